"""Jobs whose stages open a store of a type their helper cannot use (tests of the warm-up's check).

`aggregates_into_global` keeps a count in store `totals`, `latest_into_versioned` the last value
per key in store `history`; the tests declare those stores global and versioned-partitioned.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

aggregates_into_global = Job()
latest_into_versioned = Job()


@aggregates_into_global.stage()
def totals(batch: Batch) -> DataFrame:
    counts = batch.aggregate(batch.df, store="totals", key=F.col("value").cast("string"))
    return counts.select(F.col("key"), F.col("value").cast("string").alias("value"))


@latest_into_versioned.stage()
def latest(batch: Batch) -> DataFrame:
    last = batch.latest(
        batch.df, store="history", key=F.col("value").cast("string"), value=F.col("offset").cast("string")
    )
    return last.select(F.col("key"), F.col("value"))
