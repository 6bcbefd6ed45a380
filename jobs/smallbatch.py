"""The helpers' work for small batches, done in the driver over collected rows.

For a batch of a few hundred records, Spark's plans for a re-key (a group-by and two windows)
or an aggregation (a group-by) cost a few hundred milliseconds of scheduling on a busy 2-core
machine, where the rows themselves take milliseconds. Small batches are the ones that decide
how soon a partition moves on after a handover, so up to `spark.driver_batch_max_records`
input records a helper collects its rows once (a job of one stage, no shuffle) and these
functions give what the Spark plan would: the same rows, at the
same positions for a re-key, so a replay that takes the other path still makes the rows the
reading stage has already applied.

Larger batches whose rows the sink collects anyway (`Batch._collected_by_sink`) keep Spark's
group-by of a combining re-key and rank its rows here (`ranked`) instead of in two windows.

`combined` and `ranked` work on Arrow tables, as column operations: at high key cardinality
nearly every row of a combining re-key is a group of its own, and a loop in Python over them
cost more than the rest of the re-key. They take `(topic, partition, offset, key, value)` with
an integer value (`combined`), or `(topic, partition, key, combined value, last offset)`
(`ranked`), and give `(key, value, src_topic, src_partition, src_offset, src_idx)` sorted by
source and position. `indexed` takes tuples `(topic, partition, offset, key, value)`, with
bytes values when it numbers the rows itself, and gives tuples of those six columns;
`reduced` takes an Arrow table and gives tuples of `(partition, key, value)`; `at` takes an
Arrow table and the `(partition, key, offset)` tuples to keep (`dedup`'s kept first rows) and
gives those rows of the table, in its order. The six re-keyed columns are the written ones
followed by `api.REKEY_ORDER`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Row = tuple[Any, ...]

# Arrow's hash aggregate for each combine op; like Spark's, they skip nulls and give null for none
ARROW_COMBINE = {"sum": "sum", "count": "sum", "min": "min", "max": "max"}

def reduced(rows: pa.Table, op: str) -> list[Row]:
    """One row per (partition, key) of `rows` (partition, key, value) with `op` over its values:
    a group-by in the driver, as Arrow column operations."""
    agg = ARROW_COMBINE[op]
    grouped = (
        rows.rename_columns(["partition", "key", "value"])
        .group_by(["partition", "key"], use_threads=False)
        .aggregate([("value", agg)])
    )
    return list(zip(*(grouped.column(c).to_pylist() for c in ("partition", "key", f"value_{agg}")), strict=True))


def _nulls_first(value: bytes | None) -> tuple[bool, bytes]:
    """Spark's ascending order of binary values: nulls first, then unsigned byte order."""
    return (value is not None, b"" if value is None else bytes(value))


def with_constants(rows: pa.Table, *, topic: str | None, ones: bool) -> pa.Table:
    """`rows` (topic, partition, offset, key[, value]) with the columns that were left out of
    the collect because every row has the same: `topic` (None: it is there), a `value` of 1
    per row (`ones`). Returns the columns in `combined`'s order."""
    n = rows.num_rows
    if topic is not None:
        rows = rows.add_column(0, "topic", pa.repeat(pa.scalar(topic, pa.string()), n))
    if ones:
        rows = rows.append_column("value", pa.array(np.ones(n, dtype=np.int64)))
    return rows.select(["topic", "partition", "offset", "key", "value"])


def combined(rows: pa.Table, op: str) -> pa.Table:
    """One row per (topic, partition, key) of `rows` (topic, partition, offset, key, value: an
    integer): `op` over its non-null values, as a UTF-8 decimal; position (the largest offset of
    that input partition in the batch, the key's rank). Column operations (Arrow), no Python
    per row: at high key cardinality nearly every row is a group."""
    grouped = rows.group_by(["topic", "partition", "key"], use_threads=False).aggregate(
        [("value", ARROW_COMBINE[op]), ("offset", "max")]
    )
    return ranked(grouped.select(["topic", "partition", "key", f"value_{ARROW_COMBINE[op]}", "offset_max"]))


