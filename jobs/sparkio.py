"""Spark at the edges: the session of a replica, exact offset-range reads, writes to Kafka.

Reads use Spark's Kafka source in batch mode with `assign` + `startingOffsets`/`endingOffsets`
JSON, so a batch reads exactly its planned ranges and nothing else (a replay reads the same
records). Writes use Spark's Kafka sink, from the executors, with the idempotent producer by
default; output is at-least-once (a replayed batch writes its output again).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from floe_jobs.config import FloeConfig
from floe_jobs.planning import PartitionPlan
from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers")


def build_session(cfg: FloeConfig, *, app_name: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(cfg.spark.master).appName(app_name)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC",
        "spark.python.worker.reuse": "true",
        "spark.task.maxFailures": "1",
        "spark.ui.showConsoleProgress": "false",
    }
    conf = {**defaults, **cfg.spark.conf}
    if cfg.spark.jars:
        existing = conf.get("spark.jars", "")
        conf["spark.jars"] = ",".join([j for j in [existing, *cfg.spark.jars] if j])
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def producer_options(cfg: FloeConfig) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers}
    if cfg.kafka.idempotent_output:
        opts.update({"kafka.enable.idempotence": "true", "kafka.acks": "all"})
    for key, value in cfg.kafka.extra.items():
        if key.startswith(("security.", "sasl.", "ssl.")):
            opts[f"kafka.{key}"] = value
    return opts


def range_options(plans: Iterable[PartitionPlan]) -> dict[str, str]:
    """The Kafka source options that read exactly the planned ranges."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for p in plans:
        assign.setdefault(p.topic, []).append(p.partition)
        starting.setdefault(p.topic, {})[str(p.partition)] = p.start
        ending.setdefault(p.topic, {})[str(p.partition)] = p.end
    return {
        "assign": json.dumps(assign, sort_keys=True),
        "startingOffsets": json.dumps(starting, sort_keys=True),
        "endingOffsets": json.dumps(ending, sort_keys=True),
    }


def read_ranges(spark: SparkSession, cfg: FloeConfig, plans: list[PartitionPlan]) -> DataFrame:
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
    for key, value in range_options(plans).items():
        reader = reader.option(key, value)
    for key, value in cfg.kafka.extra.items():
        if key.startswith(("security.", "sasl.", "ssl.")):
            reader = reader.option(f"kafka.{key}", value)
    df = reader.option("includeHeaders", "true").option("failOnDataLoss", "true").load()
    return df.select(*KAFKA_COLUMNS)


def write_kafka(df: DataFrame, cfg: FloeConfig, *, topic: str | None, extra: Mapping[str, Any] | None = None) -> None:
    """Write key/value[/headers][/topic] rows; `topic` None means rows carry a topic column."""
    writer = df.write.format("kafka")
    for key, value in {**producer_options(cfg), **(extra or {})}.items():
        writer = writer.option(key, str(value))
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save()
