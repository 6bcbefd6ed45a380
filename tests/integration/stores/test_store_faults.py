"""Faults: Cassandra timing out or unreachable ends in bounded retries, then a typed error
naming store, operation, partition and key; never a silent drop."""

from __future__ import annotations

import time

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from floe_jobs.stores import (
    CassandraConfig,
    GlobalStore,
    PartitionedStore,
    RetryPolicy,
    StoreOptions,
    StoreUnavailableError,
    connect,
    serdes,
)
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra


def test_timeouts_are_retried_then_raised(session: Session, cassandra_config: CassandraConfig, keyspace: str,
                                          store_name: str, registry: CollectorRegistry) -> None:
    PartitionedStore(session, store_name, keyspace=keyspace, registry=registry)  # create the table
    # A real cluster, with a client-side timeout no round trip can meet.
    impatient = ExecutionProfile(request_timeout=0.000001)
    cluster = Cluster(list(cassandra_config.hosts), port=cassandra_config.port,
                      execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(), "impatient": impatient})
    slow = cluster.connect()
    try:
        store: PartitionedStore[str, str] = PartitionedStore(
            slow, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR,
            options=StoreOptions(create_table=False, dml_profile="impatient",
                                 retry=RetryPolicy(attempts=3, base_delay=0.05)),
            registry=registry,
        )
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError) as info:
            store.get(3, "the-key")
        assert time.monotonic() - started < 5
        err = info.value
        assert (err.store, err.operation, err.partition, err.key, err.attempts) == (
            store_name, "get", 3, "the-key", 3)
        assert "OperationTimedOut" in str(err)
        with pytest.raises(StoreUnavailableError):
            list(store.all(3))
        labels = {"store": store_name, "operation": "get"}
        assert registry.get_sample_value("floe_store_retries_total", labels) == 2
        assert registry.get_sample_value(
            "floe_store_errors_total", {**labels, "error": "OperationTimedOut"}) == 1
    finally:
        cluster.shutdown()


def test_unreachable_cassandra(cassandra_config: CassandraConfig) -> None:
    from cassandra.cluster import NoHostAvailable

    with pytest.raises(NoHostAvailable):
        connect(CassandraConfig(hosts=("127.0.0.1",), port=1, connect_timeout=1.0))


def test_node_lost_after_connect(session: Session, cassandra_config: CassandraConfig, keyspace: str,
                                 store_name: str, registry: CollectorRegistry) -> None:
    """A session whose only node is gone (shut down underneath the store): every operation
    fails with StoreUnavailableError after its retries, none silently."""
    GlobalStore(session, store_name, keyspace=keyspace, registry=registry)
    doomed = connect(cassandra_config)
    store: GlobalStore[str, str] = GlobalStore(
        doomed, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR,
        options=StoreOptions(create_table=False, retry=RetryPolicy(attempts=2, base_delay=0.01)),
        registry=registry,
    )
    store.put("k", "v")
    doomed.cluster.shutdown()
    for call in (lambda: store.get("k"), lambda: store.put("k", "w"), lambda: store.get_many(["k", "j"]),
                 lambda: store.put_all([(f"k{i}", "v") for i in range(500)]), lambda: list(store.all())):
        with pytest.raises(StoreUnavailableError):
            call()
