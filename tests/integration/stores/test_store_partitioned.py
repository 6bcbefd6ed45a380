"""Every operation of the partitioned store against real Cassandra, edge cases included."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import (
    PartitionedStore,
    StoreConfigError,
    StoreDecodeError,
    StoreOptions,
    StoreSpec,
    serdes,
)
from prometheus_client import CollectorRegistry

from .conftest import SHORT_TTL, wait_past_ttl

pytestmark = pytest.mark.cassandra


def make(session: Session, keyspace: str, name: str, registry: CollectorRegistry, **kwargs: Any,
         ) -> PartitionedStore[Any, Any]:
    return PartitionedStore(
        session, kwargs.pop("spec", name), keyspace=keyspace,
        key_serde=kwargs.pop("key_serde", serdes.STR), value_serde=kwargs.pop("value_serde", serdes.JSON),
        options=StoreOptions(**kwargs), registry=registry,
    )


def test_empty_store(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry, count_enabled=True)
    assert store.get(0, "nothing") is None
    assert store.get_many(0, ["a", "b"]) == {}
    assert store.get_many(0, []) == {}
    assert list(store.all(0)) == []
    assert list(store.reverse_all(0)) == []
    assert list(store.range(0, "a", "z")) == []
    assert list(store.prefix_scan(0, "a")) == []
    assert store.approximate_num_entries(0) == 0
    assert store.approximate_num_entries() == 0
    store.delete(0, "nothing")  # deleting an absent key is fine


def test_get_put_delete_and_partition_isolation(
    session: Session, keyspace: str, store_name: str, registry: CollectorRegistry
) -> None:
    store = make(session, keyspace, store_name, registry)
    store.put(0, "k", {"n": 1})
    store.put(1, "k", {"n": 2})
    assert store.get(0, "k") == {"n": 1}
    assert store.get(1, "k") == {"n": 2}
    assert store.get(2, "k") is None
    store.put(0, "k", {"n": 3})
    assert store.get(0, "k") == {"n": 3}
    store.delete(0, "k")
    assert store.get(0, "k") is None
    assert store.get(1, "k") == {"n": 2}
    store.put(1, "k", None)  # None deletes, as in Kafka
    assert store.get(1, "k") is None


@pytest.mark.parametrize("lwt", [False, True])
def test_put_if_absent(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry,
                       lwt: bool) -> None:
    store = make(session, keyspace, store_name, registry, lwt_put_if_absent=lwt)
    assert store.put_if_absent(0, "k", "first") is None
    assert store.put_if_absent(0, "k", "second") == "first"
    assert store.get(0, "k") == "first"
    # A fenced delete leaves a row with a null value: still absent for put_if_absent.
    store.put_many_fenced(0, [("k", None)], batch=1)
    assert store.put_if_absent(0, "k", "third") is None
    assert store.get(0, "k") == "third"


def test_put_all_beyond_batch_limits_and_get_many(
    session: Session, keyspace: str, store_name: str, registry: CollectorRegistry
) -> None:
    # 3,000 values of 2 KiB = ~6 MiB into one partition: far beyond Cassandra's batch size
    # thresholds (5 KiB warn / 50 KiB fail for multi-partition batches) and one frame.
    store = make(session, keyspace, store_name, registry, value_serde=serdes.BYTES, count_enabled=True)
    items = [(f"key-{i:05d}", bytes([i % 256]) * 2048) for i in range(3000)]
    store.put_all(7, items)
    assert store.approximate_num_entries(7) == 3000
    wanted = [f"key-{i:05d}" for i in range(0, 3000, 7)] + ["missing"]
    got = store.get_many(7, wanted)
    assert set(got) == set(wanted) - {"missing"}
    assert got["key-00014"] == bytes([14]) * 2048
    # put_all with None values deletes; the last write of a key in one call wins.
    store.put_all(7, [("key-00000", None), ("key-00001", b"a"), ("key-00001", b"b")])
    assert store.get(7, "key-00000") is None
    assert store.get(7, "key-00001") == b"b"
    store.delete_many(7, [f"key-{i:05d}" for i in range(1, 3000)])
    assert store.approximate_num_entries(7) == 0


def test_get_many_per_key_statements(session: Session, keyspace: str, store_name: str,
                                     registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry, in_chunk_size=1, batch_max_rows=1, concurrency=8)
    store.put_all(0, [(f"k{i}", i) for i in range(50)])
    assert store.get_many(0, [f"k{i}" for i in range(60)]) == {f"k{i}": i for i in range(50)}


def test_ranges_paging_and_order(session: Session, keyspace: str, store_name: str,
                                 registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry, page_size=3)
    keys = [f"k{i:02d}" for i in range(20)]
    store.put_all(0, [(k, k.upper()) for k in keys])
    store.put(1, "k05", "other partition")
    assert [k for k, _ in store.all(0)] == keys
    assert [k for k, _ in store.reverse_all(0)] == keys[::-1]
    assert [k for k, _ in store.range(0, "k03", "k07")] == keys[3:8]  # both ends inclusive
    assert [k for k, _ in store.reverse_range(0, "k03", "k07")] == keys[3:8][::-1]
    assert [k for k, _ in store.range(0, None, "k02")] == keys[:3]  # open start
    assert [k for k, _ in store.range(0, "k17")] == keys[17:]  # open end
    assert [k for k, _ in store.reverse_range(0, "k17")] == keys[17:][::-1]
    assert [k for k, _ in store.reverse_range(0, None, "k01")] == ["k01", "k00"]
    assert [k for k, _ in store.range(0, "k05x", "k07")] == ["k06", "k07"]
    assert list(store.range(0, "k09", "k03")) == []  # inverted: empty, logged
    assert dict(store.range(0, "k05", "k05")) == {"k05": "K05"}
    assert list(store.range(1, None, None)) == [("k05", "other partition")]


def test_prefix_scan_with_0xff_bytes(session: Session, keyspace: str, store_name: str,
                                     registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry, key_serde=serdes.BYTES, value_serde=serdes.INT)
    keys = [b"\x01", b"\x01\x00", b"\x01\xff", b"\x01\xff\xff", b"\x02", b"\xfe\xff", b"\xff", b"\xff\x00",
            b"\xff\xff", b"\xff\xff\x01", b"a", b"ab", b"ab\xff", b"ac"]
    store.put_all(3, [(k, i) for i, k in enumerate(keys)])
    def scan(prefix: bytes) -> list[bytes]:
        return [k for k, _ in store.prefix_scan(3, prefix)]
    assert scan(b"\x01") == [b"\x01", b"\x01\x00", b"\x01\xff", b"\x01\xff\xff"]
    assert scan(b"\x01\xff") == [b"\x01\xff", b"\x01\xff\xff"]
    assert scan(b"\xff") == [b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01"]
    assert scan(b"\xff\xff") == [b"\xff\xff", b"\xff\xff\x01"]
    assert scan(b"ab") == [b"ab", b"ab\xff"]
    assert scan(b"") == sorted(keys)
    assert scan(b"zz") == []
    assert [k for k, _ in store.prefix_scan(3, b"\xff", reverse=True)] == [
        b"\xff\xff\x01", b"\xff\xff", b"\xff\x00", b"\xff"]
    # A prefix encoded with another serde than the keys'.
    assert [k for k, _ in store.prefix_scan(3, "ab", prefix_serde=serdes.STR)] == [b"ab", b"ab\xff"]


def test_ttl_per_write_and_table_default(session: Session, keyspace: str, store_name: str,
                                         registry: CollectorRegistry) -> None:
    per_write = make(session, keyspace, store_name, registry)
    table_ttl = make(session, keyspace, store_name + "-t", registry,
                     spec=StoreSpec(store_name + "-t", "partitioned", ttl_seconds=SHORT_TTL))
    per_write.put(0, "short", 1, ttl=SHORT_TTL)
    per_write.put(0, "forever", 2)
    per_write.put_all(0, [("batch-short", 3)], ttl=SHORT_TTL)
    table_ttl.put(0, "default", 4)
    table_ttl.put(0, "pinned", 5, ttl=0)  # 0 overrides the table default: never expires
    written = time.time()
    assert per_write.get(0, "short") == 1
    assert per_write.get(0, "batch-short") == 3
    assert table_ttl.get(0, "default") == 4
    wait_past_ttl(written)
    assert per_write.get(0, "short") is None
    assert per_write.get(0, "batch-short") is None
    assert per_write.get(0, "forever") == 2
    assert table_ttl.get(0, "default") is None
    assert table_ttl.get(0, "pinned") == 5
    with pytest.raises(StoreConfigError, match="ttl"):
        per_write.put(0, "k", 1, ttl=-5)


def test_decode_failures_name_store_key_and_version(session: Session, keyspace: str, store_name: str,
                                                    registry: CollectorRegistry) -> None:
    raw = make(session, keyspace, store_name, registry, value_serde=serdes.BYTES)
    raw.put(0, "not-json", b"\x00{")
    raw.put(0, "future", b"\xfe\x00\x09{}")
    as_json = make(session, keyspace, store_name, registry, create_table=False)
    with pytest.raises(StoreDecodeError) as info:
        as_json.get(0, "not-json")
    assert info.value.store == store_name and info.value.key == "not-json" and info.value.partition == 0
    versioned = make(session, keyspace, store_name, registry, create_table=False,
                     value_serde=serdes.VersionedSerde(serdes.JSON, current_version=2, upgrades={1: dict}))
    with pytest.raises(StoreDecodeError, match="schema_version=9") as info:
        versioned.get(0, "future")
    assert info.value.schema_version == 9
    with pytest.raises(StoreDecodeError):
        list(as_json.all(0))
    assert registry.get_sample_value(
        "floe_store_errors_total", {"store": store_name, "operation": "get", "error": "StoreDecodeError"}
    ) == 2
    # Keys that do not decode (an INT key serde over 8-byte keys) fail the same way.
    ints = make(session, keyspace, store_name, registry, create_table=False, key_serde=serdes.INT)
    with pytest.raises(StoreDecodeError, match="key"):
        list(ints.all(0))


def test_count_is_opt_in(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry)
    with pytest.raises(StoreConfigError, match="count_enabled"):
        store.approximate_num_entries(0)


def test_partitions_and_size_estimates(session: Session, keyspace: str, store_name: str,
                                       registry: CollectorRegistry) -> None:
    store = make(session, keyspace, store_name, registry)
    for p in (0, 3, 5):
        store.put(p, "k", p)
    assert store.partitions() == [0, 3, 5]
    sizes = store.estimated_partition_sizes()
    assert set(sizes) == {"partitions", "mean_partition_bytes"}
    assert sizes["partitions"] >= 0
