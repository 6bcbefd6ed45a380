"""Provisioning: idempotent, safe under concurrent processes, strict when asked not to create."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import (
    CassandraConfig,
    GlobalStore,
    KeyspaceMissingError,
    PartitionedStore,
    StoreOptions,
    StoreSpec,
    TableMissingError,
    provision,
)
from floe_jobs.stores.schema import execute_ddl, table_columns
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra

SPECS = [
    StoreSpec("orders", "partitioned", ttl_seconds=3600),
    StoreSpec("customers", "global"),
    StoreSpec("prices", "versioned-partitioned"),
    StoreSpec("rates", "versioned-global", table_options={"comment": "fx"}),
]

WORKER = textwrap.dedent("""
    import sys, time
    from floe_jobs import offsets
    from floe_jobs.stores import CassandraConfig, StoreSpec, connect, provision
    hosts, port, keyspace, start = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    specs = [StoreSpec("orders", "partitioned", ttl_seconds=3600), StoreSpec("customers", "global"),
             StoreSpec("prices", "versioned-partitioned"),
             StoreSpec("rates", "versioned-global", table_options={"comment": "fx"})]
    session = connect(CassandraConfig(hosts=hosts, port=port))
    time.sleep(max(0.0, start - time.time()))
    provision(session, keyspace=keyspace, replication=None, stores=specs,
              extra_tables={offsets.TABLE: offsets.table_cql(keyspace)})
    # usable as soon as provision returns, whichever process created it
    session.prepare(f"SELECT * FROM {keyspace}.{offsets.TABLE} WHERE app_id = ?")
    session.cluster.shutdown()
    print("provisioned")
""")


def test_concurrent_provisioning_from_several_processes(
    session: Session, cassandra_config: CassandraConfig
) -> None:
    keyspace = f"it_prov_{uuid.uuid4().hex[:8]}"
    start = time.time() + 8.0  # every process connected by then; all issue DDL at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, ",".join(cassandra_config.hosts), str(cassandra_config.port),
             keyspace, str(start)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(4)
    ]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err[-3000:]
            assert "provisioned" in out
        session.cluster.refresh_schema_metadata()
        tables = session.cluster.metadata.keyspaces[keyspace].tables
        assert set(tables) == {"orders_kstreams_store", "customers_kstreams_store", "prices_kstreams_store",
                               "rates_kstreams_store", "floe_offsets"}
        assert tables["orders_kstreams_store"].options["default_time_to_live"] == 3600
        assert "floe_batch" in tables["orders_kstreams_store"].columns
        # The tables work: one id per table, schema in agreement.
        assert session.cluster.control_connection.wait_for_schema_agreement()
        store: PartitionedStore[bytes, bytes] = PartitionedStore(
            session, "orders", keyspace=keyspace, options=StoreOptions(create_table=False),
            registry=CollectorRegistry(),
        )
        store.put(0, b"k", b"v")
        assert store.get(0, b"k") == b"v"
        # And running it again changes nothing.
        provision(session, keyspace=keyspace, replication=None, stores=SPECS)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {keyspace}")


OPEN_WORKER = textwrap.dedent("""
    import sys, time
    from prometheus_client import CollectorRegistry
    from floe_jobs.stores import CassandraConfig, PartitionedStore, StoreOptions, connect
    hosts, port, keyspace, store, start = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
    session = connect(CassandraConfig(hosts=hosts, port=port))
    time.sleep(max(0.0, start - time.time()))
    s = PartitionedStore(session, store, keyspace=keyspace, options=StoreOptions(create_table=False),
                         registry=CollectorRegistry())
    s.put_many_fenced(0, [(sys.argv[6].encode(), b"v")], batch=1)
    session.cluster.shutdown()
    print("opened")
