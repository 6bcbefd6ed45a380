"""The NetworkPolicy the operator writes for an app, as the real API server admitted it
(docs/security.md, "Traffic"). The local stack has no network plugin that enforces
NetworkPolicies, so what is checked is what enforcement would act on: the policy selects the
app's pods (the replicas of the Deployment's template and the executors of its pod template) and
admits the ports those pods' containers listen on, from the peers spec.networkPolicy names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

APP = "fenced"


@pytest.fixture(scope="module")
def app(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> dict[str, Any]:
    body = app_manifest(APP, **spec_args)
    body["spec"]["spark"] = {"master": "k8s://https://kubernetes.default.svc:443", "executor": {"instances": 1}}
    kube.apply(body)
    wait_for(lambda: kube.get("networkpolicy", APP, spec_args["namespace"]), what="the app's NetworkPolicy")
    wait_for(lambda: kube.get("deployment", APP, spec_args["namespace"]), what="the app's Deployment")
    return body


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, selector
    return selector["matchLabels"].items() <= labels.items()


def test_the_policy_selects_the_replicas_and_the_executors(kube: Kubectl, namespace: str, app: dict[str, Any]) -> None:
    policy = kube.get("networkpolicy", APP, namespace)
    deployment = kube.get("deployment", APP, namespace)
    config = kube.get("configmap", f"{APP}-config", namespace)
    assert policy is not None and deployment is not None and config is not None
    executor = yaml.safe_load(config["data"]["executor-pod.yaml"])
    selector = policy["spec"]["podSelector"]
    assert _selects(selector, deployment["spec"]["template"]["metadata"]["labels"])
    assert _selects(selector, executor["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    # no other app's pods: another app's labels differ in app.kubernetes.io/name
    assert selector["matchLabels"]["app.kubernetes.io/name"] == APP


def test_the_policy_admits_the_containers_ports_from_the_right_peers(
    kube: Kubectl, namespace: str, app: dict[str, Any]
) -> None:
    policy = kube.get("networkpolicy", APP, namespace)
    deployment = kube.get("deployment", APP, namespace)
    assert policy is not None and deployment is not None
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "app"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    own, metrics, query = policy["spec"]["ingress"]
    # the app's own pods (replicas and executors) on every port: the drivers' and executors' included
    assert "ports" not in own and own["from"] == [{"podSelector": policy["spec"]["podSelector"]}]
    assert {"spark-driver", "spark-blockmgr"} <= set(ports)
    assert metrics["ports"] == [{"protocol": "TCP", "port": ports["http"]}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert query["ports"] == [{"protocol": "TCP", "port": ports["query"]}]
    assert query["from"] == [{"podSelector": {}}]  # the app's namespace only


def test_the_query_token_secret_is_the_apps_and_the_pods_read_it(
    kube: Kubectl, namespace: str, app: dict[str, Any]
) -> None:
    secret = kube.get("secret", f"{APP}-query", namespace)
    deployment = kube.get("deployment", APP, namespace)
    assert secret is not None and deployment is not None
    assert len(secret["data"]["token"]) >= 40
    assert [o["kind"] for o in secret["metadata"]["ownerReferences"]] == ["StreamingApp"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "app"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FLOE_METRICS_QUERY_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{APP}-query", "key": "token", "optional": True
    }


def test_turning_it_off_removes_it(kube: Kubectl, namespace: str, app: dict[str, Any]) -> None:
    kube.run("patch", "streamingapp", APP, "-n", namespace, "--type=merge", "-p",
             '{"spec": {"networkPolicy": {"enabled": false}}}')
    wait_for(lambda: kube.get("networkpolicy", APP, namespace) is None, what="the NetworkPolicy removed")
