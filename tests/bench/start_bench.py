"""A replica's start, with the driver JVM's class archive and without (`floe_jobs.classarchive`).

Each run starts one word-count replica over 3,000 lines already in its input topic and clocks it
from the process's start to its first ready answer (`/readyz`: the session started, every stage
warmed up over the last records of a partition, the group joined), with the CPU seconds its
process tree (the Python runtime and its Spark JVM) used by then, read from /proc. Then the
replica counts the lines and every count is checked in Cassandra before it stops. One side maps
the archive `make up` wrote (`FLOE_SPARK_CLASS_ARCHIVE` of the stack); the other starts the same
JVM from the jars alone; everything else is the same. Runs alternate; the result is the median.

    python tests/bench/start_bench.py [--runs 5]

Writes bench/results/scaleout-replica-start.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from cpusample import tree_cpu_seconds
from runtime_bench import (
    drop_and_close,
    drop_topics,
    load_average,
    new_app,
    percentile,
    session_for,
    spread,
    stack_env,
    write_result,
)

LINES = 3_000
READY_TIMEOUT_S = 300
TARGET = 1.25  # start to ready at least a quarter faster with the archive


def one_start(env: dict[str, str], workdir: Path, *, archive: str, run: int) -> dict[str, Any]:
    """Start a replica (with `archive`, or "" for none), time it to ready, check its counts."""
    from floe_stack import localrun

    app = new_app(env, workdir, prefix=f"start{run}", FLOE_KAFKA_STARTING_OFFSETS="earliest")
    lines = localrun.word_lines(LINES, seed=run)
    localrun.produce(app.bootstrap, app.topics[0], lines)
    session = session_for(env)
    replica = localrun.Replica(app, "r0", FLOE_SPARK_CLASS_ARCHIVE=archive)
    try:
        t0 = time.monotonic()
        replica.start()
        while not replica.ready():
            if not replica.alive() or time.monotonic() - t0 > READY_TIMEOUT_S:
                raise RuntimeError(f"the replica was not ready within {READY_TIMEOUT_S} s; see {replica.log_path}")
            time.sleep(0.05)
        ready_s = time.monotonic() - t0
        cpu_s = tree_cpu_seconds(replica.pid)
        # both stages: the input, then the words re-keyed through the repartition topic
        topics = [app.topics[0], f"{app.app_id}-words-repartition"]
        localrun.wait_caught_up(session, app, topics, timeout=300, replicas=[replica])
        got = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
        want = dict(localrun.word_truth(lines))
        if got != want:
            wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
            raise AssertionError(f"counts differ from the input after the start: {dict(list(wrong.items())[:5])}")
        mapped = "The JVM maps the class archive" in replica.log_path.read_text(errors="replace")
        if mapped != bool(archive):
            raise AssertionError(f"archive {archive!r}: the replica's JVM {'did' if mapped else 'did not'} map it")
        return {"ready_s": ready_s, "cpu_s": cpu_s}
    finally:
        replica.stop()
        drop_topics(env["FLOE_KAFKA_BOOTSTRAP"], [app.app_id])
        drop_and_close(session, [app.keyspace])


def side(values: list[dict[str, Any]]) -> dict[str, Any]:
    ready = [v["ready_s"] for v in values]
    return {
        "ready_s": spread(ready),
        "cpu_s": spread([v["cpu_s"] for v in values]),
        "p50_s": round(percentile(ready, 0.5), 3),
        "p99_s": round(percentile(ready, 0.99), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="starts of each side, alternated (medians)")
    args = p.parse_args(argv)
    env = stack_env()
    archive = env.get("FLOE_SPARK_CLASS_ARCHIVE", "")
    if not archive or not Path(archive).is_file():
        sys.exit("the stack has no class archive (FLOE_SPARK_CLASS_ARCHIVE): run `make up`")
    work = Path(f"/tmp/floe-start-bench-{int(time.time())}")
    with_archive: list[dict[str, Any]] = []
    without: list[dict[str, Any]] = []
    load = [load_average()]
    for run in range(args.runs):
        for arch, out in ((archive, with_archive), ("", without))[:: 1 if run % 2 == 0 else -1]:
            d = work / f"{run}-{'archive' if arch else 'jars'}"
            d.mkdir(parents=True)
            out.append(one_start(env, d, archive=arch, run=run))
            print(f"run {run} {'archive' if arch else 'jars   '}: {out[-1]}", flush=True)
        load.append(load_average())
    floe, base = side(with_archive), side(without)
    ratio = base["ready_s"]["median"] / floe["ready_s"]["median"]
    write_result(
        "scaleout",
        "replica-start",
        {
            "metric": "seconds from a replica's start to ready with the driver JVM's class archive (lower is better); "
            "ratio = baseline / value",
            "unit": "s",
            "value": floe["ready_s"]["median"],
            "value_max": floe["ready_s"]["max"],
            "baseline": "the same replica, its JVM loading every class from the jars",
            "baseline_value": base["ready_s"]["median"],
            "ratio": round(ratio, 3),
            "target": f"ratio >= {TARGET}",
            "target_met": ratio >= TARGET,
            "p50_s": floe["p50_s"],
            "p99_s": floe["p99_s"],
            "spread": {"value": floe["ready_s"], "baseline": base["ready_s"]},
            "cpu_s": {"value": floe["cpu_s"], "baseline": base["cpu_s"]},
            "cpu_ratio": round(base["cpu_s"]["median"] / floe["cpu_s"]["median"], 3),
            "lines": LINES,
            "runs": args.runs,
            "load_average_1m": max(entry[0] for entry in load),
            "load_averages": load,
            "command": f"python tests/bench/start_bench.py --runs {args.runs}",
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
