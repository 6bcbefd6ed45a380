"""Benchmarks of the job runtime against the local stack (`make up` first).

    .venv/bin/python tests/bench/runtime_bench.py [handover|scaleout|throughput] ...

With no area (as `make bench` runs it), all three run in turn with their defaults; each writes
bench/results/<area>-<name>.json with min/median/max of its runs, `target_met` and the load
average. What each measures: docs/runtime.md, "Benchmarks".

handover: two word-count replicas stay, a third is started anew for every run and stopped with
SIGTERM; the longest time any partition of the input or of the repartition topic goes without
a committed batch, leave-group-on-close on vs off, everything else at the operator's rendered
defaults (session timeout 10 s, heartbeat 1 s), runs alternated, for each group protocol.
scaleout: a replica added to a running group of two, over input whose words are stored keys;
seconds to its first stateful batch with 1,000,000 vs 10,000 keys stored; counts checked.
throughput: one replica vs Structured Streaming (RocksDB, changelog checkpointing) under the
same Spark settings (Spark's defaults, then Floe's tuning) and the same clock.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import podphases
import procphases
import workloads  # run as a script: its own folder is on the path
from cpusample import Sampler, stack_pids

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def stack_env() -> dict[str, str]:
    from floe_stack import envfile

    path = ROOT / ".floe" / "stack.env"
    if not path.exists():
        sys.exit("the local stack is not up (no .floe/stack.env): run `make up`")
    return envfile.read(path)


def session_for(env: dict[str, str]) -> Any:
    from floe_jobs.stores import CassandraConfig, connect

    return connect(
        CassandraConfig(hosts=tuple(env["FLOE_CASSANDRA_HOSTS"].split(",")), port=int(env["FLOE_CASSANDRA_PORT"]))
    )


def drop_and_close(session: Any, keyspaces: list[str]) -> None:
    """Drops a run's keyspaces, so later runs see the same node (see `localrun.drop_keyspace`),
    then closes the session."""
    from floe_stack import localrun

    try:
        for keyspace in keyspaces:
            localrun.drop_keyspace(session, keyspace)
    finally:
        session.cluster.shutdown()


def drop_topics(bootstrap: str, prefixes: list[str]) -> None:
    """Deletes a run's topics (every topic whose name starts with one of `prefixes`: an app's own
    repartition and dead-letter topics too), so later runs meet a broker of the same size: with
    thousands of leftover topics every metadata and offsets request of both sides grows."""
    from floe_stack import localrun

    failed = {t: e for t, e in localrun.delete_topics(bootstrap, lambda t: t.startswith(tuple(prefixes))).items() if e}
    if failed:
        raise RuntimeError(f"topics left on the broker: {failed}")


def new_app(
    env: dict[str, str],
    workdir: Path,
    *,
    prefix: str,
    partitions: int = 6,
    entrypoint: str = str(ROOT / "examples/word-count/word_count.py"),
    stores: list[dict[str, Any]] | None = None,
    **extra: str,
) -> Any:
    from floe_stack import localrun

    app_id = localrun.unique(prefix)
    localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], f"{app_id}-lines", partitions)
    localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], f"{app_id}-output", partitions)
    return localrun.App(
        app_id=app_id,
        bootstrap=env["FLOE_KAFKA_BOOTSTRAP"],
        cassandra_hosts=env["FLOE_CASSANDRA_HOSTS"].split(","),
        cassandra_port=int(env["FLOE_CASSANDRA_PORT"]),
        keyspace="floe_bench_" + app_id.split("-")[-1],
        topics=[f"{app_id}-lines"],
        output_topics=[f"{app_id}-output"],
        entrypoint=entrypoint,
        stores=stores or [{"name": "word-count", "type": "partitioned"}],
        spark_jars=env["FLOE_SPARK_JARS"].split(","),
        # Structured Streaming's driver starts from the jars: so does Floe's here
        spark_class_archive="",
        workdir=workdir,
        extra_env=dict(extra),
    )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_result(area: str, name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{area}-{name}.json"
    result = {"name": name, **result, "date": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return path


# -- handover -----------------------------------------------------------------------------------


def product_membership() -> dict[str, str]:
    """The group settings the operator renders for a StreamingApp that leaves them at their
    defaults (spec.shutdown), as the runtime reads them: both sides of the handover run these."""
    from floe_operator import model

    d = model.ShutdownSpec()
    return {
        "FLOE_KAFKA_SESSION_TIMEOUT_MS": str(d.session_timeout_ms),
        "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": str(d.heartbeat_interval_ms),
    }


def owners(session: Any, app: Any, topics: set[str]) -> list[str]:
    """Replica that planned last, per partition of `topics`."""
    return list(owner_of(session, app, topics).values())


def owner_of(session: Any, app: Any, topics: set[str]) -> dict[tuple[str, int], str]:
    """Partition of `topics` → the replica that planned it last (the offsets table's owner column
    holds `<replica>/<process id>`)."""
    from floe_jobs import offsets

    rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
    return {tp: row[3].split("/")[0] for tp, row in sorted(rows.items()) if tp[0] in topics}


def keep_logs(workdir: Path, dest: Path | None, tag: str) -> None:
    """Copy the replicas' logs of a run out of its temporary directory (for phase analysis)."""
    if dest is None:
        return
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for log in workdir.glob("*.log"):
        shutil.copy(log, dest / f"{tag}-{log.name}")


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """min / median / max of a row's runs, as the README shows them."""
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def gaps_around(
    advances: dict[tuple[str, int], list[float]], *, t_term: float, t_end: float, steady_from: float
) -> dict[str, Any]:
    """Per watched partition, the longest time without a committed batch from its last commit
    before the SIGTERM until `t_end` (the handover gap), and the longest in the steady window
    before it (the batch cadence, for comparison)."""
    per: dict[str, float] = {}
    steady_max = 0.0
    for (topic, p), times in sorted(advances.items()):
        before = [t for t in times if t < t_term]
        after = [t for t in times if t_term <= t < t_end] + [t_end]
        steady = [b - a for a, b in itertools.pairwise([t for t in before if t >= steady_from])]
        steady_max = max([steady_max, *steady])
        seq = ([before[-1]] if before else []) + after
        per[f"{topic.rsplit('-', 2)[-2] if topic.endswith('-repartition') else 'input'}/{p}"] = round(
            max(b - a for a, b in itertools.pairwise(seq)), 3
        )
    return {"max_gap_s": max(per.values()), "per_partition_gap_s": per, "steady_max_gap_s": round(steady_max, 3)}


