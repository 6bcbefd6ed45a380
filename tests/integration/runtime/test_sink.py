"""The runtime's Kafka sink on the real broker and Spark: re-keyed rows written from the driver and
through Spark's Kafka sink carry the same source-position headers, in the same order."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from floe_jobs import api, config, kafkaio, records
from floe_stack import localrun
from pyspark.sql import functions as F

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _read_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[Any] = []
    deadline = time.monotonic() + 60
    while len(out) < expected and time.monotonic() < deadline:
        out.extend(m for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
    consumer.close()
    return out


def test_both_write_paths_put_the_same_position_headers(
    kafka_bootstrap: str, spark: Any, job_config: config.FloeConfig
) -> None:
    app_id = job_config.app_id
    sink = kafkaio.KafkaSink(job_config, client_id=app_id)
    assert sink.spark_sink, "the connector jars of the local stack are on spark.jars"
    # written out of order on purpose: both paths sort by the order columns
    rows = [(f"w{i}".encode(), str(i).encode(), "lines", i % 2, 100 + i // 2, 3 - i % 3) for i in range(12)][::-1]
    df = spark.createDataFrame(rows, "key binary, value binary, t string, p int, o long, i int").select(
        "key", "value", *[F.col(c).alias(a) for c, a in zip("tpoi", api.REKEY_ORDER, strict=True)]
    )
    try:
        written = {}
        for large in (False, True):
            topic = f"{app_id}-{'spark' if large else 'driver'}"
            localrun.create_topic(kafka_bootstrap, topic, 1)
            n = sink.write(df, topic=topic, large=large, order=api.REKEY_ORDER, positions=True)
            assert n == len(rows)
            written[large] = [
                (m.key(), m.value(), [(k, bytes(v)) for k, v in m.headers() or []])
                for m in _read_all(kafka_bootstrap, topic, n)
            ]
        expected = [
            (k, v, records.position_headers(t, p, o, i))
            for k, v, t, p, o, i in sorted(rows, key=lambda r: (r[2], r[3], r[4], r[5]))
        ]
        assert written[False] == expected
        # Spark's tasks write source partitions side by side: in order within each one
        for src in ("lines:0", "lines:1"):
            assert [w for w in written[True] if w[2][0][1] == src.encode()] == [
                e for e in expected if e[2][0][1] == src.encode()
            ]
        assert len(written[True]) == len(expected)
    finally:
        sink.close()


def test_a_record_the_broker_refuses_fails_the_write(
    kafka_bootstrap: str, spark: Any, job_config: config.FloeConfig
) -> None:
    """The producer's only delivery reports are failures: one the broker sends back (a record
    above the topic's max.message.bytes, which the producer's own limit lets through) fails the
    write on both driver paths (records batched with it may be refused with it), and the next
    write on the same sink, whose records the broker takes, succeeds."""
    from confluent_kafka.admin import AdminClient, NewTopic

    app_id = job_config.app_id
    sink = kafkaio.KafkaSink(job_config, client_id=app_id)
    small, roomy = f"{app_id}-small", f"{app_id}-roomy"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created = admin.create_topics([
        NewTopic(small, 1, 1, config={"max.message.bytes": "2000"}),
        NewTopic(roomy, 1, 1),
    ])
    for future in created.values():
        future.result(30)
    # random bytes: the producer compresses (lz4), and the broker checks the compressed batch
    noise = os.urandom(10_000)
    big = spark.createDataFrame([(b"k", noise), (b"j", b"y")], "key binary, value binary")
    with pytest.raises(kafkaio.WriteError, match="output records failed; first error: Broker: Message size too large"):
        sink.write(big, topic=small)
    with pytest.raises(kafkaio.WriteError, match="output records failed; first error: Broker: Message size too large"):
        sink.write_rows(
            [(b"k", noise, [("h", b"1")], small), (b"j", b"y", None, small)]
        )
    assert sink.write(big, topic=roomy) == 2
    assert sorted(m.value() for m in _read_all(kafka_bootstrap, roomy, 2)) == sorted([noise, b"y"])
