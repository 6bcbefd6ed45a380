"""The driver-side re-key of small batches: rows and positions as Spark's plan gives them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from floe_jobs import smallbatch


def _table(rows: list[tuple[Any, ...]], columns: list[tuple[str, pa.DataType]]) -> pa.Table:
    values = list(zip(*rows, strict=True))
    return pa.table({name: pa.array(v, t) for (name, t), v in zip(columns, values, strict=True)})


def _tuples(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in table.to_pylist()]


def _combined(rows: list[tuple[Any, ...]], op: str) -> list[tuple[Any, ...]]:
    """`smallbatch.combined` over (topic, partition, offset, key, value) tuples, as tuples."""
    columns = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()),
               ("value", pa.int64())]
    return _tuples(smallbatch.combined(_table(rows, columns), op))


def _ranked(groups: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """`smallbatch.ranked` over (topic, partition, key, value, last offset) tuples, as tuples."""
    columns = [("topic", pa.string()), ("partition", pa.int32()), ("key", pa.binary()), ("value", pa.int64()),
               ("last", pa.int64())]
    return _tuples(smallbatch.ranked(_table(groups, columns)))


def test_combined_gives_one_row_per_input_partition_and_key() -> None:
    rows = [
        ("t", 0, 10, b"b", 1),
        ("t", 0, 11, b"a", 1),
        ("t", 1, 40, b"a", 5),
        ("t", 0, 12, b"b", 1),
        ("t", 0, 9, b"a", 2),
    ]
    got = _combined(rows, "sum")
    # value: the sum as a UTF-8 decimal; position: (the partition's last offset, the key's rank)
    assert sorted(got) == [
        (b"a", b"3", "t", 0, 12, 1),
        (b"a", b"5", "t", 1, 40, 1),
        (b"b", b"2", "t", 0, 12, 2),
    ]
    assert sorted(_combined(rows, "max")) == [
        (b"a", b"2", "t", 0, 12, 1),
        (b"a", b"5", "t", 1, 40, 1),
        (b"b", b"1", "t", 0, 12, 2),
    ]
    assert sorted(_combined(rows, "min"))[0] == (b"a", b"1", "t", 0, 12, 1)


def test_combined_skips_null_values_and_ranks_null_keys_first_then_unsigned_bytes() -> None:
    rows = [("t", 0, 1, b"\xff", None), ("t", 0, 2, b"a", 3), ("t", 0, 3, None, 1), ("t", 0, 3, b"a", None)]
    got = _combined(rows, "count")
    assert got == [(None, b"1", "t", 0, 3, 1), (b"a", b"3", "t", 0, 3, 2), (b"\xff", None, "t", 0, 3, 3)]


def test_combined_is_the_same_whatever_the_row_order() -> None:
    rows = [("t", p, o, bytes([65 + (o * 7 + p) % 5]), o % 3) for p in range(3) for o in range(30)]
    assert sorted(_combined(rows, "sum")) == sorted(_combined(list(reversed(rows)), "sum"))


def test_indexed_numbers_the_rows_of_each_input_record() -> None:
    rows = [("t", 0, 5, b"b", b""), ("t", 0, 5, b"a", b""), ("t", 0, 6, b"a", b""), ("t", 0, 5, b"a", b"")]
    assert sorted(smallbatch.indexed(rows)) == [
        (b"a", b"", "t", 0, 5, 1),
        (b"a", b"", "t", 0, 5, 2),
        (b"a", b"", "t", 0, 6, 1),
        (b"b", b"", "t", 0, 5, 3),
    ]


def test_indexed_takes_the_stages_own_numbers() -> None:
    rows = [("t", 0, 5, b"x", "v1"), ("t", 0, 5, b"y", "v2")]
    assert smallbatch.indexed(rows, [7, 3]) == [(b"x", "v1", "t", 0, 5, 7), (b"y", "v2", "t", 0, 5, 3)]


def test_reduced_groups_by_partition_and_key_skipping_nulls() -> None:
    rows = [(0, "a", 1), (0, "a", None), (1, "a", 4), (0, "b", None), (0, "a", 2), (0, None, 5), (0, None, 1)]
    table = _table(rows, [("partition", pa.int32()), ("key", pa.string()), ("value", pa.int64())])
    totals = [(0, "a", 3), (0, "b", None), (0, None, 6), (1, "a", 4)]
    assert sorted(smallbatch.reduced(table, "sum"), key=repr) == totals
    assert (0, "a", 2) in smallbatch.reduced(table, "max")
    assert (0, None, 1) in smallbatch.reduced(table, "min")


def test_ranked_places_grouped_rows_as_combined_does() -> None:
    """Spark's group-by then `ranked` (larger batches) equals `combined` (small ones): a replay
    that takes the other path makes the same rows at the same positions."""
    rows = [
        ("t", p, o, None if o % 11 == 0 else bytes([200 + (o * 7 + p) % 5]), o % 3) for p in range(3) for o in range(40)
    ]
    groups: dict[tuple, tuple[int, int]] = {}
    for topic, partition, offset, key, value in rows:
        total, last = groups.get((topic, partition, key), (0, -1))
        groups[(topic, partition, key)] = (total + value, max(last, offset))
    grouped = [(*g, total, last) for g, (total, last) in groups.items()]
    assert sorted(_ranked(grouped), key=repr) == sorted(_combined(rows, "sum"), key=repr)


def test_ranked_keeps_a_null_value_and_takes_the_largest_last_offset_of_each_source() -> None:
    got = _ranked([("t", 0, b"b", 2, 7), ("t", 0, b"a", None, 9), ("t", 1, b"a", 1, 3)])
    assert sorted(got, key=repr) == [
        (b"a", None, "t", 0, 9, 1),
        (b"a", b"1", "t", 1, 3, 1),
        (b"b", b"2", "t", 0, 9, 2),
    ]


def test_at_keeps_the_rows_at_the_wanted_positions_in_their_order_and_no_null_key() -> None:
    rows = pa.table(
        {
            "value": ["a0", "b1", "a2", "n3", "b4", "a5", "c6"],
            "partition": pa.array([0, 0, 1, 0, 0, 1, 0], type=pa.int32()),
            "k": ["a", "b", "a", None, "b", "a", "c"],
            "offset": pa.array([10, 10, 3, 11, 12, 3, 13], type=pa.int64()),
        }
    )
    # a at 10 in partition 0; a at 3 in partition 1 (two rows of one run share it); b at 12,
    # not 10; a null key matches nothing; c is not wanted
    wanted = [(0, "a", 10), (1, "a", 3), (0, "b", 12), (0, None, 11)]
    got = smallbatch.at(rows, ("partition", "k", "offset"), wanted)
    assert got.column("value").to_pylist() == ["a0", "a2", "b4", "a5"]
    assert got.schema == rows.schema


def test_at_with_nothing_wanted_is_empty_with_the_same_columns() -> None:
    rows = pa.table(
        {"partition": pa.array([0], type=pa.int32()), "k": [b"x"], "offset": pa.array([1], type=pa.int64())}
    )
    got = smallbatch.at(rows, ("partition", "k", "offset"), [])
    assert got.num_rows == 0 and got.schema == rows.schema



def test_constant_columns_added_in_arrow_give_what_collecting_them_gives() -> None:
    full = [("in", 0, 5, b"a", 1), ("in", 1, 6, b"b", 1), ("in", 0, 7, b"a", 1)]
    columns = [("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("key", pa.binary()),
               ("value", pa.int64())]
    collected = _table(full, columns)
    for kept, topic, ones in [(slice(1, 4), "in", True), (slice(1, 5), "in", False), (slice(0, 4), None, True)]:
        picked = _table([r[kept] for r in full], columns[kept])
        assert smallbatch.with_constants(picked, topic=topic, ones=ones).equals(collected), (topic, ones)
    nothing = _table([r[1:4] for r in full], columns[1:4]).slice(0, 0)
    assert smallbatch.with_constants(nothing, topic="in", ones=True).equals(collected.slice(0, 0))