def bench_handover_protocol(env: dict[str, str], *, protocol: str, args: argparse.Namespace) -> dict[str, Any]:
    """One app, two replicas that stay, and a third (the one that leaves) started anew for every
    run, with leave-group-on-close on and off in turn. Watched: every partition of the input
    topic and of the stateful stage's repartition topic (from the offsets table, every 100 ms)."""
    from floe_jobs import offsets
    from floe_stack import localrun

    extra = {
        "FLOE_KAFKA_GROUP_PROTOCOL": protocol,
        "FLOE_SPARK_MASTER": "local[1]",  # three drivers share two cores
        **product_membership(),
    }
    if args.heartbeat_ms:
        extra["FLOE_KAFKA_HEARTBEAT_INTERVAL_MS"] = str(args.heartbeat_ms)
    runs: dict[str, list[dict[str, Any]]] = {"leave_on": [], "leave_off": []}
    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp:
        app = new_app(env, Path(tmp), prefix="ho", **extra)
        session = session_for(env)
        topic = app.topics[0]
        watched = {topic, f"{app.app_id}-words-repartition"}
        stop = threading.Event()
        lines = localrun.word_lines(200_000, seed=3)

        def feed() -> None:
            i = 0
            while not stop.is_set():
                localrun.produce(app.bootstrap, topic, lines[i : i + 12])
                i = (i + 12) % (len(lines) - 12)
                stop.wait(0.1)

        advances: dict[tuple[str, int], list[float]] = {}
        # (wall time, partition, replica that planned it) of each advance, for the phases
        moves: list[tuple[float, tuple[str, int], str]] = []
        last: dict[tuple[str, int], int] = {}

        def monitor() -> None:
            while not stop.is_set():
                now, now_wall = time.monotonic(), time.time()
                with contextlib.suppress(Exception):  # the table may not exist yet
                    rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
                    for tp, (nxt, _c, _p, owner) in rows.items():
                        if tp[0] in watched and last.get(tp) != nxt:
                            last[tp] = nxt
                            advances.setdefault(tp, []).append(now)
                            moves.append((now_wall, tp, owner.split("/")[0]))
                stop.wait(0.1)

        stay = [localrun.Replica(app, f"r{i}", FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE="true").start() for i in range(2)]
        feeder = threading.Thread(target=feed, daemon=True)
        watcher = threading.Thread(target=monitor, daemon=True)
        victims: list[Any] = []
        try:
            feeder.start()
            watcher.start()
            sides = [True] if args.no_baseline else [True, False]
            for i, leave in enumerate(itertools.islice(itertools.cycle(sides), len(sides) * args.runs)):
                victim = localrun.Replica(
                    app, f"leaving{i}", FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE="true" if leave else "false"
                ).start()
                victims.append(victim)
                deadline = time.monotonic() + 600
                # every replica owns partitions and has committed batches since the last join
                while not (
                    all(r.ready() and r.commits_since_start() >= 2 for r in [*stay, victim])
                    and victim.name in owners(session, app, watched)
                    and len(watched_partitions(advances, watched)) == 12
                ):
                    if time.monotonic() > deadline:
                        raise TimeoutError("replicas not ready")
                    if not victim.alive():
                        raise RuntimeError(f"replica exited; see {victim.log_path}")
                    time.sleep(1)
                steady_from = time.monotonic()
                time.sleep(args.steady)
                theirs = [tp for tp, owner in owner_of(session, app, watched).items() if owner == victim.name]
                t_term, term_wall = time.monotonic(), time.time()
                victim.signal(signal.SIGTERM)
                code = victim.wait(120)
                t_exit = time.monotonic()
                time.sleep(args.window_on if leave else args.window_off)
                t_end = time.monotonic()
                run = {
                    "leave_group_on_close": leave,
                    **gaps_around(advances, t_term=t_term, t_end=t_end, steady_from=steady_from),
                    "partitions_of_leaving_replica": len(theirs),
                    "drain_s": round(t_exit - t_term, 3),
                    "phases_s": procphases.handover(
                        term_wall,
                        victim_log=procphases.log_lines(victim.log_path, since=term_wall - 1),
                        survivor_logs={r.name: procphases.log_lines(r.log_path, since=term_wall - 5) for r in stay},
                        victim=victim.name,
                        moves=list(moves),
                        theirs=theirs,
                    ),
                    "exit_code": code,
                    "sigterm_at": round(term_wall, 3),
                    "load_average": load_average(),
                }
                runs["leave_on" if leave else "leave_off"].append(run)
                print(protocol, json.dumps(run), flush=True)
        finally:
            stop.set()
            for r in [*stay, *victims]:
                r.stop()
            drop_and_close(session, [app.keyspace])
            keep_logs(Path(tmp), args.logs, f"handover-{protocol}-{app.app_id}")
    return runs


def watched_partitions(advances: dict[tuple[str, int], list[float]], topics: set[str]) -> set[tuple[str, int]]:
    return {tp for tp in advances if tp[0] in topics}


