"""Run replicas of an app on this machine against the local stack: what the demo, the
integration tests, the benchmarks and the examples' READMEs use. Tooling, not the product: no
module of the operator or of the runtime imports it.

A `Replica` is one `floe-job` process (its own Spark driver) configured by environment
variables; `wait_caught_up` reads the app's offsets table until every input and repartition
partition is committed up to its end offset with no batch in flight. Topics are created,
written and read here, and word-count input comes with its truth (`word_lines`, `word_truth`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from floe_jobs import offsets
from floe_stack.ports import free_port

ROOT = Path(__file__).resolve().parent.parent


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
    try:
        fut.result()
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} did not appear")


def delete_topics(bootstrap: str, wanted: Callable[[str], bool]) -> dict[str, Exception | None]:
    """Deletes every topic whose name `wanted` accepts; each one's outcome (None: deleted, or gone
    already), so a caller decides what a failure means to it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = sorted(t for t in admin.list_topics(timeout=15).topics if wanted(t))
    outcome: dict[str, Exception | None] = {}
    for name, fut in (admin.delete_topics(names, operation_timeout=30).items() if names else ()):
        try:
            fut.result(timeout=40)
            outcome[name] = None
        except Exception as exc:
            outcome[name] = None if "UNKNOWN_TOPIC" in str(exc) else exc
    return outcome


def produce(bootstrap: str, topic: str, values: Iterable[str | tuple[str, str]], *, keyed: bool = False) -> int:
    """Produce values (round-robin over partitions unless keyed by value; a (key, value) pair is
    produced keyed by its key); returns the count."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    md = producer.list_topics(topic, timeout=10)
    parts = len(md.topics[topic].partitions)
    n = 0
    for i, value in enumerate(values):
        if isinstance(value, tuple):
            producer.produce(topic, key=value[0].encode(), value=value[1].encode())
        elif keyed:
            producer.produce(topic, key=value.encode(), value=value.encode())
        else:
            producer.produce(topic, value=value.encode(), partition=i % parts)
        n += 1
        if n % 10_000 == 0:
            producer.flush()
        else:
            producer.poll(0)
    producer.flush()
    return n


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Partition → (log start, end offset) of `topic`, as the brokers hold them now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("floe-probe")})
    try:
        md = consumer.list_topics(topic, timeout=10)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in md.topics[topic].partitions
        }
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: high for p, (_, high) in watermarks(bootstrap, topic).items()}


def read_topic(bootstrap: str, topic: str, *, timeout: float = 30.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of `topic` still in its log (from each partition's log start, past what
    retention or a deletion removed) up to its current end, in partition order."""
    marks = watermarks(bootstrap, topic)
    ends = {p: high for p, (_, high) in marks.items()}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("floe-read"), "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in marks])
    remaining = {p for p, (low, high) in marks.items() if high > low}
    out: list[tuple[bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.key(), msg.value()))
            part, off = msg.partition(), msg.offset()
            if part is not None and off is not None and off + 1 >= ends[part]:
                remaining.discard(part)
    finally:
        consumer.close()
    if remaining:
        raise TimeoutError(f"could not read {topic} to its end; partitions left {sorted(remaining)}")
    return out


