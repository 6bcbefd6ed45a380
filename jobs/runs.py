"""Re-keyed rows packed into runs: many rows of one source partition in one Kafka record.

At high key cardinality a re-key sends nearly every row on its own, and one Kafka record per
row costs the driver's Python at every step: a produce with three headers, a consume, a
header parse, a tuple for the frame; at high cardinality that is a large share of a replica's
Python time (docs/runtime.md, "Figures behind single settings"). A run carries up to `RUN_MAX_ROWS` rows (and
about `RUN_MAX_BYTES`) as one Arrow IPC stream, so writing, reading, filtering and framing
them are column operations.

Format: the value is an Arrow IPC stream with columns `key` and `value` (binary), `off`
(int64) and `idx` (int32), each row's source position; the position headers
(`floe_jobs.records.position_headers`) give the position of the run's last row, so a run sorts
and marks like a record at that position, and `floe.run` holds `<rows>:<first offset>:<first
index>`.

Partition: each row goes to the partition Kafka's Java producer would choose for its key
(murmur2, `partitions`), so a key lands on one partition whether its rows were written in a
run, by Spark's Kafka sink or one by one; a run holds rows of one partition only. Rows with a
null key go to the source partition's number modulo the partition count (Kafka's producer
would pick any partition).

Exactly-once: every row keeps its own position, and the reading stage drops rows at or below
its high-water mark row by row (`after`), so a run is equivalent to its rows written one by
one, whatever the run boundaries of an earlier attempt were.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

RUN_HEADER = "floe.run"
RUN_MAX_ROWS = 4096
RUN_MAX_BYTES = 512 * 1024
# per-row bytes a run adds to the key and value (its position columns, Arrow offsets)
ROW_OVERHEAD_BYTES = 20

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)

SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("off", pa.int64()),
        pa.field("idx", pa.int32()),
    ]
)

Position = tuple[int, int]


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of each key of a binary array (as uint32; a null key hashes as empty).

    Column by column over the keys of each length: a loop in Python per 4-byte block of the
    longest key, not per key."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    n = len(keys)
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out
    _validity, offsets_buf, data_buf = keys.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=keys.offset * 4)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if keys.null_count:
        lengths = np.where(keys.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    for length in np.unique(lengths):
        rows = np.nonzero(lengths == length)[0]
        size = int(length)
        block = data[offsets[rows][:, None] + np.arange(size)] if size else np.zeros((len(rows), 0), np.uint8)
        h = np.full(len(rows), _SEED ^ np.uint32(size), dtype=np.uint32)
        for i in range(size // 4):
            k = np.ascontiguousarray(block[:, 4 * i : 4 * i + 4]).view("<u4").ravel().astype(np.uint32)
            k = k * _M
            k ^= k >> np.uint32(24)
            k = k * _M
            h = (h * _M) ^ k
        tail, base = size % 4, size & ~3
        if tail:
            if tail == 3:
                h ^= block[:, base + 2].astype(np.uint32) << np.uint32(16)
            if tail >= 2:
                h ^= block[:, base + 1].astype(np.uint32) << np.uint32(8)
            h ^= block[:, base].astype(np.uint32)
            h = h * _M
        h ^= h >> np.uint32(13)
        h = h * _M
        h ^= h >> np.uint32(15)
        out[rows] = h
    return out


def partitions(keys: pa.Array, count: int) -> np.ndarray:
    """The partition Kafka's Java producer (and librdkafka's `murmur2_random`) gives each key."""
    return ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(count)).astype(np.int32)


class Run(NamedTuple):
    """One record to produce: its partition and value, its source partition, the positions of
    its first and last rows, and how many rows it holds (the sink writes the last position as
    the record's position headers, the rest as `header`)."""

    partition: int
    value: bytes
    src_topic: str
    src_partition: int
    first: Position
    last: Position
    rows: int

    def header(self) -> tuple[str, bytes]:
        """The `floe.run` header: `<rows>:<first offset>:<first index>`."""
        return (RUN_HEADER, f"{self.rows}:{self.first[0]}:{self.first[1]}".encode())


def pack(rows: pa.Table, count: int) -> list[Run]:
    """Re-keyed rows, an Arrow table of key, value, src topic, src partition, src offset and src
    index (in that column order) sorted by source and position, as runs for a topic of `count`
    partitions: per source and partition, in position order, at most `RUN_MAX_ROWS` rows and
    about `RUN_MAX_BYTES` each."""
    n = rows.num_rows
    if n == 0:
        return []
    rows = rows.combine_chunks()
    keys, values, topics, parts, offs, idxs = (rows.column(i).chunk(0) for i in range(6))
    keys, values = keys.cast(pa.binary()), values.cast(pa.binary())
    src_part = parts.to_numpy(zero_copy_only=False).astype(np.int64)
    target = partitions(keys, count)
    if keys.null_count:
        nulls = keys.is_null().to_numpy(zero_copy_only=False)
        target = np.where(nulls, src_part % count, target).astype(np.int32)
    topic_codes = pc.dictionary_encode(topics).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    source = topic_codes * (1 << 32) + src_part
    order = np.lexsort((np.arange(n), target, source))
    sizes = (_lengths(keys) + _lengths(values) + ROW_OVERHEAD_BYTES)[order].cumsum()
    group = np.flatnonzero((np.diff(source[order]) != 0) | (np.diff(target[order]) != 0)) + 1
    table = pa.Table.from_arrays([keys, values, offs.cast(pa.int64()), idxs.cast(pa.int32())], schema=SCHEMA)
    src_off, src_idx = offs.to_numpy(zero_copy_only=False), idxs.to_numpy(zero_copy_only=False)
    out: list[Run] = []
    for start, end in zip([0, *group.tolist()], [*group.tolist(), n], strict=True):
        a = start
        while a < end:
            base = sizes[a - 1] if a else 0
            b = int(np.searchsorted(sizes[a:end], base + RUN_MAX_BYTES, side="right")) + a
            b = min(max(b, a + 1), a + RUN_MAX_ROWS, end)
            first, last = int(order[a]), int(order[b - 1])
            out.append(
                Run(
                    int(target[first]),
                    _serialize(table.take(pa.array(order[a:b]))),
                    topics[first].as_py(),
                    int(src_part[first]),
                    (int(src_off[first]), int(src_idx[first])),
                    (int(src_off[last]), int(src_idx[last])),
                    b - a,
                )
            )
            a = b
    return out


def _lengths(array: pa.Array) -> np.ndarray:
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)
    return np.diff(offsets).astype(np.int64)