def bench_handover(args: argparse.Namespace) -> None:
    env = stack_env()
    membership = product_membership()
    if args.heartbeat_ms:
        membership["FLOE_KAFKA_HEARTBEAT_INTERVAL_MS"] = str(args.heartbeat_ms)
    session_s = int(membership["FLOE_KAFKA_SESSION_TIMEOUT_MS"]) / 1000
    heartbeat_s = int(membership["FLOE_KAFKA_HEARTBEAT_INTERVAL_MS"]) / 1000
    for protocol in args.protocols:
        runs = bench_handover_protocol(env, protocol=protocol, args=args)
        on = [r["max_gap_s"] for r in runs["leave_on"]]
        if args.no_baseline:  # a signal while working on the handover: no row is written
            phases = podphases.medians([r["phases_s"] for r in runs["leave_on"]])
            summary = {"value": spread(on), "phases_median_s": phases}
            print(protocol, "leave-on only", json.dumps(summary), flush=True)
            continue
        off = [r["max_gap_s"] for r in runs["leave_off"]]
        value, baseline = statistics.median(on), statistics.median(off)
        gaps = [g for r in runs["leave_on"] for g in r["per_partition_gap_s"].values()]
        name = {"consumer": "kip848", "classic": "classic"}[protocol]
        if args.heartbeat_ms:
            name += f"-heartbeat-{args.heartbeat_ms}ms"
        tuned = "" if not args.heartbeat_ms else f" (heartbeat tuned to {heartbeat_s:g} s on both sides)"
        target_s = 2.0
        write_result(
            "handover",
            name,
            {
                "metric": "longest time any partition of the input or of the stateful stage's repartition topic "
                f"goes without a committed batch after SIGTERM of 1 of 3 word-count replicas ({protocol} "
                f"protocol, session timeout {session_s:g} s, heartbeat {heartbeat_s:g} s: the product's defaults"
                f"{tuned}); value: leave-group-on-close on, baseline: off, median of {args.runs} alternated runs "
                "each; lower is better, ratio = baseline / value",
                "unit": "s",
                "value": round(value, 3),
                "baseline": f"leave-group-on-close off, otherwise the same settings (partitions wait for the "
                f"{session_s:g} s session timeout)",
                "baseline_value": round(baseline, 3),
                "ratio": round(baseline / value, 2) if value else None,
                "target": f"value <= {target_s:g} s",
                "target_met": value <= target_s,
                "spread": {"value": spread(on), "baseline": spread(off)},
                "p50_s": round(statistics.median(gaps), 3),
                "p99_s": round(percentile(gaps, 0.99), 3),
                "phases_median_s": {side: podphases.medians([r["phases_s"] for r in rs]) for side, rs in runs.items()},
                "command": f".venv/bin/python tests/bench/runtime_bench.py handover --protocols {protocol} "
                f"--runs {args.runs}" + (f" --heartbeat-ms {args.heartbeat_ms}" if args.heartbeat_ms else ""),
                "load_average_1m": load_average()[0],
                "cpu_count": os.cpu_count(),
                "runs": runs,
            },
        )


# -- scale-out ----------------------------------------------------------------------------------

PREFILL = 1000  # every stored key's count before the runs: a count the input adds to


def store_keys(count: int) -> list[str]:
    return [f"k{i:07d}" for i in range(count)]


def populate_store(session: Any, keyspace: str, keys: list[str], partitions: int) -> float:
    """Write PREFILL as the count of every key into the word-count store, each key in the
    partition the runtime gives it (the repartition topic's, murmur2 of the word); returns seconds."""
    import pyarrow as pa
    from floe_jobs import runs as floe_runs
    from floe_jobs.stores import PartitionedStore, StoreSpec, provision, serdes

    spec = StoreSpec(name="word-count", type="partitioned")
    provision(session, keyspace=keyspace, replication=None, stores=[spec], create_keyspace=True)
    store = PartitionedStore(session, spec, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG)
    t0 = time.monotonic()
    chunk = 20_000
    for start in range(0, len(keys), chunk):
        part = keys[start : start + chunk]
        where = floe_runs.partitions(pa.array([k.encode() for k in part], pa.binary()), partitions)
        by_part: dict[int, list[tuple[str, int]]] = {}
        for key, p in zip(part, where.tolist(), strict=True):
            by_part.setdefault(p, []).append((key, PREFILL))
        for p, items in by_part.items():
            store.put_many_fenced(p, items, batch=0)
    return time.monotonic() - t0


def lines_of(keys: list[str], *, per_line: int = 10, repeat: int = 2, seed: int) -> list[str]:
    """Every key `repeat` times, shuffled into lines of `per_line` words."""
    import random

    words = keys * repeat
    random.Random(seed).shuffle(words)
    return [" ".join(words[i : i + per_line]) for i in range(0, len(words), per_line)]


def committed_lines(log_text: str) -> list[str]:
    return [ln for ln in log_text.splitlines() if "Committed stage=" in ln]


def scaleout_run(env: dict[str, str], app: Any, *, keys: list[str], distinct: int, run: int) -> dict[str, Any]:
    """Two replicas run the app over input whose words are keys of the store; a third starts
    and takes its share of the partitions of both stages while the input keeps coming (words
    drawn afresh from the stored keys, the same number of distinct ones whatever the store's
    size). Measured: seconds from its process start until it commits its first batch of the
    stateful stage, a batch that read stored counts and wrote them back increased."""
    import random
    from collections import Counter

    from floe_stack import localrun

    rng = random.Random(1000 + run)
    before = lines_of(rng.sample(keys, distinct), seed=run)
    during = lines_of(rng.sample(keys, distinct), seed=run + 500)
    fed: Counter[str] = Counter()
    stop = threading.Event()
    source = {"lines": before}

    def feed() -> None:
        i = 0
        while not stop.is_set():
            lines = source["lines"]
            chunk = [lines[(i + j) % len(lines)] for j in range(20)]
            localrun.produce(app.bootstrap, app.topics[0], chunk)
            for line in chunk:
                fed.update(line.split())
            i += 20
            stop.wait(0.1)

    old = [localrun.Replica(app, f"run{run}-r{i}").start() for i in range(2)]
    new = localrun.Replica(app, f"run{run}-new")
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    ready_s = None
    try:
        deadline = time.monotonic() + 600
        while not all(r.ready() and r.commits_since_start() >= 4 for r in old):
            if time.monotonic() > deadline or not all(r.alive() for r in old):
                raise RuntimeError(f"the running replicas did not settle; see {app.workdir}")
            time.sleep(0.5)
        source["lines"] = during
        t0 = time.monotonic()
        new.start()
        while time.monotonic() - t0 < 300:
            if any("Committed stage=count" in ln for ln in committed_lines(new_log(new))):
                ready_s = round(time.monotonic() - t0, 2)
                break
            if not new.alive():
                raise RuntimeError(f"replica exited; see {new.log_path}")
            time.sleep(0.1)
        if ready_s is None:
            raise TimeoutError(f"the new replica committed no stateful batch within 300 s; see {new.log_path}")
        time.sleep(3)
        stop.set()
        feeder.join()
        session = session_for(env)
        try:
            localrun.wait_caught_up(
                session, app, [app.topics[0], f"{app.app_id}-words-repartition"], timeout=600, replicas=[*old, new]
            )
        finally:
            session.cluster.shutdown()
    finally:
        stop.set()
        for r in [new, *old]:
            r.stop()
    text = new_log(new)
    counts = [ln for ln in committed_lines(text) if "Committed stage=count" in ln]
    first = counts[0]
    records = int(first.split("records=")[1].split()[0])
    out = int(first.split("out=")[1].split()[0])
    if records == 0 or out == 0:
        raise AssertionError(f"the new replica's first stateful batch updated nothing: {first}")
    return {
        "ready_s": ready_s,
        "first_batch_after_start_s": first_batch_seconds(text),
        "warm_up_s": warm_up_seconds(text),
        "first_stateful_batch": {"records": records, "changed_counts": out},
        "stateful_batches_of_new_replica": len(counts),
        "fed": fed,
    }


