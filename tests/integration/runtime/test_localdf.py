"""Floe's own DataFrames made from Arrow on the real Spark: they stay record batches in an RDD
whatever `spark.sql.execution.arrow.localRelationThreshold` the session has, and the session's
value is the same after them, from several lanes at once too."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest
from floe_jobs.localdf import LOCAL_RELATION_THRESHOLD, arrow_dataframe, collect_rows, local_dataframe
from pyspark.sql.types import LongType, StringType, StructField, StructType

pytestmark = [pytest.mark.spark]

SCHEMA = StructType([StructField("word", StringType()), StructField("n", LongType())])
ROWS = [(f"w{i}", i) for i in range(200)]


def _leaf(df: Any) -> str:
    """The class of the logical plan's leaf: LocalRelation (rows inside the plan) or LogicalRDD."""
    plan = df._jdf.queryExecution().analyzed()
    while plan.children().size() > 0:
        plan = plan.children().apply(0)
    return str(plan.getClass().getSimpleName())


@pytest.fixture
def threshold(spark: Any) -> Iterator[Any]:
    """The session with Spark's default threshold (48 MiB, unset) for the test; Floe's 0 after."""
    spark.conf.unset(LOCAL_RELATION_THRESHOLD)
    yield spark
    spark.conf.set(LOCAL_RELATION_THRESHOLD, "0")


def test_a_table_under_sparks_threshold_still_crosses_as_record_batches(threshold: Any) -> None:
    spark = threshold
    table = pa.table({"word": [r[0] for r in ROWS], "n": [r[1] for r in ROWS]})
    # Spark's own call makes a local relation of so small a table: what the crossings avoid
    assert _leaf(spark.createDataFrame(table, SCHEMA)) == "LocalRelation"
    for df in (local_dataframe(spark, ROWS, SCHEMA), arrow_dataframe(spark, table, SCHEMA)):
        assert _leaf(df) == "LogicalRDD"
        assert sorted(collect_rows(df)) == sorted(ROWS)
    # the session's setting is as it was: still unset
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD, None) is None
    spark.conf.set(LOCAL_RELATION_THRESHOLD, "1MB")
    assert _leaf(local_dataframe(spark, ROWS, SCHEMA)) == "LogicalRDD"
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD) == "1MB"


def test_crossings_side_by_side_put_back_the_setting_they_found(threshold: Any) -> None:
    spark = threshold
    spark.conf.set(LOCAL_RELATION_THRESHOLD, "8MB")

    def cross(i: int) -> str:
        rows = [(f"lane{i}-{j}", j) for j in range(50)]
        df = local_dataframe(spark, rows, SCHEMA)
        assert sorted(collect_rows(df)) == sorted(rows)
        return _leaf(df)

    with ThreadPoolExecutor(4) as pool:
        leaves = list(pool.map(cross, range(24)))
    assert leaves == ["LogicalRDD"] * 24
    assert spark.conf.get(LOCAL_RELATION_THRESHOLD) == "8MB"
