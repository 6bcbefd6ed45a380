"""The order-locations and dedup examples against the real stack, one replica each."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from floe_stack import localrun

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


def make_app(
    tmp_path: Path,
    bootstrap: str,
    hosts: list[str],
    port: int,
    jars: list[str],
    *,
    example: str,
    store: dict[str, Any],
    dropped: list[str],
) -> localrun.App:
    app_id = localrun.unique(example[:5])
    localrun.create_topic(bootstrap, f"{app_id}-in", 3)
    localrun.create_topic(bootstrap, f"{app_id}-out", 3)
    module = {"order-locations": "order_locations.py", "dedup": "dedup.py"}[example]
    app = localrun.App(
        app_id=app_id,
        bootstrap=bootstrap,
        cassandra_hosts=hosts,
        cassandra_port=port,
        keyspace="floe_ex_" + app_id.split("-")[-1],
        topics=[f"{app_id}-in"],
        output_topics=[f"{app_id}-out"],
        entrypoint=str(localrun.ROOT / "examples" / example / module),
        stores=[store],
        spark_jars=jars,
        workdir=tmp_path,
    )
    dropped.append(app.keyspace)
    return app


def produce_keyed(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        p.produce(topic, key=key.encode(), value=value)
    p.flush()


def read_with_headers(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    ends = localrun.end_offsets(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": localrun.unique("rd"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    out, want, deadline = [], sum(ends.values()), time.monotonic() + 30
    while len(out) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out.append((m.key(), m.value(), {k: v for k, v in (m.headers() or [])}))
    c.close()
    return out


def test_order_locations(
    tmp_path: Path,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    spark_jars: list[str],
    session: Any,
    dropped_keyspaces: list[str],
) -> None:
    app = make_app(
        tmp_path,
        kafka_bootstrap,
        cassandra_hosts,
        cassandra_port,
        spark_jars,
        example="order-locations",
        store={"name": "order-locations"},
        dropped=dropped_keyspaces,
    )
    rng = random.Random(4)
    records, latest = [], {}
    for i in range(600):
        order = f"o-{rng.randrange(40)}"
        loc = {
            "order_id": order,
            "lat": round(rng.uniform(-90, 90), 4),
            "lon": round(rng.uniform(-180, 180), 4),
            "ts": i,
        }
        records.append((order, json.dumps(loc).encode()))
        latest[order] = {"lat": loc["lat"], "lon": loc["lon"], "ts": i}
    bad = [("o-bad-1", b"{not json"), ("o-bad-2", b"\xff\xfe"), ("o-bad-3", b"[1, 2]")]
    produce_keyed(kafka_bootstrap, app.topics[0], records[:300] + bad + records[300:])
    token = "order-locations-query-token"
    replica = localrun.Replica(app, "r0", FLOE_METRICS_QUERY_TOKEN=token, FLOE_METRICS_QUERY_AUTH="token").start()
    try:
        localrun.wait_caught_up(session, app, app.topics, timeout=400, replicas=[replica])
        got = localrun.read_store(session, app.keyspace, "order-locations", key_serde="str", value_serde="json")
        assert got == latest
        dlq = read_with_headers(kafka_bootstrap, f"{app.app_id}-dlq")
        assert sorted(k for k, _, _ in dlq) == [b"o-bad-1", b"o-bad-2", b"o-bad-3"]
        assert all(h["floe.error"] and h["floe.topic"] == app.topics[0].encode() for _, _, h in dlq)
        port = replica.env["FLOE_METRICS_QUERY_PORT"]
        url = f"http://127.0.0.1:{port}/stores/order-locations/keys/o-7"
        # the query endpoint answers only the app's token: none, or another, is a 401
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
            assert refused.value.code == 401, headers
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            body = json.loads(r.read())
        assert body["value"] == latest["o-7"]
        with urllib.request.urlopen(f"http://127.0.0.1:{replica.metrics_port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert f'floe_job_records_dead_lettered_total{{app="{app.app_id}"}} 3.0' in metrics
        # every order's latest location is known to the replica, which owns every partition
        assert f'floe_job_state_cache_keys{{app="{app.app_id}"}} {float(len(latest))}' in metrics
    finally:
        assert replica.stop() == 0


def test_dedup(
    tmp_path: Path,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    spark_jars: list[str],
    session: Any,
    dropped_keyspaces: list[str],
) -> None:
    app = make_app(
        tmp_path,
        kafka_bootstrap,
        cassandra_hosts,
        cassandra_port,
        spark_jars,
        example="dedup",
        store={"name": "seen-ids", "ttl_seconds": 3600},
        dropped=dropped_keyspaces,
    )
    rng = random.Random(8)
    events = [(f"e-{rng.randrange(300)}", f"payload-{i}".encode()) for i in range(1500)]
    produce_keyed(kafka_bootstrap, app.topics[0], events[:700])
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, app.topics, timeout=400, replicas=[replica])
        produce_keyed(kafka_bootstrap, app.topics[0], events[700:])
        localrun.wait_caught_up(session, app, app.topics, timeout=400, replicas=[replica])
        out = read_with_headers(kafka_bootstrap, app.output_topics[0])
        first: dict[str, bytes] = {}
        for k, v in events:
            first.setdefault(k, v)
        assert sorted((k.decode(), v) for k, v, _ in out if k and v) == sorted(first.items())
    finally:
        assert replica.stop() == 0
