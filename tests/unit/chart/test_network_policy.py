"""The operator's NetworkPolicy, as rendered: on by default, over the operator's pods only,
admitting its metrics and health ports and nothing else."""

from __future__ import annotations

import pytest

from . import chartkit
from .chartkit import by_kind, one

pytestmark = pytest.mark.helm


def test_the_operator_takes_connections_only_on_its_metrics_and_health_ports(render: chartkit.Render) -> None:
    docs = render({"operator": {"metricsPort": 8088, "healthPort": 8089}})
    policy = one(docs, "NetworkPolicy")
    deployment = one(docs, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = [p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]]
    admitted = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert sorted(admitted) == sorted(ports) == [8088, 8089]
    assert all("from" not in rule for rule in policy["spec"]["ingress"])


def test_metrics_peers_and_off(render: chartkit.Render) -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    policy = one(render({"networkPolicy": {"metricsFrom": [peer]}}), "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [peer]
    assert by_kind(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy") == []


def test_metrics_auth_is_off_by_default_and_when_on_grants_the_reviews(render: chartkit.Render) -> None:
    def env(docs: list[dict]) -> dict[str, str]:  # type: ignore[type-arg]
        container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    def reviews(docs: list[dict]) -> set[str]:  # type: ignore[type-arg]
        rules = one(docs, "ClusterRole")["rules"]
        return {r for rule in rules for r in rule["resources"] if r.endswith("reviews") and "create" in rule["verbs"]}

    off = render()
    assert env(off)["FLOE_METRICS_AUTH"] == "none" and reviews(off) == set()
    on = render({"operator": {"metricsAuth": True}})
    assert env(on)["FLOE_METRICS_AUTH"] == "kubernetes"
    assert reviews(on) == {"tokenreviews", "subjectaccessreviews"}
