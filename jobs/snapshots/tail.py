"""The repartition tail: records a repartition stage had not applied at its cut.

A restored app has a new app id, so new (empty) repartition topics: what the upstream stage had
committed into the old topic and the downstream stage had not applied yet would be lost. The
snapshot reads each old repartition partition from the stage's cut to its end (after the
upstream stage was cut) and keeps the records from batches the upstream stage had committed at
its cut (`manifest.tail_wanted`); the restore writes them, in order, into the new topic, where
the stage resumes. Records of the upstream stage's plan in flight are left out: the restored
app replays that plan, and so writes them again. Duplicates (from earlier replays) keep their
source positions, by which the stage drops what it applied (`records.drop_applied`).

Reads go through the runtime's range reader and writes through a producer with the runtime's
client settings (`floe_jobs.kafkaio`); each record goes to the partition of the same number in
the new topic (a run of rows has no key: `floe_jobs.runs`), whose store rows the snapshot holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from floe_jobs import kafkaio, records
from floe_jobs.config import FloeConfig
from floe_jobs.planning import PartitionPlan
from floe_jobs.snapshots.manifest import Row, SnapshotError, StageCut, tail_wanted

SCHEMA = (
    "partition int, offset bigint, key binary, value binary, header_keys array<string>, header_values array<binary>"
)


def _headers(raw: Any) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((str(k), None if v is None else bytes(v)) for k, v in (raw or ()))


def read(cfg: FloeConfig, stage: StageCut, ends: Mapping[str, int]) -> list[Row]:
    """(partition, offset, key, value, headers) of each record of `stage`'s topic past its cut
    that `tail_wanted` keeps, `ends`: the upstream stage's committed position per source key."""
    reader = kafkaio.RangeReader(cfg, client_id=f"{cfg.app_id}-snapshot")
    try:
        tps = [(stage.topic, p.partition) for p in stage.partitions]
        high = reader.watermarks(tps)
        plans = [
            PartitionPlan(stage.topic, p.partition, 0, p.next_offset, high[(stage.topic, p.partition)].high, False)
            for p in stage.partitions
        ]
        got = reader.read([plan for plan in plans if plan.end > plan.start])
    finally:
        reader.close()
    out: list[Row] = []
    for r in got:
        if tail_wanted(records.source_position(r.headers), ends):
            out.append((r.partition, r.offset, r.key, r.value, _headers(r.headers)))
    return sorted(out, key=lambda row: (row[0], row[1]))


def to_arrow(rows: list[Row]) -> Any:
    """The tail as one Arrow table of `SCHEMA`'s columns."""
    import pyarrow as pa

    return pa.table(
        {
            "partition": pa.array([r[0] for r in rows], pa.int32()),
            "offset": pa.array([r[1] for r in rows], pa.int64()),
            "key": pa.array([r[2] for r in rows], pa.binary()),
            "value": pa.array([r[3] for r in rows], pa.binary()),
            "header_keys": pa.array([[k for k, _ in r[4]] for r in rows], pa.list_(pa.string())),
            "header_values": pa.array([[v for _, v in r[4]] for r in rows], pa.list_(pa.binary())),
        }
    ).combine_chunks()


def write(spark: Any, rows: list[Row], path: str) -> None:
    """The tail as Parquet under `path`."""
    spark.createDataFrame(to_arrow(rows), SCHEMA).write.mode("errorifexists").parquet(path)


def from_arrow(table: Any) -> list[Row]:
    """Rows read back from the tail's Parquet files, in the shape `read` returned them."""
    names = ("partition", "offset", "key", "value", "header_keys", "header_values")
    cols = [table.column(c).to_pylist() for c in names]
    out: list[Row] = []
    for partition, offset, key, value, keys, values in zip(*cols, strict=True):
        out.append((partition, offset, key, value, tuple(zip(keys or [], values or [], strict=True))))
    return sorted(out, key=lambda row: (row[0], row[1]))


def _write(cfg: FloeConfig, topic: str, rows: list[Row]) -> None:
    """Produce each record to the partition of its number (a run has no key to partition by),
    in order (idempotent: a retry neither reorders nor repeats), and wait for every one."""
    from confluent_kafka import KafkaException, Producer

    conf = {
        **kafkaio.client_settings(cfg),
        "client.id": f"{cfg.app_id}-restore",
        "acks": "all",
        "enable.idempotence": True,
        "queue.buffering.max.messages": 2_000_000,
    }
    producer = Producer(kafkaio.with_properties(conf, cfg, "producer"))
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for partition, _offset, key, value, headers in rows:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=list(headers) or None, partition=partition,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(120)
    if left or errors:
        raise SnapshotError(f"writing the repartition tail into {topic}: {left} records not acknowledged,"
                            f" errors {errors[:3]}") from (KafkaException(errors[0]) if errors else None)


def produce(cfg: FloeConfig, topic: str, rows: list[Row]) -> dict[int, int]:
    """Write the tail into `topic` (the new app's), in order; the end of each of its partitions
    before the write (where the stage resumes), by partition."""
    reader = kafkaio.RangeReader(cfg, client_id=f"{cfg.app_id}-restore")
    try:
        parts = reader.partitions([topic]).get(topic)
        if not parts:
            raise SnapshotError(f"topic {topic} does not exist")
        starts = {p: w.high for (_, p), w in reader.watermarks([(topic, p) for p in parts]).items()}
    finally:
        reader.close()
    _write(cfg, topic, rows)
    want: dict[int, int] = {}
    for r in rows:
        want[r[0]] = want.get(r[0], 0) + 1
    reader = kafkaio.RangeReader(cfg, client_id=f"{cfg.app_id}-restore")
    try:
        ends = {p: w.high for (_, p), w in reader.watermarks([(topic, p) for p in parts]).items()}
    finally:
        reader.close()
    got = {p: ends[p] - starts[p] for p in parts if ends[p] != starts[p]}
    if got != want:
        raise SnapshotError(
            f"the repartition tail landed in {topic} as {got} records per partition, not {want}: another"
            " process wrote to it during the restore"
        )
    return starts
