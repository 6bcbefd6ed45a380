"""Lag and time lag against the real Kafka broker and Cassandra node, with known offsets and produce times.

Records are produced right before each scrape at a known (injected) time, so the end
offset of every partition is known at every point of its ring and the expected time lag
follows from the committed offsets the test writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from floe_operator import cassandra, kafka, model
from floe_operator.lag import metrics as lag_metrics
from floe_operator.lag import scrape as lag_scrape
from prometheus_client import CollectorRegistry

from .conftest import FakeClock, OffsetsRows, commit_group, produce

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra]


# The apps' namespace names their Kafka consumer groups (`floe.<namespace>.<name>`), which the
# broker shares with every run: one of this module's own
NAMESPACE = f"lag-it-{uuid.uuid4().hex[:6]}"


def app_body(name: str, *, topics: list[str], bootstrap: str, hosts: list[str], port: int, keyspace: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid4())},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "kafka": {"bootstrapServers": bootstrap, "topics": topics},
            "state": {"cassandra": {"hosts": hosts, "port": port, "keyspace": keyspace}},
        },
    }


@pytest.fixture
def new_app(
    kafka_bootstrap: str, cassandra_hosts: list[str], cassandra_port: int, keyspace: str
) -> Callable[..., model.StreamingApp]:
    """new_app(name, topics, bootstrap=..., hosts=..., port=...): an app on the local stack unless told otherwise."""

    def make(name: str, topics: list[str], **where: Any) -> model.StreamingApp:
        at = {"bootstrap": kafka_bootstrap, "hosts": cassandra_hosts, "port": cassandra_port, **where}
        return model.StreamingApp.from_body(app_body(name, topics=topics, keyspace=keyspace, **at))

    return make


@dataclass(frozen=True)
class Lab:
    """What the scrape tests work with: topics, a producer, the CQL session, apps on the local
    stack, the broker's address and the injected clock."""

    make_topic: Callable[[int], str]
    producer: Any
    cql: Any
    new_app: Callable[..., model.StreamingApp]
    kafka_bootstrap: str
    clock: FakeClock


@pytest.fixture
def lab(
    make_topic: Any,
    producer: Any,
    cql: Any,
    new_app: Callable[..., model.StreamingApp],
    kafka_bootstrap: str,
    clock: FakeClock,
) -> Lab:
    return Lab(make_topic, producer, cql, new_app, kafka_bootstrap, clock)


def make_scraper(
    clock: FakeClock, session: Any, *, window: float = 60.0, kafka_offsets: lag_scrape.KafkaOffsets | None = None
) -> lag_scrape.Scraper:
    return lag_scrape.Scraper(
        # a bound, not a wait: the broker answers at once unless the machine is loaded, when 3 s
        # made a reachable broker's end offsets time out and the app stale
        kafka_offsets=kafka_offsets or lag_scrape.KafkaOffsets(timeout=15.0),
        cassandra_offsets=lag_scrape.CassandraOffsets(lambda target: session),
        partitions_of=kafka.Inspector(ttl=0.0).partitions_sync,
        clock=clock,
        window_seconds=window,
        rate_seconds=60.0,
    )


def by_partition(app: lag_scrape.AppLag) -> dict[int, lag_scrape.PartitionLag]:
    return {p.partition: p for p in app.partitions}


def test_lag_and_time_lag_from_cassandra_with_group_fallback(lab: Lab, keyspace: str) -> None:
    topic = lab.make_topic(3)
    app = lab.new_app("orders", [topic])
    ref = lag_scrape.app_ref(app, {})
    rows = OffsetsRows(lab.cql, keyspace, app.app_id)
    scraper = make_scraper(lab.clock, lab.cql)

    # 100 records per partition at t0, t0+10, t0+20.
    t0 = lab.clock.now
    for _ in range(3):
        produce(lab.producer, topic, {0: 100, 1: 100, 2: 100})
        scrape = scraper.scrape([ref])
        # Every scrape must see all three ends: the ring's points are the premise of the time lag below.
        assert scrape.errors == () and len(scrape.apps[0].partitions) == 3, scrape
        lab.clock.advance(10)
    lab.clock.advance(-10)  # the last scrape happened at t0 + 20

    # p0 at 150 and p1 at 300 in Cassandra; p2 only in the Kafka group, at 250.
    rows.commit(topic, {0: 150, 1: 300})
    commit_group(lab.kafka_bootstrap, app.consumer_group, topic, {2: 250})
    lab.clock.advance(5)
    result = scraper.scrape([ref]).apps[0]
    assert not result.stale
    parts = by_partition(result)
    assert {p: (x.end, x.committed, x.source) for p, x in parts.items()} == {
        0: (300, 150, "cassandra"),
        1: (300, 300, "cassandra"),
        2: (300, 250, "kafka"),
    }
    assert [parts[p].lag for p in range(3)] == [150, 0, 50]
    # 150 was reached half way between t0 (100) and t0+10 (200): produced at t0+5, now t0+25.
    assert parts[0].lag_seconds == pytest.approx(20.0) and parts[0].exact
    assert parts[1].lag_seconds == 0.0
    # 250 half way between t0+10 and t0+20: t0+15.
    assert parts[2].lag_seconds == pytest.approx(10.0)
    assert result.total == 200 and result.max_seconds == pytest.approx(20.0)
    assert lab.clock.now == t0 + 25

    # A quiet topic: nothing produced, nothing consumed. Time lag keeps growing; caught-up stays 0.
    lab.clock.advance(100)
    parts = by_partition(scraper.scrape([ref]).apps[0])
    assert parts[0].lag_seconds == pytest.approx(120.0)
    assert parts[1].lag_seconds == 0.0


