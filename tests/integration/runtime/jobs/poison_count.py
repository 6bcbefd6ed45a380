"""Word count whose `split` raises on one kind of record: a line starting with `POISON`.

The failure happens where a job's own code fails in practice: in an expression Spark evaluates
over the batch's records (`raise_error` on that record only), so the replica sees it as an error
of the Spark job. Every other line is counted as `examples/word-count` counts it (store
`word-count`, the new totals out).
"""

from __future__ import annotations

from floe_jobs.api import Batch, Emit, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()

POISON = "POISON"


@job.stage()
def split(batch: Batch) -> Emit:
    line = F.col("value").cast("string")
    lines = F.when(line.startswith(POISON), F.raise_error(F.concat(F.lit("cannot split line "), line))).otherwise(
        line
    )
    words = batch.df.select(
        "topic",
        "partition",
        "offset",
        F.explode(F.split(F.lower(lines), " ")).alias("word"),
    ).where(F.col("word") != "")
    return batch.rekey(words, name="words", key=F.col("word"), combine="count")


@job.stage(source="words")
def count(batch: Batch) -> DataFrame:
    partial = F.coalesce(F.col("value").cast("string").cast("long"), F.lit(1).cast("long"))
    counts = batch.aggregate(batch.df, store="word-count", key=F.col("key").cast("string"), value=partial)
    return counts.select(F.col("key"), F.col("value").cast("string").alias("value"))
