"""What one replica costs at a low, steady input rate, against Structured Streaming at the same rate.

    .venv/bin/python tests/bench/lowrate_bench.py [--rate 40] [--window 30] [--runs 3]

An app that many teams run side by side mostly sees a trickle, and on pods its replicas share
the node's cores: what a replica burns while the input is slow is what the node has left for
the others (docs/operator.md, the pod handover rows). Word count, one replica, Floe's tuning on
both sides (`runtime_bench.TUNINGS`), each side mapping a class archive of its own that a
discarded first run wrote (a replica's image has one, `floe_jobs.classarchive`). The pod
benchmark's feed writes `rate` lines a second into a new 6-partition topic from the system's
start; once the system reads them (Floe: joined its group; Structured Streaming: its first
batch) and `settle` seconds more, the CPU of the system's own process tree (the replica and its
Spark JVM; Structured Streaming's driver and JVM) is read from /proc over `window` seconds, with
the batches it committed meanwhile (Floe: its log's commits; Structured Streaming: its query's batch ids, default
trigger, RocksDB with changelog checkpointing as in the throughput rows). Cassandra's node and
the broker are left out, as in the throughput rows' ratio per CPU second. Runs alternate between
the two sides. Every run's answer is checked once the input stops and the system has caught up:
each word's count in the output topic (both sides) and in Floe's store, or the run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import workloads
from cpusample import tree_cpu_seconds
from pod_bench import Feed
from runtime_bench import (  # run as a script: its own folder is on the path
    COMMON_CONF,
    SS_HEAD,
    SS_STATE,
    TUNINGS,
    archive_conf,
    drop_and_close,
    drop_topics,
    load_average,
    log_time,
    new_app,
    session_for,
    spread,
    ss_command,
    stack_env,
    wait_for_file,
    write_result,
)

CONF = {**COMMON_CONF, **TUNINGS["floe-tuning"]}

# Structured Streaming's query with its default trigger; each line read on stdin asks for the
# last batch id, an empty stdin stops it
SS_CONTINUOUS = """
q = (result.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
     .option("checkpointLocation", checkpoint).outputMode(mode).start())
for _ in sys.stdin:
    p = q.lastProgress
    print("BATCH", p["batchId"] if p else -1, p["numInputRows"] if p else -1, flush=True)