@dataclass
class App:
    """Settings shared by every replica of one app under test."""

    app_id: str
    bootstrap: str
    cassandra_hosts: list[str]
    cassandra_port: int
    keyspace: str
    topics: list[str]
    output_topics: list[str]
    entrypoint: str
    stores: list[dict[str, Any]]
    spark_jars: list[str]
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # What each replica runs (`python -m`): the runtime's CLI, or a test's wrapper of it that
    # injects faults (tests/faultjob.py).
    module: str = "floe_jobs.cli"
    # The driver JVM's class archive (`spark.class_archive`): the stack's (`floe_stack.spark`) by
    # default, as the job image carries its own; "" starts the JVM from the jars alone.
    spark_class_archive: str = field(default_factory=lambda: os.environ.get("FLOE_SPARK_CLASS_ARCHIVE", ""))

    def env(self, name: str, **overrides: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        env.update(
            {
                "FLOE_APP_ID": self.app_id,
                "FLOE_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
                "FLOE_KAFKA_TOPICS": ",".join(self.topics),
                "FLOE_KAFKA_OUTPUT_TOPICS": ",".join(self.output_topics),
                "FLOE_CASSANDRA_HOSTS": ",".join(self.cassandra_hosts),
                "FLOE_CASSANDRA_PORT": str(self.cassandra_port),
                "FLOE_CASSANDRA_KEYSPACE": self.keyspace,
                "FLOE_STORES": json.dumps(self.stores),
                "FLOE_SPARK_JARS": ",".join(self.spark_jars),
                "FLOE_SPARK_CLASS_ARCHIVE": self.spark_class_archive,
                "FLOE_SPARK_MASTER": "local[2]",
                "FLOE_SPARK_CONF": json.dumps({"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"}),
                "FLOE_JOB_ENTRYPOINT": self.entrypoint,
                "FLOE_METRICS_PORT": str(free_port()),
                "FLOE_METRICS_QUERY_PORT": str(free_port()),
                # a local replica's query endpoint is open, as under `floe run`; a test wanting
                # the token sets FLOE_METRICS_QUERY_TOKEN and FLOE_METRICS_QUERY_AUTH=token
                "FLOE_METRICS_QUERY_AUTH": "none",
                "FLOE_POD_NAME": name,
            }
        )
        env.update(self.extra_env)
        env.update(overrides)
        return env


class Replica:
    """One `floe-job` process; its output goes to `<workdir>/<name>.log`."""

    def __init__(self, app: App, name: str, **env_overrides: str) -> None:
        self.app = app
        self.name = name
        self.env = app.env(name, **env_overrides)
        self.metrics_port = int(self.env["FLOE_METRICS_PORT"])
        self.log_path = app.workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Replica:
        self.starts += 1
        self.env["FLOE_METRICS_PORT"] = str(free_port())
        self.metrics_port = int(self.env["FLOE_METRICS_PORT"])
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        log.write(f"\n==== start {self.starts} at {time.time():.3f}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.app.module],
            env=self.env,
            cwd=str(ROOT),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def commits_since_start(self) -> int:
        """Batches this process (its latest start) has committed, from its log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return 0
        return text.rsplit("==== start", 1)[-1].count("Committed stage=")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the replica and its Spark JVM (its process group), as a node loss would."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def ready(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except Exception:
            return False

    def stop(self, timeout: float = 60.0) -> int | None:
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


def caught_up(session: Any, app: App, topics: Iterable[str]) -> bool:
    try:
        rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
    except Exception as exc:  # keyspace not created yet
        if "does not exist" in str(exc):
            return False
        raise
    for topic in topics:
        for p, end in end_offsets(app.bootstrap, topic).items():
            row = rows.get((topic, p))
            if end == 0:
                continue
            if row is None or row[0] != end or row[1] != row[2]:
                return False
    return True


def wait_caught_up(
    session: Any, app: App, topics: Iterable[str], *, timeout: float, replicas: Iterable[Replica] = ()
) -> float:
    """Seconds until every partition of `topics` (in order: input first) is fully committed."""
    topics = list(topics)
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if caught_up(session, app, topics):
            return time.monotonic() - started
        for r in replicas:
            if r.proc is not None and r.proc.poll() not in (None, 0):
                raise RuntimeError(f"replica {r.name} exited with {r.proc.returncode}; see {r.log_path}")
        time.sleep(1.0)
    raise TimeoutError(f"app {app.app_id} did not catch up on {topics} within {timeout:.0f}s")


def drop_keyspace(session: Any, keyspace: str) -> None:
    """Drops an app's keyspace when a test or benchmark is done with it. Left behind, keyspaces
    slow every later schema change on the node, provisioning included (docs/operator.md,
    "Benchmark", has the measurement)."""
    from floe_jobs.stores import schema

    schema.check_identifier(keyspace, "keyspace")
    session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=300)


def read_store(session: Any, keyspace: str, store: str, *, key_serde: str, value_serde: str) -> dict[Any, Any]:
    """Every live key of a partitioned store (all partitions)."""
    from floe_jobs.stores import schema, serdes

    ks, vs = serdes.by_name(key_serde), serdes.by_name(value_serde)
    table = schema.table_name(store)
    out: dict[Any, Any] = {}
    for row in session.execute(f"SELECT key, value FROM {keyspace}.{table}"):
        if row[1] is None:
            continue
        key = ks.decode(row[0])
        if key in out:
            raise AssertionError(f"key {key!r} stored in two partitions")
        out[key] = vs.decode(row[1])
    return out


def last_values(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in records:
        if k is not None and v is not None:
            out[k.decode()] = v.decode()
    return out


WORDS = [f"w{i:03d}" for i in range(400)] + ["kafka", "spark", "cassandra", "floe", "stream", "état", "naïve"]


def word_lines(n: int, *, seed: int = 7, words_per_line: tuple[int, int] = (1, 12)) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        k = rng.randint(*words_per_line)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(k)))
    return lines


def word_truth(lines: list[str]) -> Counter[str]:
    c: Counter[str] = Counter()
    for line in lines:
        c.update(w for w in line.lower().split(" ") if w)
    return c


class CommitGaps:
    """Polls an app's offsets rows and records, per stage partition, when its committed batch
    changed: the longest time a partition went without a commit in a window (what a snapshot must
    not stretch: the snapshot tests and benchmark)."""

    def __init__(self, session: Any, app: App) -> None:
        self.session, self.app = session, app
        self.changes: dict[tuple[Any, ...], list[float]] = {}
        self._last: dict[tuple[Any, ...], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CommitGaps:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            rows = offsets.stage_progress(self.session, keyspace=self.app.keyspace, app_id=self.app.app_id)
            for key, (_, committed, _, _) in rows.items():
                if self._last.get(key) != committed:
                    self._last[key] = committed
                    self.changes.setdefault(key, []).append(now)
            time.sleep(0.05)

    def longest(self, start: float, end: float) -> float:
        """The longest stretch in [start, end] without a commit, over the partitions that
        committed in that window."""
        worst = 0.0
        for times in self.changes.values():
            inside = [t for t in times if start <= t <= end]
            if not inside:
                continue
            points = [start, *inside, end]
            worst = max(worst, *(b - a for a, b in itertools.pairwise(points)))
        return worst
