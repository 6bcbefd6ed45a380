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
  from Kafka; 0 when caught up). Value: the 99th percentile of the absolute error, in
  seconds, over every scrape. Baseline: lag ÷ input rate, the estimate without history, on the
  same scrapes. Target: <= 0.5 s (half the scrape interval) and no worse than the baseline. The
  replica keeps up there (true lag well under a second), where a relative error divides by
  almost nothing: the relative target (10 %) is for a true lag of 5 s or more, the next row's.
- time-lag-accuracy-behind (`--only accuracy-behind`): the same comparison where the replica
  really falls behind. Its batches are capped (`--behind-batch-records`) so that surges of
  `--surge-rate` lines/s outrun it; each surge lasts until its backlog would take the replica
  `--drain-seconds` to work off (which bounds the lag's peak), then a low rate lets it catch
  up, over again until `--behind-scrapes` scrapes estimated 5 s or more (`Surges`). Value: the
  99th percentile of the relative error over the scrapes whose true lag was >= 5 s; a run with
  fewer than 30 of them says so and cannot meet the target. Baseline and target as above.
  The load average is recorded at every scrape.

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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

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


# --- accuracy: what is compared ------------------------------------------------------------

# The behind regime: scrapes whose true lag is at least this many seconds, and how many of them
# a row needs before its figure means anything.
BEHIND_TRUE_LAG_S = 5.0
BEHIND_MIN_SCRAPES = 30
# The quiet regime (true lag under a second): the estimate's absolute error at p99, at most half
# the scrape interval and no worse than the estimate without history.
QUIET_TARGET_S = 0.5


@dataclass(frozen=True)
class Sample:
    """One scrape of the accuracy runs: the offsets it saw, its estimate (and whether the
    estimator called it exact), the history-less estimate, when it ran, the load average then."""

    committed: int
    end: int
    estimate: float
    exact: bool
    naive: float
    at: float
    load_1m: float


@dataclass(frozen=True)
class Judged:
    """A scrape's estimates beside the truth (the age, at the scrape, of the record at the committed offset)."""

    truth: float
    estimate: float
    naive: float
    exact: bool = True


def judged(sample: Sample, create_time: float | None) -> Judged:
    """The truth of one scrape: 0 when caught up, else the scrape's time minus the CreateTime
    of the record at the committed offset; the naive estimate of a caught-up scrape is 0 too."""
    if sample.committed >= sample.end or create_time is None:
        return Judged(0.0, sample.estimate, 0.0, sample.exact)
    return Judged(max(0.0, sample.at - create_time), sample.estimate, sample.naive, sample.exact)


def relative_errors(rows: Sequence[Judged]) -> tuple[list[float], list[float]]:
    """Relative errors of the estimate and of the naive one, over the scrapes whose truth is > 0."""
    behind = [r for r in rows if r.truth > 0]
    return (
        [abs(r.estimate - r.truth) / r.truth for r in behind],
        [abs(r.naive - r.truth) / r.truth for r in behind],
    )


def behind_regime(rows: Sequence[Judged], min_truth: float = BEHIND_TRUE_LAG_S) -> list[Judged]:
    """The scrapes that found the app really behind: true lag of at least `min_truth` seconds."""
    return [r for r in rows if r.truth >= min_truth]


def quiet_verdict(rows: Sequence[Judged], *, target: float = QUIET_TARGET_S) -> dict[str, Any]:
    """The quiet row's figures: the 99th percentile of the absolute error over every scrape, the
    naive estimate's on the same scrapes, and whether it is within `target` seconds and no worse
    than the naive one."""
    value = percentile([abs(r.estimate - r.truth) for r in rows], 0.99)
    baseline = percentile([abs(r.naive - r.truth) for r in rows], 0.99)
    return {
        "value": round(value, 4),
        "baseline_value": round(baseline, 4),
        "ratio": round(value / baseline, 4) if baseline else None,
        "target_met": value <= target and value <= baseline,
    }


def behind_verdict(
    rows: Sequence[Judged],
    *,
    min_truth: float = BEHIND_TRUE_LAG_S,
    min_scrapes: int = BEHIND_MIN_SCRAPES,
    target: float = 0.10,
) -> dict[str, Any]:
    """The behind row's figures: the 99th percentile of the relative error over the regime's
    scrapes, the naive estimate's on the same scrapes, and whether the target is met, which it
    cannot be with fewer than `min_scrapes` scrapes in the regime (the row then says so)."""
    regime = behind_regime(rows, min_truth)
    rel, naive_rel = relative_errors(regime)
    value = percentile(rel, 0.99) if rel else None
    baseline = percentile(naive_rel, 0.99) if naive_rel else None
    enough = len(regime) >= min_scrapes
    out: dict[str, Any] = {
        "value": None if value is None else round(value, 4),
        "baseline_value": None if baseline is None else round(baseline, 4),
        "ratio": round(value / baseline, 4) if value is not None and baseline else None,
        "target_met": enough and value is not None and value <= target,
        "scrapes_in_regime": len(regime),
        "min_scrapes_in_regime": min_scrapes,
    }
    if not enough:
        out["note"] = (
            f"only {len(regime)} scrapes found a true lag >= {min_truth:g} s (at least {min_scrapes} needed): "
            "the replica did not fall far enough behind for long enough, so this run cannot show the target met; "
            "raise --surge-rate or lower --behind-batch-records"
        )
    if regime:
        abs_err = [abs(r.estimate - r.truth) for r in regime]
        out.update(
            {
                "p50_s": round(percentile(abs_err, 0.5), 4),
                "p99_s": round(percentile(abs_err, 0.99), 4),
                "median_relative_error": round(statistics.median(rel), 4),
                "baseline_median_relative_error": round(statistics.median(naive_rel), 4),
                "median_signed_error_s": round(statistics.median(r.estimate - r.truth for r in regime), 4),
                "scrapes_in_regime_not_exact": sum(1 for r in regime if not r.exact),
                "spread": {
                    "true_lag_s": spread([r.truth for r in regime]),
                    "absolute_error_s": spread(abs_err),
                    "baseline_absolute_error_s": spread([abs(r.naive - r.truth) for r in regime]),
                },
            }
        )
    return out


# --- accuracy: how the producer is driven ------------------------------------------------


class Bursty:
    """The quiet regime's producer: `low` lines/s, then ten times it, in steps of `step_s`,
    until `scrapes` samples are taken."""

    def __init__(self, *, low: float, step_s: float, scrapes: int) -> None:
        self.low, self.step_s, self.scrapes = low, step_s, scrapes
        self.started: float | None = None

    def rate(self, at: float) -> float:
        if self.started is None:
            self.started = at
        return bursty_rate(at - self.started, low=self.low, step_s=self.step_s)

    def observe(self, at: float, end: int, committed: int, estimate: float) -> None:
        pass

    def done(self, samples: Sequence[Sample], at: float) -> bool:
        return len(samples) >= self.scrapes


class Surges:
    """The behind regime's producer, driven by what the scrapes see: `low` lines/s for
    `quiet_s`, then a surge of `high` lines/s that outruns the replica, until its backlog would
    take the replica `drain_s` seconds to work off at the rate it consumed during the surge (or
    `max_surge_s` passed), then `low` again until the replica has caught up (a backlog of at
    most `caught_up_s` seconds of `low`); over again until `behind_scrapes` scrapes estimated a
    lag of `min_lag_s` or more and the replica caught up, or `max_s` seconds passed.

    The backlog's drain time bounds the lag's peak (the last record of a surge waits about that
    long), which keeps it within the scraper's history at one scrape a second. The replica's
    consumption rate is measured over the surge's own scrapes, since the quiet phase before it
    shows only the input rate, and from the surge's second scrape on, since the replica had
    caught up when the surge started. A surge starts and ends `offset_s` after the scrape that decided
    it, so that the changes of rate fall between the estimator's points (a real producer's do)
    instead of on them, where interpolating between points would be exact. Pure: times come from
    the caller.

    A surge runs at `high` lines/s, or, after a surge that found the replica slower, at `outrun`
    times the rate it consumed then: against a replica a surge outruns many times over, even the
    shortest surge (2 s) leaves a backlog whose drain (the lag's peak) would leave the history."""

    OUTRUN = 6.0

    def __init__(
        self,
        *,
        low: float,
        high: float,
        quiet_s: float,
        drain_s: float,
        max_surge_s: float,
        behind_scrapes: int,
        max_s: float,
        min_lag_s: float = BEHIND_TRUE_LAG_S,
        caught_up_s: float = 2.0,
        offset_s: float = 0.5,
        outrun: float | None = None,
    ) -> None:
        self.low, self.high = low, high
        self.quiet_s, self.drain_s, self.max_surge_s = quiet_s, drain_s, max_surge_s
        self.behind_scrapes, self.max_s = behind_scrapes, max_s
        self.min_lag_s, self.caught_up_s, self.offset_s = min_lag_s, caught_up_s, offset_s
        self.outrun = self.OUTRUN if outrun is None else outrun
        self.high_from, self.high_until = float("inf"), float("inf")
        self.phase: Literal["quiet", "surge", "drain"] = "quiet"
        self.started: float | None = None
        self.since: float | None = None
        self.seen_behind = 0
        self._surge_points: list[tuple[float, int, int]] = []  # (at, end, committed) during the current surge
        self.surges: list[dict[str, float]] = []

    def rate(self, at: float) -> float:
        return self.high if self.high_from <= at < self.high_until else self.low

    def observe(self, at: float, end: int, committed: int, estimate: float) -> None:
        if self.started is None:
            self.started = self.since = at
        assert self.since is not None
        if estimate >= self.min_lag_s:
            self.seen_behind += 1
        backlog = max(0, end - committed)
        if self.phase == "quiet":
            if at - self.since >= self.quiet_s:
                self.phase, self.since, self._surge_points = "surge", at, [(at, end, committed)]
                self.high_from, self.high_until = at + self.offset_s, float("inf")
        elif self.phase == "surge":
            self._surge_points.append((at, end, committed))
            t0, e0, _ = self._surge_points[0]
            took = at - t0
            # the replica's rate from the surge's second scrape on: before it, it had nothing to catch up
            t1, _, c1 = self._surge_points[1] if len(self._surge_points) > 2 else (at, 0, committed)
            consumed = (committed - c1) / (at - t1) if at > t1 else 0.0
            drain = backlog / consumed if consumed > 0 else float("inf")
            if took >= self.max_surge_s or (took >= 2.0 and drain >= self.drain_s):
                self.surges.append(
                    {
                        "seconds": round(took, 2),
                        "input_lines_per_s": round((end - e0) / took, 1) if took > 0 else 0.0,
                        "consumed_lines_per_s": round(consumed, 1),
                        "backlog_lines": backlog,
                    }
                )
                self.phase, self.since, self.high_until = "drain", at, at + self.offset_s
                if consumed > 0:  # a slow replica gets slower surges, so that the shortest one does not overshoot
                    self.high = min(self.high, max(2 * self.low, self.outrun * consumed))
        elif self.phase == "drain" and backlog <= self.low * self.caught_up_s:
            self.phase, self.since = "quiet", at

    def done(self, samples: Sequence[Sample], at: float) -> bool:
        if self.started is not None and at - self.started >= self.max_s:
            return True
        return self.phase == "quiet" and bool(self.surges) and self.seen_behind >= self.behind_scrapes


# --- accuracy: the run -------------------------------------------------------------------


@dataclass
class AccuracyRun:
    """What one accuracy run measured."""

    samples: list[Sample]
    rows: list[Judged]
    scrape_seconds: list[float]


def run_accuracy(
    args: argparse.Namespace,
    env: dict[str, str],
    session: Any,
    *,
    schedule: Bursty | Surges,
    prefix: str,
    extra_env: dict[str, str] | None = None,
) -> AccuracyRun:
    """The real runtime (one word-count replica, `floe_stack.localrun`) consumes a topic fed at
    the rate `schedule` gives. At every scrape (1 s apart, after `--warm-seconds`) the estimated
    time lag of the input partition is recorded; afterwards the truth of each (the scrape's time
    minus the CreateTime of the record at the committed offset, read back from Kafka) is found."""
    import dataclasses
    import tempfile

    from floe_stack import localrun

    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    hosts = env["FLOE_CASSANDRA_HOSTS"].split(",")
    port = int(env["FLOE_CASSANDRA_PORT"])
    workdir = Path(tempfile.mkdtemp(prefix="floe-bench-lag-"))
    app_id = localrun.unique(prefix)
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
        extra_env={"FLOE_SPARK_MASTER": "local[1]", **(extra_env or {})},
    )
    ref = dataclasses.replace(
        lag.app_ref(app_of(999, topic=topic, bootstrap=bootstrap, hosts=hosts, port=port), {}),
        app_id=app.app_id,
        keyspace=app.keyspace,
        group=app.app_id,
    )
    lines = localrun.word_lines(50_000, seed=11)
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        tick, i, debt = 0.05, 0, 0.0
        next_at = time.time()
        while not stop.is_set():
            debt += schedule.rate(time.time()) * tick
            for _ in range(int(debt)):
                while True:
                    try:
                        producer.produce(topic, value=lines[i % len(lines)].encode(), partition=0)
                        break
                    except BufferError:  # the client's queue is full: let it drain
                        producer.poll(0.05)
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
    samples: list[Sample] = []
    durations: list[float] = []
    thread = threading.Thread(target=produce, daemon=True)
    try:
        deadline = time.monotonic() + 600
        thread.start()
        while replica.commits_since_start() < 2:
            if time.monotonic() > deadline or not replica.alive():
                raise RuntimeError(f"the replica did not start consuming; see {replica.log_path}")
            time.sleep(0.5)
        warm_until = time.time() + args.warm_seconds  # the scraper's rate window fills
        while not schedule.done(samples, time.time()):
            if not replica.alive():
                raise RuntimeError(f"the replica exited; see {replica.log_path}")
            scrape = scraper.scrape([ref])
            result = scrape.apps[0]
            part = result.partitions[0] if result.partitions else None
            if part is not None and part.committed is not None and scrape.at >= warm_until:
                naive = part.lag / result.input_rate if result.input_rate else float("nan")
                samples.append(
                    Sample(
                        part.committed,
                        part.end,
                        part.lag_seconds,
                        part.exact,
                        naive,
                        scrape.at,
                        os.getloadavg()[0],
                    )
                )
                durations.append(scrape.duration)
                schedule.observe(scrape.at, part.end, part.committed, part.lag_seconds)
            time.sleep(max(0.0, 1.0 - scrape.duration))
    finally:
        stop.set()
        thread.join(timeout=10)
        replica.stop()
        session.execute(f"DROP KEYSPACE IF EXISTS {app.keyspace}", timeout=300)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}"})
    rows = []
    for s in samples:
        create_time = None
        if s.committed < s.end:
            consumer.assign([TopicPartition(topic, 0, s.committed)])
            msg = consumer.poll(10)
            assert msg is not None and msg.offset() == s.committed, "record at the committed offset not found"
            create_time = msg.timestamp()[1] / 1000.0
        rows.append(judged(s, create_time))
    consumer.close()
    AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic, f"{app_id}-output"])
    raw = workdir / "samples.json"
    raw.write_text(json.dumps([dataclasses.asdict(s) | {"truth": r.truth} for s, r in zip(samples, rows, strict=True)]))
    print(f"samples with their truth: {raw}")
    return AccuracyRun(samples, rows, durations)


