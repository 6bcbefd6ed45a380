"""The records of one micro-batch, between the Kafka read and the stage.

A small batch is read with a plain consumer (`floe_jobs.kafkaio`) into a list of `Record` tuples —
the columns of Spark's Kafka source, in its order — and handed to the stage as a DataFrame
built from them. Holding the records in Python first lets the runtime do the per-record
bookkeeping without a Spark job: the bytes of the batch (for the byte cap) and, for a stage
that reads a repartition topic, dropping the records whose source position was already applied
(`drop_applied`). A large batch is read by Spark's Kafka source and never reaches Python: the
same filter runs as a Spark plan (`drop_applied_frame`).

Re-keyed records carry their source position in headers: `floe.src` (`topic:partition` of the
stage-1 input record), `floe.off` (its offset) and `floe.idx` (the index of the record among
those derived from it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

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
    """The batch as a DataFrame whose jobs run in the JVM only (`floe_jobs.localdf`)."""
    from floe_jobs.localdf import local_dataframe

    return local_dataframe(spark, records, schema())


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
    not tracked.
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
        if (mark is not None and at <= mark) or (high is not None and at <= high):
            continue
        kept.append(r)
        seen.setdefault((r.topic, r.partition), {})[src] = at
    return kept, seen


class KeptFrame(NamedTuple):
    """What `drop_applied_frame` kept: the records, their highest positions, how many, and a
    call that releases their cached copy (once the batch is done)."""

    df: Any
    seen: dict[TP, dict[str, Position]]
    kept: int
    release: Callable[[], Any]


def drop_applied_frame(df: Any, applied: Mapping[TP, Mapping[str, Position]]) -> KeptFrame:
    """`drop_applied` as a Spark plan over a DataFrame of `schema()` rows: the same records kept
    and the same highest positions, computed by one job. That job caches the kept records, so
    the stage's own jobs do not read Kafka again.

    A record is kept when it has no source position, or when its position is above both the
    stored mark of its (topic, partition) and source and every position before it (by offset) in
    this batch from the same source: the running maximum of the earlier positions equals
    `drop_applied`'s highest kept one whenever the comparison matters, since a record it drops
    is at or below one of the two.
    """
    from floe_jobs.localdf import local_dataframe
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType


    def header(name: str) -> Any:  # the first header of that name, as text (Python: the first)
        return F.element_at(F.filter(F.col("headers"), lambda h: h["key"] == name), 1)["value"].cast("string")

    src = header(SRC_HEADER)
    pos = F.struct(
        F.coalesce(header(OFF_HEADER).cast("long"), F.lit(-1).cast("long")).alias("off"),
        F.coalesce(header(IDX_HEADER).cast("long"), F.lit(-1).cast("long")).alias("idx"),
    )
    located = df.withColumn("_floe_src", src).withColumn("_floe_pos", pos)
    marks = local_dataframe(
        df.sparkSession,
        [
            (topic, partition, source, off, idx)
            for (topic, partition), sources in applied.items()
            for source, (off, idx) in sources.items()
        ],
        StructType(
            [
                StructField("topic", StringType()),
                StructField("partition", IntegerType()),
                StructField("_floe_src", StringType()),
                StructField("_floe_mark_off", LongType()),
                StructField("_floe_mark_idx", LongType()),
            ]
        ),
    )
    earlier = Window.partitionBy("topic", "partition", "_floe_src").orderBy("offset").rowsBetween(
        Window.unboundedPreceding, -1
    )
    mark = F.struct(F.col("_floe_mark_off").alias("off"), F.col("_floe_mark_idx").alias("idx"))
    prev = F.col("_floe_prev")
    keep = F.col("_floe_src").isNull() | (
        (F.col("_floe_mark_off").isNull() | (F.col("_floe_pos") > mark)) & (prev.isNull() | (F.col("_floe_pos") > prev))
    )
    kept = (
        located.join(F.broadcast(marks), ["topic", "partition", "_floe_src"], "left")
        .withColumn("_floe_prev", F.max("_floe_pos").over(earlier))
        .where(keep)
        .select(*df.columns, "_floe_src", "_floe_pos")
        .persist()
    )
    groups = kept.groupBy("topic", "partition", "_floe_src").agg(
        F.max("_floe_pos").alias("high"), F.count(F.lit(1)).alias("n")
    )
    seen: dict[TP, dict[str, Position]] = {}
    count = 0
    for row in groups.collect():
        count += row["n"]
        if row["_floe_src"] is not None:
            high = (row["high"]["off"], row["high"]["idx"])
            seen.setdefault((row["topic"], row["partition"]), {})[row["_floe_src"]] = high
    return KeptFrame(kept.select(*df.columns), seen, count, kept.unpersist)
