"""Versioned stores: latest and as-of reads, out-of-order puts, deletes, history retention."""

from __future__ import annotations

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import (
    PUT_NOT_DONE,
    VALID_TO_UNDEFINED,
    StoreSpec,
    VersionedGlobalStore,
    VersionedPartitionedStore,
    VersionedRecord,
    serdes,
)
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra


def test_versioned_partitioned_history(session: Session, keyspace: str, store_name: str,
                                       registry: CollectorRegistry) -> None:
    store: VersionedPartitionedStore[str, str] = VersionedPartitionedStore(
        session, StoreSpec(store_name, "versioned-partitioned", history_retention_ms=10_000),
        keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR, registry=registry,
    )
    assert store.get(0, "k") is None
    assert store.get(0, "k", as_of=1) is None
    assert store.put(0, "k", "v100", 100) == VALID_TO_UNDEFINED
    assert store.put(0, "k", "v200", 200) == VALID_TO_UNDEFINED
    assert store.put(0, "k", "v300", 300) == VALID_TO_UNDEFINED
    assert store.get(0, "k") == VersionedRecord("v300", 300)
    assert store.get(0, "k", as_of=99) is None
    assert store.get(0, "k", as_of=100) == VersionedRecord("v100", 100, 200)
    assert store.get(0, "k", as_of=199) == VersionedRecord("v100", 100, 200)
    assert store.get(0, "k", as_of=250) == VersionedRecord("v200", 200, 300)
    assert store.get(0, "k", as_of=10_000) == VersionedRecord("v300", 300)
    # Out of order: into the middle of an interval, before all history, and onto an existing timestamp.
    assert store.put(0, "k", "v150", 150) == 200
    assert store.get(0, "k", as_of=160) == VersionedRecord("v150", 150, 200)
    assert store.get(0, "k", as_of=120) == VersionedRecord("v100", 100, 150)
    assert store.put(0, "k", "v50", 50) == 100
    assert store.get(0, "k", as_of=60) == VersionedRecord("v50", 50, 100)
    assert store.put(0, "k", "v200b", 200) == 300
    assert store.get(0, "k", as_of=200) == VersionedRecord("v200b", 200, 300)
    assert store.put(0, "k", "v300b", 300) == VALID_TO_UNDEFINED
    assert store.get(0, "k") == VersionedRecord("v300b", 300)
    # Other partitions and keys are separate.
    assert store.get(1, "k") is None
    assert store.get_many(0, ["k", "nope"]) == {"k": VersionedRecord("v300b", 300)}


def test_versioned_delete(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: VersionedPartitionedStore[str, int] = VersionedPartitionedStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG, registry=registry,
    )
    store.put(0, "k", 1, 1000)
    assert store.delete(0, "k", 2000) == VersionedRecord(1, 1000)
    assert store.get(0, "k") is None
    assert store.get(0, "k", as_of=1500) == VersionedRecord(1, 1000, 2000)
    assert store.get(0, "k", as_of=2500) is None
    store.put(0, "k", 3, 3000)
    assert store.get(0, "k", as_of=2500) is None
    assert store.get(0, "k") == VersionedRecord(3, 3000)
    assert store.delete(0, "never", 10) is None


def test_history_retention(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: VersionedPartitionedStore[str, int] = VersionedPartitionedStore(
        session, StoreSpec(store_name, "versioned-partitioned", history_retention_ms=1000),
        keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG, registry=registry,
    )
    for ts in (1000, 2000, 3000):
        store.put(0, "k", ts, ts)
    assert store.get(0, "k", as_of=2500) == VersionedRecord(2000, 2000, 3000)
    assert store.get(0, "k", as_of=1500) is None  # beyond stream time 3000 - retention 1000
    store.put(0, "k", 5000, 5000)  # stream time 5000: history ending before 4000 is removed
    assert store.put(0, "k", 1, 3500) == PUT_NOT_DONE  # older than stream time - retention
    rows = session.execute(
        f"SELECT toUnixTimestamp(validto) FROM {keyspace}.{store.table} WHERE partition = 0 AND key = %s",
        (b"k",),
    ).all()
    assert sorted(r[0] for r in rows) == [-1, 5000]  # [3000, 5000) kept, older versions gone
    assert store.get(0, "k", as_of=1500) is None
    assert store.get(0, "k", as_of=4500) == VersionedRecord(3000, 3000, 5000)
    assert store.get(0, "k", as_of=6000) == VersionedRecord(5000, 5000)
    # A fresh process (no observed stream time) learns it from the key's latest version.
    fresh: VersionedPartitionedStore[str, int] = VersionedPartitionedStore(
        session, StoreSpec(store_name, "versioned-partitioned", history_retention_ms=1000),
        keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG, registry=registry,
    )
    assert fresh.put(0, "k", 2, 3900) == PUT_NOT_DONE


def test_versioned_global(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: VersionedGlobalStore[str, dict[str, int]] = VersionedGlobalStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.JSON, registry=registry,
    )
    store.put("a", {"v": 1}, 10)
    store.put("a", {"v": 2}, 20)
    store.put("b", {"v": 9}, 15)
    assert store.get("a") == VersionedRecord({"v": 2}, 20)
    assert store.get("a", as_of=15) == VersionedRecord({"v": 1}, 10, 20)
    assert store.delete("a", 30) == VersionedRecord({"v": 2}, 20)
    assert store.get("a") is None
    assert store.get_many(["a", "b"]) == {"b": VersionedRecord({"v": 9}, 15)}