def bench_accuracy(args: argparse.Namespace, env: dict[str, str], session: Any) -> None:
    """The quiet regime: a bursty producer (`--rate` lines/s, then ten times that, in steps of
    `--step-seconds`) that the replica keeps up with."""
    run = run_accuracy(
        args,
        env,
        session,
        schedule=Bursty(low=args.rate, step_s=args.step_seconds, scrapes=args.scrapes),
        prefix="lagacc",
    )
    rows = run.rows
    rel, naive_rel = relative_errors(rows)
    abs_err = [abs(r.estimate - r.truth) for r in rows]
    naive_abs = [abs(r.naive - r.truth) for r in rows]
    verdict = quiet_verdict(rows)
    value, baseline = verdict["value"], verdict["baseline_value"]
    write(
        "time-lag-accuracy",
        {
            "metric": "absolute error in seconds of the estimated time lag against the true age of the record at "
            f"the committed offset, 99th percentile over all {len(rows)} scrapes (1 s apart); one word-count "
            "replica (the real runtime) keeping up with a producer that steps between "
            f"{args.rate:.0f} and {args.rate * 10:.0f} lines/s every {args.step_seconds:.0f} s, so the true lag "
            "stays under 5 s, where a relative error divides by almost nothing (the relative target is the "
            "-behind row's); lower is better, ratio = value / baseline",
            "unit": "s",
            **verdict,
            "baseline": "lag / input rate over the scraper's rate window (no history of end offsets), same scrapes",
            "target": f"<= {QUIET_TARGET_S:g} s (half the scrape interval) and <= baseline",
            "p50_s": round(percentile(abs_err, 0.5), 4),
            "p99_s": value,
            "baseline_p50_s": round(percentile(naive_abs, 0.5), 4),
            "baseline_p99_s": baseline,
            "relative_error_p99": round(percentile(rel, 0.99), 4),
            "baseline_relative_error_p99": round(percentile(naive_rel, 0.99), 4),
            "median_relative_error": round(statistics.median(rel), 4),
            "baseline_median_relative_error": round(statistics.median(naive_rel), 4),
            "spread": {
                "true_lag_s": spread([r.truth for r in rows]),
                "absolute_error_s": spread(abs_err),
                "baseline_absolute_error_s": spread(naive_abs),
            },
            "scrapes": len(rows),
            "scrapes_behind": len(rel),
            "command": f".venv/bin/python tests/bench/lag_bench.py --only accuracy --scrapes {args.scrapes} "
            f"--rate {args.rate:.0f} --step-seconds {args.step_seconds:.0f}",
            "load_average_1m": round(os.getloadavg()[0], 2),
            "cpu_count": os.cpu_count(),
            "machine": "2 CPUs shared with the local stack (kube-apiserver, etcd, Kafka, Cassandra)",
        },
    )


