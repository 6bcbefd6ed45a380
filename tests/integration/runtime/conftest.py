"""Fixtures for runtime tests: a fresh app (topics, keyspace) per test on the real stack."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from floe_stack import cassandra as stack_cassandra
from floe_stack import kafka as stack_kafka
from floe_stack import localrun


@pytest.fixture
def session(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[object]:
    from floe_jobs.stores import CassandraConfig, connect

    s = connect(CassandraConfig(hosts=tuple(cassandra_hosts), port=cassandra_port))
    yield s
    s.cluster.shutdown()


@pytest.fixture
def dropped_keyspaces(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[list[str]]:
    """Keyspaces a test creates, dropped when it ends (see `localrun.drop_keyspace`)."""
    from floe_jobs.stores import CassandraConfig, connect

    names: list[str] = []
    yield names
    if names:
        s = connect(CassandraConfig(hosts=tuple(cassandra_hosts), port=cassandra_port))
        try:
            for name in names:
                localrun.drop_keyspace(s, name)
        finally:
            s.cluster.shutdown()


NewApp = Callable[..., localrun.App]


@pytest.fixture
def new_app(
    tmp_path: Path,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    spark_jars: list[str],
    dropped_keyspaces: list[str],
) -> NewApp:
    """Makes an app on the stack: its input and output topics (6 partitions), and a keyspace of its
    own, dropped when the test ends."""

    def make(
        prefix: str, *, entrypoint: str, stores: list[dict[str, Any]], input_name: str, batch: int
    ) -> localrun.App:
        app_id = localrun.unique(prefix)
        localrun.create_topic(kafka_bootstrap, f"{app_id}-{input_name}", 6)
        localrun.create_topic(kafka_bootstrap, f"{app_id}-output", 6)
        app = localrun.App(
            app_id=app_id,
            bootstrap=kafka_bootstrap,
            cassandra_hosts=cassandra_hosts,
            cassandra_port=cassandra_port,
            keyspace="floe_rt_" + app_id.split("-")[1],
            topics=[f"{app_id}-{input_name}"],
            output_topics=[f"{app_id}-output"],
            entrypoint=entrypoint,
            stores=stores,
            spark_jars=spark_jars,
            workdir=tmp_path,
            extra_env={"FLOE_KAFKA_MAX_RECORDS_PER_BATCH": str(batch)},
        )
        dropped_keyspaces.append(app.keyspace)
        return app

    return make


@pytest.fixture
def word_count_app(new_app: NewApp) -> localrun.App:
    return new_app(
        "wc",
        entrypoint=str(localrun.ROOT / "examples/word-count/word_count.py"),
        stores=[{"name": "word-count", "type": "partitioned"}],
        input_name="lines",
        batch=5000,
    )


# The stack's services an outage test may stop, by the name of their pid file.
SERVICES = {stack_kafka.NAME: stack_kafka.Kafka, stack_cassandra.NAME: stack_cassandra.Cassandra}


class Services:
    """Stops and starts the local stack's own Kafka broker or Cassandra node, for tests of
    outages. What a test stopped is started again, and waited for, when the test ends (passed or
    not), so the tests after it find the stack whole.

    The stack is the one `.floe` names, which may be another checkout's (a worktree whose `.floe`
    links to the clone that ran `make up`): its layout is that checkout's, so a restarted service
    finds its own data directory (one per checkout) and nothing else of the stack is touched:
    only the stopped service is started again, no image is built, the env file stays as it is."""

    def __init__(self, root: Path) -> None:
        from floe_stack.layout import Layout

        self.layout = Layout.discover((root / ".floe").resolve().parent)
        self.stopped: set[str] = set()

    def stop(self, name: str) -> float:
        """Stop `name` (`kafka` or `cassandra`) as its pid file records it: SIGTERM, so Cassandra
        flushes its commit log (a SIGKILLed single node may lose its last 10 s of acknowledged
        writes by design of `commitlog_sync: periodic`); seconds it took to exit."""
        from floe_stack import procs

        assert name in SERVICES, f"not a service these tests stop: {name}"
        t0 = time.monotonic()
        assert procs.stop(self.layout, name, timeout=60), f"{name} of the local stack was not running"
        self.stopped.add(name)
        return time.monotonic() - t0

    def start(self) -> float:
        """Start what was stopped, as the stack started it, and wait until it answers; seconds taken."""
        from floe_stack import component

        t0 = time.monotonic()
        book = component.PortBook.load(self.layout)
        started = [SERVICES[name](self.layout, book) for name in sorted(self.stopped)]
        for service in started:
            service.install()  # the jars' location, from the warm cache
            service.start()
        for service in started:
            service.wait_ready(timeout=240)
        self.stopped.clear()
        return time.monotonic() - t0


@pytest.fixture
def services() -> Iterator[Services]:
    s = Services(localrun.ROOT)
    yield s
    if s.stopped:
        s.start()
