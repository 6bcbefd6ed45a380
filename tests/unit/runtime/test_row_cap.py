"""A stage fed by a repartition topic reads several re-keyed rows per record of the batch cap, and
its batch is placed as the input records those rows stand for."""

from __future__ import annotations

from types import SimpleNamespace

from floe_jobs import api, config, placement, stagepass

from .appenv import WORD_COUNT_ENV

ENV = {**WORD_COUNT_ENV, "FLOE_KAFKA_MAX_RECORDS_PER_BATCH": "5000"}


def _cap(stage: api.Stage, **env: str) -> int:
    ctx = SimpleNamespace(cfg=config.load(environ={**ENV, **env}))
    return stagepass.row_cap(ctx, stage)  # type: ignore[arg-type]


def test_an_input_stage_reads_the_batch_cap() -> None:
    assert _cap(api.Stage(name="split", fn=lambda b: b, source=None)) == 5000


def test_a_rekeyed_stage_reads_eight_rows_per_record_by_default() -> None:
    assert _cap(api.Stage(name="count", fn=lambda b: b, source="split")) == 40_000


def test_the_rows_per_record_setting_is_read() -> None:
    stage = api.Stage(name="count", fn=lambda b: b, source="split")
    assert _cap(stage, FLOE_KAFKA_REPARTITION_ROWS_PER_RECORD="1") == 5000
    assert _cap(stage, FLOE_KAFKA_REPARTITION_ROWS_PER_RECORD="3") == 15_000


def test_a_rekeyed_batch_is_placed_as_the_input_records_its_rows_stand_for() -> None:
    cfg = config.load(environ={**ENV, "FLOE_SPARK_MASTER": "local[2]"})
    assert cfg.spark.driver_batch_limit == 50_000
    within = placement.for_rows(cfg, 400_000)
    assert (within.records, within.driver_grouping, within.spark_sink) == (50_000, True, False)
    beyond = placement.for_rows(cfg, 400_001)
    assert (beyond.records, beyond.driver_grouping) == (50_001, False)
    one = config.load(environ={**ENV, "FLOE_SPARK_MASTER": "local[2]", "FLOE_KAFKA_REPARTITION_ROWS_PER_RECORD": "1"})
    assert placement.for_rows(one, 60_000) == placement.decide(one, records=60_000)


def test_a_warm_up_groups_where_a_full_batch_does_and_collects_its_output() -> None:
    def warm(**env: str) -> placement.Placement:
        return placement.for_warm_up(config.load(environ={**ENV, **env}))

    # a local master's driver groups batches up to 50,000 records: a full batch of the default cap
    local = warm(FLOE_SPARK_MASTER="local[2]", FLOE_KAFKA_MAX_RECORDS_PER_BATCH="50000")
    assert (local.records, local.driver_grouping, local.spark_read, local.spark_sink) == (None, True, False, False)
    # a cap above the driver's limit: a full batch runs Spark's plans, so the warm-up does too
    assert not warm(FLOE_SPARK_MASTER="local[2]", FLOE_KAFKA_MAX_RECORDS_PER_BATCH="50001").driver_grouping
    # executors on Kubernetes: the driver groups batches up to 10,000 records
    k8s = "k8s://https://kubernetes.default.svc"
    assert not warm(FLOE_SPARK_MASTER=k8s, FLOE_KAFKA_MAX_RECORDS_PER_BATCH="50000").driver_grouping
    assert warm(FLOE_SPARK_MASTER=k8s, FLOE_KAFKA_MAX_RECORDS_PER_BATCH="10000").driver_grouping
    # a full batch large enough for Spark's sink: the dry run still collects what it emits
    big = warm(FLOE_SPARK_MASTER="local[2]", FLOE_KAFKA_SPARK_SINK_MIN_RECORDS="1")
    assert big.driver_grouping and not big.spark_sink
