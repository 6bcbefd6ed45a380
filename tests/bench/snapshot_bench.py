"""Benchmarks of snapshots and restore against the local stack (`make up` first).

    .venv/bin/python tests/bench/snapshot_bench.py [--keys 1000000] [--runs 3]

Word count, one replica (`local[2]`), over lines that name every one of `--keys` keys once.
`floe-job snapshot` cuts the running app to a `file://` location; the replica then counts more
lines, stops, and `floe-job restore --replace` puts the app back at the cut in place; the replica
starts again and counts to the end of the input, and the store must then equal the truth of
every line produced (each run is checked; a wrong count fails the benchmark). Three rows, each
the median of `--runs` runs with min and max:

- snapshot-<keys>-keys: the snapshot's own seconds (the manifest's `seconds`: the cut, the
  Parquet files and the manifest, Spark's start left out) against a plain scan of the same store
  table by one client in the same run (every row paged through, nothing written): what the
  consistent cut and the files cost over reading the rows. Target: at most 3 times the scan.
- snapshot-restore-<keys>-keys: the in-place restore's own seconds (as `floe-job restore`
  reports them: the manifest checked, the files read and summed, the positions deleted, the
  tables truncated, every row and position written) against counting the same keys again from
  the input, the other way back to that state (seconds from producing the lines to a warm
  replica having committed them all). Target: faster than counting again (ratio below 1).
- snapshot-gap-<gap-keys>-keys: with lines of keys already counted flowing (50 a second) while
  the snapshot runs, the longest time any stage partition went without a commit meanwhile,
  against the longest over the 10 s before it (its batches' own rhythm). Target: the snapshot
  adds at most one batch (value at most twice the baseline in every run). Measured at
  `--gap-keys` (100,000; `--gap-keys 1000000` for the million-key row): with input flowing, a
  snapshot copies each partition optimistically and must find a committed batch that lasts as
  long as the copy of its rows, so the larger a partition the more attempts (docs/snapshots.md,
  "Measured"). The runs without flow take the time and restore rows.

The snapshot's size (Parquet bytes, rows, bytes per key) is in the snapshot row.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import runtime_bench as rb  # noqa: E402

PER_LINE = 20
WRITER = "word-count=count"
WINDOW_S = 10.0
COMMAND = ".venv/bin/python tests/bench/snapshot_bench.py"


def key_lines(keys: int) -> tuple[list[str], list[str]]:
    """Lines naming every key once; and 3,000 lines of 5 keys already counted (the flow, produced
    50 a second, from the start again when they run out)."""
    names = [f"k{i:07d}" for i in range(keys)]
    first = [" ".join(names[i : i + PER_LINE]) for i in range(0, keys, PER_LINE)]
    again = [" ".join(names[(i * 37 + j * 101) % keys] for j in range(5)) for i in range(3000)]
    return first, again


def floe_job(app: Any, name: str, *args: str) -> dict[str, Any]:
    """`floe-job <args>` with the app's configuration; its summary line, or an error."""
    done = subprocess.run([sys.executable, "-m", "floe_jobs.cli", *args], env=app.env(name), cwd=str(ROOT),
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"floe-job {args[0]} exited {done.returncode}: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def scan_seconds(session: Any, keyspace: str) -> tuple[float, int]:
    """Seconds to page through every row of the word-count store table, and the rows read."""
    from cassandra.query import SimpleStatement
    from floe_jobs.stores import schema

    stmt = SimpleStatement(f"SELECT partition, key, value FROM {keyspace}.{schema.table_name('word-count')}",
                           fetch_size=5000)
    start = time.monotonic()
    rows = sum(1 for _ in session.execute(stmt, timeout=600))
    return time.monotonic() - start, rows


def one_run(env: dict[str, str], keys: int, workdir: Path, *, flow: bool) -> dict[str, Any]:
    from floe_stack import localrun

    workdir.mkdir(parents=True, exist_ok=True)
    session = rb.session_for(env)
    app = rb.new_app(env, workdir, prefix="snapb", stores=[{"name": "word-count", "type": "partitioned"}])
    topics = [*app.topics, f"{app.app_id}-words-repartition"]
    first, again = key_lines(keys)
    replica = localrun.Replica(app, "r0").start()
    stop = threading.Event()
    produced: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while not replica.ready():
            if time.monotonic() > deadline:
                raise TimeoutError("the replica was not ready within 300 s")
            time.sleep(0.5)
        started = time.monotonic()
        localrun.produce(app.bootstrap, app.topics[0], first)
        produced += first
        localrun.wait_caught_up(session, app, topics, timeout=1800, replicas=[replica])
        count_seconds = time.monotonic() - started
        scan_s, scanned = scan_seconds(session, app.keyspace)
        if scanned != keys:
            raise AssertionError(f"the store holds {scanned} rows, not {keys}")

        def feed() -> None:
            i = 0
            while not stop.is_set():
                chunk = again[i : i + 50]
                localrun.produce(app.bootstrap, app.topics[0], chunk)
                produced.extend(chunk)
                i = (i + 50) % len(again)
                time.sleep(1.0)

        feeder = threading.Thread(target=feed)
        gaps = localrun.CommitGaps(session, app).start()
        if flow:
            feeder.start()
            time.sleep(WINDOW_S)
        before = time.monotonic()
        snap_dir = workdir / f"snap-{app.app_id}"
        summary = floe_job(app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER)
        after = time.monotonic()
        gap, gap_before = gaps.longest(before, after), gaps.longest(before - WINDOW_S, before)
        stop.set()
        if flow:
            feeder.join()
        else:  # what the app counts after the cut, which the restore undoes
            localrun.produce(app.bootstrap, app.topics[0], again)
            produced.extend(again)
        localrun.wait_caught_up(session, app, topics, timeout=900, replicas=[replica])
        gaps.stop()
        if replica.stop() != 0:
            raise RuntimeError(f"the replica did not stop cleanly; see {replica.log_path}")
        restored = floe_job(app, "restore", "restore", "--from", snap_dir.as_uri(), "--replace")
        replica = localrun.Replica(app, "r1").start()
        localrun.wait_caught_up(session, app, topics, timeout=1800, replicas=[replica])
        got = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
        want = localrun.word_truth(produced)
        if got != dict(want):
            wrong = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            raise AssertionError(f"counts after the restore in place differ at {len(wrong)} keys, e.g. {wrong[:5]}")
        size = sum(f.stat().st_size for f in snap_dir.rglob("*.parquet"))
        return {
            "count_s": round(count_seconds, 2), "scan_s": round(scan_s, 2), "snapshot_s": float(summary["seconds"]),
            "snapshot_process_s": round(after - before, 2), "restore_s": float(restored["seconds"]),
            "gap_s": round(gap, 2), "gap_before_s": round(gap_before, 2), "bytes": size,
            "rows": int(summary["rows"]), "keys": keys, "lines": len(produced), "flow": flow,
        }
    finally:
        stop.set()
        replica.stop()
        rb.drop_and_close(session, [app.keyspace])
        rb.drop_topics(env["FLOE_KAFKA_BOOTSTRAP"], [app.app_id])


def spread(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [float(r[key]) for r in runs]
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write(name: str, result: dict[str, Any]) -> None:
    rb.RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"name": name, **result, "date": datetime.now(UTC).isoformat(timespec="seconds")}
    path = rb.RESULTS / f"snapshot-{name}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


def label_of(keys: int) -> str:
    return f"{keys // 1000}k" if keys < 1_000_000 else f"{keys // 1_000_000}m"


def compared(runs: list[dict[str, Any]], value: str, baseline: str) -> dict[str, Any]:
    """The fields of a row whose value and baseline are medians of two keys of the runs."""
    got, base = spread(runs, value), spread(runs, baseline)
    return {"unit": "s", "value": got["median"], "value_spread": got, "baseline_value": base["median"],
            "baseline_spread": base, "ratio": round(got["median"] / base["median"], 3), "p50_s": got["median"],
            "p99_s": got["max"]}


def report(runs: list[dict[str, Any]], keys: int, common: dict[str, Any]) -> None:
    """The snapshot's time and size and the in-place restore's time, from runs without flow."""
    label = label_of(keys)
    snap = compared(runs, "snapshot_s", "scan_s")
    size = spread(runs, "bytes")
    write(f"{label}-keys", {
        "metric": f"seconds the snapshot of {keys:,} word-count keys took (its own time: cut, Parquet, manifest) of "
                  "a running replica, against a plain paged scan of the same store table in the same run; "
                  "lower is better, ratio = value / baseline",
        **snap, "baseline": "full scan of the store table", "target": "ratio <= 3", "target_met": snap["ratio"] <= 3,
        "size_bytes": size["median"], "size_spread": size, "bytes_per_key": round(size["median"] / keys, 1),
        "process_s": spread(runs, "snapshot_process_s"), **common,
    })
    restore = compared(runs, "restore_s", "count_s")
    write(f"restore-{label}-keys", {
        "metric": f"seconds an in-place restore of a snapshot of {keys:,} keys took (its own time: checks, positions "
                  "deleted, tables truncated, rows and positions written) against counting the same keys again from "
                  "the input on a warm replica; lower is better, ratio = value / baseline",
        **restore, "baseline": "counting the keys again from the input", "target": "ratio < 1",
        "target_met": restore["ratio"] < 1, **common,
    })


def report_gap(runs: list[dict[str, Any]], keys: int, common: dict[str, Any]) -> None:
    """The longest commit gap while a snapshot runs with input flowing, from runs with flow."""
    gap = compared(runs, "gap_s", "gap_before_s")
    worst = max(r["gap_s"] / r["gap_before_s"] for r in runs)
    write(f"gap-{label_of(keys)}-keys", {
        "metric": f"longest time any stage partition of a word count of {keys:,} keys went without a commit while a "
                  f"snapshot ran with input flowing, against the longest over the {WINDOW_S:.0f} s before it; lower "
                  "is better, ratio = value / baseline",
        **gap, "baseline": "the window before the snapshot",
        "target": "ratio <= 2 in every run (the snapshot adds at most one batch)", "target_met": worst <= 2,
        "worst_ratio": round(worst, 3), **common,
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--gap-keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    env = rb.stack_env()
    command = f"{COMMAND} --keys {args.keys} --gap-keys {args.gap_keys} --runs {args.runs}"
    with tempfile.TemporaryDirectory(prefix="floe-snapshot-bench-") as tmp:
        for keys, flow, write_rows in ((args.keys, False, report), (args.gap_keys, True, report_gap)):
            runs, loads = [], []
            for i in range(args.runs):
                runs.append(one_run(env, keys, Path(tmp) / f"{keys}-{flow}-{i}", flow=flow))
                loads.append([round(x, 2) for x in os.getloadavg()])
                print(f"run {i + 1} keys={keys} flow={flow}: {runs[-1]} load {loads[-1]}", flush=True)
            write_rows(runs, keys, {"runs": len(runs), "per_run": runs, "load_average": loads, "command": command,
                                    "cpu_count": os.cpu_count()})


if __name__ == "__main__":
    main()
