"""The read cache against real Cassandra (coherent with own writes, bounded staleness for
others'), and the metrics a store exports."""

from __future__ import annotations

import time

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import CacheOptions, GlobalStore, PartitionedStore, StoreOptions, serdes
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra


def test_cache_coherent_with_own_writes(session: Session, keyspace: str, store_name: str,
                                        registry: CollectorRegistry) -> None:
    store: PartitionedStore[str, int] = PartitionedStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG,
        options=StoreOptions(cache=CacheOptions(max_entries=100, ttl_seconds=60)), registry=registry,
    )
    labels = {"store": store_name}
    assert store.get(0, "k") is None  # miss, remembered as absent
    assert store.get(0, "k") is None  # hit
    store.put(0, "k", 1)
    assert store.get(0, "k") == 1
    store.put_all(0, [("k", 2), ("j", 3)])
    assert store.get_many(0, ["k", "j", "x"]) == {"k": 2, "j": 3}
    store.delete(0, "k")
    assert store.get(0, "k") is None
    assert store.put_if_absent(0, "k", 4) is None
    assert store.get(0, "k") == 4
    store.delete_many(0, ["k", "j"])
    assert store.get_many(0, ["k", "j"]) == {}
    assert store.get(1, "k") is None  # partitions do not share cache entries
    assert registry.get_sample_value("floe_store_cache_hits_total", labels) == 8
    assert registry.get_sample_value("floe_store_cache_misses_total", labels) == 3


def test_cache_staleness_is_bounded_by_its_ttl(session: Session, keyspace: str, store_name: str,
                                               registry: CollectorRegistry) -> None:
    options = StoreOptions(cache=CacheOptions(max_entries=10, ttl_seconds=1.0))
    reader: GlobalStore[str, str] = GlobalStore(session, store_name, keyspace=keyspace, key_serde=serdes.STR,
                                                value_serde=serdes.STR, options=options, registry=registry)
    writer: GlobalStore[str, str] = GlobalStore(session, store_name, keyspace=keyspace, key_serde=serdes.STR,
                                                value_serde=serdes.STR, registry=registry)
    writer.put("k", "old")
    assert reader.get("k") == "old"
    writer.put("k", "new")  # another process, as far as the reader's cache knows
    assert reader.get("k") == "old"
    time.sleep(1.1)
    assert reader.get("k") == "new"


def test_metrics(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: PartitionedStore[str, int] = PartitionedStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG, registry=registry,
    )
    store.put(0, "a", 1)
    store.get(0, "a")
    store.get(0, "b")
    store.put_all(0, [(f"k{i}", i) for i in range(10)])
    assert len(list(store.all(0))) == 11

    def sample(name: str, op: str) -> float | None:
        return registry.get_sample_value(name, {"store": store_name, "operation": op})

    assert sample("floe_store_operations_total", "get") == 2
    assert sample("floe_store_operation_duration_seconds_count", "get") == 2
    assert (sample("floe_store_operation_duration_seconds_sum", "get") or 0) > 0
    assert sample("floe_store_keys_total", "put_all") == 10
    assert sample("floe_store_keys_total", "all") == 11
    assert sample("floe_store_operations_total", "put") == 1