def test_a_topic_read_by_two_stages_shows_the_stage_furthest_behind(lab: Lab, keyspace: str) -> None:
    """Each stage keeps its own row per partition: the lag is that of the slower stage. A row of an
    earlier runtime (no stage) is read where no stage has one yet, and ignored once one has."""
    topic = lab.make_topic(3)
    app = lab.new_app("two-stages", [topic])
    ref = lag_scrape.app_ref(app, {})
    rows = OffsetsRows(lab.cql, keyspace, app.app_id)
    produce(lab.producer, topic, {0: 100, 1: 100, 2: 100})
    rows.commit(topic, {0: 10, 1: 20, 2: 60})  # an earlier runtime's rows
    rows.commit(topic, {0: 100, 1: 90}, stage="tally")
    rows.commit(topic, {0: 40, 1: 95}, stage="recount")
    result = make_scraper(lab.clock, lab.cql).scrape([ref]).apps[0]
    assert not result.stale
    got = {p.partition: (p.committed, p.lag, p.source) for p in result.partitions}
    assert got == {0: (40, 60, "cassandra"), 1: (90, 10, "cassandra"), 2: (60, 40, "cassandra")}
    assert result.total == 110


def test_unprovisioned_app_uses_the_group_and_an_idle_topic_reads_zero(lab: Lab) -> None:
    busy, idle = lab.make_topic(2), lab.make_topic(2)
    app = lab.new_app("fresh", [busy, idle])
    produce(lab.producer, busy, {0: 40, 1: 10})
    commit_group(lab.kafka_bootstrap, app.consumer_group, busy, {0: 30})
    scraper = make_scraper(lab.clock, lab.cql)
    result = scraper.scrape([lag_scrape.app_ref(app, {})]).apps[0]
    assert not result.stale
    got = {(p.topic, p.partition): (p.lag, p.source, p.lag_seconds) for p in result.partitions}
    assert got == {
        (busy, 0): (10, "kafka", 0.0),  # first point: the age of what is known, 0 s so far
        (busy, 1): (0, "none", 0.0),  # nothing committed anywhere: the app has not started
        (idle, 0): (0, "none", 0.0),
        (idle, 1): (0, "none", 0.0),
    }
    lab.clock.advance(30)
    result = scraper.scrape([lag_scrape.app_ref(app, {})]).apps[0]
    got = {(p.topic, p.partition): p.lag_seconds for p in result.partitions}
    assert got[(busy, 0)] == pytest.approx(30.0)  # a lower bound: the records are at least that old
    assert got[(idle, 0)] == 0.0 and got[(idle, 1)] == 0.0


def test_many_apps_not_started_each_get_their_own_group_offsets(lab: Lab) -> None:
    """Apps with no Cassandra rows yet fall back to their groups, read side by side: each app
    must get its own group's commits, whatever order the reads finish in."""
    topic = lab.make_topic(2)
    produce(lab.producer, topic, {0: 100, 1: 100})
    apps = [lab.new_app(f"idle-{i}", [topic]) for i in range(lag_scrape.GROUP_READS_IN_FLIGHT + 8)]
    for i, app in enumerate(apps):
        if i % 4 != 3:  # every fourth app has committed nowhere
            commit_group(lab.kafka_bootstrap, app.consumer_group, topic, {0: i, 1: 100 - i})
    scrape = make_scraper(lab.clock, lab.cql).scrape([lag_scrape.app_ref(app, {}) for app in apps])
    assert scrape.errors == ()
    got = {a.name: {p.partition: (p.committed, p.source) for p in a.partitions} for a in scrape.apps}
    assert got == {
        app.name: {0: (i, "kafka"), 1: (100 - i, "kafka")} if i % 4 != 3 else {0: (None, "none"), 1: (None, "none")}
        for i, app in enumerate(apps)
    }


