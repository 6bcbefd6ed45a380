"""What a StreamingApp author gets, asked of the real API server (docs/security.md): the drivers'
Role of a k8s:// master is bound to the ServiceAccount Floe creates for the app and to no other,
grants the verbs Spark's scheduler backend uses and no more, so the namespace's default account
gains nothing; and the app says whether its namespace enforces a Pod Security Standard."""

from __future__ import annotations

from typing import Any

import pytest

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

APP = "drivers"


def can(kube: Kubectl, namespace: str, account: str, verb: str, resource: str) -> bool:
    """The API server's authorizer on whether `account` of `namespace` may `verb` `resource`
    there (`pods/exec`: the subresource, not a pod named exec)."""
    resource, _, subresource = resource.partition("/")
    proc = kube.run(
        "auth",
        "can-i",
        verb,
        resource,
        *([f"--subresource={subresource}"] if subresource else []),
        "-n",
        namespace,
        f"--as=system:serviceaccount:{namespace}:{account}",
        check=False,
    )
    return proc.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def app(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> dict[str, Any]:
    body = app_manifest(APP, **spec_args)
    body["spec"]["spark"] = {"master": "k8s://https://kubernetes.default.svc:443", "executor": {"instances": 1}}
    kube.apply(body)
    wait_for(lambda: kube.get("rolebinding", f"{APP}-spark", spec_args["namespace"]), what="the drivers' RoleBinding")
    return body


def test_the_drivers_role_is_bound_to_floes_service_account_only(
    kube: Kubectl, namespace: str, app: dict[str, Any]
) -> None:
    binding = kube.get("rolebinding", f"{APP}-spark", namespace)
    assert binding is not None
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{APP}-spark", "namespace": namespace}]
    assert binding["roleRef"]["name"] == f"{APP}-spark"
    assert can(kube, namespace, f"{APP}-spark", "create", "pods")
    assert not can(kube, namespace, "default", "create", "pods")
    assert not can(kube, namespace, "default", "delete", "configmaps")


def test_the_drivers_role_holds_only_what_spark_uses(kube: Kubectl, namespace: str, app: dict[str, Any]) -> None:
    role = kube.get("role", f"{APP}-spark", namespace)
    assert role is not None
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): sorted(r["verbs"]) for r in role["rules"]}
    assert rules == {
        (("",), ("pods",)): ["create", "delete", "deletecollection", "get", "list", "patch", "watch"],
        (("",), ("configmaps",)): ["create", "deletecollection"],
    }
    account = f"{APP}-spark"
    for verb, resource in (
        ("create", "services"),
        ("delete", "services"),
        ("create", "persistentvolumeclaims"),
        ("get", "configmaps"),
        ("get", "secrets"),
        ("create", "pods/exec"),
    ):
        assert not can(kube, namespace, account, verb, resource), f"{account} may {verb} {resource}"


def test_the_app_says_its_namespace_enforces_no_pod_security_standard(
    kube: Kubectl, namespace: str, app: dict[str, Any]
) -> None:
    cond = wait_for(
        lambda: (c := condition(kube.get("streamingapp", APP, namespace), "PodSecurity")) and c,
        what="the PodSecurity condition",
    )
    assert (cond["status"], cond["reason"]) == ("False", "NotEnforced")
    assert cond["message"].startswith(f"Namespace {namespace} does not enforce the restricted Pod Security Standard")
