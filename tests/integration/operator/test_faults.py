"""What only the operator can know: a missing Secret or key, a missing topic, Cassandra or Kafka
unreachable. Each gives Degraded with a precise reason, no Deployment, retries, and recovery once
fixed; the other apps keep being served."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]


def _degraded(kube: Kubectl, name: str, namespace: str, reason: str) -> dict[str, Any]:
    return wait_for(
        lambda: (
            (o := kube.get("streamingapp", name, namespace)) and condition(o, "Degraded").get("reason") == reason and o
        ),
        what=f"Degraded {reason} on {name}",
        timeout=60,
    )


def _event(kube: Kubectl, name: str, namespace: str, reason: str, type_: str = "Warning") -> None:
    """Waits for the operator's Event `reason` on app `name` (posted from a handler or a resync)."""
    wait_for(
        lambda: [
            e
            for e in kube.list("event", namespace)
            if e["involvedObject"]["name"] == name
            and e["reason"] == reason
            and e["type"] == type_
            and e["source"].get("component") == "floe-operator"
        ],
        what=f"a {type_} event {reason}",
    )


def test_missing_secret_then_key_then_recovery(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> None:
    ns = spec_args["namespace"]
    # No pods: their image is not built here, a fault of its own once the Secret is fixed.
    body = app_manifest("needs-secret", **spec_args, replicas=0)
    body["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": "cass-creds"}
    kube.apply(body)
    obj = _degraded(kube, "needs-secret", ns, "SecretNotFound")
    assert condition(obj, "Degraded")["status"] == "True"
    assert "Secret cass-creds not found" in condition(obj, "Degraded")["message"]
    assert condition(obj, "Ready")["reason"] == "SecretNotFound"
    assert kube.get("deployment", "needs-secret", ns) is None
    _event(kube, "needs-secret", ns, "SecretNotFound")

    kube.run("create", "secret", "generic", "cass-creds", "-n", ns, "--from-literal=username=floe")
    obj = _degraded(kube, "needs-secret", ns, "SecretKeyNotFound")
    assert "has no key password" in condition(obj, "Degraded")["message"]
    assert kube.get("deployment", "needs-secret", ns) is None
    _event(kube, "needs-secret", ns, "SecretKeyNotFound")

    kube.run("delete", "secret", "cass-creds", "-n", ns)
    kube.run(
        "create",
        "secret",
        "generic",
        "cass-creds",
        "-n",
        ns,
        "--from-literal=username=floe",
        "--from-literal=password=x",
    )
    dep = wait_for(lambda: kube.get("deployment", "needs-secret", ns), what="the Deployment after the fix")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FLOE_CASSANDRA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "cass-creds", "key": "password", "optional": True
    }
    cm = kube.get("configmap", "needs-secret-config", ns)
    assert cm is not None and "password" not in cm["data"]["floe.yaml"]
    obj = wait_for(
        lambda: (
            (o := kube.get("streamingapp", "needs-secret", ns)) and condition(o, "Degraded")["status"] == "False" and o
        ),
        what="Degraded False",
    )
    assert condition(obj, "Degraded")["reason"] == "AsExpected"
    _event(kube, "needs-secret", ns, "Provisioned", "Normal")


def test_missing_topic_then_recovery(
    kube: Kubectl, spec_args: dict[str, Any], kafka_bootstrap: str, operator: object
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    ns = spec_args["namespace"]
    missing = f"floe-op-missing-{uuid.uuid4().hex[:6]}"
    kube.apply(app_manifest("needs-topic", **{**spec_args, "topic": missing}))
    obj = _degraded(kube, "needs-topic", ns, "TopicNotFound")
    assert f"Input topic {missing} not found" in condition(obj, "Degraded")["message"]
    assert kube.get("deployment", "needs-topic", ns) is None

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(missing, num_partitions=1, replication_factor=1)])[missing].result(timeout=30)
    wait_for(lambda: kube.get("deployment", "needs-topic", ns), what="the Deployment after the topic exists")
    obj = wait_for(
        lambda: (
            (o := kube.get("streamingapp", "needs-topic", ns)) and (o.get("status") or {}).get("partitions") == 1 and o
        ),
        what="partitions counted",
    )
    # 2 replicas, 1 partition: one replica would idle.
    assert condition(obj, "ReplicasWithinPartitions")["reason"] == "ReplicasExceedPartitions"


