"""Large batches read by Spark's Kafka source: the same records as the driver's reader, and the
repartition filter as a Spark plan keeping exactly what the Python one keeps."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from floe_jobs import config, kafkaio, localrun, planning, records
from floe_jobs.localdf import collect_rows

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _positions(rng: random.Random, n: int) -> list[records.Record]:
    """Repartition-like records of two partitions: mostly increasing source positions per source,
    some repeated (a replay of stage 1 written again), some without headers."""
    out = []
    offsets = {0: 0, 1: 0}
    last: dict[tuple[int, str], tuple[int, int]] = {}
    for _ in range(n):
        partition = rng.randrange(2)
        src = f"lines:{rng.randrange(3)}"
        if rng.random() < 0.1:
            headers = None
        elif rng.random() < 0.2 and (partition, src) in last:  # a copy of an earlier position
            off, idx = last[(partition, src)]
            off, idx = max(0, off - rng.randrange(3)), rng.randrange(3)
            headers = records.position_headers(src.split(":")[0], int(src.split(":")[1]), off, idx)
        else:
            off, idx = last.get((partition, src), (0, 0))
            off, idx = (off + rng.randrange(0, 2), rng.randrange(4))
            last[(partition, src)] = (off, idx)
            headers = records.position_headers(src.split(":")[0], int(src.split(":")[1]), off, idx)
        out.append(
            records.Record(b"k", b"v", "words", partition, offsets[partition], datetime.now(UTC), headers)  # type: ignore[arg-type]
        )
        offsets[partition] += 1
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_spark_filter_keeps_what_the_python_one_keeps(spark: Any, seed: int) -> None:
    rng = random.Random(seed)
    batch = _positions(rng, 400)
    applied: dict[records.TP, dict[str, records.Position]] = {
        ("words", p): {f"lines:{s}": (rng.randrange(0, 30), rng.randrange(4)) for s in range(3) if rng.random() < 0.7}
        for p in range(2)
        if rng.random() < 0.8
    }
    kept, seen = records.drop_applied(batch, applied)
    frame = records.drop_applied_frame(records.to_dataframe(spark, batch), applied)
    try:
        got = sorted((r[2], r[3], r[4]) for r in collect_rows(frame.df))
    finally:
        frame.release()
    assert got == sorted((r.topic, r.partition, r.offset) for r in kept)
    assert frame.kept == len(kept)
    assert frame.seen == seen
    assert 0 < len(kept) < len(batch), "the case drops some records and keeps others"


def test_spark_reads_exactly_the_planned_ranges(
    kafka_bootstrap: str, spark: Any, job_config: config.FloeConfig
) -> None:
    topic = f"{job_config.app_id}-read"
    localrun.create_topic(kafka_bootstrap, topic, 2)
    sink = kafkaio.KafkaSink(job_config, client_id=job_config.app_id)
    rows = [
        (f"k{i}".encode() if i % 3 else None, f"v{i}".encode(), records.position_headers("lines", i % 4, i, 0), topic)
        for i in range(200)
    ]
    sink.write_rows(rows)
    sink.close()
    reader = kafkaio.RangeReader(job_config, client_id=job_config.app_id)
    try:
        marks = reader.watermarks([(topic, 0), (topic, 1)])
        assert sum(m.high for m in marks.values()) == 200
        plans = [
            planning.PartitionPlan(topic, 0, 1, 3, marks[(topic, 0)].high - 2, replay=False),
            planning.PartitionPlan(topic, 1, 1, 0, marks[(topic, 1)].high, replay=False),
        ]
        expected = reader.read(plans)
    finally:
        reader.close()
    df = kafkaio.read_with_spark(spark, job_config, plans)
    assert df.schema == records.schema()
    got = collect_rows(df)

    def comparable(r: Any) -> tuple[Any, ...]:
        pairs = [(h["key"], h["value"]) if isinstance(h, dict) else h for h in r[6] or []]
        headers = [(k, bytes(v)) for k, v in pairs]
        return (r[2], r[3], r[4], r[0] or b"", bytes(r[1]), headers)

    assert sorted(map(comparable, got)) == sorted(map(comparable, expected))
    assert len(got) == sum(p.end - p.start for p in plans)
    assert collect_rows(kafkaio.read_with_spark(spark, job_config, [])) == []
