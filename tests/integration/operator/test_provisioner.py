"""The operator's Cassandra provisioning against the real node: apps arriving together on a new
keyspace cost one round of DDL, tables are found through `system_schema` (the operator's session
keeps no schema mirror), and what is missing or dropped is created again."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from floe_jobs import offsets
from floe_jobs.stores import schema
from floe_operator import cassandra, model

from ...unit.operator.crdtools import defaulted


class CountingProvisioner(cassandra.Provisioner):
    """The real provisioner, counting the provisioning runs that reach Cassandra."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def provision_sync(self, target: cassandra.Target, app: model.StreamingApp) -> None:
        self.runs += 1
        super().provision_sync(target, app)


def _app(keyspace: str, name: str, hosts: list[str], port: int, stores: list[dict[str, Any]]) -> model.StreamingApp:
    body = {
        "apiVersion": "streaming.floe.dev/v1alpha1",
        "kind": "StreamingApp",
        "metadata": {"name": name, "namespace": "prov", "uid": str(uuid.uuid4()), "generation": 1},
        "spec": {
            "image": "floe/job:test",
            "job": {"entrypoint": "app:run"},
            "kafka": {"bootstrapServers": "127.0.0.1:9092", "topics": ["lines"]},
            "state": {"cassandra": {"hosts": hosts, "port": port, "keyspace": keyspace}, "stores": stores},
        },
    }
    return model.StreamingApp.from_body(defaulted(copy.deepcopy(body)))


@pytest.fixture
def fresh_keyspace(cql: Any) -> Iterator[str]:
    name = f"floe_prov_it_{uuid.uuid4().hex[:6]}"
    yield name
    cql.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)


@pytest.fixture
def provisioner() -> Iterator[CountingProvisioner]:
    p = CountingProvisioner()
    yield p
    p.close()


def test_apps_arriving_together_share_one_provisioning(
    fresh_keyspace: str, provisioner: CountingProvisioner, cassandra_hosts: list[str], cassandra_port: int, cql: Any
) -> None:
    stores = [{"name": "word-count", "type": "partitioned"}]
    apps = [_app(fresh_keyspace, f"app-{i}", cassandra_hosts, cassandra_port, stores) for i in range(20)]
    target = cassandra.target_of(apps[0], {})

    async def burst() -> None:
        await asyncio.gather(*(provisioner.provision(target, app) for app in apps))

    asyncio.run(burst())
    assert provisioner.runs == 1
    tables = schema.columns_of(cql, fresh_keyspace, [offsets.TABLE, "word_count_kstreams_store"])
    assert set(tables) == {offsets.TABLE, "word_count_kstreams_store"}
    assert schema.FENCE_COLUMN in tables["word_count_kstreams_store"]
    # The operator's own session mirrors no schema, so connecting to a shared cluster stays cheap.
    assert provisioner.session(target).cluster.metadata.keyspaces == {}


def test_a_new_store_or_a_dropped_table_is_provisioned_again(
    fresh_keyspace: str, provisioner: CountingProvisioner, cassandra_hosts: list[str], cassandra_port: int, cql: Any
) -> None:
    first = _app(fresh_keyspace, "first", cassandra_hosts, cassandra_port, [{"name": "counts", "type": "partitioned"}])
    target = cassandra.target_of(first, {})
    asyncio.run(provisioner.provision(target, first))
    asyncio.run(provisioner.provision(target, first))
    assert provisioner.runs == 1

    second = _app(
        fresh_keyspace, "second", cassandra_hosts, cassandra_port,
        [{"name": "counts", "type": "partitioned"}, {"name": "last-seen", "type": "global"}],
    )
    asyncio.run(provisioner.provision(target, second))
    assert provisioner.runs == 2
    assert schema.table_columns(cql, fresh_keyspace, "last_seen_kstreams_store") is not None

    provisioner.drop_sync(target, keyspace=fresh_keyspace, tables=["counts_kstreams_store"])
    assert schema.table_columns(cql, fresh_keyspace, "counts_kstreams_store") is None
    asyncio.run(provisioner.provision(target, first))
    assert provisioner.runs == 3
    assert schema.FENCE_COLUMN in (schema.table_columns(cql, fresh_keyspace, "counts_kstreams_store") or set())


def test_a_table_without_the_fence_column_gets_it(
    fresh_keyspace: str, provisioner: CountingProvisioner, cassandra_hosts: list[str], cassandra_port: int, cql: Any
) -> None:
    """A partitioned table made by the Java library (no fence column) is completed, not replaced."""
    cql.execute(
        f"CREATE KEYSPACE {fresh_keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    cql.execute(
        f"CREATE TABLE {fresh_keyspace}.counts_kstreams_store "
        "(partition int, key blob, time timestamp, value blob, PRIMARY KEY ((partition), key))"
    )
    cql.execute(f"INSERT INTO {fresh_keyspace}.counts_kstreams_store (partition, key, value) VALUES (0, 0x01, 0x02)")
    app = _app(fresh_keyspace, "legacy", cassandra_hosts, cassandra_port, [{"name": "counts", "type": "partitioned"}])
    asyncio.run(provisioner.provision(cassandra.target_of(app, {}), app))
    assert schema.FENCE_COLUMN in (schema.table_columns(cql, fresh_keyspace, "counts_kstreams_store") or set())
    rows = list(cql.execute(f"SELECT value FROM {fresh_keyspace}.counts_kstreams_store WHERE partition = 0"))
    assert [r.value for r in rows] == [b"\x02"]
