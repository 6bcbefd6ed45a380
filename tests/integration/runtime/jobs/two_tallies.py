"""Two stateful stages reading one input topic: each counts the records per key into its own store.

Input: records keyed by word (a word always lands in one partition). Stage `tally` adds them up
in store `tally`, stage `recount` in store `recount`; nothing is emitted. Each stage keeps its own
position per input partition (`floe_jobs.offsets`), so both stores must hold every count.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import functions as F

job = Job()


@job.stage()
def tally(batch: Batch) -> None:
    batch.aggregate(batch.df, store="tally", key=F.col("key").cast("string"))


@job.stage()
def recount(batch: Batch) -> None:
    batch.aggregate(batch.df, store="recount", key=F.col("key").cast("string"))
