"""Lag exporter benchmarks on the local Kafka and Cassandra.

    .venv/bin/python tests/bench/lag_bench.py [--apps 50] [--partitions 24] [--runs 20] [--seconds 25]

Writes bench/results/lag-<name>.json:

- scrape-50x24: one scrape of every app (`lag.Scraper.scrape`: end offsets of all
  partitions in one ListOffsets request per broker, committed offsets from the 50 apps'
  offsets tables with concurrent queries). Baseline: the same numbers gathered app by app,
  one ListOffsets request and one synchronous Cassandra read per app and topic, as a
  per-app timer would. Target: <= 1 s.
- scrape-not-started-200: one scrape of 200 apps with no offsets in Cassandra yet, whose
  groups are read instead (a short-lived consumer each), side by side. Baseline: the same
  scrape reading the groups one after another. Target: ratio <= 0.5.
- time-lag-accuracy: one word-count replica (the real runtime, `floe_stack.localrun`) consumes
  a one-partition topic that a bursty producer feeds (its rate steps tenfold up and down); at
  every scrape (1 s apart, at least 100) the estimated time lag is compared with the truth,
  the scrape's time minus the CreateTime of the record at the committed offset (read back
  from Kafka; 0 when caught up). Value: the 99th percentile of the relative error over the
  scrapes that found the app behind. Baseline: lag ÷ input rate, the estimate without
  history, on the same scrapes. Target: <= 10 %.

Topics (`floe-bench-lag-*`) and the keyspace `floe_bench_lag` are kept between runs.
Needs the local stack (`make up`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cassandra.cluster import Cluster
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from floe_jobs import offsets
from floe_operator import kafka, model
from floe_operator.lag import scrape as lag

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
KEYSPACE = "floe_bench_lag"


def stack_env() -> dict[str, str]:
    env = dict(os.environ)
    path = ROOT / ".floe" / "stack.env"
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                env.setdefault(key.strip(), value.strip())
    return env


def percentile(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, max(0, round(q * (len(data) - 1))))]


def compared(times: list[float], base: list[float]) -> dict[str, float]:
    """Medians and percentiles of a timed value against its baseline timed in the same run."""
    value, baseline = statistics.median(times), statistics.median(base)
    return {
        "value": round(value, 4),
        "baseline_value": round(baseline, 4),
        "ratio": round(value / baseline, 4),
        "p50_s": round(percentile(times, 0.5), 4),
        "p99_s": round(percentile(times, 0.99), 4),
        "baseline_p50_s": round(percentile(base, 0.5), 4),
        "spread": {"value": spread(times), "baseline": spread(base)},
    }


def write(name: str, result: dict[str, Any]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "name": name,
        **result,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (RESULTS / f"lag-{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


def app_of(i: int, *, topic: str, bootstrap: str, hosts: list[str], port: int) -> model.StreamingApp:
    return model.StreamingApp.from_body(
        {
            "metadata": {"name": f"bench-{i:03d}", "namespace": "bench", "uid": f"u-{i}"},
            "spec": {
                "image": "example/app:1",
                "job": {"entrypoint": "m:f"},
                "kafka": {"bootstrapServers": bootstrap, "topics": [topic]},
                "state": {"cassandra": {"hosts": hosts, "port": port, "keyspace": KEYSPACE}},
            },
        }
    )


def ensure_topics(admin: AdminClient, names: list[str], partitions: int) -> None:
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names if n not in existing]
    for name, fut in (admin.create_topics(missing) if missing else {}).items():
        try:
            fut.result(timeout=60)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        print(f"created {name}")


def bench_scrape(args: argparse.Namespace, env: dict[str, str], session: Any) -> None:
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    hosts = env["FLOE_CASSANDRA_HOSTS"].split(",")
    port = int(env["FLOE_CASSANDRA_PORT"])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"floe-bench-lag-{args.partitions}p-{i:03d}" for i in range(args.apps)]
    ensure_topics(admin, topics, args.partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for t in topics:
        for p in range(args.partitions):
            for _ in range(10):
                producer.produce(t, value=b"x", partition=p)
        producer.poll(0)
    producer.flush(60)
    apps = [app_of(i, topic=t, bootstrap=bootstrap, hosts=hosts, port=port) for i, t in enumerate(topics)]
    offsets.ensure_offsets_table(session, keyspace=KEYSPACE)
    stmt = session.prepare(
        f"UPDATE {KEYSPACE}.{offsets.TABLE}"
        " SET next_offset = ?, committed_at = toTimestamp(now()) WHERE app_id = ? AND topic = ? AND partition = ?"
    )
    for a, t in zip(apps, topics, strict=True):
        for p in range(args.partitions):
            session.execute(stmt, (5, a.app_id, offsets.position_key("main", t), p))  # a one-stage app's rows
    refs = [lag.app_ref(a, {}) for a in apps]
    inspector = kafka.Inspector()
    scraper = lag.Scraper(
        kafka_offsets=lag.KafkaOffsets(),
        cassandra_offsets=lag.CassandraOffsets(lambda target: session),
        partitions_of=inspector.partitions_sync,
    )

    def per_app_baseline() -> float:
        started = time.perf_counter()
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        kadmin = baseline_admin
        for ref in refs:
            counts = inspector.partitions_sync(ref.kafka, list(ref.topics))
            req = {TopicPartition(t, p): OffsetSpec.latest() for t in ref.topics for p in range(counts[t] or 0)}
            for fut in kadmin.list_offsets(req, request_timeout=5).values():
                fut.result()
            for t in ref.topics:
                list(session.execute(baseline_stmt, (ref.app_id, offsets.position_key("main", t))))
        return time.perf_counter() - started

    baseline_admin = AdminClient({"bootstrap.servers": bootstrap})
    baseline_stmt = session.prepare(
        f"SELECT partition, next_offset, committed_at FROM {KEYSPACE}.{offsets.TABLE} WHERE app_id = ? AND topic = ?"
    )
    for _ in range(2):  # warm-up: connections, prepared statements, metadata
        scrape = scraper.scrape(refs)
        per_app_baseline()
    assert not scrape.errors, scrape.errors
    assert sum(len(a.partitions) for a in scrape.apps) == args.apps * args.partitions
    assert all(a.total == args.partitions * 5 for a in scrape.apps)
    times, base = [], []
    for _ in range(args.runs):
        times.append(scraper.scrape(refs).duration)
        base.append(per_app_baseline())
    write(
        f"scrape-{args.apps}x{args.partitions}",
        {
            "metric": f"seconds for one lag scrape of {args.apps} apps x {args.partitions} partitions "
            f"(end offsets, committed offsets from Cassandra, time lag, status), median of {args.runs} scrapes "
            "alternated with the baseline's; lower is better, ratio = value / baseline",
            "unit": "s",
            "baseline": "the same offsets gathered app by app: one ListOffsets request and one synchronous "
            "Cassandra read per app",
            "target": "<= 1.0 s",
            **compared(times, base),
            "target_met": statistics.median(times) <= 1.0,
            "runs": args.runs,
            "memory_points": scraper.memory_points(),
            "command": f".venv/bin/python tests/bench/lag_bench.py --apps {args.apps} --partitions {args.partitions} "
            f"--runs {args.runs}",
            "machine": "2 CPUs shared with the local stack (kube-apiserver, etcd, Kafka, Cassandra)",
        },
    )


def bench_not_started(args: argparse.Namespace, env: dict[str, str], session: Any) -> None:
    """Apps with no row in Cassandra yet (created, not started): each falls back to its Kafka
    group's commits, one short-lived consumer per group. Value: reads side by side
    (`lag.GROUP_READS_IN_FLIGHT`); baseline: the same scraper reading them one after another."""
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    hosts = env["FLOE_CASSANDRA_HOSTS"].split(",")
    port = int(env["FLOE_CASSANDRA_PORT"])
    topic = "floe-bench-lag-not-started"
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [topic], 6)
    refs = [
        lag.app_ref(app_of(1000 + i, topic=topic, bootstrap=bootstrap, hosts=hosts, port=port), {})
        for i in range(args.idle_apps)
    ]
    in_flight = lag.GROUP_READS_IN_FLIGHT

    def scrape(reads: int) -> float:
        scraper = lag.Scraper(
            kafka_offsets=lag.KafkaOffsets(group_reads_in_flight=reads),
            cassandra_offsets=lag.CassandraOffsets(lambda target: session),
            partitions_of=kafka.Inspector().partitions_sync,
        )
        result = scraper.scrape(refs)
        assert not result.errors, result.errors
        assert {p.source for a in result.apps for p in a.partitions} == {"none"}
        return result.duration

    deadline = time.monotonic() + 120
    while True:  # warm-up, untimed: a topic just created may have no leaders yet
        try:
            scrape(in_flight)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    times, base = [], []
    for _ in range(args.idle_runs):  # alternated, so both see the machine's load alike
        times.append(scrape(in_flight))
        base.append(scrape(1))
    write(
        f"scrape-not-started-{args.idle_apps}",
        {
            "metric": f"seconds for one lag scrape of {args.idle_apps} apps not started yet (no offsets in "
            f"Cassandra, so each app's Kafka group is read), median of {args.idle_runs} scrapes alternated with the "
            "baseline's; lower is better, ratio = value / baseline",
            "unit": "s",
            "baseline": "the same scrape reading the groups one after another",
            "target": "ratio <= 0.5",
            **compared(times, base),
            "target_met": statistics.median(times) / statistics.median(base) <= 0.5,
            "runs": args.idle_runs,
            "reads_in_flight": in_flight,
            "command": f".venv/bin/python tests/bench/lag_bench.py --only not-started --idle-apps {args.idle_apps} "
            f"--idle-runs {args.idle_runs}",
            "machine": "2 CPUs shared with the local stack (kube-apiserver, etcd, Kafka, Cassandra)",
        },
    )


def bursty_rate(t: float, *, low: float, step_s: float) -> float:
    """Lines per second `t` seconds into the run: `low`, then ten times it, in steps of `step_s`."""
    return low * (10 if int(t // step_s) % 2 else 1)


def spread(values: list[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
        "samples": len(values),
    }


def bench_accuracy(args: argparse.Namespace, env: dict[str, str], session: Any) -> None:
    """The real runtime (one word-count replica, `floe_stack.localrun`) consumes a topic that a
    bursty producer feeds: `--rate` lines/s, then ten times that, in steps of `--step-seconds`.
    At every scrape (1 s apart) the estimated time lag of the input partition is compared with
    the truth: the scrape's time minus the CreateTime of the record at the committed offset,
    read back from Kafka (0 when the replica has caught up)."""
    import dataclasses
    import tempfile

    from floe_stack import localrun

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    hosts = env["FLOE_CASSANDRA_HOSTS"].split(",")
    port = int(env["FLOE_CASSANDRA_PORT"])
    workdir = Path(tempfile.mkdtemp(prefix="floe-bench-lag-"))
    app_id = localrun.unique("lagacc")
    topic = f"{app_id}-lines"
    localrun.create_topic(bootstrap, topic, 1)
    localrun.create_topic(bootstrap, f"{app_id}-output", 1)
    app = localrun.App(
        app_id=app_id,
        bootstrap=bootstrap,
        cassandra_hosts=hosts,
        cassandra_port=port,
        keyspace="floe_bench_" + app_id.split("-")[-1],
        topics=[topic],
        output_topics=[f"{app_id}-output"],
        entrypoint=str(ROOT / "examples/word-count/word_count.py"),
        stores=[{"name": "word-count", "type": "partitioned"}],
        spark_jars=env["FLOE_SPARK_JARS"].split(","),
        workdir=workdir,
        extra_env={"FLOE_SPARK_MASTER": "local[1]"},
    )
    ref = dataclasses.replace(
        lag.app_ref(app_of(999, topic=topic, bootstrap=bootstrap, hosts=hosts, port=port), {}),
        app_id=app.app_id,
        keyspace=app.keyspace,
        group=app.app_id,
    )
    lines = localrun.word_lines(50_000, seed=11)
    stop = threading.Event()
    produce_started = [0.0]

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        tick, i, debt = 0.05, 0, 0.0
        produce_started[0] = next_at = time.time()
        while not stop.is_set():
            debt += bursty_rate(time.time() - produce_started[0], low=args.rate, step_s=args.step_seconds) * tick
            for _ in range(int(debt)):
                producer.produce(topic, value=lines[i % len(lines)].encode(), partition=0)
                i += 1
            debt -= int(debt)
            producer.poll(0)
            next_at += tick
            time.sleep(max(0.0, next_at - time.time()))
        producer.flush(10)

    replica = localrun.Replica(app, "r0").start()
    scraper = lag.Scraper(
        kafka_offsets=lag.KafkaOffsets(),
        cassandra_offsets=lag.CassandraOffsets(lambda target: session),
        partitions_of=kafka.Inspector().partitions_sync,
    )
    samples: list[tuple[int, int, float, float, float]] = []  # (committed, end, estimate, naive, scrape time)
    thread = threading.Thread(target=produce, daemon=True)
    try:
        deadline = time.monotonic() + 600
        thread.start()
        while replica.commits_since_start() < 2:
            if time.monotonic() > deadline or not replica.alive():
                raise RuntimeError(f"the replica did not start consuming; see {replica.log_path}")
            time.sleep(0.5)
        warm_until = time.time() + args.warm_seconds  # the scraper's rate window fills
        while len(samples) < args.scrapes:
            if not replica.alive():
                raise RuntimeError(f"the replica exited; see {replica.log_path}")
            scrape = scraper.scrape([ref])
            result = scrape.apps[0]
            part = result.partitions[0] if result.partitions else None
            if part is not None and part.committed is not None and scrape.at >= warm_until:
                naive = part.lag / result.input_rate if result.input_rate else float("nan")
                samples.append((part.committed, part.end, part.lag_seconds, naive, scrape.at))
            time.sleep(max(0.0, 1.0 - scrape.duration))
    finally:
        stop.set()
        thread.join(timeout=10)
        replica.stop()
        keyspace = app.keyspace
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=300)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}"})
    rel, naive_rel, abs_err, naive_abs, truths = [], [], [], [], []
    for committed, end, estimate, naive, at in samples:
        if committed >= end:
            truth = 0.0
        else:
            consumer.assign([TopicPartition(topic, 0, committed)])
            msg = consumer.poll(10)
            assert msg is not None and msg.offset() == committed, "record at the committed offset not found"
            truth = max(0.0, at - msg.timestamp()[1] / 1000.0)
        naive = 0.0 if committed >= end else naive
        truths.append(truth)
        abs_err.append(abs(estimate - truth))
        naive_abs.append(abs(naive - truth))
        if truth > 0:
            rel.append(abs(estimate - truth) / truth)
            naive_rel.append(abs(naive - truth) / truth)
    consumer.close()
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic, f"{app_id}-output"])
    value, baseline = percentile(rel, 0.99), percentile(naive_rel, 0.99)
    write(
        "time-lag-accuracy",
        {
            "metric": "relative error of the estimated time lag against the true age of the record at the "
            f"committed offset, 99th percentile over the {len(rel)} of {len(samples)} scrapes (1 s apart) that "
            "found the app behind; one word-count replica (the real runtime) consuming a producer that steps "
            f"between {args.rate:.0f} and {args.rate * 10:.0f} lines/s every {args.step_seconds:.0f} s; lower is "
            "better, ratio = value / baseline (p50_s/p99_s: absolute error in seconds over every scrape)",
            "unit": "ratio",
            "value": round(value, 4),
            "baseline": "lag / input rate over the scraper's rate window (no history of end offsets), same scrapes",
            "baseline_value": round(baseline, 4),
            "ratio": round(value / baseline, 4) if baseline else None,
            "target": "<= 0.10",
            "target_met": value <= 0.10,
            "p50_s": round(percentile(abs_err, 0.5), 4),
            "p99_s": round(percentile(abs_err, 0.99), 4),
            "baseline_p50_s": round(percentile(naive_abs, 0.5), 4),
            "baseline_p99_s": round(percentile(naive_abs, 0.99), 4),
            "median_relative_error": round(statistics.median(rel), 4),
            "baseline_median_relative_error": round(statistics.median(naive_rel), 4),
            "spread": {
                "true_lag_s": spread(truths),
                "absolute_error_s": spread(abs_err),
                "baseline_absolute_error_s": spread(naive_abs),
            },
            "scrapes": len(samples),
            "scrapes_behind": len(rel),
            "command": f".venv/bin/python tests/bench/lag_bench.py --only accuracy --scrapes {args.scrapes} "
            f"--rate {args.rate:.0f} --step-seconds {args.step_seconds:.0f}",
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpu_count": os.cpu_count(),
            "machine": "2 CPUs shared with the local stack (kube-apiserver, etcd, Kafka, Cassandra)",
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=24)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--scrapes", type=int, default=120, help="scrapes of the accuracy run (1 s apart)")
    parser.add_argument("--rate", type=float, default=1500.0, help="lines/s of the bursty producer's low steps")
    parser.add_argument("--step-seconds", type=float, default=10.0, help="length of each rate step (accuracy)")
    parser.add_argument("--warm-seconds", type=float, default=20.0, help="scrapes before the counted ones")
    parser.add_argument("--idle-apps", type=int, default=200, help="apps not started yet (not-started)")
    parser.add_argument("--idle-runs", type=int, default=5, help="runs of each kind (not-started)")
    parser.add_argument("--only", choices=["scrape", "not-started", "accuracy"], default=None)
    args = parser.parse_args()
    env = stack_env()
    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    session = cluster.connect()
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE}"
        " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        if args.only in (None, "scrape"):
            bench_scrape(args, env, session)
        if args.only in (None, "not-started"):
            bench_not_started(args, env, session)
        if args.only in (None, "accuracy"):
            bench_accuracy(args, env, session)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
