"""The local stack is real: each component does the job tests and the demo rely on."""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Any

import pytest

from tests import leftovers


@pytest.fixture(scope="module")
def kafka_record(kafka_bootstrap: str) -> tuple[str, bytes, bytes]:
    """A topic holding exactly one record, produced through the real broker."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = leftovers.topic(f"stack-test-{uuid.uuid4().hex[:8]}")  # removed after the module
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    key, value = b"k-" + uuid.uuid4().hex.encode(), b"hello floe"
    producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    return topic, key, value


@pytest.mark.kafka
def test_kafka_produces_and_consumes(kafka_bootstrap: str, kafka_record: tuple[str, bytes, bytes]) -> None:
    from confluent_kafka import Consumer

    topic, key, value = kafka_record
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        msg = None
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None, "no record consumed within 60 s"
        assert (msg.key(), msg.value(), msg.offset()) == (key, value, 0)
    finally:
        consumer.close()


@pytest.mark.cassandra
def test_cassandra_creates_and_reads_a_table(cassandra_hosts: list[str], cassandra_port: int) -> None:
    from cassandra.cluster import Cluster

    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    session = cluster.connect()
    try:
        session.execute("CREATE KEYSPACE IF NOT EXISTS stack_test WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        table = f"stack_test.t_{uuid.uuid4().hex[:8]}"
        session.execute(f"CREATE TABLE {table} (k text PRIMARY KEY, v int)")
        session.execute(f"INSERT INTO {table} (k, v) VALUES (%s, %s)", ("answer", 42))
        row = session.execute(f"SELECT v FROM {table} WHERE k = %s", ("answer",)).one()
        assert row is not None and row.v == 42
        version = session.execute("SELECT release_version FROM system.local").one().release_version
        assert version.startswith("5.0")
        session.execute(f"DROP TABLE {table}")
    finally:
        cluster.shutdown()


@pytest.mark.k8s
def test_apiserver_and_controller_manager_reconcile_a_deployment(kubeconfig: str) -> None:
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig)
    api = client.ApiClient()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = f"stack-test-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"greeting": "hello"}})
        assert core.read_namespaced_config_map("cm", ns).data == {"greeting": "hello"}
        labels = {"app": "web"}
        apps.create_namespaced_deployment(ns, {
            "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
        })
        deadline = time.monotonic() + 60
        owned = []
        while time.monotonic() < deadline and not owned:
            owned = [rs for rs in apps.list_namespaced_replica_set(ns).items
                     if any(o.kind == "Deployment" and o.name == "web" for o in rs.metadata.owner_references or [])]
            time.sleep(0.5)
        assert owned, "kube-controller-manager created no ReplicaSet for the Deployment within 60 s"
        assert owned[0].spec.replicas == 2
    finally:
        core.delete_namespace(ns)


@pytest.mark.k8s
def test_kubectl_matches_the_server_release(kubectl: str, kubeconfig: str, stack_env: dict[str, str]) -> None:
    out = subprocess.run([kubectl, "version", "-o", "json"], capture_output=True, text=True, check=True).stdout
    assert f'"gitVersion": "v{stack_env["FLOE_KUBE_VERSION"]}"' in out.replace('":"', '": "')


@pytest.mark.helm
def test_helm_version(helm: str, stack_env: dict[str, str]) -> None:
    out = subprocess.run([helm, "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert out.startswith(f"v{stack_env['FLOE_HELM_VERSION']}")


@pytest.mark.spark
@pytest.mark.kafka
def test_spark_reads_the_kafka_record_through_the_connector(
    spark: Any, kafka_bootstrap: str, kafka_record: tuple[str, bytes, bytes]
) -> None:
    """Reads through the suite's shared session: a session built here with getOrCreate would be
    that same session, and stopping it would stop Spark for every later test in the process."""
    topic, key, value = kafka_record
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest")
            .load().select("key", "value", "offset").collect())
    assert [(bytes(r.key), bytes(r.value), r.offset) for r in rows] == [(key, value, 0)]
