"""The lag loop against a real API server that refuses it at first, then lets it in: the app is
kept and reported stale while its Secret cannot be read, and measured (real Kafka offsets, real
Cassandra commits) with its status written as soon as the RBAC allows it. Nothing is restarted."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_operator import k8s, kafka, model
from floe_operator.lag import loop as lag_loop
from floe_operator.lag import metrics as lag_metrics
from floe_operator.lag import scrape as lag_scrape
from prometheus_client import CollectorRegistry

from .conftest import OffsetsRows, produce

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "lag-reader"


def token_kubeconfig(env: dict[str, str], kubectl: str, path: Path, *, namespace: str, account: str) -> Path:
    """A kubeconfig that authenticates as ServiceAccount `namespace/account`, so the loop runs with
    exactly the RBAC granted to it."""
    token = subprocess.run([kubectl, f"--kubeconfig={env['KUBECONFIG']}", "-n", namespace, "create", "token", account,
                            "--duration=1h"], capture_output=True, text=True, check=True).stdout.strip()
    admin = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "floe", "context": {"cluster": cluster["name"], "user": account}}],
        "current-context": "floe",
    }))
    path.chmod(0o600)
    return path


def kube(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [env["FLOE_KUBECTL"], *args], input=stdin, capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def namespace(stack_env: dict[str, str], kubeconfig: str) -> Iterator[str]:
    env = {**os.environ, **stack_env, "KUBECONFIG": kubeconfig}
    kube(env, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds/streamingapp.yaml"))
    kube(env, "wait", "--for=condition=Established", "--timeout=60s", "crd/streamingapps.streaming.floe.dev")
    name = f"floe-lag-rec-{uuid.uuid4().hex[:6]}"
    kube(env, "create", "namespace", name)
    kube(env, "-n", name, "create", "serviceaccount", ACCOUNT)
    yield name
    kube(env, "delete", "namespace", name, "--wait=false")


def grant(env: dict[str, str], namespace: str) -> None:
    """What the chart grants the operator for lag: read Secrets, write the app's status."""
    rules = [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
        {"apiGroups": [model.GROUP], "resources": [f"{model.PLURAL}/status"], "verbs": ["patch"]},
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": ACCOUNT, "namespace": namespace},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": ACCOUNT, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }
    kube(env, "apply", "-f", "-", stdin=yaml.safe_dump_all([role, binding]))


def series(registry: CollectorRegistry, name: str, **labels: str) -> list[float]:
    """Values of one metric family as Prometheus would read them from `registry`."""
    return [
        s.value
        for family in registry.collect()
        if family.name == name
        for s in family.samples
        if labels.items() <= s.labels.items()
    ]


def test_app_refused_by_rbac_is_kept_stale_then_measured_once_allowed(
    namespace: str,
    stack_env: dict[str, str],
    kubeconfig: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    app_manifest: Callable[..., dict[str, Any]],
    make_topic: Any,
    producer: Any,
    cql: Any,
    keyspace: str,
) -> None:
    admin = {**os.environ, **stack_env, "KUBECONFIG": kubeconfig}
    topic = make_topic(2)
    produce(producer, topic, {0: 5, 1: 5})
    secret_env = [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "reader-creds", "key": "password"}}}]
    body = app_manifest("reader", namespace, topics=[topic], keyspace=keyspace, env=secret_env)
    kube(admin, "-n", namespace, "create", "secret", "generic", "reader-creds", "--from-literal=password=p")
    kube(admin, "apply", "-f", "-", stdin=json.dumps(body))
    created = json.loads(kube(admin, "-n", namespace, "get", model.PLURAL, "reader", "-o", "json"))
    app_id = model.StreamingApp.from_body(created).app_id
    OffsetsRows(cql, keyspace, app_id).commit(topic, {0: 2, 1: 3})  # lag 3 + 2

    # The loop authenticates as a ServiceAccount that may not read Secrets yet.
    path = token_kubeconfig(
        admin, admin["FLOE_KUBECTL"], tmp_path / "reader.kubeconfig", namespace=namespace, account=ACCOUNT
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    loop = lag_loop.LagLoop(
        cluster=k8s.Cluster(k8s.load_client()),
        scraper=lag_scrape.Scraper(
            kafka_offsets=lag_scrape.KafkaOffsets(timeout=3.0),
            cassandra_offsets=lag_scrape.CassandraOffsets(lambda target: cql),
            partitions_of=kafka.Inspector(ttl=0.0).partitions_sync,
        ),
        metrics=metrics,
        options=lag_loop.Options(interval_seconds=1.0, status_seconds=0.0),
        apps={(namespace, "reader"): created},  # what the apps index would hold
    )

    asyncio.run(loop.tick())
    assert series(registry, "floe_lag_metrics_stale", app="reader") == [1.0]
    assert series(registry, "floe_consumergroup_lag", app="reader") == []
    assert (namespace, "reader") in loop.apps and (namespace, "reader") in loop.memory

    grant(admin, namespace)
    for _ in range(60):  # RBAC changes reach the authorizer within moments
        asyncio.run(loop.tick())
        if series(registry, "floe_lag_metrics_stale", app="reader") == [0.0]:
            break
        time.sleep(0.5)
    assert series(registry, "floe_lag_metrics_stale", app="reader") == [0.0]
    assert sorted(series(registry, "floe_consumergroup_lag", app="reader")) == [2.0, 3.0]
    status = json.loads(kube(admin, "-n", namespace, "get", model.PLURAL, "reader", "-o", "json"))["status"]
    assert status["lag"]["records"] == 5 and status["lag"]["stale"] is False
