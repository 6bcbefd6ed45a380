"""Fixtures for the operator's integration tests: the real API server, Kafka and Cassandra of the
local stack, the CRD installed, and the operator running in-process with Kopf's runner."""

from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kopf.testing
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from floe_operator import handlers

from tests import leftovers

from .kube import Kubectl

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "streamingapp.yaml"
SNAPSHOT_CRD = ROOT / "crds" / "streamingappsnapshot.yaml"
RESYNC_SECONDS = 2.0


@pytest.fixture(scope="session")
def kube(kubectl: str, kubeconfig: str) -> Kubectl:
    k = Kubectl(kubectl, kubeconfig)
    for crd in (CRD, SNAPSHOT_CRD):
        k.run("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    k.run("wait", "--for=condition=Established", "--timeout=60s", "crd/streamingapps.streaming.floe.dev",
          "crd/streamingappsnapshots.streaming.floe.dev")
    return k


@pytest.fixture(scope="module")
def namespace(kube: Kubectl) -> Iterator[str]:
    name = leftovers.prefix(f"floe-op-it-{uuid.uuid4().hex[:6]}")  # its apps' topics start with it
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """A real 3-partition input topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = leftovers.topic(f"floe-op-it-{uuid.uuid4().hex[:6]}")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=1)])[name].result(timeout=30)
    return name


@pytest.fixture(scope="module")
def keyspace(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[str]:
    from cassandra.cluster import Cluster

    name = f"floe_op_it_{uuid.uuid4().hex[:6]}"
    yield name
    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def cql(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[Any]:
    from cassandra.cluster import Cluster

    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    session = cluster.connect()
    yield session
    cluster.shutdown()


@pytest.fixture(scope="module")
def operator(kube: Kubectl, namespace: str) -> Iterator[kopf.testing.KopfRunner]:
    """The operator, in-process, watching the test namespace, resyncing every 2 s."""
    with running_operator(kube, namespace, resync_seconds=RESYNC_SECONDS) as runner:
        yield runner


@contextlib.contextmanager
def running_operator(
    kube: Kubectl,
    namespace: str,
    *,
    resync_seconds: float,
    also: Sequence[str] = (),
    lag_interval_seconds: float | None = None,
) -> Iterator[kopf.testing.KopfRunner]:
    """The operator, in-process, watching `namespace` (and the namespaces `also`), with its lag
    loop every `lag_interval_seconds` when given; their apps are deleted before it stops."""
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=resync_seconds, started=started))
    if lag_interval_seconds is not None:
        from floe_operator.lag import loop as lag_loop

        lag_loop.register(registry, lag_loop.Options(interval_seconds=lag_interval_seconds))
    watched = [namespace, *also]
    runner = kopf.testing.KopfRunner(
        ["run", "--standalone", *(arg for ns in watched for arg in ("--namespace", ns))], registry=registry, timeout=60
    )
    with runner:
        assert started.wait(timeout=30), "the operator did not start"
        yield runner
        # Delete the apps while the operator still runs, so their finalizers are honoured; then
        # the snapshots left (the finalizer of one with deletionPolicy Delete is the operator's).
        for ns in watched:
            kube.run("delete", "streamingapp", "--all", "-n", ns, "--wait=true", "--timeout=90s", timeout=120)
            kube.run("delete", "streamingappsnapshot", "--all", "-n", ns, "--wait=true", "--timeout=120s", timeout=150)
    assert runner.exception is None, runner.exception


def pods_state(stack_env: dict[str, str]) -> tuple[str, str]:
    """(Degraded status, Ready reason) of an app whose image is not built here, once its status
    follows its Deployment: with the stack's node, admission refuses its pods (the node runs only
    images built here) and the app says so; without a node the scheduler has nowhere to put them,
    and the app says that."""
    if stack_env.get("FLOE_NODE") == "1":
        return "True", "PodsRejected"
    return "True", "Unschedulable"


def counts_store(app: str) -> str:
    """The partitioned store of the app `app_manifest` makes: its own, since two apps may not write
    one store table."""
    return f"{app}-counts"


def app_manifest(
    name: str, namespace: str, *, topic: str, keyspace: str, kafka: str, hosts: list[str], port: int, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "streaming.floe.dev/v1alpha1",
        "kind": "StreamingApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "registry.example.com/floe/word-count:1.0.0",
            "job": {"entrypoint": "wordcount.app:transform"},
            "replicas": 2,
            "kafka": {"bootstrapServers": kafka, "topics": [topic]},
            "state": {
                "cassandra": {"hosts": hosts, "port": port, "keyspace": keyspace},
                # a partitioned store of its own (one writer per store table), a global one shared
                "stores": [{"name": counts_store(name)}, {"name": "latest", "type": "global", "ttlSeconds": 3600}],
            },
        },
    }
    for key, value in spec.items():
        body["spec"][key] = value
    return body


@pytest.fixture(scope="module")
def spec_args(
    namespace: str, topic: str, keyspace: str, kafka_bootstrap: str, cassandra_hosts: list[str], cassandra_port: int
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "topic": topic,
        "keyspace": keyspace,
        "kafka": kafka_bootstrap,
        "hosts": cassandra_hosts,
        "port": cassandra_port,
    }
