"""The global store against real Cassandra: what a single-column key allows, and clear errors
for the rest."""

from __future__ import annotations

import time

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import GlobalStore, StoreOptions, UnsupportedOperationError, serdes
from prometheus_client import CollectorRegistry

from .conftest import SHORT_TTL, wait_past_ttl

pytestmark = pytest.mark.cassandra


def test_global_operations(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: GlobalStore[str, int] = GlobalStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG,
        options=StoreOptions(count_enabled=True, page_size=7), registry=registry,
    )
    assert store.get("a") is None
    assert list(store.all()) == []
    assert store.approximate_num_entries() == 0
    store.put("a", 1)
    assert store.get("a") == 1
    assert store.put_if_absent("a", 2) == 1
    assert store.put_if_absent("b", 2) is None
    store.put_all([(f"k{i}", i) for i in range(100)])
    assert store.get_many(["a", "k5", "k99", "zz"]) == {"a": 1, "k5": 5, "k99": 99}
    assert dict(store.all()) == {"a": 1, "b": 2, **{f"k{i}": i for i in range(100)}}
    assert store.approximate_num_entries() == 102
    store.delete("a")
    store.delete_many(["k1", "k2"])
    store.put("b", None)
    assert store.get_many(["a", "b", "k1", "k2", "k3"]) == {"k3": 3}
    assert store.approximate_num_entries() == 98


def test_global_ttl_and_lwt(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry) -> None:
    store: GlobalStore[str, str] = GlobalStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR,
        options=StoreOptions(lwt_put_if_absent=True), registry=registry,
    )
    assert store.put_if_absent("k", "v", ttl=30) is None
    assert store.put_if_absent("k", "w") == "v"
    assert store.get("k") == "v"
    store.put("short", "x", ttl=SHORT_TTL)
    store.put_all([("short-too", "y")], ttl=SHORT_TTL)
    written = time.time()
    assert store.get_many(["short", "short-too"]) == {"short": "x", "short-too": "y"}
    wait_past_ttl(written)
    assert store.get_many(["short", "short-too", "k"]) == {"k": "v"}


@pytest.mark.parametrize("operation", ["range", "reverse_range", "reverse_all", "prefix_scan"])
def test_unsupported_operations_name_the_store_type(
    session: Session, keyspace: str, store_name: str, registry: CollectorRegistry, operation: str
) -> None:
    store: GlobalStore[bytes, bytes] = GlobalStore(session, store_name, keyspace=keyspace, registry=registry)
    with pytest.raises(UnsupportedOperationError, match=f"{operation} is not supported by global stores") as info:
        getattr(store, operation)(b"a")
    assert info.value.store == store_name
