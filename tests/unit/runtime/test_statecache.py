"""The state cache's rules: what it answers, when it forgets, and its bound."""

from __future__ import annotations

import pytest
from floe_jobs.statecache import ABSENT, KeySummary, StateCache, as_read, cacheable


def empty() -> bool:
    return True


def not_empty() -> bool:
    return False


def test_complete_partition_answers_unknown_keys_as_absent() -> None:
    cache = StateCache(100)
    part = cache.partition("ks.counts", 0, 1, empty)
    assert part is not None and part.complete
    cache.remember("ks.counts", 0, part, {"a": (3, 7)})
    found, unknown = part.known(["a", "b"])
    assert found == {"a": (3, 7), "b": ABSENT}
    assert unknown == []


def test_incomplete_partition_asks_for_what_it_does_not_know() -> None:
    cache = StateCache(100)
    part = cache.partition("ks.counts", 0, 1, not_empty)
    assert part is not None and not part.complete
    cache.remember("ks.counts", 0, part, {"a": (3, 7), "gone": ABSENT})
    found, unknown = part.known(["a", "gone", "b"])
    assert found == {"a": (3, 7), "gone": ABSENT}
    assert unknown == ["b"]


def test_a_new_assignment_starts_over_and_asks_emptiness_again() -> None:
    cache = StateCache(100)
    asked: list[int] = []

    def probe() -> bool:
        asked.append(1)
        return len(asked) == 1

    first = cache.partition("ks.counts", 2, 1, probe)
    assert first is not None
    cache.remember("ks.counts", 2, first, {"a": (1, 1)})
    assert cache.partition("ks.counts", 2, 1, probe) is first
    again = cache.partition("ks.counts", 2, 5, probe)
    assert again is not None and again is not first
    assert not again.complete and again.rows == {}
    assert len(asked) == 2
    assert cache.keys == 0
    # what the replaced partition object is told is ignored
    cache.remember("ks.counts", 2, first, {"b": (1, 1)})
    assert cache.keys == 0


def test_no_assignment_or_off_keeps_nothing() -> None:
    assert StateCache(100).partition("ks.counts", 0, None, empty) is None
    assert StateCache(0).partition("ks.counts", 0, 1, empty) is None


def test_drop_forgets_the_partition() -> None:
    cache = StateCache(100)
    part = cache.partition("ks.counts", 0, 1, empty)
    assert part is not None
    cache.remember("ks.counts", 0, part, {"a": (1, 1), "b": (2, 1)})
    assert cache.keys == 2
    cache.drop("ks.counts", 0)
    assert cache.keys == 0
    fresh = cache.partition("ks.counts", 0, 1, not_empty)
    assert fresh is not None and fresh is not part and not fresh.complete


def test_past_the_bound_a_partition_reads_cassandra_for_the_rest_of_its_assignment() -> None:
    cache = StateCache(3)
    p0 = cache.partition("ks.counts", 0, 1, empty)
    p1 = cache.partition("ks.counts", 1, 2, not_empty)
    assert p0 is not None and p1 is not None
    cache.remember("ks.counts", 0, p0, {"a": (1, 1), "b": (1, 1)})
    cache.remember("ks.counts", 1, p1, {"c": (1, 1), "d": (1, 1)})  # 4 > 3
    assert cache.keys == 2
    assert p1.known(["c"]) == ({}, ["c"])  # emptied
    assert cache.partition("ks.counts", 1, 2, empty) is None
    assert cache.partition("ks.counts", 0, 1, empty) is p0
    # the next assignment keeps rows again
    again = cache.partition("ks.counts", 1, 3, not_empty)
    assert again is not None
    cache.remember("ks.counts", 1, again, {"c": (1, 1)})
    assert cache.keys == 3


def test_rewriting_known_keys_does_not_count_them_twice() -> None:
    cache = StateCache(2)
    part = cache.partition("ks.counts", 0, 1, empty)
    assert part is not None
    cache.remember("ks.counts", 0, part, {"a": (1, 1), "b": (1, 1)})
    cache.remember("ks.counts", 0, part, {"a": (2, 2), "b": (3, 2)})
    assert cache.keys == 2
    assert part.known(["a", "b"]) == ({"a": (2, 2), "b": (3, 2)}, [])


