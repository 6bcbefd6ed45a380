"""Where one batch runs, in the driver or in Spark: one decision per batch, in one place.

Three phases of a batch can run in the replica's driver or in Spark, and each is cheaper in the
driver while the batch is small (docs/runtime.md, "What a batch costs"): its read (a consumer in
the driver, or Spark's Kafka source), the helpers' grouping (`floe_jobs.smallbatch`, or Spark's
shuffles) and its output (collected and produced by the driver, or Spark's Kafka sink). Each has
its threshold in the configuration; `decide` compares the batch's size with all three once, and
the read, the helpers and the sink follow what it decided, so a batch never takes a path that
another phase sized differently.

A batch's size is its input records. An input topic's batch is sized by its plan, before its
read: Spark's source counts nothing it reads, and the driver reads one row per record. A
repartition topic's batch, always read by the driver, is sized by the rows it read (its records
may be runs of many rows, `floe_jobs.runs`) over `kafka.repartition_rows_per_record`: such a
batch may hold that many re-keyed rows per record of the batch cap (`stagepass.row_cap`), so
the batch the cap allows takes the paths an input batch of the cap's size takes (`for_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

from floe_jobs.config import FloeConfig


@dataclass(frozen=True)
class Placement:
    """Where each phase of one batch runs."""

    # the input records the decision was made for; None: unknown (a warm-up's dry run)
    records: int | None
    # read by Spark's Kafka source rather than by the lane's consumer in the driver
    spark_read: bool
    # the state helpers group rows in the driver (`floe_jobs.smallbatch`) rather than in Spark
    driver_grouping: bool
    # what the batch emits goes to Spark's Kafka sink (when its connector is on spark.jars)
    # rather than being collected and produced by the lane's producer
    spark_sink: bool


def decide(cfg: FloeConfig, *, records: int | None, spark_source: bool = False) -> Placement:
    """Where a batch of `records` input records runs. `spark_source`: Spark's Kafka source may
    read it (an input topic's batch, the connector on spark.jars). A batch of unknown size (a
    tool or a test driving helpers outside the loop) runs its helpers' Spark plans, the ones
    large batches need, and collects its output."""
    if records is None:
        return Placement(records=None, spark_read=False, driver_grouping=False, spark_sink=False)
    return Placement(
        records=records,
        spark_read=spark_source and records >= cfg.kafka.spark_read_min_records,
        driver_grouping=records <= cfg.spark.driver_batch_limit,
        spark_sink=records > cfg.kafka.spark_sink_min_records,
    )


def for_warm_up(cfg: FloeConfig) -> Placement:
    """Where a warm-up's dry run runs: its helpers group where a full batch (the batch cap) does,
    since the first batches after a start or a handover are full ones, and warming another path
    compiles plans no batch then runs (Spark's shuffles, where the driver groups batches up to
    the cap, as with a `local` master by default). Its output is collected: a dry run cannot warm
    a sink that writes. Its read is the driver's: the warm-up runs Spark's source apart."""
    full = decide(cfg, records=cfg.kafka.max_records_per_batch)
    return Placement(records=None, spark_read=False, driver_grouping=full.driver_grouping, spark_sink=False)


def for_rows(cfg: FloeConfig, rows: int) -> Placement:
    """Where a repartition topic's batch of `rows` re-keyed rows runs: sized as the input records
    those rows stand for, `kafka.repartition_rows_per_record` rows each (rounded up)."""
    return decide(cfg, records=-(-rows // cfg.kafka.repartition_rows_per_record))
