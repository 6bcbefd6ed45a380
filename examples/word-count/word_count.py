"""Word count, the seed demo: lines → words → counts.

Stage `split` reads the input lines, splits them into lower-case words and re-keys them by word
through `<app-id>-words-repartition`; stage `count` adds them up in store `word-count`
(key: the word, str; value: the count, long) and emits each changed count to the first output
topic (`word-count-output`): key = the word as UTF-8, value = the count as a UTF-8 decimal.
"""

from __future__ import annotations

from floe_jobs.api import Batch, Emit, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()

WORD_SPLIT = r"[^\p{L}\p{N}']+"


@job.stage()
def split(batch: Batch) -> Emit:
    words = batch.df.select(
        "topic",
        "partition",
        "offset",
        F.explode(F.split(F.lower(F.col("value").cast("string")), WORD_SPLIT)).alias("word"),
    ).where(F.col("word") != "")
    return batch.rekey(words, name="words", key=F.col("word"), combine="count")


@job.stage(source="words")
def count(batch: Batch) -> DataFrame:
    # a partial count, as a UTF-8 decimal; a record without one (written by a re-key that did
    # not combine) is one occurrence
    partial = F.coalesce(F.col("value").cast("string").cast("long"), F.lit(1).cast("long"))
    counts = batch.aggregate(batch.df, store="word-count", key=F.col("key").cast("string"), value=partial)
    return counts.select(F.col("key"), F.col("value").cast("string").alias("value"))
