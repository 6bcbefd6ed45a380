"""Interop with kafka-streams-cassandra-state-store: tables created with its CQL and written
with its statements are read and written by Floe, and the other way round.

The CQL below is the Java library's (0.8.x) table layout and statements, verbatim in
structure; keys and values are Kafka StringSerde / LongSerde bytes.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import (
    FENCE_COLUMN,
    GlobalStore,
    PartitionedStore,
    StoreOptions,
    VersionedPartitionedStore,
    VersionedRecord,
    serdes,
    table_name,
)
from floe_jobs.stores.schema import table_columns
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra

JAVA_PARTITIONED = """CREATE TABLE IF NOT EXISTS {t} (
    partition int,
    key blob,
    time timestamp,
    value blob,
    PRIMARY KEY ((partition), key)
) WITH compaction = { 'class' : 'LeveledCompactionStrategy' }"""
JAVA_GLOBAL = """CREATE TABLE IF NOT EXISTS {t} (
    key blob,
    time timestamp,
    value blob,
    PRIMARY KEY (key)
) WITH compaction = { 'class' : 'LeveledCompactionStrategy' }"""
JAVA_VERSIONED = """CREATE TABLE IF NOT EXISTS {t} (
    partition int,
    key blob,
    validFrom timestamp,
    validTo timestamp,
    time timestamp,
    value blob,
    PRIMARY KEY ((partition), key, validTo)
) WITH compaction = { 'class' : 'LeveledCompactionStrategy' }"""


def long_bytes(n: int) -> bytes:
    return struct.pack(">q", n)


def now() -> datetime:
    return datetime.now(UTC)


def test_partitioned_table_created_by_the_java_library(session: Session, keyspace: str, store_name: str,
                                                       registry: CollectorRegistry) -> None:
    java_store = f"Java.{store_name}"
    table = f"{keyspace}.{table_name(java_store)}"
    session.execute(JAVA_PARTITIONED.replace("{t}", table), execution_profile="floe-ddl")
    insert = session.prepare(f"INSERT INTO {table} (partition, key, time, value) VALUES (?, ?, ?, ?)")
    for word, count in (("kafka", 3), ("streams", 1), ("cassandra", 2)):
        session.execute(insert, (4, word.encode(), now(), long_bytes(count)))

    store: PartitionedStore[str, int] = PartitionedStore(
        session, java_store, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG,
        options=StoreOptions(create_table=False, count_enabled=True), registry=registry,
    )
    assert FENCE_COLUMN in (table_columns(session, keyspace, store.table) or set())
    assert dict(store.all(4)) == {"cassandra": 2, "kafka": 3, "streams": 1}
    assert [k for k, _ in store.prefix_scan(4, "ka")] == ["kafka"]
    assert store.approximate_num_entries(4) == 3

    store.put(4, "kafka", 10)
    store.put_many_fenced(4, [("floe", 7)], batch=3)
    # Read back with the Java library's statements.
    select = session.prepare(f"SELECT value FROM {table} WHERE partition=? AND key=?")
    assert session.execute(select, (4, b"kafka")).one()[0] == long_bytes(10)
    assert session.execute(select, (4, b"floe")).one()[0] == long_bytes(7)
    rng = session.prepare(f"SELECT key, value FROM {table} WHERE partition=? AND key>=? AND key<=?")
    assert [bytes(r[0]) for r in session.execute(rng, (4, b"c", b"g"))] == [b"cassandra", b"floe"]
    # The Java library keeps writing after the column was added, and Floe reads that.
    session.execute(insert, (4, b"streams", now(), long_bytes(5)))
    assert store.get(4, "streams") == 5
    # Opening again (column already there) is a no-op; so is a concurrent "already exists".
    PartitionedStore(session, java_store, keyspace=keyspace, options=StoreOptions(create_table=False),
                     registry=registry)


def test_floe_created_tables_serve_java_statements(session: Session, keyspace: str, store_name: str,
                                                   registry: CollectorRegistry) -> None:
    store: GlobalStore[str, int] = GlobalStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG, registry=registry,
    )
    table = store.qualified_table
    store.put("a", 1)
    session.execute(
        session.prepare(f"INSERT INTO {table} (key, time, value) VALUES (?, ?, ?)"), (b"b", now(), long_bytes(2))
    )
    assert store.get("b") == 2
    row = session.execute(session.prepare(f"SELECT value FROM {table} WHERE key=?"), (b"a",)).one()
    assert row[0] == long_bytes(1)
    # Floe fills `time` with the write time, as the Java library does.
    t = session.execute(f"SELECT time FROM {table} WHERE key = 0x61").one()[0]
    assert abs((datetime.now(UTC).replace(tzinfo=None) - t).total_seconds()) < 120


def test_global_table_created_by_the_java_library(session: Session, keyspace: str, store_name: str,
                                                  registry: CollectorRegistry) -> None:
    table = f"{keyspace}.{table_name(store_name)}"
    session.execute(JAVA_GLOBAL.replace("{t}", table), execution_profile="floe-ddl")
    session.execute(session.prepare(f"INSERT INTO {table} (key, time, value) VALUES (?, ?, ?)"),
                    (b"k", now(), b"java"))
    store: GlobalStore[str, str] = GlobalStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR,
        options=StoreOptions(create_table=False), registry=registry,
    )
    assert store.get("k") == "java"
    assert FENCE_COLUMN not in (table_columns(session, keyspace, store.table) or set())


def test_versioned_table_created_by_the_java_library(session: Session, keyspace: str, store_name: str,
                                                     registry: CollectorRegistry) -> None:
    table = f"{keyspace}.{table_name(store_name)}"
    session.execute(JAVA_VERSIONED.replace("{t}", table), execution_profile="floe-ddl")
    insert = session.prepare(
        f"INSERT INTO {table} (partition, key, validFrom, validTo, time, value) VALUES (?, ?, ?, ?, ?, ?)"
    )

    def ms(n: int) -> datetime:
        return datetime.fromtimestamp(n / 1000, UTC)

    # What the Java store leaves after put(k, "one", 1000) then put(k, "two", 2000).
    session.execute(insert, (0, b"k", ms(2000), ms(-1), now(), b"two"))
    session.execute(insert, (0, b"k", ms(1000), ms(2000), now(), b"one"))
    store: VersionedPartitionedStore[str, str] = VersionedPartitionedStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.STR,
        options=StoreOptions(create_table=False), registry=registry,
    )
    assert store.get(0, "k") == VersionedRecord("two", 2000)
    assert store.get(0, "k", as_of=1500) == VersionedRecord("one", 1000, 2000)
    store.put(0, "k", "three", 3000)
    # The Java library's reads: latest by validTo = -1, as-of by validTo > t.
    latest = session.prepare(f"SELECT value, time, validFrom, validTo FROM {table} WHERE partition=? AND key=? "
                             "AND validTo=?")
    row = session.execute(latest, (0, b"k", ms(-1))).one()
    assert row[0] == b"three" and row[2] == ms(3000).replace(tzinfo=None)
    as_of = session.prepare(f"SELECT value FROM {table} WHERE partition=? AND key=? AND validTo>? "
                            "ORDER BY validTo ASC LIMIT 1")
    assert session.execute(as_of, (0, b"k", ms(2500))).one()[0] == b"two"
