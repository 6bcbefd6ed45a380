"""Fixtures for the lag exporter and autoscaler against the local stack's real Kafka, Cassandra and API server.

Time is injected: a `FakeClock` stands for the wall clock of the scraper and the loop, and
each test moves it forward by one interval between scrapes, producing and committing
exactly what it wants to have happened in that interval. Offsets and records are real.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import localrun


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def cql(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[Any]:
    from cassandra.cluster import Cluster

    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    session = cluster.connect()
    yield session
    cluster.shutdown()


@pytest.fixture(scope="module")
def keyspace(cql: Any) -> Iterator[str]:
    name = f"it_lag_{uuid.uuid4().hex[:8]}"
    cql.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {name}"
        " WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    yield name
    cql.execute(f"DROP KEYSPACE IF EXISTS {name}")


@pytest.fixture
def app_manifest(
    kafka_bootstrap: str, cassandra_hosts: list[str], cassandra_port: int
) -> Callable[..., dict[str, Any]]:
    """A StreamingApp manifest on the local stack's Kafka and Cassandra; `spec` entries are added as given."""
    from floe_operator import model

    def make(name: str, namespace: str, *, topics: list[str], keyspace: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": model.API_VERSION,
            "kind": model.KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "image": "example/app:1",
                "job": {"entrypoint": "m:f"},
                "kafka": {"bootstrapServers": kafka_bootstrap, "topics": topics},
                "state": {"cassandra": {"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}},
                **spec,
            },
        }

    return make


@pytest.fixture(scope="module")
def admin(kafka_bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def make_topic(admin: Any, kafka_bootstrap: str) -> Iterator[Callable[[int], str]]:
    """Topics whose partitions all have a leader, so the first scrape of a test already sees them."""
    created: list[str] = []

    def make(partitions: int) -> str:
        name = f"it-lag-{uuid.uuid4().hex[:8]}"
        localrun.create_topic(kafka_bootstrap, name, partitions)
        created.append(name)
        return name

    yield make
    if created:
        for fut in admin.delete_topics(created).values():
            fut.result(timeout=30)


@pytest.fixture(scope="module")
def producer(kafka_bootstrap: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "acks": "all"})


def produce(producer: Any, topic: str, counts: dict[int, int]) -> None:
    """Append `counts[p]` records to partition p and wait until the broker has them all."""
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, value=b"x" * 16, key=str(i).encode(), partition=partition)
            if i % 10000 == 9999:
                producer.poll(0)
    assert producer.flush(30) == 0


class OffsetsRows:
    """Writes an app's committed offsets the way its runtime does: one row per stage and
    topic-partition (`stage` None: the stage-less row an earlier runtime wrote)."""

    def __init__(self, session: Any, keyspace: str, app_id: str) -> None:
        offsets.ensure_offsets_table(session, keyspace=keyspace)
        self.table = f"{keyspace}.{offsets.TABLE}"
        self.app_id = app_id
        self._session = session
        self._update = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_at = toTimestamp(now())"
            " WHERE app_id = ? AND topic = ? AND partition = ?"
        )

    def commit(self, topic: str, positions: dict[int, int], *, stage: str | None = None) -> None:
        key = topic if stage is None else offsets.position_key(stage, topic)
        for partition, offset in positions.items():
            self._session.execute(self._update, (offset, self.app_id, key, partition))


def commit_group(bootstrap: str, group: str, topic: str, positions: dict[int, int]) -> None:
    """Commit offsets for a Kafka consumer group, as a Kafka-committing consumer would."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def in_process_loop(
    cluster: Any, cql: Any, clock: FakeClock, *, interval: float
) -> tuple[Any, Any, dict[tuple[str, str], dict[str, Any]]]:
    """The operator's lag loop run in the test's process on the real Kafka, Cassandra and API
    server, its time `clock`'s: (loop, its metrics registry, the apps index the test fills in as
    the operator's index would)."""
    from floe_operator import kafka
    from floe_operator.lag import loop as lag_loop
    from floe_operator.lag import metrics as lag_metrics
    from floe_operator.lag import scrape as lag_scrape
    from prometheus_client import CollectorRegistry

    scraper = lag_scrape.Scraper(
        kafka_offsets=lag_scrape.KafkaOffsets(),
        cassandra_offsets=lag_scrape.CassandraOffsets(lambda target: cql),
        partitions_of=kafka.Inspector(ttl=0.0).partitions_sync,
        clock=clock,
    )
    registry = CollectorRegistry()
    apps: dict[tuple[str, str], dict[str, Any]] = {}
    loop = lag_loop.LagLoop(
        cluster=cluster,
        scraper=scraper,
        metrics=lag_metrics.LagMetrics(registry),
        options=lag_loop.Options(interval_seconds=interval),
        apps=apps,
    )
    return loop, registry, apps
