"""Drop repeats: a record whose key was already seen within the store's TTL is dropped.

Input: records keyed by an event id. The partitioned store `seen-ids` (its `ttl_seconds` is the
de-duplication window) remembers each id with the offset where it was first seen. First
occurrences go to the first output topic, key and value unchanged.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()


@job.stage()
def drop_repeats(batch: Batch) -> DataFrame:
    firsts = batch.dedup(batch.df, store="seen-ids", key=F.col("key").cast("string"))
    return firsts.select("key", "value", "headers")
