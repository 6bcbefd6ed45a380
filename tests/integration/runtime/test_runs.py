"""Runs of re-keyed rows on the real broker and Spark: they land where Kafka's partitioner puts
their keys, a read stops at its row limit, and every row of a run reaches the stage's DataFrame."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from floe_jobs import api, config, kafkaio, placement, planning, records, runs
from floe_jobs.localdf import collect_rows
from floe_stack import localrun
from pyspark.sql import functions as F

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 6


def _read(job_config: config.FloeConfig, topic: str, limits: dict[tuple[str, int], int] | None = None) -> Any:
    reader = kafkaio.RangeReader(job_config, client_id=job_config.app_id)
    try:
        marks = reader.watermarks([(topic, p) for p in range(PARTITIONS)])
        plans = [planning.PartitionPlan(topic, p, 1, m.low, m.high, replay=False) for (_t, p), m in marks.items()]
        return (*reader.read_rows(plans, limits), marks)
    finally:
        reader.close()


def test_runs_land_on_the_partitions_kafkas_partitioner_gives_their_keys(
    kafka_bootstrap: str, job_config: config.FloeConfig, rekeyed_table: Any
) -> None:
    keyed, packed = (f"{job_config.app_id}-{name}" for name in ("keyed", "packed"))
    for topic in (keyed, packed):
        localrun.create_topic(kafka_bootstrap, topic, PARTITIONS)
    keys = [f"word-{i}".encode() for i in range(3000)]
    sink = kafkaio.KafkaSink(job_config, client_id=job_config.app_id)
    try:
        # one record per key, partitioned by the producer (murmur2, as Kafka's Java producer)
        assert sink.write_rows((k, b"1", None, keyed) for k in keys) == len(keys)
        rows = [(k, b"1", "lines", 0, 10, i) for i, k in enumerate(sorted(keys), 1)]
        written = sink.write_runs(packed, rekeyed_table(rows))
    finally:
        sink.close()
    by_producer = {r.key: r.partition for r in _read(job_config, keyed)[0]}
    assert len(by_producer) == len(keys) and len(set(by_producer.values())) == PARTITIONS
    got, _stopped, _marks = _read(job_config, packed)
    assert len(got) == written < len(keys), "runs, not one record per row"
    placed = {k: r.partition for r in got for k in runs.table(r.value).column("key").to_pylist()}
    assert placed == by_producer
    assert list(runs.partitions(pa.array(keys), PARTITIONS)) == [by_producer[k] for k in keys]


def test_a_read_stops_at_its_row_limit_and_the_frame_holds_every_row(
    kafka_bootstrap: str, spark: Any, job_config: config.FloeConfig, rekeyed_table: Any
) -> None:
    topic = f"{job_config.app_id}-rows"
    localrun.create_topic(kafka_bootstrap, topic, PARTITIONS)
    rows = [(f"k{i:06d}".encode(), str(i).encode(), "lines", 0, 10, i) for i in range(1, 60_001)]
    sink = kafkaio.KafkaSink(job_config, client_id=job_config.app_id)
    try:
        sink.write_runs(topic, rekeyed_table(rows))
    finally:
        sink.close()
    everything, stopped, marks = _read(job_config, topic)
    assert stopped == {} and records.row_count(everything) == len(rows)
    limits = {(topic, p): 5000 for p in range(PARTITIONS)}
    some, stopped, _ = _read(job_config, topic, limits)
    assert stopped, "every partition holds more than 5,000 rows"
    rows_at = {(r.partition, r.offset): runs.info(r.headers).rows for r in everything}  # type: ignore[union-attr]
    for (_t, partition), end in stopped.items():
        mine = [r for r in some if r.partition == partition]
        assert [r.offset for r in mine] == list(range(marks[(topic, partition)].low, end))
        taken = sum(rows_at[(partition, r.offset)] for r in mine)
        assert 0 < taken <= 5000 < taken + rows_at[(partition, end)], "it stops before the record that would pass"
    df = records.to_dataframe(spark, everything)
    assert df.count() == len(rows)
    got = collect_rows(df.select(F.col("key"), F.col("value"), "topic", "partition", "headers"))
    assert sorted((bytes(k), bytes(v)) for k, v, *_ in got) == sorted((r[0], r[1]) for r in rows)
    assert {(t, h) for _k, _v, t, _p, h in got} == {(topic, None)}


def test_a_combining_rekey_is_written_as_runs_and_counted_back(
    kafka_bootstrap: str, spark: Any, job_config: config.FloeConfig
) -> None:
    topic = job_config.repartition_topic("words")
    localrun.create_topic(kafka_bootstrap, topic, PARTITIONS)
    lines = spark.createDataFrame(
        [("lines", i % 2, i, f"a b{i % 50} c{i}") for i in range(400)],
        "topic string, partition int, offset long, v string",
    )
    words = lines.select("topic", "partition", "offset", F.explode(F.split("v", " ")).alias("word"))
    batch = api.Batch(
        spark=spark,
        df=lines,
        stage="split",
        cfg=job_config,
        args=[],
        seqs={},
        sink=kafkaio.KafkaSink(job_config, client_id=job_config.app_id),
        records=400,
    )
    emit = batch.rekey(words, name="words", key=F.col("word"), combine="count")
    assert emit.table is not None, "a small combining re-key holds its rows for the sink to pack"
    try:
        written = batch.sink.write(emit.df, topic=emit.topic, positions=True, table=emit.table)
    finally:
        batch.sink.close()
    got, _stopped, _marks = _read(job_config, topic)
    # per source partition: a, the 25 b-words of its parity, its 200 c-words
    assert written == 2 * (1 + 25 + 200) and len(got) < written
    df = records.to_dataframe(spark, got)
    counts = {
        bytes(k).decode(): n
        for k, n in collect_rows(df.groupBy("key").agg(F.sum(F.col("value").cast("string").cast("long")).alias("n")))
    }
    assert counts["a"] == 400 and counts["b7"] == 8 and counts["c399"] == 1 and len(counts) == 451


@pytest.mark.cassandra
@pytest.mark.parametrize("in_driver", [True, False], ids=["driver", "spark"])
def test_dedup_keeps_only_new_keys_among_rows_that_share_a_runs_offset(
    in_driver: bool,
    spark: Any,
    job_config: config.FloeConfig,
    session: Any,
    dropped_keyspaces: list[str],
    cassandra_hosts: list[str],
    cassandra_port: int,
    rekeyed_table: Any,
) -> None:
    """Rows of one run share its offset: `dedup` finds each kept key's first row by key as well,
    so a repeated key next to a new one in the same run is still dropped; grouped in the driver
    (a small batch) or by Spark's plan, with the same rows and columns."""
    from floe_jobs import state
    from floe_jobs.stores import schema

    keyspace = f"it_runs_{job_config.app_id.split('-')[-1]}"
    dropped_keyspaces.append(keyspace)
    schema.provision(
        session, keyspace=keyspace, replication=None, stores=[schema.StoreSpec(name="seen", type="partitioned")]
    )
    cfg = job_config.model_copy(
        update={
            "cassandra": job_config.cassandra.model_copy(
                update={"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}
            ),
            "stores": [config.StoreSettings(name="seen", type="partitioned")],
        }
    )
    topic = cfg.repartition_topic("words")

    def kept(seq: int, offset: int, keys: list[bytes]) -> list[str]:
        (run,) = runs.pack(rekeyed_table([(k, b"1", "lines", 0, offset, i) for i, k in enumerate(keys, 1)]), 1)
        stamp = datetime(2026, 11, 28, 12, 0, offset, 123456, tzinfo=UTC)
        plain = records.Record(b"solo", b"1", topic, 0, offset - 1, stamp, [("h", b"v"), ("n", None)])
        rows = [plain, records.Record(None, run.value, topic, 0, offset, None, records.run_headers(run))]
        batch = api.Batch(
            spark=spark,
            df=records.to_dataframe(spark, rows),
            stage="count",
            cfg=cfg,
            args=[],
            seqs={(topic, 0): seq},
            sink=kafkaio.KafkaSink(cfg, client_id=cfg.app_id),
            records=len(keys) + 1,
            where=placement.Placement(
                records=len(keys) + 1, spark_read=False, driver_grouping=in_driver, spark_sink=False
            ),
        )
        out = batch.dedup(batch.df, store="seen", key=F.col("key").cast("string"))
        assert out.schema == batch.df.schema
        got = collect_rows(out)
        read = {r[2:5]: r for r in collect_rows(batch.df)}
        assert all(r == read[r[2:5]] for r in got if r[0] == b"solo"), "the kept record as read, every column"
        return sorted(bytes(r[0]).decode() for r in got)

    try:
        assert kept(1, 5, [b"a"]) == ["a", "solo"]
        assert kept(2, 9, [b"a", b"b"]) == ["b"], "a was seen in the first batch; solo too"
    finally:
        state.shutdown_sessions()
