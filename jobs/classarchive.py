"""`floe-job class-archive FILE`: the driver JVM's class archive, written by a training run.

A replica's JVM loads some twenty thousand classes before its first batch (Spark's session,
the SQL engine, Arrow, code generation), parsing and verifying each one from the jars: about
a quarter of the CPU of its start to ready (`bench/results/scaleout-replica-start.json`).
Java's class data sharing maps them instead from an archive the JVM wrote at the exit of an
earlier run over the same class path. This command is that earlier run: a session with Floe's
settings (`sparkio.DEFAULTS`) runs what a replica's batches run (records crossing as Arrow, a
split and explode, a grouped count, a join, a window, a Python UDF, rows collected as Arrow),
and the JVM writes what it loaded at its exit.

The job image runs it once when it is built and keeps the file where the runtime looks when
`spark.class_archive` is unset (`sparkio.IMAGE_CLASS_ARCHIVE`, `images/job.Dockerfile`);
`make up` does the same for the local replicas (`floe_stack.spark`). A replica whose JVM
cannot use the archive (another Java build, another class path, a changed jar) says so in a
warning and loads its classes from the jars, as without one: the archive only ever costs its
mapping. Only the driver's JVM uses it; executors start from the jars.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import Any

from floe_jobs import localdf, records, sparkio
from floe_jobs.exitcodes import EXIT_CONFIG, EXIT_OK

TRAINING_LINES = 2_000
JVM_EXIT_TIMEOUT_S = 120

_WORDS = ("stream", "state", "offset", "partition", "replica", "batch", "fence", "commit", "lag", "pod")


def training_records(n: int = TRAINING_LINES) -> list[records.Record]:
    """Kafka records of lines of words, as a replica's first batch would hold."""
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        line = " ".join(_WORDS[(i * k) % len(_WORDS)] for k in range(1, 8))
        out.append(records.Record(str(i).encode(), line.encode(), "training", i % 3, i, stamp, None))
    return out


def train(spark: Any) -> int:
    """Run the batch shapes a replica runs; returns the distinct words counted (a check)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    df = records.to_dataframe(spark, training_records())
    words = df.select(
        "topic", "partition", "offset", F.explode(F.split(F.lower(F.col("value").cast("string")), r"\s+")).alias("word")
    ).where(F.col("word") != "")
    counts = words.groupBy("word").agg(F.count("*").alias("n"), F.max("offset").alias("last"))
    known = localdf.local_dataframe(spark, [(w, w.upper()) for w in _WORDS], StructType(
        [StructField("word", StringType()), StructField("label", StringType())]
    ))
    joined = counts.join(known, "word", "left")
    ranked = words.withColumn("rank", F.row_number().over(Window.partitionBy("word").orderBy(F.desc("offset"))))
    shout = F.udf(lambda s: s.upper() if s else s, StringType())
    localdf.collect_rows(ranked.where(F.col("rank") == 1).select(shout("word")))
    return len(localdf.collect_rows(joined))


def write(path: str) -> None:
    """Start a JVM that archives its classes at exit, train it, and end it; the archive is
    renamed into place only once whole."""
    part = f"{path}.part-{os.getpid()}"
    conf = {**sparkio.DEFAULTS, sparkio.CLASS_ARCHIVE_OPTION: f"-XX:ArchiveClassesAtExit={part} -Xlog:cds=error"}
    spark = sparkio.start_session("local[2]", "floe-class-archive", conf)
    proc = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    try:
        train(spark)
    finally:
        spark.stop()
        # the gateway JVM exits when its stdin closes; it writes the archive on the way out
        proc.stdin.close()
        proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
    if not os.path.isfile(part):
        raise RuntimeError(f"the JVM wrote no class archive ({part}); its output above says why")
    os.replace(part, path)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: floe-job class-archive FILE", file=sys.stderr)
        return EXIT_CONFIG
    path = os.path.abspath(argv[0])
    write(path)
    print(f"floe-job: class archive written to {path} ({os.path.getsize(path) // 2**20} MiB)")
    return EXIT_OK
