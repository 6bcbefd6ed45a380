"""What a test makes on the shared stack is removed when its scope ends (`tests/leftovers.py`):
the topics it created, the topics its app made for itself under its unique id, its keyspaces;
and nothing another test made beside it."""

from __future__ import annotations

from typing import Any

import pytest
from floe_stack import localrun

from tests import leftovers


def topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


@pytest.mark.kafka
def test_a_scope_deletes_its_topics_and_its_apps_topics_and_no_other(kafka_bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    # another test's topic, made in this test's own scope, so removed at its end all the same
    other = localrun.unique("left-other")
    localrun.create_topic(kafka_bootstrap, other, 1)

    made = leftovers.open_scope()
    app_id = localrun.unique("left")  # recorded as a prefix
    localrun.create_topic(kafka_bootstrap, f"{app_id}-lines", 2)  # recorded by name
    localrun.create_topic(kafka_bootstrap, "plain-" + app_id, 1)  # recorded by name
    # what the app makes itself (its dead-letter topic, say): only its prefix names it
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(f"{app_id}-dlq", num_partitions=1, replication_factor=1)])[f"{app_id}-dlq"].result(30)
    mine = {f"{app_id}-lines", "plain-" + app_id, f"{app_id}-dlq"}
    assert mine | {other} <= topics(kafka_bootstrap)
    leftovers.close_scope(made)

    left = topics(kafka_bootstrap)
    assert not mine & left, f"left on the broker: {sorted(mine & left)}"
    assert other in left, "a topic made outside the scope was deleted"


@pytest.mark.cassandra
def test_a_scope_drops_the_keyspaces_it_names(cassandra_hosts: list[str], cassandra_port: int) -> None:
    from cassandra.cluster import Cluster

    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    try:
        session: Any = cluster.connect()
        made = leftovers.open_scope()
        name = leftovers.keyspace(localrun.unique("left").replace("-", "_"))
        session.execute(
            f"CREATE KEYSPACE {name} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}",
            timeout=60,
        )
        leftovers.close_scope(made)
        rows = session.execute("SELECT keyspace_name FROM system_schema.keyspaces", timeout=30)
        assert name not in {r.keyspace_name for r in rows}
    finally:
        cluster.shutdown()
