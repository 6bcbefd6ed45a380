"""CPU seconds of one word-count throughput run, by process and by JVM thread.

    .venv/bin/python tests/bench/cpu_by_thread.py floe|ss [--words 10000] [--lines 100000]
        [--jvm-options "..."] [--logs DIR]

Runs one Floe replica (`floe`) or the Structured Streaming baseline (`ss`) as the throughput
benchmark does, sampling every process's and every Spark JVM thread's CPU time from /proc
every 0.3 s, so processes that end during the run still count. Prints the run's result, CPU
seconds per process kind, and the Spark JVMs' and Cassandra's CPU seconds per thread name (numbers dropped:
"C2 CompilerThread0" and "C2 CompilerThread1" add up). `--jvm-options` replaces the driver
JVM's options of both systems, e.g. to compare JIT settings. JVM start-up is included.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import threading
from pathlib import Path

import runtime_bench as rb  # run as a script: its own folder is on the path

HZ = os.sysconf("SC_CLK_TCK")
# processes whose threads are counted one by one (the stack's Cassandra runs before the run starts:
# its threads count from the run's start)
THREADED = ("spark-jvm", "CassandraDaemon")
KINDS = ("CassandraDaemon", "kafka.Kafka", "kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "floe_jobs")


def _cpu(stat: str) -> tuple[str, float]:
    """(name, user + system seconds) from a /proc stat line."""
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / HZ


def _kind(cmdline: bytes) -> str:
    text = cmdline.decode(errors="replace")
    if "java" in text and "pyspark" in text:
        return "spark-jvm"
    return next((k for k in KINDS if k in text), "other")


def _largest(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda kv: -kv[1])


class Sampler:
    """Latest CPU time of every process and of every Spark JVM thread seen."""

    def __init__(self) -> None:
        self.procs: dict[int, tuple[str, float]] = {}
        self.threads: dict[tuple[int, int], tuple[str, str, float]] = {}
        self._stop = threading.Event()
        self.start = self._sample()
        self.start_threads = dict(self.threads)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> dict[int, tuple[str, float]]:
        seen: dict[int, tuple[str, float]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if not cmdline:  # a kernel thread, or a process that has just exited
                    continue
                kind = _kind(cmdline)
                seen[int(entry.name)] = (kind, _cpu((entry / "stat").read_text())[1])
                if kind in THREADED:
                    for task in (entry / "task").iterdir():
                        self.threads[(int(entry.name), int(task.name))] = (kind, *_cpu((task / "stat").read_text()))
            except (OSError, ValueError):
                continue
        return seen

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            self.procs.update(self._sample())

    def stop(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        self._stop.set()
        self._thread.join()
        by_kind: collections.defaultdict[str, float] = collections.defaultdict(float)
        for pid, (kind, cpu) in self.procs.items():
            before = self.start.get(pid)
            by_kind[kind] += cpu - (before[1] if before is not None and before[0] == kind else 0.0)
        by_thread = {kind: collections.defaultdict[str, float](float) for kind in THREADED}
        for key, (kind, name, cpu) in self.threads.items():
            then = self.start_threads.get(key)
            by_thread[kind][re.sub(r"[#:\-\d]+$", "", name).strip()] += cpu - (then[2] if then is not None else 0.0)
        return (
            {k: round(v, 1) for k, v in _largest(by_kind) if v >= 0.05},
            {kind: {k: round(v, 1) for k, v in _largest(c)[:12]} for kind, c in by_thread.items()},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["floe", "ss"])
    parser.add_argument("--words", type=int, default=10_000, help="vocabulary the lines draw from")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--jvm-options", default=None, help="driver JVM options of both systems")
    parser.add_argument("--logs", type=Path, default=None, help="keep the Floe replica's log here")
    args = parser.parse_args()
    if args.jvm_options:
        conf = json.dumps({"spark.driver.extraJavaOptions": args.jvm_options})
        new_app = rb.new_app
        rb.new_app = lambda *a, **k: new_app(*a, **k, FLOE_SPARK_CONF=conf)  # type: ignore[assignment]
        rb.SS_SCRIPT = rb.SS_SCRIPT.replace(
            '.config("spark.ui.enabled", "false")',
            f'.config("spark.ui.enabled", "false").config("spark.driver.extraJavaOptions", {args.jvm_options!r})',
        )
    env = rb.stack_env()
    lines = rb.vocab_lines(args.lines, args.words, seed=5)
    sampler = Sampler()
    if args.system == "floe":
        result = rb.floe_throughput(env, lines, batch=args.batch, logs=args.logs)
    else:
        result = rb.ss_throughput(env, lines, batch=args.batch)
    by_kind, by_thread = sampler.stop()
    print(json.dumps({"run": result, "cpu_s_by_process": by_kind, "cpu_s_by_thread": by_thread}, indent=2))


if __name__ == "__main__":
    main()
