"""What the sink produces from a collected Arrow table (`floe_jobs.kafkaio.output_columns`) is what
its per-row code produced from collected tuples: the same rows, order, headers and topics."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
from floe_jobs.kafkaio import _bytes, _headers, output_columns
from floe_jobs.records import position_headers

ORDER = ("_floe_src_topic", "_floe_src_partition", "_floe_src_offset", "_floe_src_idx")


def _per_row(
    rows: list[tuple[Any, ...]], cols: list[str], order: tuple[str, ...], positions: bool, topic: str | None
) -> list[tuple[Any, Any, Any, Any]]:
    """The rows (key, value, headers, topic) as the sink's per-row code made them from tuples."""
    collected = list(rows)
    if order:
        collected.sort(key=lambda r: tuple(r[len(cols) :]))
    at = {c: i for i, c in enumerate(cols)}
    k, v, h, t = (at.get(c) for c in ("key", "value", "headers", "topic"))
    n = len(cols)
    return [
        (
            None if k is None else _bytes(r[k]),
            None if v is None else _bytes(r[v]),
            position_headers(*r[n : n + 4]) if positions else _headers(None if h is None else r[h]),
            topic if t is None else r[t],
        )
        for r in collected
    ]


def _produced(table: pa.Table, cols: list[str], order: tuple[str, ...], positions: bool, topic: str | None) -> Any:
    out = output_columns(table, cols, order=order, positions=positions)
    n = len(out.keys)
    assert len(out.values) == n
    headers = out.headers if out.headers is not None else [None] * n
    topics = out.topics if out.topics is not None else [topic] * n
    return list(zip(out.keys, out.values, headers, topics, strict=True))


def test_rekeyed_rows_come_out_sorted_by_source_position_with_their_position_headers() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        rows = [
            (
                rng.choice([f"k{rng.randrange(30)}".encode(), None, b"\x00\xff"]),
                rng.choice([b"1", b"", None]),
                rng.choice(["in", "in-b"]),
                rng.randrange(3),
                rng.randrange(5),
                rng.randrange(4),
            )
            for _ in range(rng.randrange(0, 300))
        ]
        table = pa.table(
            {
                "key": pa.array([r[0] for r in rows], pa.binary()),
                "value": pa.array([r[1] for r in rows], pa.binary()),
                ORDER[0]: pa.array([r[2] for r in rows], pa.string()),
                ORDER[1]: pa.array([r[3] for r in rows], pa.int32()),
                ORDER[2]: pa.array([r[4] for r in rows], pa.int64()),
                ORDER[3]: pa.array([r[5] for r in rows], pa.int32()),
            }
        )
        cols = ["key", "value"]
        assert _produced(table, cols, ORDER, True, "out") == _per_row(rows, cols, ORDER, True, "out")


def test_string_keys_and_values_go_out_as_the_str_the_per_row_code_gave() -> None:
    rows = [("é∂", "3"), (None, "1"), ("b", None), ("", "")]
    table = pa.table({"key": pa.array([r[0] for r in rows]), "value": pa.array([r[1] for r in rows])})
    got = _produced(table, ["key", "value"], (), False, "out")
    assert got == _per_row(rows, ["key", "value"], (), False, "out")
    assert got[0] == ("é∂", "3", None, "out")


def test_headers_and_topic_columns_are_taken_per_row() -> None:
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    rows: list[tuple[Any, ...]] = [
        (b"a", b"1", [{"key": "h", "value": b"x"}, {"key": "n", "value": None}], "t1"),
        (b"b", b"2", None, "t2"),
        (b"c", b"3", [], "t1"),
    ]
    table = pa.table(
        {
            "key": pa.array([r[0] for r in rows], pa.binary()),
            "value": pa.array([r[1] for r in rows], pa.binary()),
            "headers": pa.array([r[2] for r in rows], header),
            "topic": pa.array([r[3] for r in rows], pa.string()),
        }
    )
    cols = ["key", "value", "headers", "topic"]
    assert _produced(table, cols, (), False, None) == _per_row(rows, cols, (), False, None)
    assert _produced(table, cols, (), False, None)[0][2] == [("h", b"x"), ("n", None)]


def test_rows_without_any_header_have_none_so_the_sink_takes_its_one_call_per_row_path() -> None:
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    table = pa.table(
        {
            "key": pa.array([b"a", b"b"]),
            "value": pa.array([b"1", b"2"]),
            "headers": pa.array([None, []], header),
        }
    )
    out = output_columns(table, ["key", "value", "headers"])
    assert out.headers is None
    assert out.topics is None
    assert output_columns(table.slice(0, 0), ["key", "value", "headers"], order=()).keys == []