def test_stores_whose_rows_read_back_as_written() -> None:
    assert cacheable(store_type="partitioned", value_serde="long")
    assert not cacheable(store_type="global", value_serde="long")
    assert not cacheable(store_type="partitioned", value_serde="json")
    assert not cacheable(store_type="partitioned", value_serde="float32")


@pytest.mark.parametrize(
    ("serde", "written", "read"),
    [("float", 3, 3.0), ("bytes", bytearray(b"x"), b"x"), ("long", 5, 5), ("str", "s", "s"), ("long", None, None)],
)
def test_values_are_kept_as_a_read_returns_them(serde: str, written: object, read: object) -> None:
    kept = as_read(serde, written)
    assert kept == read and type(kept) is type(read)


def test_partitions_no_longer_owned_are_forgotten() -> None:
    cache = StateCache(100)
    kept = cache.partition("ks.counts", 0, 1, empty)
    gone = cache.partition("ks.counts", 1, 2, empty)
    assert kept is not None and gone is not None
    cache.remember("ks.counts", 0, kept, {"a": (1, 1)})
    cache.remember("ks.counts", 1, gone, {"b": (1, 1), "c": (1, 1)})
    cache.retain({1, 7})
    assert cache.keys == 1
    assert cache.partition("ks.counts", 0, 1, not_empty) is kept
    assert cache.partition("ks.counts", 1, 2, not_empty) is not gone


def test_known_rows_fetch_only_what_they_do_not_know() -> None:
    from floe_jobs.statecache import UNKNOWN, Ownership

    owned = Ownership(StateCache(100), {0: 1})
    known = owned.rows("ks.counts", 0, value_serde="float", is_empty=not_empty)
    asked: list[list[str]] = []

    def fetch(keys: list[str]) -> dict[str, tuple[object, int | None, int | None]]:
        asked.append(keys)
        return {k: ABSENT for k in keys}

    # "c" was written just above a cell another writer stamped higher than the batch
    known.wrote([("a", 3), ("c", 1)], 4, 1000, {"c": 5001})
    assert known.read(["a", "b", "c"], fetch) == {"a": (3.0, 4, 1000), "b": ABSENT, "c": (1.0, 4, 5001)}
    assert known.read(["a", "b"], fetch) == {"a": (3.0, 4, 1000), "b": ABSENT}
    assert asked == [["b"]]
    known.forget()
    assert owned.cache.keys == 0
    assert UNKNOWN.read(["a"], fetch) == {"a": ABSENT}
    UNKNOWN.wrote([("a", 1)], 5, 1000, {})
    assert asked == [["b"], ["a"]]


def test_past_the_bound_a_complete_partition_still_answers_keys_it_surely_lacks() -> None:
    cache = StateCache(3)
    part = cache.partition("ks.counts", 0, 1, empty)
    assert part is not None
    cache.remember("ks.counts", 0, part, {"a": (1, 1), "b": (1, 1)})
    cache.remember("ks.counts", 0, part, {"c": (1, 1), "d": (1, 1), "gone": ABSENT})  # 5 > 3
    assert cache.keys == 0 and part.rows == {} and part.summary is not None
    assert cache.partition("ks.counts", 0, 1, empty) is part
    # every key it holds must be read; one it never held is absent without a read
    assert part.known(["a", "b", "c", "d", "new"]) == ({"new": ABSENT}, ["a", "b", "c", "d"])
    cache.remember("ks.counts", 0, part, {"new": (1, 2)})
    assert part.known(["new"]) == ({}, ["new"])
    assert cache.keys == 0


def test_a_key_summary_never_misses_a_key_it_was_given() -> None:
    summary = KeySummary(capacity=1000)
    held = [f"id{i:08d}" for i in range(50_000)]  # past its first capacity: it grows
    for start in range(0, len(held), 7_000):
        summary.add(held[start : start + 7_000])
    assert summary.might_hold(held).all()
    others = [f"other{i}" for i in range(20_000)]
    false_positives = int(summary.might_hold(others).sum())
    assert false_positives < 0.03 * len(others)
