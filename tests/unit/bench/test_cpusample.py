"""The throughput benchmark's CPU accounting: which process a command line is, and a /proc
stat line's CPU seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cpusample  # a script's module, on its folder's path


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        (["java", "-cp", "/c/cassandra/*", "org.apache.cassandra.service.CassandraDaemon"], "cassandra"),
        (["java", "-Xmx768m", "-cp", "/c/kafka/*", "kafka.Kafka", "/c/server.properties"], "kafka"),
        (
            ["java", "-cp", "/v/lib/python3.11/site-packages/pyspark/jars/*", "org.apache.spark.deploy.SparkSubmit"],
            "spark-jvm",
        ),
        (["/v/bin/python", "-m", "floe_jobs.cli", "run", "examples/word-count/word_count.py"], "floe-replica"),
        (["/v/bin/python", "/tmp/floe-bench-ss-x1/ss.py", "127.0.0.1:9092"], "structured-streaming-driver"),
        (["/root/.cache/floe/bin/kube-apiserver", "--etcd-servers=http://127.0.0.1:2379"], "kubernetes"),
        (["/root/.cache/floe/bin/etcd", "--name", "floe"], "kubernetes"),
        (["/v/bin/python", "tests/bench/runtime_bench.py", "throughput"], "other"),
    ],
)
def test_kind_of_a_command_line(cmdline: list[str], kind: str) -> None:
    assert cpusample.kind("\0".join(cmdline).encode() + b"\0") == kind


def test_cpu_seconds_of_a_stat_line_whose_name_holds_parentheses_and_spaces() -> None:
    ticks = cpusample.HZ
    stat = f"4242 (C2 Compiler (x) 1) S 1 2 3 4 5 6 7 8 9 10 {3 * ticks} {ticks} 0 0 20 0 1 0 5 6 7"
    assert cpusample._cpu(stat) == ("C2 Compiler (x) 1", 4.0)


def test_descendants_of_roots_only() -> None:
    parent_of = {10: 1, 11: 10, 12: 11, 20: 1, 21: 20, 30: 1}
    assert cpusample.descendants({10, 30}, parent_of) == {10, 11, 12, 30}
