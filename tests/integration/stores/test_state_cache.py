"""The state helpers with a replica's known rows (`floe_jobs.statecache`), on real Cassandra:
reads spared, results and stored rows as without the cache, and forgotten when they may be stale."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cassandra.cluster import Session
from floe_jobs import state
from floe_jobs.statecache import Ownership, StateCache
from floe_jobs.stores import CassandraConfig, PartitionedStore, serdes
from floe_jobs.stores.errors import StoreConfigError
from floe_jobs.stores.schema import StoreSpec
from prometheus_client import REGISTRY, CollectorRegistry

pytestmark = pytest.mark.cassandra


@pytest.fixture
def ref(session: Session, keyspace: str, store_name: str, cassandra_hosts: list[str], cassandra_port: int
        ) -> Iterator[state.StoreRef]:
    yield make_ref(session, keyspace, store_name, cassandra_hosts, cassandra_port)
    state.shutdown_sessions()


def make_ref(session: Session, keyspace: str, name: str, hosts: list[str], port: int, *,
             ttl: int | None = None) -> state.StoreRef:
    # the table, made as the runtime's provisioning makes it; the helpers only open it
    PartitionedStore(session, StoreSpec(name=name, type="partitioned", ttl_seconds=ttl), keyspace=keyspace,
                     registry=CollectorRegistry())
    return state.StoreRef(cassandra=CassandraConfig(hosts=tuple(hosts), port=port),
                          keyspace=keyspace, name=name, type="partitioned", ttl_seconds=ttl, key_serde="str",
                          value_serde="long")


def reads(ref: state.StoreRef) -> float:
    """Fenced reads the helpers sent to Cassandra for this store so far."""
    value = REGISTRY.get_sample_value(
        "floe_store_operations_total", {"store": ref.name, "operation": "get_many_fenced"}
    )
    return value or 0.0


def merge(ref: state.StoreRef, batch: int, deltas: dict[str, int], owned: Ownership | None) -> dict[str, int]:
    rows = [(0, key, delta) for key, delta in deltas.items()]
    out = state.merge_partition_rows(rows, ref=ref, fences={0: batch}, combine="sum", owned=owned)
    return {key: value for _p, key, value in out}


def stored(session: Session, ref: state.StoreRef) -> dict[str, tuple[Any, int | None]]:
    store = PartitionedStore(session, ref.name, keyspace=ref.keyspace, key_serde=serdes.STR,
                             value_serde=serdes.LONG, registry=CollectorRegistry())
    return {key: store.get_many_fenced(0, [key])[key] for key, _ in store.all(0)}


def test_a_new_partition_is_never_read_and_replays_stay_exactly_once(session: Session, ref: state.StoreRef) -> None:
    owned = Ownership(StateCache(100), {0: 1})
    assert merge(ref, 1, {"a": 1, "b": 2}, owned) == {"a": 1, "b": 2}
    assert merge(ref, 2, {"a": 5, "c": 1}, owned) == {"a": 6, "c": 1}
    assert merge(ref, 2, {"a": 5, "c": 1}, owned) == {"a": 6, "c": 1}  # a replay: nothing applied twice
    assert reads(ref) == 0
    assert stored(session, ref) == {"a": (6, 2), "b": (2, 1), "c": (1, 2)}
    assert owned.cache.keys == 3


def test_keys_written_under_the_same_assignment_are_not_read_again(session: Session, ref: state.StoreRef) -> None:
    merge(ref, 1, {"a": 1}, None)  # the partition has rows before this replica takes it
    owned = Ownership(StateCache(100), {0: 1})
    assert merge(ref, 2, {"a": 1, "b": 1}, owned) == {"a": 2, "b": 1}
    assert reads(ref) == 2  # one before, one for the keys of the first batch
    assert merge(ref, 3, {"a": 1, "b": 1}, owned) == {"a": 3, "b": 2}
    assert reads(ref) == 2
    assert merge(ref, 4, {"a": 1, "new": 1}, owned) == {"a": 4, "new": 1}
    assert reads(ref) == 3  # only the unknown key is asked for
    assert stored(session, ref) == {"a": (4, 4), "b": (2, 3), "new": (1, 4)}


def test_another_owner_in_between_is_seen(session: Session, ref: state.StoreRef) -> None:
    cache = StateCache(100)
    assert merge(ref, 1, {"a": 1}, Ownership(cache, {0: 1})) == {"a": 1}
    assert merge(ref, 2, {"a": 10}, None) == {"a": 11}  # another replica, while this one did not own it
    assert merge(ref, 3, {"a": 1}, Ownership(cache, {0: 7})) == {"a": 12}  # assigned again
    assert stored(session, ref) == {"a": (12, 3)}


def test_a_failed_write_forgets_the_partition(session: Session, ref: state.StoreRef) -> None:
    owned = Ownership(StateCache(100), {0: 1})
    out = state.latest_partition_rows([(0, "k", 5)], ref=ref, fences={0: 1}, owned=owned)
    assert list(out) == [(0, "k", 5)]
    assert owned.cache.keys == 1
    with pytest.raises(StoreConfigError):
        list(state.latest_partition_rows([(0, "k", "not a long")], ref=ref, fences={0: 2}, owned=owned))
    assert owned.cache.keys == 0
    before = reads(ref)
    assert list(state.latest_partition_rows([(0, "k", 6)], ref=ref, fences={0: 2}, owned=owned)) == [(0, "k", 6)]
    assert reads(ref) == before + 1
    assert stored(session, ref) == {"k": (6, 2)}