q.stop()
"""


@contextlib.contextmanager
def feeding(env: dict[str, str], topic: str, lines: list[str], rate: float) -> Iterator[Callable[[], list[str]]]:
    """The pod benchmark's feed of `lines` into `topic` at `rate` a second, in a thread; yields the
    call that stops it, checks every record was delivered and returns the lines produced."""
    feed = Feed(env, [topic], rate=rate, lines=lines)
    stop = threading.Event()
    thread = threading.Thread(target=feed.run, args=(stop,), daemon=True)
    thread.start()

    def finish() -> list[str]:
        stop.set()
        thread.join()
        feed.check()
        sent: list[str] = feed.sent()
        return sent

    try:
        yield finish
    finally:
        stop.set()
        thread.join()


def floe_run(
    env: dict[str, str], args: argparse.Namespace, lines: list[str], conf: dict[str, str], **settings: str
) -> dict[str, Any]:
    """`settings`: the replica's own (FLOE_ variables) over the product's defaults."""
    from floe_stack import localrun

    with tempfile.TemporaryDirectory(prefix="floe-bench-lowrate-") as tmp:
        app = new_app(
            env, Path(tmp), prefix="lr", FLOE_SPARK_MASTER="local[2]", FLOE_SPARK_CONF=json.dumps(conf), **settings
        )
        session = session_for(env)
        replica = localrun.Replica(app, "r0").start()
        try:
            with feeding(env, app.topics[0], lines, args.rate) as finish:
                deadline = time.monotonic() + 300
                while "Assigned partitions" not in replica.log_path.read_text(errors="replace"):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the replica did not join its group within 300 s")
                    time.sleep(0.2)
                time.sleep(args.settle)
                cpu0, t0 = tree_cpu_seconds(replica.pid), time.time()
                time.sleep(args.window)
                cpu1, t1 = tree_cpu_seconds(replica.pid), time.time()
                sent = finish()
            localrun.wait_caught_up(
                session, app, workloads.WORD_COUNT.drained(app.app_id, app.topics[0]), timeout=300, replicas=[replica]
            )
            text = replica.log_path.read_text(errors="replace")
        finally:
            replica.stop()
        try:
            checked = workloads.check_output(
                workloads.WORD_COUNT, sent, localrun.read_topic(app.bootstrap, app.output_topics[0], timeout=300)
            )
            checked["store_keys_checked"] = workloads.check_store(
                workloads.WORD_COUNT,
                sent,
                lambda store, ks, vs: localrun.read_store(session, app.keyspace, store, key_serde=ks, value_serde=vs),
            )
        finally:
            drop_and_close(session, [app.keyspace])
            drop_topics(app.bootstrap, [app.app_id])
    batches = sum(1 for ln in text.splitlines() if "Committed stage=" in ln and t0 <= log_time(ln) <= t1)
    return measured(cpu1 - cpu0, t1 - t0, batches, checked)


def ss_run(env: dict[str, str], args: argparse.Namespace, lines: list[str], conf: dict[str, str]) -> dict[str, Any]:
    from floe_stack import localrun

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    with tempfile.TemporaryDirectory(prefix="floe-bench-ss-") as tmp:
        topic, out = localrun.unique("ss-lines"), localrun.unique("ss-out")
        localrun.create_topic(bootstrap, topic, 6)
        localrun.create_topic(bootstrap, out, 6)
        script = Path(tmp) / "ss.py"
        script.write_text(SS_HEAD + workloads.WORD_COUNT.ss_query + SS_CONTINUOUS)
        command = ss_command(env, script, Path(tmp), topic, out, batch=50_000, conf={**conf, **SS_STATE})
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )

        def last() -> tuple[int, int]:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("Structured Streaming's query stopped")
                if line.startswith("BATCH"):
                    return int(line.split()[1]), int(line.split()[2])

        try:
            with feeding(env, topic, lines, args.rate) as finish:
                deadline = time.monotonic() + 300
                while last()[0] < 0:  # started: its first trigger has run
                    if time.monotonic() > deadline:
                        raise RuntimeError("Structured Streaming's query made no progress within 300 s")
                    time.sleep(0.5)
                time.sleep(args.settle)
                b0, cpu0, t0 = last()[0], tree_cpu_seconds(proc.pid), time.time()
                time.sleep(args.window)
                b1, cpu1, t1 = last()[0], tree_cpu_seconds(proc.pid), time.time()
                sent = finish()
            # caught up: its triggers read nothing for a few seconds
            idle_since, deadline = None, time.monotonic() + 300
            while idle_since is None or time.monotonic() - idle_since < 5:
                if time.monotonic() > deadline:
                    raise RuntimeError("Structured Streaming did not catch up within 300 s")
                rows = last()[1]
                idle_since = (idle_since or time.monotonic()) if rows == 0 else None
                time.sleep(0.5)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=120)
        try:
            checked = workloads.check_output(
                workloads.WORD_COUNT, sent, localrun.read_topic(bootstrap, out, timeout=300)
            )
        finally:
            drop_topics(bootstrap, [topic, out])
    return measured(cpu1 - cpu0, t1 - t0, b1 - b0, checked)


def measured(cpu: float, seconds: float, batches: int, checked: dict[str, int]) -> dict[str, Any]:
    return {
        "cpu_cores": round(cpu / seconds, 3),
        "batches_per_s": round(batches / seconds, 2),
        "cpu_s_per_batch": round(cpu / max(batches, 1), 3),
        "window_s": round(seconds, 1),
        "checked": checked,
    }


def alternated(env: dict[str, str], args: argparse.Namespace, archive_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """A discarded run of each system that writes its class archive at its JVM's exit (as a
    replica's image has one), then `args.runs` runs of each side, alternated, each mapping its
    system's archive. A third side, Floe with its linger off (`kafka.linger_ms` 0), shows what
    the linger gives."""
    sides: dict[str, tuple[str, Callable[..., dict[str, Any]]]] = {
        "floe": ("floe", floe_run),
        "structured_streaming": ("structured_streaming", ss_run),
        "floe_linger_0": ("floe", functools.partial(floe_run, FLOE_KAFKA_LINGER_MS="0")),
    }
    archives = {system: archive_dir / f"{system}.jsa" for system in ("floe", "structured_streaming")}
    short = argparse.Namespace(**{**vars(args), "settle": 1.0, "window": 5.0})
    lines = workloads.vocab_lines(int(args.rate * 400), 10_000, seed=99)
    for system, path in archives.items():
        written = sides[system][1](env, short, lines, {**CONF, **archive_conf(path, write=True)})
        print("warm-up (discarded)", system, json.dumps(written), flush=True)
    for path in archives.values():
        wait_for_file(path)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for run in range(args.runs):
        lines = workloads.vocab_lines(int(args.rate * (args.settle + args.window + 300)), 10_000, seed=run)
        for side, (system, fn) in sides.items():
            runs[side].append(fn(env, args, lines, {**CONF, **archive_conf(archives[system], write=False)}))
            print(side, json.dumps(runs[side][-1]), flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=40.0, help="lines a second into the input")
    p.add_argument("--settle", type=float, default=15.0, help="seconds of input before the window")
    p.add_argument("--window", type=float, default=30.0, help="seconds whose CPU is counted")
    p.add_argument("--runs", type=int, default=3, help="runs of each side, alternated (medians)")
    args = p.parse_args(argv)
    env = stack_env()
    with tempfile.TemporaryDirectory(prefix="floe-bench-archive-") as archive_dir:
        runs = alternated(env, args, Path(archive_dir))
    floe = [r["cpu_cores"] for r in runs["floe"]]
    ss = [r["cpu_cores"] for r in runs["structured_streaming"]]
    value, baseline = statistics.median(floe), statistics.median(ss)
    ratio = round(baseline / value, 3)
    write_result(
        "lowrate",
        f"word-count-{args.rate:g}-lines",
        {
            "metric": (
                f"CPU cores used by one replica's own processes (the replica and its Spark JVM) at a steady "
                f"{args.rate:g} lines/s of word count (10,000 distinct words), over {args.window:g} s after "
                f"{args.settle:g} s of input, Floe's tuning on both sides, each side mapping its own class archive "
                "(written at the JVM's exit by a discarded run of that side); "
                "Floe (value) vs Spark Structured Streaming (baseline, default trigger, RocksDB state store with "
                f"changelog checkpointing), median of {args.runs} alternated runs each; lower is better, "
                "ratio = baseline / value; Cassandra's node and the broker left out. Every run's answer is "
                "checked once the input stops: each word's count in the output topic (both sides) and in "
                "Floe's store, or the run fails"
            ),
            "unit": "cores",
            "value": value,
            "baseline": (
                "Spark Structured Streaming groupBy().count(), default trigger, RocksDB with changelog checkpointing"
            ),
            "baseline_value": baseline,
            "ratio": ratio,
            "target": "ratio >= 1.0",
            "target_met": ratio >= 1.0,
            "spread": {"value": spread(floe), "baseline": spread(ss)},
            "batches_per_s": {
                "value": statistics.median(r["batches_per_s"] for r in runs["floe"]),
                "baseline": statistics.median(r["batches_per_s"] for r in runs["structured_streaming"]),
            },
            "linger_0": {
                "what": "Floe with kafka.linger_ms 0 (a lane's passes back to back), alternated with the two sides",
                "cpu_cores": spread([r["cpu_cores"] for r in runs["floe_linger_0"]]),
                "batches_per_s": statistics.median(r["batches_per_s"] for r in runs["floe_linger_0"]),
                "cpu_s_per_batch": statistics.median(r["cpu_s_per_batch"] for r in runs["floe_linger_0"]),
            },
            "spark_conf": CONF,
            "class_archive": "each system's own (spark.driver.defaultJavaOptions -XX:SharedArchiveFile), written at "
            "the JVM's exit by a discarded run of that side",
            "p50_s": None,
            "p99_s": None,
            "command": f".venv/bin/python tests/bench/lowrate_bench.py --rate {args.rate:g} --settle {args.settle:g} "
            f"--window {args.window:g} --runs {args.runs}",
            "load_average_1m": load_average()[0],
            "cpu_count": os.cpu_count(),
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
