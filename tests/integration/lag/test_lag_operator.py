"""The lag loop inside the running operator (Kopf's runner, the real API server, Kafka and Cassandra):
status.lag and status.autoscaling written, the Lag printer column filled, series exported,
and no scaling while the app's Deployment is still rolling out."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import kopf.testing
import pytest
import yaml
from floe_operator import handlers, model
from floe_operator.lag import loop as lag_loop
from prometheus_client import REGISTRY

from ..waiting import wait_for
from .conftest import OffsetsRows, produce
from .test_lag_scalers_apply import apply_crds, apply_keda_crds

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def run(binary: str, kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [binary, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def namespace(kubectl: str, kubeconfig: str) -> Iterator[str]:
    apply_crds(kubectl, kubeconfig, ROOT / "crds/streamingapp.yaml", "streamingapps.streaming.floe.dev")
    name = f"floe-lag-op-{uuid.uuid4().hex[:6]}"
    run(kubectl, kubeconfig, "create", "namespace", name)
    yield name
    run(kubectl, kubeconfig, "delete", "namespace", name, "--wait=false")


def test_operator_writes_lag_status_and_holds_during_rollout(
    namespace: str,
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    producer: Any,
    cql: Any,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
) -> None:
    topic = make_topic(2)
    keyspace = f"it_lag_op_{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": model.API_VERSION,
        "kind": model.KIND,
        "metadata": {"name": "lagged", "namespace": namespace},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "replicas": 2,
            "kafka": {"bootstrapServers": kafka_bootstrap, "topics": [topic]},
            "state": {"cassandra": {"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}},
            "autoscaling": {"mode": "Native", "maxReplicas": 4},
        },
    }
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=5.0, started=started))
    lag_loop.register(registry, lag_loop.Options(interval_seconds=1.0, status_seconds=1.0))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", namespace], registry=registry, timeout=60)
    try:
        with runner:
            assert started.wait(timeout=30)
            run(
                kubectl,
                kubeconfig,
                "apply",
                "--server-side",
                "--field-manager=floe-tests",
                "-f",
                "-",
                stdin=yaml.safe_dump(body),
            )

            def get() -> dict[str, Any]:
                return json.loads(
                    run(kubectl, kubeconfig, "get", "streamingapp", "lagged", "-n", namespace, "-o", "json")
                )

            # The reconcile provisions the offsets table; then the app "commits" as its runtime would.
            wait_for(lambda: (get().get("status") or {}).get("keyspace"), timeout=60, what="state provisioned")
            app = model.StreamingApp.from_body(get())
            produce(producer, topic, {0: 15, 1: 7})
            OffsetsRows(cql, keyspace, app.app_id).commit(topic, {0: 10, 1: 7})

            status = wait_for(
                lambda: (s := get().get("status") or {}).get("lag", {}).get("records") == 5 and s,
                timeout=30,
                what="status.lag.records = 5",
            )
            assert status["lag"]["topics"][topic]["records"] == 5
            assert status["lag"]["stale"] is False and status["lag"]["status"] in ("OK", "WARN")
            auto = status["autoscaling"]
            assert auto["mode"] == "Native"
            # No kubelet in the stack: the Deployment never becomes available, so no decision is made.
            assert auto["reason"] == "RolloutInProgress" and auto["desiredReplicas"] == 2
            column = run(kubectl, kubeconfig, "get", "streamingapp", "lagged", "-n", namespace)
            assert column.splitlines()[0].split()[3] == "LAG" and column.splitlines()[1].split()[3] == "5"
            labels = {"namespace": namespace, "app": "lagged", "topic": topic, "partition": "0"}
            assert REGISTRY.get_sample_value("floe_consumergroup_lag", labels) == 5
            assert (
                REGISTRY.get_sample_value("floe_consumergroup_sum_lag", {"namespace": namespace, "app": "lagged"}) == 5
            )
            assert get()["spec"]["replicas"] == 2
            run(
                kubectl,
                kubeconfig,
                "delete",
                "streamingapp",
                "lagged",
                "-n",
                namespace,
                "--wait=true",
                "--timeout=100s",
            )
    finally:
        cql.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    assert runner.exception is None, runner.exception


def test_hpa_mode_gets_an_hpa_and_switching_back_to_native_removes_it(
    namespace: str,
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    cql: Any,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
) -> None:
    topic = make_topic(3)
    keyspace = f"it_lag_op_{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": model.API_VERSION,
        "kind": model.KIND,
        "metadata": {"name": "hpa", "namespace": namespace},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "replicas": 1,
            "kafka": {"bootstrapServers": kafka_bootstrap, "topics": [topic], "maxRecordsPerBatch": 5000},
            "state": {"cassandra": {"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}},
            "autoscaling": {"mode": "HPA", "maxReplicas": 10},
        },
    }
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=2.0, started=started))
    lag_loop.register(registry, lag_loop.Options(interval_seconds=1.0))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", namespace], registry=registry, timeout=60)

    def hpa() -> dict[str, Any] | None:
        out = run(kubectl, kubeconfig, "get", "hpa", "hpa", "-n", namespace, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    try:
        with runner:
            assert started.wait(timeout=30)
            run(
                kubectl,
                kubeconfig,
                "apply",
                "--server-side",
                "--field-manager=floe-tests",
                "-f",
                "-",
                stdin=yaml.safe_dump(body),
            )
            live = wait_for(hpa, timeout=60, what="the HPA")
            spec = live["spec"]
            assert spec["scaleTargetRef"] == {"apiVersion": model.API_VERSION, "kind": model.KIND, "name": "hpa"}
            assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 3)  # capped at the 3 partitions
            assert spec["metrics"][0]["external"]["target"]["averageValue"] == "5k"
            owner = live["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == (model.KIND, "hpa")

            body["spec"]["autoscaling"]["mode"] = "Native"
            run(
                kubectl,
                kubeconfig,
                "apply",
                "--server-side",
                "--field-manager=floe-tests",
                "-f",
                "-",
                stdin=yaml.safe_dump(body),
            )
            wait_for(lambda: hpa() is None or None, timeout=60, what="the HPA removed")
            run(kubectl, kubeconfig, "delete", "streamingapp", "hpa", "-n", namespace, "--wait=true", "--timeout=100s")
    finally:
        cql.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    assert runner.exception is None, runner.exception


def test_keda_mode_gets_a_scaled_object_once_keda_is_installed(
    namespace: str,
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    cql: Any,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
) -> None:
    apply_keda_crds(kubectl, kubeconfig)
    topic = make_topic(2)
    keyspace = f"it_lag_op_{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": model.API_VERSION,
        "kind": model.KIND,
        "metadata": {"name": "keda", "namespace": namespace},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "replicas": 1,
            "kafka": {"bootstrapServers": kafka_bootstrap, "topics": [topic]},
            "state": {"cassandra": {"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}},
            "autoscaling": {"mode": "KEDA", "minReplicas": 0, "maxReplicas": 4},
        },
    }
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=2.0, started=started))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", namespace], registry=registry, timeout=60)

    def scaled_object() -> dict[str, Any] | None:
        out = run(
            kubectl,
            kubeconfig,
            "get",
            "scaledobjects.keda.sh",
            "keda",
            "-n",
            namespace,
            "-o",
            "json",
            "--ignore-not-found",
        )
        return json.loads(out) if out.strip() else None

    try:
        with runner:
            assert started.wait(timeout=30)
            run(
                kubectl,
                kubeconfig,
                "apply",
                "--server-side",
                "--field-manager=floe-tests",
                "-f",
                "-",
                stdin=yaml.safe_dump(body),
            )
            so = wait_for(scaled_object, timeout=60, what="the ScaledObject")
            assert so["spec"]["scaleTargetRef"]["kind"] == model.KIND
            trigger = so["spec"]["triggers"][0]
            assert trigger["type"] == "kafka" and trigger["metadata"]["topic"] == topic
            assert trigger["metadata"]["consumerGroup"] == f"floe.{namespace}.keda"
            run(kubectl, kubeconfig, "delete", "streamingapp", "keda", "-n", namespace, "--wait=true", "--timeout=100s")
    finally:
        cql.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    assert runner.exception is None, runner.exception
