"""Exactly-once fencing: values written with the batch id that produced them, replays skipped."""

from __future__ import annotations

from typing import Any

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import CacheOptions, PartitionedStore, StoreOptions, serdes
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra


def counts(session: Session, keyspace: str, name: str, registry: CollectorRegistry,
           **options: Any) -> PartitionedStore[str, int]:
    return PartitionedStore(session, name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG,
                            options=StoreOptions(**options), registry=registry)


def apply_batch(store: PartitionedStore[str, int], partition: int, batch: int,
                records: list[tuple[str, int]], *, crash_after: int | None = None) -> None:
    """What the job runtime does: read fences, skip keys already at >= batch, write the rest."""
    keys = sorted({k for k, _ in records})
    current = store.get_many_fenced(partition, keys)
    updates: dict[str, int | None] = {}
    for key, delta in records:
        value, fence = current[key]
        if fence is not None and fence >= batch:
            continue  # applied before the crash
        base = updates.get(key, value) or 0
        updates[key] = None if base + delta == 0 else base + delta
    items = sorted(updates.items())
    if crash_after is not None:
        items = items[:crash_after]  # only part of the batch reached Cassandra
    store.put_many_fenced(partition, items, batch=batch)


def test_fenced_reads_and_writes(session: Session, keyspace: str, store_name: str,
                                 registry: CollectorRegistry) -> None:
    store = counts(session, keyspace, store_name, registry)
    store.put(0, "plain", 1)
    assert store.get_many_fenced(0, ["plain", "absent"]) == {"plain": (1, None), "absent": (None, None)}
    store.put_many_fenced(0, [("a", 10), ("b", 20)], batch=5)
    assert store.get_many_fenced(0, ["a", "b"]) == {"a": (10, 5), "b": (20, 5)}
    store.put_many_fenced(0, [("a", None)], batch=6)  # a fenced delete
    assert store.get(0, "a") is None
    assert store.get_many(0, ["a", "b"]) == {"b": 20}
    assert store.get_many_fenced(0, ["a"]) == {"a": (None, 6)}
    assert dict(store.all(0)) == {"b": 20, "plain": 1}  # the tombstone row is invisible
    store.put_many_fenced(0, [("a", 1)], batch=7)
    assert store.get_many_fenced(0, ["a"]) == {"a": (1, 7)}


def test_replay_after_a_partial_batch_is_exactly_once(session: Session, keyspace: str, store_name: str,
                                                      registry: CollectorRegistry) -> None:
    store = counts(session, keyspace, store_name, registry, batch_max_rows=1)
    apply_batch(store, 2, 1, [("x", 1), ("y", 1), ("z", 1)])
    batch2 = [("x", 1), ("y", 2), ("z", -1), ("w", 5)]
    apply_batch(store, 2, 2, batch2, crash_after=2)  # w and x written, y and z not
    apply_batch(store, 2, 2, batch2)  # the replay
    apply_batch(store, 2, 2, batch2)  # and a second one, for good measure
    assert dict(store.all(2)) == {"x": 2, "y": 3, "w": 5}
    assert store.get_many_fenced(2, ["z"]) == {"z": (None, 2)}


def test_fenced_writes_keep_the_cache_coherent(session: Session, keyspace: str, store_name: str,
                                               registry: CollectorRegistry) -> None:
    store = counts(session, keyspace, store_name, registry, cache=CacheOptions(max_entries=100, ttl_seconds=60))
    store.put(0, "k", 1)
    assert store.get(0, "k") == 1
    store.put_many_fenced(0, [("k", 2)], batch=1)
    assert store.get(0, "k") == 2
    store.put_many_fenced(0, [("k", None)], batch=2)
    assert store.get(0, "k") is None
