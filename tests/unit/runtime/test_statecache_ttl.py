"""The state cache's rules for stores with a TTL (`floe_jobs.statecache.Lifetime`): a row written
is known only while it surely lives in Cassandra, read again while it may have expired, and
absent again once it surely has."""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs.statecache import ABSENT, Fenced, KnownRows, Lifetime, StateCache, lifetime

STORE = "ks.seen"
TTL = 100  # margin 2 s: live until sent + 97, gone after acked + 102


def complete_rows(cache: StateCache, ttl: int = TTL) -> KnownRows:
    part = cache.partition(STORE, 0, 1, lambda: True)
    assert part is not None and part.complete
    return KnownRows(cache, STORE, 0, part, "long", lifetime(ttl))


def no_fetch(keys: list[Any]) -> dict[Any, Fenced]:
    raise AssertionError(f"fetched {keys}: they were known")


class Fetches:
    """A fetch that answers from `rows` (absent otherwise) and records what it was asked."""

    def __init__(self, rows: dict[Any, Fenced] | None = None) -> None:
        self.rows = rows or {}
        self.asked: list[list[Any]] = []

    def __call__(self, keys: list[Any]) -> dict[Any, Fenced]:
        self.asked.append(list(keys))
        return {key: self.rows.get(key, ABSENT) for key in keys}


def test_stores_without_a_ttl_never_expire() -> None:
    assert lifetime(None) is None
    assert lifetime(0) is None
    assert lifetime(3600, 7 * 24 * 3600) == Lifetime(3600.0)
    assert lifetime(3600, 60) == Lifetime(60.0)  # a fenced delete's shorter TTL bounds every row
    assert lifetime(3600, None) == Lifetime(3600.0)


def test_lifetime_keeps_a_margin_on_both_sides() -> None:
    life = Lifetime(3600.0)
    assert life.live_until(1000.0) == 1000.0 + 3600 - 1 - 37
    assert life.gone_after(1000.5) == 1000.5 + 3600 + 37
    # a TTL of a few seconds: the rows are not known even at once
    assert Lifetime(2.0).live_until(1000.0) < 1000.0


def test_a_written_row_is_known_until_its_ttl_nears() -> None:
    cache = StateCache(100)
    known = complete_rows(cache)
    known.wrote([("a", 7)], 1, 500, {}, sent=1000.0, acked=1000.5)
    assert known.read(["a", "b"], no_fetch, now=1096.9) == {"a": (7, 1, 500), "b": ABSENT}
    assert cache.keys == 1


def test_a_row_that_may_have_expired_is_read_even_from_a_complete_partition() -> None:
    cache = StateCache(100)
    known = complete_rows(cache)
    known.wrote([("a", 7)], 1, 500, {}, sent=1000.0, acked=1000.5)
    still_there = Fetches({"a": (7, 1, 500)})
    assert known.read(["a", "b"], still_there, now=1097.0) == {"a": (7, 1, 500), "b": ABSENT}
    assert still_there.asked == [["a"]]
    assert cache.keys == 0  # its remaining TTL is not known here: not kept
    gone = Fetches()
    assert known.read(["a"], gone, now=1102.0) == {"a": ABSENT}
    assert gone.asked == [["a"]]


def test_a_row_surely_expired_is_absent_again_without_a_read() -> None:
    cache = StateCache(100)
    known = complete_rows(cache)
    known.wrote([("a", 7)], 1, 500, {}, sent=1000.0, acked=1000.5)
    assert known.read(["a"], no_fetch, now=1102.6) == {"a": ABSENT}
    assert known.part is not None and known.part.stale == {} and not known.part.fading


def test_a_row_written_again_is_known_until_its_last_write_nears_its_ttl() -> None:
    cache = StateCache(100)
    known = complete_rows(cache)
    known.wrote([("a", 7)], 1, 500, {}, sent=1000.0, acked=1000.5)
    known.wrote([("a", 8)], 2, 600, {}, sent=1050.0, acked=1050.5)
    # past the first write's life and its expiry, the second write is what is known
    assert known.read(["a"], no_fetch, now=1103.0) == {"a": (8, 2, 600)}
    assert known.read(["a"], Fetches({"a": (8, 2, 600)}), now=1147.0) == {"a": (8, 2, 600)}
    assert known.read(["a"], no_fetch, now=1153.0) == {"a": ABSENT}


def test_a_stale_row_written_again_is_not_made_absent_by_its_first_write() -> None:
    cache = StateCache(100)
    known = complete_rows(cache)
    known.wrote([("a", 7)], 1, 500, {}, sent=1000.0, acked=1000.5)
    assert known.read(["a"], Fetches({"a": (7, 1, 500)}), now=1098.0) == {"a": (7, 1, 500)}
    known.wrote([("a", 9)], 3, 700, {}, sent=1098.0, acked=1098.5)
    # the first write's rows are surely gone by now; the second write's row is not
    assert known.read(["a"], no_fetch, now=1103.0) == {"a": (9, 3, 700)}


def test_keys_read_as_absent_are_kept_and_rows_with_a_value_are_not() -> None:
    cache = StateCache(100)
    part = cache.partition(STORE, 0, 1, lambda: False)
    assert part is not None and not part.complete
    known = KnownRows(cache, STORE, 0, part, "long", lifetime(TTL))
    first = Fetches({"old": (3, 1, 100)})
    assert known.read(["old", "new"], first, now=10.0) == {"old": (3, 1, 100), "new": ABSENT}
    again = Fetches({"old": (3, 1, 100)})
    assert known.read(["old", "new"], again, now=11.0) == {"old": (3, 1, 100), "new": ABSENT}
    assert again.asked == [["old"]]


def test_past_the_bound_a_partition_with_a_ttl_keeps_only_a_summary_of_its_keys() -> None:
    cache = StateCache(2)
    known = complete_rows(cache)
    known.wrote([("a", 1), ("b", 2)], 1, 500, {}, sent=1000.0, acked=1000.5)
    assert known.read(["a"], Fetches(), now=1098.0) == {"a": ABSENT}  # "a" is stale: read
    known.wrote([("c", 3), ("d", 4)], 2, 600, {}, sent=1001.0, acked=1001.5)  # 3 > 2
    assert known.part is not None and known.part.summary is not None
    assert not known.part.expiring and not known.part.fading and not known.part.stale
    assert cache.keys == 0
    asked = Fetches()
    assert known.read(["a", "b", "c", "d", "e"], asked, now=1099.0) == dict.fromkeys("abcde", ABSENT)
    assert asked.asked == [["a", "b", "c", "d"]]  # every key it knew is read; "e", never seen, is not


@pytest.mark.parametrize("ttl", [None, 0])
def test_without_a_ttl_written_rows_stay_known(ttl: int | None) -> None:
    cache = StateCache(100)
    known = complete_rows(cache, ttl=ttl or 0)
    known.wrote([("a", 7)], 1, 500, {})
    assert known.read(["a"], no_fetch, now=1e12) == {"a": (7, 1, 500)}
