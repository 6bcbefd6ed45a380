"""A stateless stage whose output for one kind of line is larger than a Kafka producer takes: a
line starting with `HUGE` goes out as a 2 MB value (librdkafka's message.max.bytes is 1,000,000
by default), every other line as it came (key and value: the line).

Nothing in the stage fails: the write does, in `produce()`, and only a dry run that checks sizes
as the producer does can tell which input record made the oversized output.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()

HUGE = "HUGE"
SIZE = 2_000_000


@job.stage()
def echo(batch: Batch) -> DataFrame:
    line = F.col("value").cast("string")
    value = F.when(line.startswith(HUGE), F.repeat(F.lit("x"), SIZE)).otherwise(line)
    return batch.df.select(line.alias("key"), value.alias("value"))