def new_log(replica: Any) -> str:
    return str(replica.log_path.read_text(errors="replace").rsplit("==== start", 1)[-1])


def check_counts(env: dict[str, str], app: Any, fed: Any) -> int:
    """Every key the input named holds PREFILL plus its occurrences: each batch read the stored
    count and added to it, the new replica's included. Returns the keys checked."""
    import pyarrow as pa
    from floe_jobs import runs as floe_runs
    from floe_jobs.stores import PartitionedStore, serdes

    session = session_for(env)
    try:
        store = PartitionedStore(
            session, "word-count", keyspace=app.keyspace, key_serde=serdes.STR, value_serde=serdes.LONG
        )
        keys = sorted(fed)
        where = floe_runs.partitions(pa.array([k.encode() for k in keys], pa.binary()), 6).tolist()
        stored: dict[str, Any] = {}
        for part in set(where):
            stored.update(store.get_many(part, [k for k, p in zip(keys, where, strict=True) if p == part]))
    finally:
        session.cluster.shutdown()
    wrong = {k: (stored.get(k), PREFILL + n) for k, n in fed.items() if stored.get(k) != PREFILL + n}
    if wrong:
        sample = dict(list(wrong.items())[:5])
        raise AssertionError(f"{len(wrong)} of {len(fed)} counts are not prefill + input, e.g. {sample}")
    return len(fed)


def first_batch_seconds(log_text: str) -> float | None:
    """Seconds from a replica's start log line to its first committed batch."""
    fmt = "%Y-%m-%d %H:%M:%S,%f"
    stamps = [ln for ln in log_text.splitlines() if "Committed stage=" in ln or "Starting app=" in ln]
    if len(stamps) < 2 or "Starting app=" not in stamps[0]:
        return None
    started = datetime.strptime(stamps[0][:23], fmt)
    return round((datetime.strptime(stamps[1][:23], fmt) - started).total_seconds(), 2)


def nodetool(env: dict[str, str], *args: str) -> str:
    """Cassandra's nodetool against the local stack's node: the `NodeTool` class of the stack's
    cassandra-all jars over its local JMX port, with the JDK 17 options the node runs with."""
    import subprocess

    from floe_stack.cassandra import JDK17_MODULE_OPTIONS

    jars = Path(env["FLOE_CACHE"]) / "jars" / f"cassandra-{env['FLOE_CASSANDRA_VERSION']}"
    port = json.loads((ROOT / ".floe" / "ports.json").read_text()).get("cassandra_jmx", 7199)
    with tempfile.TemporaryDirectory(prefix="floe-nodetool-") as logs:
        argv = [
            "java",
            f"-Dcassandra.logdir={logs}",
            *JDK17_MODULE_OPTIONS,
            "-cp",
            f"{jars}/*",
            "org.apache.cassandra.tools.NodeTool",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            *args,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"nodetool {' '.join(args)} failed: {done.stderr[-2000:]}")
    return done.stdout


def settle_cassandra(
    env: dict[str, str], session: Any, keyspaces: list[str], *, quiet_s: float = 5.0, flush: bool = True
) -> float:
    """Flush the keyspaces' memtables, then wait until Cassandra has neither a compaction nor a
    flush running or pending for `quiet_s` seconds; returns the seconds it took. A store just
    filled with a million rows is otherwise still being flushed and compacted when the measured
    replica starts, and that work (not the stored keys) takes the cores the replica needs."""
    t0 = time.monotonic()
    for keyspace in keyspaces if flush else []:
        nodetool(env, "flush", keyspace)
    pools = ("CompactionExecutor", "MemtableFlushWriter", "MemtablePostFlush", "PerDiskMemtableFlushWriter_0")
    quiet_since: float | None = None
    while time.monotonic() - t0 < 1800:
        busy = sum(
            (r[1] or 0) + (r[2] or 0)
            for r in session.execute("SELECT name, active_tasks, pending_tasks FROM system_views.thread_pools")
            if r[0] in pools
        )
        busy += len(list(session.execute("SELECT keyspace_name FROM system_views.sstable_tasks")))
        now = time.monotonic()
        if busy:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= quiet_s:
            return round(now - t0, 1)
        time.sleep(1)
    raise TimeoutError("Cassandra kept compacting for 30 minutes")