def test_a_group_without_commits_is_read_again_only_after_the_recheck_interval(lab: Lab) -> None:
    """A not-started app's empty group is not read at every scrape; commits made meanwhile show
    once the recheck interval has passed, and a group with commits is read every time."""
    topic = lab.make_topic(1)
    produce(lab.producer, topic, {0: 50})
    empty, busy = lab.new_app("empty", [topic]), lab.new_app("busy", [topic])
    commit_group(lab.kafka_bootstrap, busy.consumer_group, topic, {0: 10})
    offsets = lag_scrape.KafkaOffsets(timeout=3.0, empty_recheck_seconds=60.0, clock=lab.clock)
    scraper = make_scraper(lab.clock, lab.cql, kafka_offsets=offsets)
    refs = [lag_scrape.app_ref(a, {}) for a in (empty, busy)]

    def committed() -> dict[str, int | None]:
        scrape = scraper.scrape(refs)
        assert scrape.errors == ()
        return {a.name: a.partitions[0].committed for a in scrape.apps}

    assert committed() == {"empty": None, "busy": 10}
    commit_group(lab.kafka_bootstrap, empty.consumer_group, topic, {0: 20})
    commit_group(lab.kafka_bootstrap, busy.consumer_group, topic, {0: 30})
    lab.clock.advance(30)
    assert committed() == {"empty": None, "busy": 30}  # the empty group is trusted for 60 s
    lab.clock.advance(31)
    assert committed() == {"empty": 20, "busy": 30}


def test_unreachable_sources_mark_only_their_apps_stale_and_recover(lab: Lab, cassandra_port: int) -> None:
    topic = lab.make_topic(1)
    good = lab.new_app("good", [topic])
    no_kafka = lab.new_app("no-kafka", [topic], bootstrap="127.0.0.1:1")
    no_cassandra = lab.new_app("no-cassandra", [topic], hosts=["127.0.0.1"], port=1)
    produce(lab.producer, topic, {0: 5})
    provisioner = cassandra.Provisioner(connect_timeout=2.0)
    sessions: dict[int, Any] = {}

    def session_for(target: cassandra.Target) -> Any:
        if target.connection.port == cassandra_port:
            return lab.cql
        if target.connection.port in sessions:
            return sessions[target.connection.port]
        return provisioner.session(target)  # raises CassandraUnavailable

    scraper = lag_scrape.Scraper(
        kafka_offsets=lag_scrape.KafkaOffsets(timeout=2.0),
        cassandra_offsets=lag_scrape.CassandraOffsets(session_for),
        partitions_of=kafka.Inspector(ttl=0.0, timeout=2.0).partitions_sync,
        clock=lab.clock,
    )
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    refs = [lag_scrape.app_ref(a, {}) for a in (good, no_kafka, no_cassandra)]
    scrape = scraper.scrape(refs)
    metrics.update(scrape)
    states = {a.name: a.stale for a in scrape.apps}
    assert states == {"good": False, "no-kafka": True, "no-cassandra": True}, scrape.errors
    assert {s for s, _ in scrape.errors} == {"kafka", "cassandra"}
    get = registry.get_sample_value
    assert get("floe_lag_scrape_errors_total", {"source": "kafka"}) >= 1
    assert get("floe_lag_scrape_errors_total", {"source": "cassandra"}) >= 1
    assert get("floe_lag_metrics_stale", {"namespace": NAMESPACE, "app": "no-cassandra"}) == 1
    assert get("floe_lag_metrics_stale", {"namespace": NAMESPACE, "app": "good"}) == 0
    assert (
        get("floe_lag_last_success_timestamp_seconds") is None or get("floe_lag_last_success_timestamp_seconds") == 0.0
    )

    # Cassandra comes back (same scraper, no restart): the app is measured again.
    sessions[1] = lab.cql
    lab.clock.advance(10)
    scrape = scraper.scrape(refs[:1] + refs[2:])
    metrics.update(scrape)
    assert [a.stale for a in scrape.apps] == [False, False]
    assert get("floe_lag_metrics_stale", {"namespace": NAMESPACE, "app": "no-cassandra"}) == 0
    assert get("floe_lag_last_success_timestamp_seconds") == lab.clock.now
    provisioner.close()