""")


def test_concurrent_opening_of_a_java_table_adds_the_fence_once(
    session: Session, cassandra_config: CassandraConfig, keyspace: str, store_name: str
) -> None:
    table = f"{keyspace}.{store_name.replace('-', '_')}_kstreams_store"
    session.execute(
        f"CREATE TABLE {table} (partition int, key blob, time timestamp, value blob, "
        "PRIMARY KEY ((partition), key)) WITH compaction = { 'class' : 'LeveledCompactionStrategy' }",
        execution_profile="floe-ddl",
    )
    start = time.time() + 8.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_WORKER, ",".join(cassandra_config.hosts), str(cassandra_config.port),
             keyspace, store_name, str(start), f"worker-{i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(4)
    ]
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-3000:]
            assert "opened" in out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    rows = session.execute(f"SELECT key, floe_batch FROM {table} WHERE partition = 0").all()
    assert sorted((bytes(r[0]), r[1]) for r in rows) == [(f"worker-{i}".encode(), 1) for i in range(4)]


def test_missing_keyspace_and_table_are_clear_errors(session: Session, keyspace: str, store_name: str) -> None:
    with pytest.raises(KeyspaceMissingError, match="does not exist"):
        provision(session, keyspace="it_absent_keyspace", replication=None, stores=SPECS, create_keyspace=False)
    with pytest.raises(TableMissingError, match="does not exist and create_table is off") as info:
        GlobalStore(session, store_name, keyspace=keyspace, options=StoreOptions(create_table=False),
                    registry=CollectorRegistry())
    assert info.value.store == store_name
    # With create_keyspace off, an existing keyspace is enough.
    provision(session, keyspace=keyspace, replication=None, stores=[StoreSpec(store_name, "global")],
              create_keyspace=False)
    assert table_columns(session, keyspace, f"{store_name.replace('-', '_')}_kstreams_store") is not None


def test_store_creates_its_keyspace_when_asked(session: Session, store_name: str) -> None:
    keyspace = f"it_own_{uuid.uuid4().hex[:8]}"
    try:
        store: GlobalStore[bytes, bytes] = GlobalStore(
            session, store_name, keyspace=keyspace,
            options=StoreOptions(create_keyspace=True, replication={"class": "SimpleStrategy",
                                                                    "replication_factor": 1}),
            registry=CollectorRegistry(),
        )
        store.put(b"a", b"b")
        assert store.get(b"a") == b"b"
    finally:
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {keyspace}")


def test_extra_tables_are_created_with_the_stores(session: Session) -> None:
    from floe_jobs import offsets

    keyspace = f"it_extra_{uuid.uuid4().hex[:8]}"
    try:
        for _ in range(2):  # the second run finds everything and changes nothing
            provision(
                session, keyspace=keyspace, replication=None, stores=SPECS[:2],
                extra_tables={offsets.TABLE: offsets.table_cql(keyspace)},
            )
            assert "floe_batch" in (table_columns(session, keyspace, "orders_kstreams_store") or set())
            assert table_columns(session, keyspace, "customers_kstreams_store") == {"key", "time", "value"}
            assert {"app_id", "next_offset", "source_positions"} <= (table_columns(session, keyspace, offsets.TABLE)
                                                                     or set())
        with pytest.raises(Exception, match="not a valid Cassandra name"):
            provision(session, keyspace=keyspace, replication=None, stores=[], extra_tables={"bad-name": "x"})
    finally:
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {keyspace}")


def test_new_store_tables_compact_as_the_nodes_release_calls_for(session: Session) -> None:
    """A new table gets UCS on Cassandra 5.0 and later, LCS before; a store's own compaction wins."""
    from floe_jobs.stores.schema import release_version

    keyspace = f"it_compact_{uuid.uuid4().hex[:8]}"
    own = StoreSpec("own", "global", table_options={"compaction": {"class": "SizeTieredCompactionStrategy"}})
    try:
        provision(session, keyspace=keyspace, replication=None, stores=[SPECS[0], own])
        rows = session.execute(
            "SELECT table_name, compaction FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
        )
        compaction = {table: options["class"].rsplit(".", 1)[-1] for table, options in rows}
        release = release_version(session) or ""
        expected = "UnifiedCompactionStrategy" if int(release.split(".")[0]) >= 5 else "LeveledCompactionStrategy"
        assert compaction == {"orders_kstreams_store": expected, "own_kstreams_store": "SizeTieredCompactionStrategy"}
    finally:
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {keyspace}")