def _serialize(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


@dataclass(frozen=True)
class RunInfo:
    rows: int
    first: Position


def info(headers: Iterable[tuple[str, Any]] | None) -> RunInfo | None:
    """The `floe.run` header of a record, or None when the record is not a run."""
    for key, value in headers or ():
        if key == RUN_HEADER and value is not None:
            try:
                rows, first_off, first_idx = (int(part) for part in bytes(value).decode().split(":"))
            except ValueError:
                raise ValueError(
                    f"malformed {RUN_HEADER} header {bytes(value)!r}: a run of re-keyed rows needs "
                    "<rows>:<first offset>:<first index>; only Floe's re-keys write this topic"
                ) from None
            return RunInfo(rows, (first_off, first_idx))
    return None


def table(value: bytes) -> pa.Table:
    """The rows of a run: key, value, off, idx."""
    return pa.ipc.open_stream(value).read_all()


def after(value: bytes, headers: Sequence[tuple[str, Any]], floor: Position) -> tuple[bytes, list[tuple[str, Any]]]:
    """The run without its rows at or below position `floor` (what an earlier attempt applied):
    its value and headers. The run's last row is above `floor`, so at least that row stays."""
    rows = table(value)
    off, idx = rows.column("off"), rows.column("idx")
    keep = pc.or_(pc.greater(off, floor[0]), pc.and_(pc.equal(off, floor[0]), pc.greater(idx, floor[1])))
    kept = rows.filter(keep)
    first = f"{kept.num_rows}:{kept.column('off')[0].as_py()}:{kept.column('idx')[0].as_py()}".encode()
    return _serialize(kept), [(k, first if k == RUN_HEADER else v) for k, v in headers]
