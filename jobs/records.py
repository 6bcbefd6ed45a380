"""The records of one micro-batch, between the Kafka read and the stage.

A small batch is read with a plain consumer (`floe_jobs.kafkaio`) into a list of `Record` tuples —
the columns of Spark's Kafka source, in its order — and handed to the stage as a DataFrame
built from them. Holding the records in Python first lets the runtime do the per-record
bookkeeping without a Spark job: the bytes of the batch (for the byte cap) and, for a stage
that reads a repartition topic, dropping the records whose source position was already applied
(`drop_applied`). A large batch of an input topic is read by Spark's Kafka source and never
reaches Python; repartition topics are always read here, since their records may be runs of
rows (`floe_jobs.runs`) that only the driver unpacks.

Re-keyed records carry their source position in headers: `floe.src` (`topic:partition` of the
stage-1 input record), `floe.off` (its offset) and `floe.idx` (the index of the record among
those derived from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from floe_jobs import runs

SRC_HEADER = "floe.src"
OFF_HEADER = "floe.off"
IDX_HEADER = "floe.idx"

# per-record overhead counted against kafka.max_bytes_per_batch (offset, timestamp, framing)
RECORD_OVERHEAD_BYTES = 64

TP = tuple[str, int]
Position = tuple[int, int]  # (source offset, index)


class Record(NamedTuple):
    """One Kafka record with the columns of Spark's Kafka source (headers: None when absent)."""

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: datetime | None
    headers: list[tuple[str, bytes | None]] | None


def schema() -> Any:
    """The Spark schema of `Record` rows: the Kafka source's columns and types."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("headers", ArrayType(header)),
        ]
    )


def to_dataframe(spark: Any, records: Sequence[Record]) -> Any:
    """The batch as a DataFrame whose jobs run in the JVM only (`floe_jobs.localdf`). Each row of
    a run (`floe_jobs.runs`) becomes a row with the run's topic, partition, offset and timestamp
    and no headers: the Arrow columns of the run, never Python objects per row."""
    import pyarrow as pa
    from floe_jobs.localdf import arrow_dataframe, arrow_schema, arrow_table, local_dataframe

    is_run = [r.headers is not None and runs.info(r.headers) is not None for r in records]
    if not any(is_run):
        return local_dataframe(spark, records, schema())
    arrow = arrow_schema(schema())
    pieces: list[Any] = []
    plain: list[Record] = []
    for r, run in zip(records, is_run, strict=True):
        if not run:
            plain.append(r)
            continue
        if plain:
            pieces.append(arrow_table(plain, schema()))
            plain = []
        pieces.append(_run_table(r, arrow))
    if plain:
        pieces.append(arrow_table(plain, schema()))
    return arrow_dataframe(spark, pa.concat_tables(pieces), schema())


def _run_table(record: Record, arrow: Any) -> Any:
    """The rows of a run as an Arrow table of `schema()` (`arrow`: that schema in Arrow)."""
    import pyarrow as pa

    assert record.value is not None
    rows = runs.table(record.value)
    n = rows.num_rows
    fields = {f.name: f.type for f in arrow}
    return pa.Table.from_arrays(
        [
            rows.column("key").combine_chunks(),
            rows.column("value").combine_chunks(),
            pa.repeat(pa.scalar(record.topic, fields["topic"]), n),
            pa.repeat(pa.scalar(record.partition, fields["partition"]), n),
            pa.repeat(pa.scalar(record.offset, fields["offset"]), n),
            pa.repeat(pa.scalar(record.timestamp, fields["timestamp"]), n),
            pa.nulls(n, fields["headers"]),
        ],
        schema=arrow,
    )


def row_count(records: Sequence[Record]) -> int:
    """Rows of the records: a run counts as its rows (`floe_jobs.runs`), another record as one."""
    total = 0
    for r in records:
        run = runs.info(r.headers) if r.headers else None
        total += 1 if run is None else run.rows
    return total


def average_bytes(records: Sequence[Record]) -> float | None:
    """Mean size of a record as counted against the byte cap; None for an empty batch."""
    if not records:
        return None
    total = sum(len(r.key or b"") + len(r.value or b"") + RECORD_OVERHEAD_BYTES for r in records)
    return total / len(records)


def position_headers(src_topic: str, src_partition: int, offset: int, idx: int) -> list[tuple[str, bytes]]:
    """The headers a re-keyed record carries (the inverse of `source_position`)."""
    return [
        (SRC_HEADER, f"{src_topic}:{src_partition}".encode()),
        (OFF_HEADER, str(offset).encode()),
        (IDX_HEADER, str(idx).encode()),
    ]


def run_headers(run: runs.Run) -> list[tuple[str, bytes]]:
    """The headers a run of re-keyed rows carries: its last row's position, and `floe.run`."""
    return [*position_headers(run.src_topic, run.src_partition, *run.last), run.header()]


