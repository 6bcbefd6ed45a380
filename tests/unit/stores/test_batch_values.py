"""A fenced write's batch rows: values serialized once per write give the bytes that serializing
every row gives (`floe_jobs.stores.kv._Serialized`, `_add`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cassandra.cqltypes import BytesType, Int32Type, LongType
from cassandra.query import BatchStatement, BatchType
from floe_jobs.stores import kv

PROTOCOL = 5


def _stmt(*types: Any, query_id: bytes = b"q1") -> Any:
    """What `_add` reads of a prepared statement: its bind markers' types and its id."""
    return SimpleNamespace(column_metadata=[SimpleNamespace(type=t) for t in types], query_id=query_id)


FENCED = _stmt(Int32Type, BytesType, BytesType, LongType, LongType)  # partition, key, value, fence, stamp
FENCED_TTL = _stmt(Int32Type, BytesType, BytesType, LongType, Int32Type, LongType, query_id=b"q2")


def _batch_rows(rows: list[tuple[Any, tuple[Any, ...]]], *, once: bool) -> list[Any]:
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch._add_statement_and_params(True, b"first", [])  # `_add` sends rows after the first itself
    ser = kv._Serialized(PROTOCOL)
    for stmt, params in rows:
        kv.add_row(batch, stmt, params, PROTOCOL, ser.values(stmt, params) if once else None)
    return list(batch._statements_and_parameters)


def test_rows_serialized_once_per_write_are_the_rows_serialized_one_by_one() -> None:
    rows = [
        (FENCED, (7, b"k1", b"\x00" * 8, 42, 1_700_000_000_000_000)),
        (FENCED, (7, b"k2", None, 42, 1_700_000_000_000_000)),  # a fenced delete's null value
        (FENCED, (7, b"k3", b"v", 42, 1_700_000_000_000_123)),  # a row stamped above another writer
        (FENCED_TTL, (7, b"k4", None, 42, 86_400, 1_700_000_000_000_000)),  # the tombstone's TTL
        (FENCED_TTL, (7, b"k5", b"v", 42, 60, 1_700_000_000_000_000)),
    ]
    assert _batch_rows(rows, once=True) == _batch_rows(rows, once=False)


def test_one_value_is_serialized_by_each_statements_column_type() -> None:
    ser = kv._Serialized(PROTOCOL)
    assert ser.one(_stmt(LongType), 0, 7) == LongType.serialize(7, PROTOCOL)
    assert ser.one(_stmt(Int32Type, query_id=b"q2"), 0, 7) == Int32Type.serialize(7, PROTOCOL)
    assert ser.one(_stmt(LongType), 0, b"raw") == b"raw" and ser.one(_stmt(LongType), 0, None) is None


def test_a_first_row_given_as_sent_routes_the_batch_as_one_given_as_python_values() -> None:
    from cassandra.protocol import ColumnMetadata
    from cassandra.query import PreparedStatement

    columns = [ColumnMetadata("ks", "t", n, t) for n, t in
               (("partition", Int32Type), ("key", BytesType), ("value", BytesType), ("floe_batch", LongType))]
    stmt = PreparedStatement(columns, b"q3", [0], "INSERT INTO ks.t ...", "ks", PROTOCOL, [], None)
    params = (7, b"k1", None, 42)
    ser = kv._Serialized(PROTOCOL)
    as_python, as_sent = BatchStatement(batch_type=BatchType.UNLOGGED), BatchStatement(batch_type=BatchType.UNLOGGED)
    kv.add_row(as_python, stmt, params, PROTOCOL)
    kv.add_row(as_sent, stmt, (), PROTOCOL, ser.values(stmt, params))
    assert as_sent.routing_key == as_python.routing_key == Int32Type.serialize(7, PROTOCOL)
    assert as_sent.keyspace == as_python.keyspace == "ks"
    assert list(as_sent._statements_and_parameters) == list(as_python._statements_and_parameters)