def bench_scaleout(args: argparse.Namespace) -> None:
    from collections import Counter

    env = stack_env()
    sizes = {"small": args.small, "large": args.large}
    runs: dict[str, list[dict[str, Any]]] = {"small": [], "large": []}
    fills: dict[str, float] = {}
    fed: dict[str, Counter[str]] = {}
    checked: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp:
        session = session_for(env)
        apps: dict[str, Any] = {}
        keys: dict[str, list[str]] = {}
        try:
            for name, count in sizes.items():
                workdir = Path(tmp) / name
                workdir.mkdir()
                apps[name] = new_app(env, workdir, prefix="so", FLOE_SPARK_MASTER="local[1]")
                keys[name] = store_keys(count)
                fills[name] = round(populate_store(session, apps[name].keyspace, keys[name], 6), 1)
                fed[name] = Counter()
            # the fill flushed and compacted before the first run; then alternated runs, each after
            # Cassandra is quiet again
            settle_cassandra(env, session, [a.keyspace for a in apps.values()])
            for i in range(args.runs):
                for name in ("small", "large") if i % 2 == 0 else ("large", "small"):
                    settled = settle_cassandra(env, session, [], flush=False)
                    result = scaleout_run(env, apps[name], keys=keys[name], distinct=args.distinct, run=i)
                    fed[name].update(result.pop("fed"))
                    result.update(keys=sizes[name], settle_s=settled, load_average=load_average())
                    runs[name].append(result)
                    print(name, json.dumps(result), flush=True)
            for name, app in apps.items():
                checked[name] = check_counts(env, app, fed[name])
        finally:
            drop_and_close(session, [app.keyspace for app in apps.values()])
            keep_logs(Path(tmp) / "small", args.logs, "scaleout-small")
            keep_logs(Path(tmp) / "large", args.logs, "scaleout-large")
    small = [r["ready_s"] for r in runs["small"]]
    large = [r["ready_s"] for r in runs["large"]]
    ratio = statistics.median(large) / statistics.median(small)
    write_result(
        "scaleout",
        "new-replica-first-batch",
        {
            "metric": "seconds from process start until a replica added to a running group of 2 commits its first "
            "batch of the stateful stage (word count; its partitions taken over from the running replicas; input "
            f"words drawn from the stored keys, {args.distinct:,} distinct ones per run) with {args.large:,} keys "
            f"in the store (value) vs {args.small:,} (baseline), median of {args.runs} alternated runs each; every "
            "count checked afterwards to be the stored count plus the input's; lower is better, ratio = value / "
            "baseline, 1.0 means the store's size costs a new replica nothing",
            "unit": "s",
            "value": round(statistics.median(large), 2),
            "baseline": f"{args.small:,} keys in the store, otherwise the same",
            "baseline_value": round(statistics.median(small), 2),
            "ratio": round(ratio, 3),
            "target": "ratio <= 1.2",
            "target_met": ratio <= 1.2,
            "spread": {"value": spread(large), "baseline": spread(small)},
            "p50_s": None,
            "p99_s": None,
            "command": ".venv/bin/python tests/bench/runtime_bench.py scaleout "
            f"--small {args.small} --large {args.large} --distinct {args.distinct} --runs {args.runs}",
            "load_average_1m": load_average()[0],
            "cpu_count": os.cpu_count(),
            "runs": {**runs, "fill_s": fills, "keys_checked": checked},
        },
    )


# -- throughput ---------------------------------------------------------------------------------

SS_HEAD = """
import json, sys
from datetime import datetime
from pyspark.sql import SparkSession, functions as F
bootstrap, topic, out, checkpoint, jars, max_offsets, conf = sys.argv[1:8]
builder = (SparkSession.builder.master("local[2]").appName("ss-throughput")
           .config("spark.jars", jars).config("spark.ui.enabled", "false")
           .config("spark.ui.showConsoleProgress", "false"))
for key, value in json.loads(conf).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
       .option("subscribe", topic).option("startingOffsets", "earliest")
       .option("maxOffsetsPerTrigger", max_offsets).load())
"""
SS_TAIL = """
q = (result.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
     .option("checkpointLocation", checkpoint).outputMode(mode).trigger(availableNow=True).start())
q.awaitTermination()
# the clock: from the first trigger's start to the end of the last one that read records (its
# offsets, state checkpoint and commit log written), as the query's progress reports them
def at(p):
    return datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
done = [p for p in q.recentProgress if p["numInputRows"] > 0]
first, last = at(done[0]), max(at(p) + p["durationMs"]["triggerExecution"] / 1000 for p in done)
print("PROGRESS", json.dumps({"seconds": last - at(q.recentProgress[0]), "batches": len(done),
      "rows": sum(p["numInputRows"] for p in done), "first_batch_s": done[0]["durationMs"]["triggerExecution"] / 1000}),
      flush=True)
"""

# Spark settings both systems run with in each configuration. "floe-tuning" is what Floe's
# runtime sets by default (`floe_jobs.sparkio`); "spark-defaults" puts those keys back to Spark's
# own defaults. Both: the same driver memory and shuffle partitions (two cores).
COMMON_CONF = {"spark.driver.memory": "768m", "spark.sql.shuffle.partitions": "2"}
TUNINGS = {
    "spark-defaults": {
        "spark.sql.adaptive.enabled": "true",
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC",
        "spark.sql.execution.arrow.localRelationThreshold": "48MB",
    },
    "floe-tuning": {
        "spark.sql.adaptive.enabled": "false",
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC -XX:TieredStopAtLevel=1",
        "spark.sql.execution.arrow.localRelationThreshold": "0",
    },
}
# Floe's runtime maps a class archive of its driver JVM by default (its image's,
# `floe_jobs.classarchive`). In these tunings each system maps one of its own: its discarded
# warm-up run writes it at its JVM's exit, over its own workload, and its measured runs map it.
ARCHIVED_TUNINGS = ("floe-tuning",)
ARCHIVE_OPTION = "spark.driver.defaultJavaOptions"


def archive_conf(path: Path, *, write: bool) -> dict[str, str]:
    """The driver option that writes (`write`) or maps the class archive at `path`."""
    option = f"-XX:ArchiveClassesAtExit={path} -Xlog:cds=error" if write else f"-XX:SharedArchiveFile={path}"
    return {ARCHIVE_OPTION: option}


def wait_for_file(path: Path, timeout: float = 120.0) -> None:
    """A JVM writes its class archive as it exits, after the process that ran it has ended."""
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no class archive at {path}: the warm-up run's JVM did not write one")
        time.sleep(0.5)