def test_unreachable_services_degrade_without_blocking_others(
    kube: Kubectl, spec_args: dict[str, Any], operator: object, capfd: pytest.CaptureFixture[str]
) -> None:
    ns = spec_args["namespace"]
    kube.apply(app_manifest("no-cassandra", **{**spec_args, "port": 1}))
    kube.apply(app_manifest("no-kafka", **{**spec_args, "kafka": "127.0.0.1:1"}))
    kube.apply(app_manifest("healthy", **spec_args))
    wait_for(lambda: kube.get("deployment", "healthy", ns), what="the healthy app's Deployment")
    obj = _degraded(kube, "no-cassandra", ns, "CassandraUnavailable")
    assert "127.0.0.1:1" in condition(obj, "Degraded")["message"]
    assert condition(obj, "StateProvisioned")["status"] == "False"
    obj = _degraded(kube, "no-kafka", ns, "KafkaUnavailable")
    assert "127.0.0.1:1" in condition(obj, "Degraded")["message"]
    assert kube.get("deployment", "no-cassandra", ns) is None
    assert kube.get("deployment", "no-kafka", ns) is None
    # The unreachable cluster is the app's status, not a line per reconnect in the operator's log.
    time.sleep(3)
    noise = [line for line in capfd.readouterr().err.splitlines() if "rdkafka" in line]
    assert not noise, f"librdkafka lines in the operator's log: {noise[:3]}"
    # A Degraded app, retrying in the background, is still deleted promptly: its resync timer may
    # be mid-probe (a 5 s Kafka timeout), and the finalizer goes as soon as that probe returns.
    for name in ("no-kafka", "no-cassandra"):
        kube.run("delete", "streamingapp", name, "-n", ns, "--wait=true", "--timeout=20s")
        assert kube.get("streamingapp", name, ns) is None


def test_a_secret_the_operator_may_not_read_degrades_the_app(
    kube: Kubectl, kubeconfig: str, spec_args: dict[str, Any]
) -> None:
    """A pass run by a ServiceAccount without RBAC on Secrets (a narrowed install): the real
    API server refuses the read, and the app is Degraded with the grant to add, nothing applied."""
    import asyncio

    import kubernetes
    from floe_operator import cassandra, k8s, kafka, reconcile

    ns = spec_args["namespace"]
    account = f"no-secrets-{uuid.uuid4().hex[:6]}"
    kube.run("create", "serviceaccount", account, "-n", ns)
    kube.run("create", "secret", "generic", f"{account}-creds", "-n", ns, "--from-literal=username=u")
    token = kube.run("create", "token", account, "-n", ns).stdout.strip()
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=config)
    config.cert_file = config.key_file = None  # the ServiceAccount's token, not the admin's certificate
    config.api_key = {"authorization": f"Bearer {token}"}
    deps = reconcile.Deps(
        cluster=k8s.Cluster(kubernetes.client.ApiClient(config)),
        provisioner=cassandra.Provisioner(),
        kafka=kafka.Inspector(),
    )
    body = app_manifest("narrowed", **spec_args)
    body["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": f"{account}-creds"}
    outcome = asyncio.run(reconcile.reconcile(body, deps=deps, children={}))
    assert outcome.fault is not None and outcome.fault.reason == "SecretUnreadable", outcome.fault
    assert f"Reading Secret {account}-creds in namespace {ns} failed (HTTP 403: " in outcome.fault.message
    assert outcome.fault.message.endswith(f"grant the operator's ServiceAccount get on Secrets in namespace {ns}")
    assert outcome.applied == []
    deps.provisioner.close()
