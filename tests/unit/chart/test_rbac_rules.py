"""The operator's RBAC, as rendered: what each mode grants, and nothing it should not.

The live counterpart (tests/integration/chart) asks the API server with `kubectl auth can-i`.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_operator import render as operator_render

from . import chartkit
from .chartkit import by_kind, one

pytestmark = pytest.mark.helm


def grants(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    for rule in rules:
        if group not in rule.get("apiGroups", []) or resource not in rule.get("resources", []):
            continue
        if verb not in rule.get("verbs", []) and "*" not in rule.get("verbs", []):
            continue
        names = rule.get("resourceNames")
        if names and (name is None or name not in names):
            continue
        return True
    return False


def test_no_wildcards_anywhere(render: chartkit.Render) -> None:
    for values in ({}, {"rbac": {"sparkOnKubernetes": True}}, {"operator": {"watchNamespaces": ["a"]}}):
        for doc in by_kind(render(values), "ClusterRole") + by_kind(render(values), "Role"):
            for rule in doc["rules"]:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule[key], rule


def test_cluster_wide_role_grants_what_the_operator_calls(render: chartkit.Render) -> None:
    rules = one(render(), "ClusterRole")["rules"]
    needed = [
        ("streaming.floe.dev", "streamingapps", ["get", "list", "watch", "patch"]),
        ("streaming.floe.dev", "streamingapps/status", ["patch"]),
        ("streaming.floe.dev", "streamingapps/scale", ["get", "patch", "update"]),
        ("streaming.floe.dev", "streamingapps/finalizers", ["update"]),
        ("apps", "deployments", ["get", "list", "watch", "create", "patch"]),
        ("", "configmaps", ["get", "list", "watch", "create", "patch"]),
        ("", "services", ["get", "list", "watch", "create", "patch", "delete"]),
        ("policy", "poddisruptionbudgets", ["get", "list", "watch", "create", "patch"]),
        ("networking.k8s.io", "networkpolicies", ["get", "create", "patch", "delete"]),
        ("", "secrets", ["get", "create"]),
        ("", "pods", ["list", "watch"]),
        ("", "events", ["create"]),
        ("", "serviceaccounts", ["get"]),
        ("rbac.authorization.k8s.io", "roles", ["get"]),
        ("rbac.authorization.k8s.io", "rolebindings", ["get"]),
        ("monitoring.coreos.com", "servicemonitors", ["get", "create", "patch", "delete"]),
        ("apiextensions.k8s.io", "customresourcedefinitions", ["list", "watch"]),
    ]
    for group, resource, verbs in needed:
        for verb in verbs:
            assert grants(rules, group, resource, verb), f"{verb} {resource}.{group}"
    sm_crd = "servicemonitors.monitoring.coreos.com"
    assert grants(rules, "apiextensions.k8s.io", "customresourcedefinitions", "get", sm_crd)


def test_cluster_wide_role_withholds_what_the_operator_never_does(render: chartkit.Render) -> None:
    # without executors on Kubernetes: the rights a driver's Role grants are not the operator's
    rules = one(render({"rbac": {"sparkOnKubernetes": False}}), "ClusterRole")["rules"]
    forbidden = [
        ("", "secrets", "list"),
        ("", "secrets", "watch"),
        ("", "pods", "delete"),
        ("", "pods", "create"),
        ("", "serviceaccounts", "create"),
        ("rbac.authorization.k8s.io", "roles", "create"),
        ("rbac.authorization.k8s.io", "roles", "escalate"),
        ("rbac.authorization.k8s.io", "roles", "bind"),
        ("apps", "deployments", "delete"),
        ("streaming.floe.dev", "streamingapps", "delete"),
        ("streaming.floe.dev", "streamingapps", "create"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "create"),
        ("", "namespaces", "list"),  # Kopf does not look at namespaces when cluster-wide
    ]
    for group, resource, verb in forbidden:
        assert not grants(rules, group, resource, verb), f"{verb} {resource}.{group} must not be granted"
    assert not grants(rules, "apiextensions.k8s.io", "customresourcedefinitions", "get", "anything.example.com")


def test_spark_on_kubernetes_grants_at_least_what_the_drivers_role_holds(render: chartkit.Render) -> None:
    # on by default: the CRD accepts a k8s:// master
    rules = one(render(), "ClusterRole")["rules"]
    for rule in operator_render.SPARK_DRIVER_RULES:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert grants(rules, group, resource, verb), f"drivers get {verb} {resource}, the operator not"
    for kind in ("serviceaccounts", "roles", "rolebindings"):
        group = "" if kind == "serviceaccounts" else "rbac.authorization.k8s.io"
        for verb in ("get", "create", "patch", "delete"):
            assert grants(rules, group, kind, verb)
    assert grants(rules, "", "pods", "list")  # executors that cannot be scheduled are reported
    for verb in ("escalate", "bind"):
        assert not grants(rules, "rbac.authorization.k8s.io", "roles", verb)


def test_optional_kinds_follow_their_switches(render: chartkit.Render) -> None:
    rules = one(render(), "ClusterRole")["rules"]
    assert grants(rules, "autoscaling", "horizontalpodautoscalers", "create")
    assert grants(rules, "keda.sh", "scaledobjects", "create")
    assert grants(rules, "keda.sh", "triggerauthentications", "create")
    off = {"rbac": {"serviceMonitors": False, "hpa": False, "keda": False}}
    rules = one(render(off), "ClusterRole")["rules"]
    assert not grants(rules, "monitoring.coreos.com", "servicemonitors", "get")
    assert not grants(rules, "autoscaling", "horizontalpodautoscalers", "get")
    assert not grants(rules, "keda.sh", "scaledobjects", "get")
    assert not grants(rules, "apiextensions.k8s.io", "customresourcedefinitions", "get", "scaledobjects.keda.sh")


def test_watch_namespaces_grants_roles_only_there(render: chartkit.Render) -> None:
    docs = render({"operator": {"watchNamespaces": ["team-a", "team-b"]}})
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert {r["metadata"]["namespace"] for r in roles} == {"team-a", "team-b"}
    bindings = [b for b in by_kind(docs, "RoleBinding") if not b["metadata"]["name"].endswith("-leader-election")]
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b"}
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "floe", "namespace": chartkit.NAMESPACE}]
        assert b["roleRef"]["kind"] == "Role"
    cluster_rules = one(docs, "ClusterRole")["rules"]
    for group, resource in [("apps", "deployments"), ("", "secrets"), ("streaming.floe.dev", "streamingapps")]:
        for verb in ("get", "list"):
            assert not grants(cluster_rules, group, resource, verb), f"{resource} must not be granted cluster-wide"
    assert grants(cluster_rules, "", "namespaces", "watch")
    no_ns = one(render({"operator": {"watchNamespaces": ["a"]}, "rbac": {"listNamespaces": False}}), "ClusterRole")
    assert not grants(no_ns["rules"], "", "namespaces", "list")


def test_peering_rules_follow_the_mode(render: chartkit.Render) -> None:
    peering = {"peering": {"enabled": True}, "leaderElection": {"enabled": False}}
    docs = render(peering)
    assert grants(one(docs, "ClusterRole")["rules"], "kopf.dev", "clusterkopfpeerings", "patch")
    docs = render(peering | {"operator": {"watchNamespaces": ["a"]}})
    assert grants(one(docs, "Role")["rules"], "kopf.dev", "kopfpeerings", "patch")
    assert not grants(one(docs, "ClusterRole")["rules"], "kopf.dev", "clusterkopfpeerings", "patch")
    assert not grants(one(render(), "ClusterRole")["rules"], "kopf.dev", "clusterkopfpeerings", "get")


def test_leader_election_may_read_and_write_only_its_own_lease(render: chartkit.Render) -> None:
    for values in ({}, {"operator": {"watchNamespaces": ["a"]}}):
        docs = render(values)
        role = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"] == "floe-leader-election")
        assert role["metadata"]["namespace"] == chartkit.NAMESPACE
        rules = role["rules"]
        for verb in ("get", "update"):
            assert grants(rules, "coordination.k8s.io", "leases", verb, "floe")
            assert not grants(rules, "coordination.k8s.io", "leases", verb, "kube-scheduler")
        # The chart creates the Lease; a create right could not be limited to its name.
        for verb in ("create", "delete", "patch", "list", "watch"):
            assert not grants(rules, "coordination.k8s.io", "leases", verb)
        binding = next(b for b in by_kind(docs, "RoleBinding") if b["metadata"]["name"] == "floe-leader-election")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "floe-leader-election",
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "floe", "namespace": chartkit.NAMESPACE}]
        for cluster_role in by_kind(docs, "ClusterRole"):
            assert not grants(cluster_role["rules"], "coordination.k8s.io", "leases", "get")
    off = render({"leaderElection": {"enabled": False}})
    assert [r for r in by_kind(off, "Role") if "leader" in r["metadata"]["name"]] == []


def test_rbac_off_renders_no_rbac(render: chartkit.Render) -> None:
    docs = render({"rbac": {"create": False}})
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        assert by_kind(docs, kind) == []


SNAPSHOT_RIGHTS = [
    # create and delete: an app's scheduled snapshots and their retention (the admission policy
    # confines both to snapshots labelled and owned by an app)
    ("streaming.floe.dev", "streamingappsnapshots", ["get", "list", "watch", "patch", "create", "delete"]),
    ("streaming.floe.dev", "streamingappsnapshots/status", ["get", "patch"]),
    ("streaming.floe.dev", "streamingappsnapshots/finalizers", ["update"]),
    ("batch", "jobs", ["get", "list", "watch", "create"]),
    ("", "pods", ["list", "watch"]),
]


def test_snapshots_and_their_jobs_are_granted_in_every_install_mode(render: chartkit.Render) -> None:
    cluster = one(render(), "ClusterRole")["rules"]
    namespaced = [r for r in by_kind(render({"operator": {"watchNamespaces": ["team-a", "team-b"]}}), "Role")
                  if not r["metadata"]["name"].endswith("-leader-election")]
    assert len(namespaced) == 2
    for rules in [cluster, *(r["rules"] for r in namespaced)]:
        for group, resource, verbs in SNAPSHOT_RIGHTS:
            for verb in verbs:
                assert grants(rules, group, resource, verb), f"{verb} {resource}.{group}"
        # the garbage collector deletes a snapshot's Job with it; the operator never changes one
        for verb in ("delete", "update", "patch", "deletecollection"):
            assert not grants(rules, "batch", "jobs", verb), f"{verb} jobs must not be granted"
        assert not grants(rules, "batch", "cronjobs", "create")
        assert not grants(rules, "streaming.floe.dev", "streamingappsnapshots", "deletecollection")
        assert not grants(rules, "streaming.floe.dev", "streamingappsnapshots", "update")