# Structured Streaming's recommended state store for large state, with changelog checkpointing
# (each micro-batch uploads the changes, not a snapshot)
SS_STATE = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
# (name, workload, vocabulary, default records): word count with about 10,000, 100,000 and
# 1,000,000 distinct words; dedup over 1,000,000 distinct ids and latest over 1,000,000 keys,
# each with a fifth as many repeats again
CASES: tuple[tuple[str, workloads.Workload, int, int], ...] = (
    ("10k-words", workloads.WORD_COUNT, 10_000, 100_000),
    ("100k-words", workloads.WORD_COUNT, 100_000, 100_000),
    ("1m-words", workloads.WORD_COUNT, 2_000_000, 200_000),
    ("1m-ids", workloads.DEDUP, 1_000_000, 1_200_000),
    ("1m-keys", workloads.LATEST, 1_000_000, 1_200_000),
)


def case_records(workload: workloads.Workload, count: int, vocab: int, *, seed: int) -> list[workloads.Record]:
    if workload is workloads.WORD_COUNT:
        return workloads.vocab_lines(count, vocab, seed=seed)
    make = workloads.repeated_ids if workload is workloads.DEDUP else workloads.key_updates
    return make(count, min(vocab, count), seed=seed)


FULL_RUNS = 5  # runs of each side a throughput row should have; fewer are said in the result
# CPU counted per record for the second ratio: the system's own processes and the broker, not
# the state store's node (Cassandra shares the two cores here; in production it runs elsewhere)
OWN_KINDS = ("spark-jvm", "floe-replica", "structured-streaming-driver", "kafka")


def _tree_rss(root: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class PeakRss:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, _tree_rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def log_time(line: str) -> float:
    """Epoch seconds of a replica's log line (its asctime prefix, the machine's local time)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def warm_up_seconds(log_text: str) -> float:
    """Wall-clock time of a replica's warm-up: from the first stage's start to the last one's
    end (lanes warm up side by side, so their durations overlap)."""
    warmed = [ln for ln in log_text.splitlines() if "Warmed up stage=" in ln]
    if not warmed:
        return 0.0
    ends = [log_time(ln) for ln in warmed]
    starts = [end - float(ln.split("seconds=")[1].split()[0]) for end, ln in zip(ends, warmed, strict=True)]
    return round(max(ends) - min(starts), 2)


def floe_processing_seconds(log_text: str) -> dict[str, float]:
    """From a replica's log: seconds from the start of its stage warm-up (before it joins the
    group) to the commit of its last batch, and the parts of that time."""
    warmed = [ln for ln in log_text.splitlines() if "Warmed up stage=" in ln]
    commits = [ln for ln in log_text.splitlines() if "Committed stage=" in ln]
    starts = [log_time(ln) - float(ln.split("seconds=")[1].split()[0]) for ln in warmed + commits[:1]]
    begin, end = min(starts), log_time(commits[-1])
    first = commits[0]
    first_start = log_time(first) - float(first.split("seconds=")[1].split()[0])
    return {
        "seconds": round(end - begin, 2),
        "warm_up_s": warm_up_seconds(log_text),
        "batches_s": round(end - first_start, 2),
        "batches": len(commits),
    }


def own_cpu(cpu_s: dict[str, float]) -> float:
    return round(sum(v for k, v in cpu_s.items() if k in OWN_KINDS), 2)


def floe_throughput(
    env: dict[str, str],
    records: list[workloads.Record],
    *,
    workload: workloads.Workload,
    batch: int,
    conf: dict[str, str],
    logs: Path | None = None,
) -> dict[str, Any]:
    from floe_stack import localrun

    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp:
        app = new_app(
            env,
            Path(tmp),
            prefix="tp",
            entrypoint=workload.entrypoint,
            stores=workload.stores,
            FLOE_SPARK_MASTER="local[2]",
            FLOE_KAFKA_MAX_RECORDS_PER_BATCH=str(batch),
            FLOE_SPARK_CONF=json.dumps(conf),
        )
        session = session_for(env)
        localrun.produce(app.bootstrap, app.topics[0], records)
        roots = set(stack_pids(ROOT))
        cpu = Sampler(interval=0.5, roots=roots)
        replica = localrun.Replica(app, "r0").start()
        roots.add(replica.pid)
        rss = PeakRss(replica.pid)
        try:
            localrun.wait_caught_up(
                session, app, workload.drained(app.app_id, app.topics[0]), timeout=3600, replicas=[replica]
            )
            phases = floe_processing_seconds(replica.log_path.read_text(errors="replace"))
        finally:
            peak = rss.stop()
            replica.stop()
            cpu_s = cpu.stop()
            # kept whether the run succeeded or not: a replica that failed is what the log is for
            keep_logs(Path(tmp), logs, f"throughput-{app.app_id}")
        try:
            # the answer, checked after the clock stopped: the output topic and the store
            checked = workloads.check_output(
                workload, records, localrun.read_topic(app.bootstrap, app.output_topics[0], timeout=900)
            )
            checked["store_keys_checked"] = workloads.check_store(
                workload,
                records,
                lambda store, ks, vs: localrun.read_store(session, app.keyspace, store, key_serde=ks, value_serde=vs),
            )
            compaction = store_compaction(session, app.keyspace)
        finally:
            drop_and_close(session, [app.keyspace])
            drop_topics(app.bootstrap, [app.app_id])
    return {
        **phases,
        "store_compaction": compaction,
        "records_per_s": round(len(records) / phases["seconds"], 1),
        "peak_rss_mb": peak >> 20,
        "cpu_s": cpu_s,
        "own_cpu_s": own_cpu(cpu_s),
        "checked": checked,
    }


def store_compaction(session: Any, keyspace: str) -> dict[str, str]:
    """Each store table's compaction strategy as Cassandra holds it (the offsets table left out)."""
    rows = session.execute(
        "SELECT table_name, compaction FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
    )
    return {table: options["class"].rsplit(".", 1)[-1] for table, options in rows if table.endswith("_kstreams_store")}


