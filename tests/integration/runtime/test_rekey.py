"""`Batch.rekey(combine=...)` on real Spark: one row per key and input partition with the combined
value, at positions a replay reproduces and a later batch exceeds; bad arguments are refused.
Small batches group their rows in the driver (`floe_jobs.smallbatch`): the same rows as Spark's."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from floe_jobs import api, config, kafkaio, records, smallbatch
from floe_jobs.localdf import collect_rows
from pyspark.sql import functions as F

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _batch(
    spark: Any, cfg: config.FloeConfig, lines: list[tuple[int, int, str]], *, planned: int | None = None
) -> api.Batch:
    recs = [records.Record(None, text.encode(), "lines", p, off, datetime.now(UTC), None) for p, off, text in lines]
    return api.Batch(
        spark=spark,
        df=records.to_dataframe(spark, recs),
        stage="split",
        cfg=cfg,
        args=[],
        seqs={},
        sink=kafkaio.KafkaSink(cfg, client_id="rekey-it"),
        records=planned,
    )


def _words(batch: api.Batch) -> Any:
    return batch.df.select(
        "topic", "partition", "offset", F.explode(F.split(F.col("value").cast("string"), " ")).alias("word")
    )


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, str) else bytes(value)


def _rows(emit: api.Emit) -> list[tuple[Any, Any, tuple[Any, ...]]]:
    rows = collect_rows(emit.df.select("key", "value", *emit.order))
    return sorted((_plain(r[0]), _plain(r[1]), tuple(r[2:])) for r in rows)


def _held(emit: api.Emit) -> list[tuple[Any, Any, tuple[Any, ...]]]:
    """The rows the stage holds for the sink: an Arrow table for a combining re-key."""
    held = emit.rows if emit.table is None else [tuple(r.values()) for r in emit.table.to_pylist()]
    assert held is not None
    return sorted((_plain(r[0]), _plain(r[1]), tuple(r[2:])) for r in held)


def test_combine_sends_each_key_once_per_input_partition(spark: Any, job_config: config.FloeConfig) -> None:
    lines = [(0, 10, "a b a"), (0, 11, "b c"), (1, 40, "a a"), (0, 12, "a")]
    batch = _batch(spark, job_config, lines)
    emit = batch.rekey(_words(batch), name="words", key=F.col("word"), combine="count")
    assert emit.topic == f"{job_config.app_id}-words-repartition" and emit.positions
    rows = _rows(emit)
    # without a planned size (a warm-up) the rows are also ranked in the driver, for the sink
    assert _held(emit) == rows
    # value: the count as a UTF-8 decimal; position: (last offset of the input partition, rank)
    assert rows == [
        (b"a", b"2", ("lines", 1, 40, 1)),
        (b"a", b"3", ("lines", 0, 12, 1)),
        (b"b", b"2", ("lines", 0, 12, 2)),
        (b"c", b"1", ("lines", 0, 12, 3)),
    ]
    # a replay of the same range makes the same rows at the same positions
    again = _batch(spark, job_config, list(reversed(lines)))
    assert _rows(again.rekey(_words(again), name="words", key=F.col("word"), combine="count")) == rows
    # the next batch of partition 0 is above every position of this one
    later = _batch(spark, job_config, [(0, 13, "a")])
    (row,) = _rows(later.rekey(_words(later), name="words", key=F.col("word"), combine="sum"))
    assert row[2][2:] > max(r[2][2:] for r in rows if r[2][1] == 0)


def test_rekey_refuses_bad_arguments(spark: Any, job_config: config.FloeConfig) -> None:
    batch = _batch(spark, job_config, [(0, 1, "a")])
    accepted = r"combine 'avg': accepted values are \['count', 'max', 'min', 'sum'\]"
    with pytest.raises(api.StateHelperError, match=accepted):
        batch.rekey(_words(batch), name="words", key=F.col("word"), combine="avg")
    with pytest.raises(api.StateHelperError, match="pass one of them"):
        batch.rekey(_words(batch), name="words", key=F.col("word"), combine="count", index="word")
    with pytest.raises(api.StateHelperError, match=r"needs the input columns \['offset'\]"):
        batch.rekey(_words(batch).drop("offset"), name="words", key=F.col("word"))


@pytest.mark.parametrize("seed", range(4))
def test_small_batches_rekey_in_the_driver_exactly_as_spark_does(
    spark: Any, job_config: config.FloeConfig, seed: int
) -> None:
    """A replay may take another path (a batch's size decides it), so all must make the same rows
    at the same positions: every combine, a stage's own index, and rows numbered per record.
    Spark's plans alone above `kafka.spark_sink_min_records` input records (Spark's Kafka sink takes
    them); below it a combining re-key ranks Spark's group-by in the driver; small batches do
    everything in the driver."""
    rng = random.Random(seed)
    vocab = ["a", "b", "é", "zz", "\u00ff", "A", "b b"]
    lines = [
        (rng.randrange(3), off, " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 6))))
        for off in rng.sample(range(1000), 60)
    ]
    spark_batch = _batch(spark, job_config, lines, planned=job_config.kafka.spark_sink_min_records + 1)
    ranked_batch = _batch(spark, job_config, lines, planned=job_config.spark.driver_batch_limit + 1)
    driver_batch = _batch(spark, job_config, lines, planned=len(lines))

    def words(batch: api.Batch) -> Any:
        return batch.df.select(
            "topic", "partition", "offset", F.posexplode(F.split(F.col("value").cast("string"), " "))
        ).where(F.col("col") != "")

    cases: list[dict[str, Any]] = [
        *({"combine": op} for op in sorted(api.COMBINE_OPS)),
        {"combine": "sum", "value": F.length("col") - 2},  # negative and zero values too
        {"index": "pos", "value": F.upper("col")},  # a stage's own numbers, a string value
        {},  # rows numbered per input record
    ]
    for case in cases:
        expected = spark_batch.rekey(words(spark_batch), name="words", key=F.col("col"), **case)
        got = driver_batch.rekey(words(driver_batch), name="words", key=F.col("col"), **case)
        assert expected.rows is None and expected.table is None, case
        assert (got.table if "combine" in case else got.rows) is not None, case
        assert _rows(got) == _rows(expected), case
        assert _held(got) == _rows(expected), case
        if "combine" in case:
            ranked = ranked_batch.rekey(words(ranked_batch), name="words", key=F.col("col"), **case)
            assert ranked.table is not None and _held(ranked) == _rows(expected), case


@pytest.mark.parametrize("op", sorted(api.COMBINE_OPS))
def test_the_driver_group_by_of_small_aggregations_equals_sparks(spark: Any, op: str) -> None:
    """`aggregate` groups a small batch's rows in the driver (`smallbatch.reduced`): the same
    totals per (partition, key) as Spark's group-by, null values skipped, all-null giving null."""
    rng = random.Random(op)
    rows = [
        (rng.randrange(3), rng.choice(["a", "b", "é", None]), rng.choice([None, *range(-3, 9)])) for _ in range(300)
    ]
    df = spark.createDataFrame(rows, "partition int, key string, value long")
    expected = sorted(
        collect_rows(df.groupBy("partition", "key").agg(api.COMBINE_OPS[op]("value").alias("value"))),
        key=repr,
    )
    assert sorted(smallbatch.reduced(df.toArrow(), op), key=repr) == expected
