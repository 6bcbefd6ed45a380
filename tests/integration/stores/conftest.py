"""Fixtures for the store tests against the local stack's real Cassandra node.

One throwaway keyspace per test session (dropped at the end); every test gets its own store
names, so tests never see each other's rows.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from cassandra.cluster import Session
from floe_jobs.stores import CassandraConfig, connect
from floe_jobs.stores.schema import execute_ddl, keyspace_cql
from prometheus_client import CollectorRegistry

# Cassandra expires a cell at the whole second it was written in plus its TTL, so a 1 s TTL
# can lapse a millisecond after the write. TTL tests write with this one, read the values back
# at once, and then wait until it has passed since their last write.
SHORT_TTL = 3


def wait_past_ttl(last_write: float, ttl: float = SHORT_TTL) -> None:
    """Sleep until `ttl` seconds (and a little) have passed since `last_write` (time.time())."""
    time.sleep(max(0.0, last_write + ttl + 0.3 - time.time()))


@pytest.fixture(scope="session")
def cassandra_config(cassandra_hosts: list[str], cassandra_port: int) -> CassandraConfig:
    return CassandraConfig(hosts=tuple(cassandra_hosts), port=cassandra_port, request_timeout=20.0)


@pytest.fixture(scope="session")
def session(cassandra_config: CassandraConfig) -> Iterator[Session]:
    s = connect(cassandra_config)
    yield s
    s.cluster.shutdown()


@pytest.fixture(scope="session")
def keyspace(session: Session) -> Iterator[str]:
    name = f"it_stores_{uuid.uuid4().hex[:8]}"
    execute_ddl(session, keyspace_cql(name))
    yield name
    execute_ddl(session, f"DROP KEYSPACE IF EXISTS {name}")


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def store_name(request: pytest.FixtureRequest) -> str:
    """A store name unique to the test (so is its table)."""
    base = request.node.name.split("[")[0].removeprefix("test_")[:20]
    return f"{base}-{uuid.uuid4().hex[:6]}"
