"""Latest value per key, the benchmark's job: the last value of each key (by offset) kept in
store `latest` and every changed one emitted to the first output topic (key and value as UTF-8)."""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()


@job.stage()
def keep_latest(batch: Batch) -> DataFrame:
    last = batch.latest(batch.df, store="latest", key=F.col("key").cast("string"), value=F.col("value").cast("string"))
    return last.select("key", "value")
