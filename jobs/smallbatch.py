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

Rows are `(topic, partition, offset, key, value)` with the key as bytes (or None) and the
value an int for `combined`, bytes for `indexed` without an index, anything otherwise; for
`reduced`, `(partition, key, value)`; for `ranked`, `(topic, partition, key, combined value,
last offset)`. Re-key results are `(key, value, src_topic, src_partition, src_offset,
src_idx)`: the written columns followed by `api.REKEY_ORDER`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Row = tuple[Any, ...]

# Spark's aggregates skip nulls; all-null gives null
COMBINE: dict[str, Callable[[list[Any]], Any]] = {"sum": sum, "count": sum, "min": min, "max": max}


def _reduce(op: str, values: list[Any]) -> Any:
    """`op` over the non-null values as Spark's aggregate gives it: null when there are none."""
    kept = [v for v in values if v is not None]
    return COMBINE[op](kept) if kept else None


def reduced(rows: Iterable[Row], op: str) -> list[Row]:
    """One row per (partition, key) with `op` over its values: a group-by in the driver."""
    groups: dict[tuple[Any, Any], list[Any]] = {}
    for partition, key, value in rows:
        groups.setdefault((partition, key), []).append(value)
    return [(partition, key, _reduce(op, values)) for (partition, key), values in groups.items()]


def _nulls_first(value: bytes | None) -> tuple[bool, bytes]:
    """Spark's ascending order of binary values: nulls first, then unsigned byte order."""
    return (value is not None, b"" if value is None else bytes(value))


def combined(rows: Iterable[Row], op: str) -> list[Row]:
    """One row per (topic, partition, key): `op` over its non-null values, as a UTF-8 decimal;
    position (the largest offset of that input partition in the batch, the key's rank)."""
    values: dict[tuple[str, int, bytes | None], list[int | None]] = {}
    last: dict[tuple[str, int, bytes | None], int] = {}
    for topic, partition, offset, key, value in rows:
        group = (topic, partition, None if key is None else bytes(key))
        values.setdefault(group, []).append(None if value is None else int(value))
        last[group] = max(last.get(group, offset), offset)
    return ranked((*group, _reduce(op, found), last[group]) for group, found in values.items())


def ranked(groups: Iterable[Row]) -> list[Row]:
    """The rows of Spark's group-by of a combining re-key, `(topic, partition, key, value, last
    offset)`, at their positions: (the largest last offset of that input partition, the key's
    rank among the partition's keys), the value as a UTF-8 decimal. The Spark plan does this
    with two windows, that is two more shuffles."""
    by_source: dict[tuple[str, int], list[tuple[bytes | None, int | None]]] = {}
    last: dict[tuple[str, int], int] = {}
    for topic, partition, key, value, offset in groups:
        source = (topic, partition)
        by_source.setdefault(source, []).append((None if key is None else bytes(key), value))
        last[source] = max(last.get(source, offset), offset)
    out: list[Row] = []
    for source, found in sorted(by_source.items()):  # in the order the sink writes them
        found.sort(key=lambda kv: _nulls_first(kv[0]))
        for idx, (key, value) in enumerate(found, start=1):
            out.append((key, None if value is None else str(value).encode(), *source, last[source], idx))
    return out


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
