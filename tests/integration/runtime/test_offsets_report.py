"""`floe-job offsets`, the read-only report `kubectl floe status` runs in a pod, as a process against
the real Kafka and Cassandra: every live offsets row with its owner, last commit and lag (the
topic's end offset from the broker minus the row's next offset), and nothing of the configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra]

BIN = Path(sys.executable).parent


@pytest.fixture
def names(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[tuple[str, str, Any]]:
    from cassandra.cluster import Cluster

    suffix = uuid.uuid4().hex[:6]
    keyspace, topic = f"floe_report_it_{suffix}", f"floe-report-it-{suffix}"
    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    session = cluster.connect()
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    try:
        yield keyspace, topic, session
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        cluster.shutdown()


def test_offsets_report_prints_each_rows_owner_last_commit_and_lag(
    names: tuple[str, str, Any], kafka_bootstrap: str, cassandra_hosts: list[str], cassandra_port: int
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    keyspace, topic, session = names
    app_id = f"report-it-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, count in ((0, 5), (1, 3)):
        for i in range(count):
            producer.produce(topic, value=f"r{i}".encode(), partition=partition)
    assert producer.flush(30) == 0

    offsets.ensure_offsets_table(session, keyspace=keyspace)
    committed = datetime(2026, 3, 1, 12, 0, 5, 250000, tzinfo=UTC)
    insert = (
        f"INSERT INTO {keyspace}.{offsets.TABLE} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
        " owner, committed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    )
    session.execute(insert, (app_id, offsets.position_key("main", topic), 0, 2, 4, 4, "kf-abc", committed))
    session.execute(insert, (app_id, offsets.position_key("main", topic), 1, 3, 1, 2, "kf-def", None))
    # a snapshot holds partition 0 (far ahead), and held partition 1 once (run out: no hold)
    hold = f"UPDATE {keyspace}.{offsets.TABLE} SET held_until = %s WHERE app_id = %s AND topic = %s AND partition = %s"
    session.execute(hold, (int(datetime(2099, 1, 1, tzinfo=UTC).timestamp() * 1e6), app_id,
                           offsets.position_key("main", topic), 0))
    session.execute(hold, (1_000_000, app_id, offsets.position_key("main", topic), 1))
    # a retired legacy row (no position) is not shown
    session.execute(insert, (app_id, topic, 0, None, 1, 1, offsets.RETIRED, None))

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update(
        FLOE_APP_ID=app_id,
        FLOE_KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        FLOE_KAFKA_TOPICS=topic,
        FLOE_CASSANDRA_HOSTS=",".join(cassandra_hosts),
        FLOE_CASSANDRA_PORT=str(cassandra_port),
        FLOE_CASSANDRA_KEYSPACE=keyspace,
        FLOE_JOB_ENTRYPOINT="unused:job",
    )
    proc = subprocess.run([str(BIN / "floe-job"), "offsets"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report == {
        "app_id": app_id,
        "partitions": [
            {"stage": "main", "topic": topic, "partition": 0, "owner": "kf-abc", "next_offset": 2, "end_offset": 5,
             "lag": 3, "committed_at": "2026-03-01T12:00:05.250Z", "in_flight": False, "stopped_at": None,
             "stopped_error": None, "held_until": "2099-01-01T00:00:00.000Z"},
            {"stage": "main", "topic": topic, "partition": 1, "owner": "kf-def", "next_offset": 3, "end_offset": 3,
             "lag": 0, "committed_at": None, "in_flight": True, "stopped_at": None, "stopped_error": None,
             "held_until": None},
        ],
    }
