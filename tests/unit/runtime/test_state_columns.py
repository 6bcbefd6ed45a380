"""The state path's column operations give what its per-row code gives (`floe_jobs.state`)."""

from __future__ import annotations

import random

import pyarrow as pa
from floe_jobs import state


def _rows(seed: int, n: int) -> list[tuple[int, bytes | str | None, int | None]]:
    rng = random.Random(seed)
    out: list[tuple[int, bytes | str | None, int | None]] = []
    for i in range(n):
        key: bytes | str | None = rng.choice([f"w{rng.randrange(50)}", "é∂", None, f"k{i}"])
        out.append((rng.choice([0, 3, 5, 1, 11]), key, rng.choice([None, rng.randrange(-5, 10**12)])))
    return out


def test_group_table_gives_each_partitions_items_in_input_order_like_the_row_grouping() -> None:
    for seed in range(20):
        rows = _rows(seed, random.Random(seed).randrange(0, 400))
        table = pa.table(
            {
                "partition": pa.array([r[0] for r in rows], pa.int32()),
                "key": pa.array([r[1] for r in rows], pa.string()),
                "value": pa.array([r[2] for r in rows], pa.int64()),
            }
        )
        assert state.group_table(table) == state._group(rows)
        assert state._group(table) == state._group(rows)


def test_group_table_gives_binary_keys_and_values_as_bytes() -> None:
    table = pa.table(
        {
            "p": pa.array([2, 1, 2], pa.int32()),
            "k": pa.array([b"\x00a", b"b", b"\xff"], pa.binary()),
            "v": pa.array([b"1", None, b""], pa.binary()),
        }
    )
    grouped = state.group_table(table)
    assert grouped == {1: [(b"b", None)], 2: [(b"\x00a", b"1"), (b"\xff", b"")]}
    assert all(type(k) is bytes for items in grouped.values() for k, _ in items)


def test_group_table_of_no_rows_is_empty() -> None:
    empty = pa.table(
        {"partition": pa.array([], pa.int32()), "key": pa.array([], pa.string()), "value": pa.array([], pa.int64())}
    )
    assert state.group_table(empty) == {}


def test_the_inlined_merge_decides_as_decide_merge() -> None:
    olds = [None, (None, None, None), (10, None, None), (10, 4, 1), (10, 5, 1), (10, 6, 9), (None, 2, 3), (None, 7, 3)]
    for name, fn in state.COMBINERS.items():
        decide = state.merge_decider(fn)
        for old in olds:
            for delta in (-3, 0, 4):
                value, write = state.decide_merge(old, delta, batch=5, combine=fn)
                assert decide(old, delta, 5) == (value, value, write), (name, old, delta)