def ss_command(
    env: dict[str, str], script: Path, workdir: Path, topic: str, out: str, *, batch: int, conf: dict[str, str]
) -> list[str]:
    """The command line of a Structured Streaming script of `SS_HEAD`'s arguments: the broker, the
    input and output topics, a checkpoint under `workdir`, the Kafka connector's jars, the records
    per trigger and the Spark settings."""
    return [
        sys.executable,
        str(script),
        env["FLOE_KAFKA_BOOTSTRAP"],
        topic,
        out,
        str(workdir / "chk"),
        env["FLOE_SPARK_JARS"],
        str(batch),
        json.dumps(conf),
    ]


def ss_throughput(
    env: dict[str, str],
    records: list[workloads.Record],
    *,
    workload: workloads.Workload,
    batch: int,
    conf: dict[str, str],
) -> dict[str, Any]:
    import subprocess

    from floe_stack import localrun

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    with tempfile.TemporaryDirectory(prefix="floe-bench-ss-") as tmp:
        topic, out = localrun.unique("ss-lines"), localrun.unique("ss-out")
        localrun.create_topic(bootstrap, topic, 6)
        localrun.create_topic(bootstrap, out, 6)
        localrun.produce(bootstrap, topic, records)
        script = Path(tmp) / "ss.py"
        script.write_text(SS_HEAD + workload.ss_query + SS_TAIL)
        roots = set(stack_pids(ROOT))
        cpu = Sampler(interval=0.5, roots=roots)
        proc = subprocess.Popen(
            ss_command(env, script, Path(tmp), topic, out, batch=batch, conf={**conf, **SS_STATE}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        roots.add(proc.pid)
        rss = PeakRss(proc.pid)
        stdout, stderr = proc.communicate(timeout=3600)
        peak = rss.stop()
        cpu_s = cpu.stop()
    try:
        if "PROGRESS" not in stdout:
            raise RuntimeError(f"Structured Streaming failed: {stderr[-3000:]}")
        checked = workloads.check_output(workload, records, localrun.read_topic(bootstrap, out, timeout=900))
    finally:
        drop_topics(bootstrap, [topic, out])
    progress = json.loads(stdout.split("PROGRESS", 1)[1].strip().splitlines()[0])
    return {
        "seconds": round(progress["seconds"], 2),
        "records_per_s": round(len(records) / progress["seconds"], 1),
        "first_batch_s": round(progress["first_batch_s"], 2),
        "batches": progress["batches"],
        "peak_rss_mb": peak >> 20,
        "cpu_s": cpu_s,
        "own_cpu_s": own_cpu(cpu_s),
        "checked": checked,
    }


def bench_throughput(args: argparse.Namespace) -> None:
    # each system's class archive (ARCHIVED_TUNINGS) lives as long as the benchmark
    with tempfile.TemporaryDirectory(prefix="floe-bench-archive-") as archive_dir:
        _bench_throughput(args, Path(archive_dir))


def _bench_throughput(args: argparse.Namespace, archive_dir: Path) -> None:
    env = stack_env()
    # One discarded run of each system first: a node just started interprets before its JIT
    # compiles, and both systems share the broker, so measured runs see warm services alike.
    warm_lines = workloads.vocab_lines(20_000, 10_000, seed=4)
    archives = {side: archive_dir / f"{side}.jsa" for side in ("floe", "ss")}
    archived = any(t in ARCHIVED_TUNINGS for t in args.tunings)
    for i in range(max(args.warm_up, 1 if archived else 0)):
        conf = {**COMMON_CONF, **TUNINGS[args.tunings[0]]}
        write = {side: archive_conf(path, write=True) if archived and i == 0 else {} for side, path in archives.items()}
        wc = workloads.WORD_COUNT
        print(
            "warm-up (discarded)",
            floe_throughput(env, warm_lines, workload=wc, batch=args.batch, conf={**conf, **write["floe"]}),
            ss_throughput(env, warm_lines, workload=wc, batch=args.batch, conf={**conf, **write["ss"]}),
            flush=True,
        )
    if archived:
        for path in archives.values():
            wait_for_file(path)
    for name, workload, vocab, count in [c for c in CASES if c[0] in args.cases]:
        count = args.lines or count
        records = case_records(workload, count, vocab, seed=5)
        distinct = workloads.distinct_of(workload, records)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {t: {"floe": [], "ss": []} for t in args.tunings}
        for i in range(args.runs):  # alternated, so both see the machine's load alike
            for tuning in args.tunings if i % 2 == 0 else list(reversed(args.tunings)):
                conf = {**COMMON_CONF, **TUNINGS[tuning]}
                maps = {
                    side: archive_conf(path, write=False) if tuning in ARCHIVED_TUNINGS else {}
                    for side, path in archives.items()
                }
                runs[tuning]["floe"].append(
                    floe_throughput(
                        env, records, workload=workload, batch=args.batch, conf={**conf, **maps["floe"]}, logs=args.logs
                    )
                )
                runs[tuning]["ss"].append(
                    ss_throughput(env, records, workload=workload, batch=args.batch, conf={**conf, **maps["ss"]})
                )
                print(name, tuning, runs[tuning]["floe"][-1], runs[tuning]["ss"][-1], flush=True)
            write_throughput(args, name=name, workload=workload, count=count, distinct=distinct, runs=runs)


def write_throughput(
    args: argparse.Namespace,
    *,
    name: str,
    workload: workloads.Workload,
    count: int,
    distinct: int,
    runs: dict[str, dict[str, list[dict[str, Any]]]],
) -> None:
    """The rows of one case from the runs made so far (written after every alternated round, so
    a benchmark stopped early leaves results that say how many runs they hold)."""
    for tuning, by in runs.items():
        done = len(by["floe"])
        floe = [r["records_per_s"] for r in by["floe"]]
        ss = [r["records_per_s"] for r in by["ss"]]
        floe_cpu = [count / r["own_cpu_s"] for r in by["floe"]]
        ss_cpu = [count / r["own_cpu_s"] for r in by["ss"]]
        ratio = statistics.median(floe) / statistics.median(ss)
        write_result(
            "throughput",
            f"{workload.name}-{name}-{tuning}",
            {
                "metric": "input records per second, one replica, "
                + workload.what.format(count=count, distinct=distinct)
                + f", Spark settings: {tuning} on both sides; Floe (value) vs Spark Structured "
                f"Streaming (baseline), median of {done} alternated runs each"
                + ("" if done >= FULL_RUNS else f" (only {done}, not {FULL_RUNS})")
                + ". Clock, both sides: from the "
                "start of the first work on the data (Floe: its stage warm-up, before it joins the group; "
                "Structured Streaming: its first trigger) to the commit of the last batch (Floe: offsets in "
                "Cassandra; Structured Streaming: the last trigger's end); process start-up excluded on both. "
                "Higher is better, ratio = value / baseline; ratio_per_cpu_second: records per CPU second of the "
                "system's own processes and the Kafka broker (not Cassandra's node). Every run's answer is "
                "checked after its clock stops: each key's latest value in the output topic (both sides) and "
                "in Cassandra (Floe) is the one the input implies (a word's count, an id once, a key's last "
                "value), or the run fails",
                "unit": "records/s",
                "value": round(statistics.median(floe), 1),
                "baseline": f"{workload.baseline}, RocksDB state store with changelog "
                f"checkpointing, availableNow trigger, {args.batch:,} records per trigger",
                "baseline_value": round(statistics.median(ss), 1),
                "ratio": round(ratio, 3),
                "ratio_per_cpu_second": round(statistics.median(floe_cpu) / statistics.median(ss_cpu), 3),
                "target": "ratio >= 1.0",
                "target_met": ratio >= 1.0,
                "spread": {
                    "value": spread(floe),
                    "baseline": spread(ss),
                    "value_lines_per_cpu_s": spread(floe_cpu),
                    "baseline_lines_per_cpu_s": spread(ss_cpu),
                },
                "spark_conf": {**COMMON_CONF, **TUNINGS[tuning]},
                "class_archive": (
                    "each system's own (spark.driver.defaultJavaOptions -XX:SharedArchiveFile), written at the JVM's "
                    "exit by its discarded warm-up run over 20,000 lines of word count"
                    if tuning in ARCHIVED_TUNINGS
                    else "none: both drivers load every class from the jars"
                ),
                **(
                    {}
                    if done >= FULL_RUNS
                    else {
                        "fewer_runs": f"{done} alternated runs of each side, not {FULL_RUNS}"
                        + ("" if done == args.runs else f" ({args.runs} asked, stopped after {done})")
                        + ": the spread says less than one of 5 runs does"
                    }
                ),
                "p50_s": None,
                "p99_s": None,
                "command": ".venv/bin/python tests/bench/runtime_bench.py throughput "
                f"--cases {name} --tunings {' '.join(args.tunings)} --runs {args.runs} --warm-up {args.warm_up}"
                + (f" --lines {args.lines}" if args.lines else ""),
                "load_average_1m": load_average()[0],
                "cpu_count": os.cpu_count(),
                "runs": {"floe": by["floe"], "structured_streaming": by["ss"], "distinct_keys": distinct},
            },
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="area")
    h = sub.add_parser("handover")
    h.add_argument("--protocols", nargs="+", default=["consumer", "classic"], choices=["consumer", "classic"])
    h.add_argument("--window-on", type=float, default=15.0, help="seconds observed after the SIGTERM, leave on")
    h.add_argument("--window-off", type=float, default=25.0, help="seconds observed after the SIGTERM, leave off")
    h.add_argument("--steady", type=float, default=10.0, help="seconds of steady state before each SIGTERM")
    h.add_argument("--runs", type=int, default=3, help="runs of each side, alternated (medians)")
    h.add_argument("--heartbeat-ms", type=int, default=None, help="an extra row with this heartbeat on both sides")
    h.add_argument("--logs", type=Path, default=None, help="keep the replicas' logs here")
    h.add_argument(
        "--no-baseline",
        action="store_true",
        help="leave-group-on-close on only, printed with its phases, no result file (a quick signal, not a row)",
    )
    so = sub.add_parser("scaleout")
    so.add_argument("--small", type=int, default=10_000)
    so.add_argument("--large", type=int, default=1_000_000)
    so.add_argument("--distinct", type=int, default=5_000, help="distinct stored keys the input names per run")
    so.add_argument("--runs", type=int, default=3, help="new replicas per store size, alternated (medians)")
    so.add_argument("--logs", type=Path, default=None, help="keep the replicas' logs here")
    tp = sub.add_parser("throughput")
    tp.add_argument(
        "--cases",
        nargs="+",
        default=os.environ.get("FLOE_BENCH_THROUGHPUT_CASES", " ".join(c[0] for c in CASES)).split(),
        choices=[c[0] for c in CASES],
        help="cases to run (default: $FLOE_BENCH_THROUGHPUT_CASES, else all)",
    )
    tp.add_argument("--tunings", nargs="+", default=list(TUNINGS), choices=list(TUNINGS))
    tp.add_argument("--lines", type=int, default=None, help="input records of every case (default: each case's own)")
    tp.add_argument("--batch", type=int, default=50_000, help="records per batch (both systems)")
    tp.add_argument(
        "--runs",
        type=int,
        default=int(os.environ.get("FLOE_BENCH_THROUGHPUT_RUNS", "5")),
        help="runs of each system and tuning, alternated (medians; default: $FLOE_BENCH_THROUGHPUT_RUNS, else 5)",
    )
    tp.add_argument("--warm-up", type=int, default=1, help="discarded runs of each system on a fifth of the lines")
    tp.add_argument("--logs", type=Path, default=None, help="keep the replicas' logs here")
    args = p.parse_args(argv)
    runs = {"handover": bench_handover, "scaleout": bench_scaleout, "throughput": bench_throughput}
    for each in [args] if args.area else [p.parse_args([area]) for area in runs]:
        print(f"runtime_bench: {each.area}", flush=True)
        runs[each.area](each)
    return 0


if __name__ == "__main__":
    sys.exit(main())