def bench_accuracy_behind(args: argparse.Namespace, env: dict[str, str], session: Any) -> None:
    """The behind regime: surges of `--surge-rate` lines/s outrun the replica (its batches capped
    at `--behind-batch-records` records, so a producer this machine sustains outruns it) until
    its true lag passes `BEHIND_TRUE_LAG_S`, then `--behind-rate` lets it catch up (`Surges`)."""
    schedule = Surges(
        low=args.behind_rate,
        high=args.surge_rate,
        quiet_s=args.quiet_seconds,
        drain_s=args.drain_seconds,
        max_surge_s=args.max_surge_seconds,
        behind_scrapes=args.behind_scrapes,
        max_s=args.behind_max_seconds,
    )
    run = run_accuracy(
        args,
        env,
        session,
        schedule=schedule,
        prefix="lagbehind",
        extra_env={"FLOE_KAFKA_MAX_RECORDS_PER_BATCH": str(args.behind_batch_records)},
    )
    verdict = behind_verdict(run.rows)
    loads = [s.load_1m for s in run.samples]
    write(
        "time-lag-accuracy-behind",
        {
            "metric": "relative error of the estimated time lag against the true age of the record at the "
            f"committed offset, 99th percentile over the {verdict['scrapes_in_regime']} of {len(run.rows)} scrapes "
            f"(1 s apart) whose true lag was >= {BEHIND_TRUE_LAG_S:g} s; one word-count replica (the real runtime, "
            f"batches capped at {args.behind_batch_records} records) that a producer outruns in surges of "
            f"{args.surge_rate:.0f} lines/s (later ones at most {Surges.OUTRUN:g} times the rate the replica managed "
            f"in the one before), each until its backlog would take the replica {args.drain_seconds:g} s "
            f"to work off, then lets catch up at {args.behind_rate:.0f} lines/s; lower is better, ratio = value / "
            "baseline (p50_s/p99_s: absolute error in seconds over the same scrapes)",
            "unit": "ratio",
            "baseline": "lag / input rate over the scraper's rate window (no history of end offsets), same scrapes",
            "target": "<= 0.10",
            **verdict,
            "scrapes": len(run.rows),
            "true_lag_s_every_scrape": spread([r.truth for r in run.rows]) if run.rows else None,
            "surges": schedule.surges,
            "scrape_duration_s": spread(run.scrape_seconds) if run.scrape_seconds else None,
            "load_average_1m_during": spread(loads) if loads else None,
            "command": f".venv/bin/python tests/bench/lag_bench.py --only accuracy-behind "
            f"--behind-scrapes {args.behind_scrapes} --surge-rate {args.surge_rate:.0f} "
            f"--behind-rate {args.behind_rate:.0f} --behind-batch-records {args.behind_batch_records} "
            f"--drain-seconds {args.drain_seconds:g} --quiet-seconds {args.quiet_seconds:g} "
            f"--max-surge-seconds {args.max_surge_seconds:g} --behind-max-seconds {args.behind_max_seconds:g} "
            f"--warm-seconds {args.warm_seconds:g}",
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
    parser.add_argument("--warm-seconds", type=float, default=20.0, help="seconds of scrapes before the counted ones")
    parser.add_argument("--idle-apps", type=int, default=200, help="apps not started yet (not-started)")
    parser.add_argument("--idle-runs", type=int, default=5, help="runs of each kind (not-started)")
    behind = parser.add_argument_group("accuracy-behind: surges that outrun the replica")
    behind.add_argument(
        "--behind-scrapes",
        type=int,
        default=60,
        help="stop once this many scrapes estimated a lag >= 5 s (and the replica caught up)",
    )
    behind.add_argument("--surge-rate", type=float, default=30000.0, help="lines/s of a surge")
    behind.add_argument("--behind-rate", type=float, default=300.0, help="lines/s between surges")
    behind.add_argument("--behind-batch-records", type=int, default=1000, help="the replica's batch cap")
    behind.add_argument("--quiet-seconds", type=float, default=5.0, help="low-rate seconds before each surge")
    behind.add_argument(
        "--drain-seconds",
        type=float,
        default=20.0,
        help="end a surge once its backlog would take the replica this long to work off",
    )
    behind.add_argument("--max-surge-seconds", type=float, default=60.0, help="longest surge")
    behind.add_argument("--behind-max-seconds", type=float, default=600.0, help="longest run (counted scrapes)")
    parser.add_argument("--only", choices=["scrape", "not-started", "accuracy", "accuracy-behind"], default=None)
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
        if args.only in (None, "accuracy-behind"):
            bench_accuracy_behind(args, env, session)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