def ranked(groups: pa.Table) -> pa.Table:
    """The rows of a combining re-key's group-by, (topic, partition, key, value, last offset) by
    position, at their positions: (the largest last offset of that input partition, the key's
    rank among the partition's keys), the value as a UTF-8 decimal. The Spark plan does this
    with two windows, that is two more shuffles. Returns (key, value, src topic, src partition,
    src offset, src index) sorted by source, then position (the order the sink writes them)."""
    names = ["topic", "partition", "key", "value", "last"]
    table = groups.rename_columns(names).combine_chunks()
    # Spark's ascending order: null keys first, then unsigned byte order
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("key", "ascending", "at_start")])
    n = table.num_rows
    topics, partitions, lasts = (table.column(c).to_numpy() for c in ("topic", "partition", "last"))
    starts = np.flatnonzero(
        np.concatenate([[n > 0], (topics[1:] != topics[:-1]) | (partitions[1:] != partitions[:-1])])
    )
    lengths = np.diff(np.append(starts, n))
    source_last = np.maximum.reduceat(lasts, starts) if n else lasts
    return pa.table(
        {
            "key": table.column("key").cast(pa.binary()),
            "value": pc.cast(pc.cast(table.column("value"), pa.string()), pa.binary()),
            "src_topic": table.column("topic").cast(pa.string()),
            "src_partition": table.column("partition").cast(pa.int32()),
            "src_offset": pa.array(np.repeat(source_last, lengths).astype(np.int64)),
            "src_idx": pa.array((np.arange(n) - np.repeat(starts, lengths) + 1).astype(np.int32)),
        }
    )


def indexed(rows: Sequence[Row], index: Sequence[int] | None = None) -> list[Row]:
    """Each row at (its input record's offset, its number among that record's rows): `index`
    gives the numbers when the stage has them (e.g. posexplode's pos), else rows of one input
    record are numbered from 1 in (key, value) order, which takes binary values."""
    if index is not None:
        return [(r[3], r[4], r[0], r[1], r[2], int(i)) for r, i in zip(rows, index, strict=True)]
    by_record: dict[tuple[str, int, int], list[tuple[bytes | None, bytes | None]]] = {}
    for topic, partition, offset, key, value in rows:
        by_record.setdefault((topic, partition, offset), []).append(
            (None if key is None else bytes(key), None if value is None else bytes(value))
        )
    out: list[Row] = []
    for (topic, partition, offset), kvs in by_record.items():
        kvs.sort(key=lambda kv: (_nulls_first(kv[0]), _nulls_first(kv[1])))
        out.extend((key, value, topic, partition, offset, i) for i, (key, value) in enumerate(kvs, start=1))
    return out


def at(rows: pa.Table, columns: tuple[str, str, str], wanted: Sequence[Row]) -> pa.Table:
    """The rows of `rows` whose (partition, key, offset) `columns` equal one of `wanted`'s tuples,
    in `rows`' order: `dedup`'s join back to the first rows, as one Arrow hash join. A null key
    matches nothing, as in Spark's join."""
    probe = pa.table(
        {
            "p": rows.column(columns[0]),
            "k": rows.column(columns[1]),
            "o": rows.column(columns[2]),
            "i": pa.array(np.arange(rows.num_rows, dtype=np.int64)),
        }
    )
    wanted = [w for w in wanted if w[1] is not None]
    found = pa.table(
        {
            name: pa.array([w[n] for w in wanted], type=probe.column(name).type)
            for n, name in enumerate(("p", "k", "o"))
        }
    )
    hits = probe.join(found, keys=["p", "k", "o"], join_type="inner").column("i").to_numpy()
    return rows.take(pa.array(np.sort(hits)))
