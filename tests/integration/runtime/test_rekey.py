"""`Batch.rekey(combine=...)` on real Spark: one row per key and input partition with the combined
value, at positions a replay reproduces and a later batch exceeds; bad arguments are refused."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from floe_jobs import api, config, kafkaio, records
from floe_jobs.localdf import collect_rows
from pyspark.sql import functions as F

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _batch(spark: Any, cfg: config.FloeConfig, lines: list[tuple[int, int, str]]) -> api.Batch:
    recs = [records.Record(None, text.encode(), "lines", p, off, datetime.now(UTC), None) for p, off, text in lines]
    return api.Batch(
        spark=spark,
        df=records.to_dataframe(spark, recs),
        stage="split",
        cfg=cfg,
        args=[],
        seqs={},
        sink=kafkaio.KafkaSink(cfg, client_id="rekey-it"),
    )


def _words(batch: api.Batch) -> Any:
    return batch.df.select(
        "topic", "partition", "offset", F.explode(F.split(F.col("value").cast("string"), " ")).alias("word")
    )


def _rows(emit: api.Emit) -> list[tuple[bytes, bytes, tuple[Any, ...]]]:
    rows = collect_rows(emit.df.select("key", "value", *emit.order))
    return sorted((bytes(r[0]), bytes(r[1]), tuple(r[2:])) for r in rows)


def test_combine_sends_each_key_once_per_input_partition(spark: Any, job_config: config.FloeConfig) -> None:
    lines = [(0, 10, "a b a"), (0, 11, "b c"), (1, 40, "a a"), (0, 12, "a")]
    batch = _batch(spark, job_config, lines)
    emit = batch.rekey(_words(batch), name="words", key=F.col("word"), combine="count")
    assert emit.topic == f"{job_config.app_id}-words-repartition" and emit.positions
    rows = _rows(emit)
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
