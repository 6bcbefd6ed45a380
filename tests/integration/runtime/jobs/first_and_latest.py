"""A job for the chaos runs over the other state helpers: `dedup` on a TTL store, then `latest`.

Input: records keyed by item, valued `<event id>:<n>`; an event may be delivered again (the
same key and value). The first delivery of each event id is kept (`seen`, a store with a TTL);
the item's latest kept value goes to the `latest` store and, with every kept record, out.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()


@job.stage()
def first_and_latest(batch: Batch) -> DataFrame:
    event = F.split(F.col("value").cast("string"), ":").getItem(0)
    firsts = batch.dedup(batch.df, store="seen", key=event)
    batch.latest(firsts, store="latest", key=F.col("key").cast("string"), value=F.col("value").cast("string"))
    return firsts.select("key", "value")
