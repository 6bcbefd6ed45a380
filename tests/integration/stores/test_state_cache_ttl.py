"""`dedup`'s fenced markers with a replica's known rows (`floe_jobs.statecache`) on a store with a
TTL, on real Cassandra: new ids cost no read, an id seen within the TTL is dropped and kept again
after it, and a replay after a crash emits nothing twice."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from cassandra.cluster import Session
from floe_jobs import state
from floe_jobs.statecache import Ownership, StateCache
from prometheus_client import REGISTRY

from tests.integration.stores.test_state_cache import make_ref

pytestmark = pytest.mark.cassandra

TTL = 4  # seconds: a written marker is known for 1.96 s of it (`Lifetime`), surely gone after 5.04


@pytest.fixture
def ref(session: Session, keyspace: str, store_name: str, cassandra_hosts: list[str], cassandra_port: int
        ) -> Iterator[state.StoreRef]:
    yield make_ref(session, keyspace, store_name, cassandra_hosts, cassandra_port, ttl=3600)
    state.shutdown_sessions()


@pytest.fixture
def short_ref(session: Session, keyspace: str, store_name: str, cassandra_hosts: list[str], cassandra_port: int
              ) -> Iterator[state.StoreRef]:
    yield make_ref(session, keyspace, store_name + "_short", cassandra_hosts, cassandra_port, ttl=TTL)
    state.shutdown_sessions()


def reads(ref: state.StoreRef) -> float:
    value = REGISTRY.get_sample_value(
        "floe_store_operations_total", {"store": ref.name, "operation": "get_many_fenced"}
    )
    return value or 0.0


def dedup(ref: state.StoreRef, batch: int, ids: list[str], owned: Ownership | None) -> list[str]:
    """The ids a batch keeps, each with its first offset as the marker (as `Batch.dedup` does)."""
    rows = [(0, key, offset) for offset, key in enumerate(ids)]
    out = state.first_seen_partition_rows(rows, ref=ref, fences={0: batch}, owned=owned)
    return [key for _p, key, keep in out if keep]


def ttls(session: Session, ref: state.StoreRef) -> dict[str, int]:
    rows = session.execute(f"SELECT key, TTL(value) FROM {state.open_store(ref).qualified_table}")
    return {bytes(key).decode(): ttl for key, ttl in rows}


def test_new_ids_cost_no_read_and_an_id_seen_within_the_ttl_is_dropped(
    session: Session, ref: state.StoreRef
) -> None:
    owned = Ownership(StateCache(100), {0: 1})
    assert dedup(ref, 1, ["a", "b"], owned) == ["a", "b"]
    assert dedup(ref, 2, ["a", "c"], owned) == ["c"]
    assert dedup(ref, 3, ["b", "c", "d"], owned) == ["d"]
    assert reads(ref) == 0
    markers = ttls(session, ref)
    assert sorted(markers) == ["a", "b", "c", "d"]
    assert all(0 < ttl <= 3600 for ttl in markers.values())


def test_after_the_ttl_an_id_is_kept_again(short_ref: state.StoreRef) -> None:
    owned = Ownership(StateCache(100), {0: 1})
    assert dedup(short_ref, 1, ["a"], owned) == ["a"]
    assert dedup(short_ref, 2, ["a"], owned) == []
    time.sleep(TTL + 1.5)
    assert dedup(short_ref, 3, ["a", "b"], owned) == ["a", "b"]


def test_a_replay_after_a_crash_does_not_emit_an_id_twice(ref: state.StoreRef) -> None:
    first = Ownership(StateCache(100), {0: 1})
    assert dedup(ref, 1, ["a", "b"], first) == ["a", "b"]
    assert dedup(ref, 2, ["c", "a"], first) == ["c"]
    # the replica dies after writing batch 2's markers, before its offsets commit; the next owner
    # starts with nothing known and replays batch 2: the same answer, then batch 3 drops them all
    after = Ownership(StateCache(100), {0: 2})
    assert dedup(ref, 2, ["c", "a"], after) == ["c"]
    assert dedup(ref, 3, ["a", "b", "c", "e"], after) == ["e"]


def test_a_marker_written_by_another_owner_is_read_each_time(
    session: Session, ref: state.StoreRef
) -> None:
    dedup(ref, 1, ["a"], None)  # another replica, before this one took the partition
    owned = Ownership(StateCache(100), {0: 3})
    assert dedup(ref, 2, ["a", "b"], owned) == ["b"]
    before = reads(ref)
    # its remaining TTL is not known here, so it is not kept; "b", written here, is
    assert dedup(ref, 3, ["a", "b"], owned) == []
    assert reads(ref) == before + 1
    assert owned.cache.keys == 1


def test_past_the_bound_only_ids_the_partition_may_hold_are_read(ref: state.StoreRef) -> None:
    owned = Ownership(StateCache(3), {0: 1})
    assert dedup(ref, 1, ["a", "b", "c", "d"], owned) == ["a", "b", "c", "d"]  # 4 > 3: a summary
    assert owned.cache.keys == 0
    assert dedup(ref, 2, ["a", "e"], owned) == ["e"]
    assert reads(ref) == 1  # "a", which it may hold; "e" surely not
    assert dedup(ref, 3, ["e", "f"], owned) == ["f"]
