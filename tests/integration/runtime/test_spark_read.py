"""Large batches of input topics read by Spark's Kafka source: the same records as the driver's reader."""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import config, kafkaio, planning, records
from floe_jobs.localdf import collect_rows
from floe_stack import localrun

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


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
