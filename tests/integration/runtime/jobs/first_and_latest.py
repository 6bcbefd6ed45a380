"""A job for the chaos runs over the other state helpers: `dedup` on a TTL store, then `latest`.

Input: records keyed by item, valued `<event id>:<n>`; an event may be delivered again (the
same key and value). The first delivery of each event id is kept (`seen`, a store with a TTL);
the item's latest kept value goes to the `latest` store and, with every kept record, out, as
`<value>@<partition>:<offset>`: the input record it came from, so that a test tells a second
delivery let through (another record of the event) from a replayed batch's output (the same
record again).
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
    source = F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"))
    return firsts.select("key", F.concat_ws("@", F.col("value").cast("string"), source).alias("value"))