def position_headers_column(src_topic: str, src_partition: str, offset: str, idx: str) -> Any:
    """`position_headers` as a Spark column over the named columns (for Spark's Kafka sink)."""
    from pyspark.sql import functions as F

    def header(key: str, value: Any) -> Any:
        return F.struct(F.lit(key).alias("key"), value.cast("binary").alias("value"))

    return F.array(
        header(SRC_HEADER, F.concat_ws(":", src_topic, src_partition)),
        header(OFF_HEADER, F.col(offset).cast("string")),
        header(IDX_HEADER, F.col(idx).cast("string")),
    )


def source_position(headers: Iterable[tuple[str, Any]] | None) -> tuple[str, Position] | None:
    """(source partition, (offset, index)) of a re-keyed record; None when it carries none."""
    if not headers:
        return None
    found: dict[str, Any] = {}
    for key, value in headers:
        if key in (SRC_HEADER, OFF_HEADER, IDX_HEADER) and key not in found:
            found[key] = value
    if SRC_HEADER not in found or found[SRC_HEADER] is None:
        return None
    src = bytes(found[SRC_HEADER]).decode()
    off = int(bytes(found.get(OFF_HEADER) or b"-1"))
    idx = int(bytes(found.get(IDX_HEADER) or b"-1"))
    return src, (off, idx)


def drop_applied(
    records: Sequence[Record], applied: Mapping[TP, Mapping[str, Position]]
) -> tuple[list[Record], dict[TP, dict[str, Position]]]:
    """Records of a repartition topic not yet applied, and the highest position among them.

    A record is applied when its source position is at or below the stored high-water mark
    of its (topic, partition) and source, or at or below a position kept earlier in this same
    batch: a replay of stage 1 wrote it again, and both copies can reach one batch when the
    replay comes before this stage has read the first. Each copy is in source order within a
    partition (stage 1 writes in that order). Records without a source position are kept and
    not tracked. A run (`floe_jobs.runs`) is its rows, each at its own position: it is dropped
    when its last row is applied and cut when only its first rows are.
    """
    kept: list[Record] = []
    seen: dict[TP, dict[str, Position]] = {}
    for r in records:
        pos = source_position(r.headers)
        if pos is None:
            kept.append(r)
            continue
        src, at = pos
        mark = applied.get((r.topic, r.partition), {}).get(src)
        high = seen.get((r.topic, r.partition), {}).get(src)
        floor = max((p for p in (mark, high) if p is not None), default=None)
        if floor is not None and at <= floor:
            continue
        if floor is not None:
            run = runs.info(r.headers)
            if run is not None and run.first <= floor:  # a run that an earlier attempt applied in part
                assert r.value is not None and r.headers is not None
                value, headers = runs.after(r.value, r.headers, floor)
                r = r._replace(value=value, headers=headers)
        kept.append(r)
        seen.setdefault((r.topic, r.partition), {})[src] = at
    return kept, seen
