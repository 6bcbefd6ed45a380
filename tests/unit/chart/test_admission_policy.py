"""The ValidatingAdmissionPolicy that confines the operator's writes, as rendered.

Tied to the operator's code: every kind `floe_operator.k8s` can write (other than the
StreamingApp and its Lease) must be matched, and the policy must look for the very label and
owner kind `floe_operator.render` puts on every child. The live counterpart, which has the
API server evaluate the CEL, is tests/integration/chart/test_operator_admission_live.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_operator import k8s, model
from floe_operator import render as operator_render

from . import chartkit
from .chartkit import RenderError, by_kind, one

pytestmark = pytest.mark.helm

POLICY = f"{chartkit.RELEASE}-operator-writes"


def matched(policy: dict[str, Any]) -> set[tuple[str, str]]:
    """(group, resource) pairs the policy sees every create, update and delete of."""
    found = set()
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        if rule["resources"] == [model.SNAPSHOT_PLURAL]:
            continue  # create and delete only (test_the_operator_creates_and_deletes_only_...)
        assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}, rule
        assert rule["apiVersions"] == ["*"], rule
        found |= {(group, resource) for group in rule["apiGroups"] for resource in rule["resources"]}
    return found


def expressions(policy: dict[str, Any]) -> str:
    spec = policy["spec"]
    return "\n".join([v["expression"] for v in spec["variables"]] + [v["expression"] for v in spec["validations"]])


def test_policy_and_binding_are_on_by_default_and_deny(render: chartkit.Render) -> None:
    docs = render()
    policy = one(docs, "ValidatingAdmissionPolicy")
    binding = one(docs, "ValidatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == POLICY
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}


def test_policy_applies_only_to_the_operators_service_account(render: chartkit.Render) -> None:
    conditions = one(render(), "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    user = f"system:serviceaccount:{chartkit.NAMESPACE}:{chartkit.RELEASE}"
    assert [c["expression"] for c in conditions] == [f"request.userInfo.username == '{user}'"]
    values = {"serviceAccount": {"create": False, "name": "existing"}}
    conditions = one(render(values), "ValidatingAdmissionPolicy")["spec"]["matchConditions"]
    assert conditions[0]["expression"].endswith(f":{chartkit.NAMESPACE}:existing'")


def test_every_kind_the_operator_writes_is_matched(render: chartkit.Render) -> None:
    policy = one(render(), "ValidatingAdmissionPolicy")
    writable = set()
    for (api_version, kind), path in k8s._RESOURCES.items():
        if kind in (model.KIND, model.SNAPSHOT_KIND, "Lease"):
            continue  # the app and the snapshot themselves (status, scale, finalizers) and the operator's own Lease
        group = api_version.rpartition("/")[0]
        writable.add((group, path.rsplit("/", 1)[1]))
    missing = writable - matched(policy)
    assert not missing, f"kinds the operator can write that the policy does not check: {missing}"
    # Never matched: what the operator legitimately writes that is no child of an app.
    for group, resource in [(model.GROUP, model.PLURAL),
                            ("coordination.k8s.io", "leases"), ("", "events"),
                            ("events.k8s.io", "events"), ("kopf.dev", "kopfpeerings")]:
        assert (group, resource) not in matched(policy)


def test_policy_checks_the_label_and_owner_the_renderer_sets(render: chartkit.Render) -> None:
    text = expressions(one(render(), "ValidatingAdmissionPolicy"))
    assert f"'{operator_render.MANAGED_BY}'" in text
    assert f"== '{operator_render.FIELD_MANAGER}'" in text
    assert "r.kind in variables.ownerKinds" in text
    assert f"r.apiVersion.startsWith('{model.GROUP}/')" in text
    # Judged on the new object at create, the old at delete, both at update.
    assert "request.operation == 'CREATE' ? variables.createdFloes" in text
    assert "request.operation == 'DELETE' ? variables.wasFloes" in text
    assert "variables.wasFloes && variables.createdFloes" in text


def test_a_job_must_be_a_snapshots_or_an_apps_restore_and_every_other_child_an_apps(render: chartkit.Render) -> None:
    """The owner kinds the renderers put on their children: a Job is a snapshot's (snapshotjob.job)
    or a new app's restore (restorejob.job), anything else an app's (render.owner_reference)."""
    from floe_operator import restorejob, snapshotjob

    from ..operator.conftest import load_case

    variables = {v["name"]: v["expression"] for v in one(render(), "ValidatingAdmissionPolicy")["spec"]["variables"]}
    assert variables["ownerKinds"] == (
        f"request.resource.resource == 'jobs' ? ['{model.SNAPSHOT_KIND}', '{model.KIND}'] : ['{model.KIND}']"
    )
    assert snapshotjob.owner_reference(_snapshot())["kind"] == model.SNAPSHOT_KIND
    body = load_case("minimal")
    body["spec"]["restoreFrom"] = {"location": "s3a://b/p"}
    restore = restorejob.job(model.StreamingApp.from_body(body))
    assert [r["kind"] for r in restore["metadata"]["ownerReferences"]] == [model.KIND]
    assert restore["metadata"]["labels"][operator_render.MANAGED_BY] == operator_render.FIELD_MANAGER
    assert ("batch", "jobs") in matched(one(render(), "ValidatingAdmissionPolicy"))


def test_the_operator_creates_and_deletes_only_the_scheduled_snapshots_of_apps(render: chartkit.Render) -> None:
    """Snapshots are matched for create and delete, never update (Kopf patches the annotations
    and finalizer of every snapshot, the users' own too); one the schedule creates passes:
    labelled as Floe's and owned by its StreamingApp."""
    from datetime import UTC, datetime

    from floe_operator import snapshotschedule

    policy = one(render(), "ValidatingAdmissionPolicy")
    rules = [r for r in policy["spec"]["matchConstraints"]["resourceRules"] if model.SNAPSHOT_PLURAL in r["resources"]]
    assert [(r["apiGroups"], r["operations"], r["resources"]) for r in rules] == [
        ([model.GROUP], ["CREATE", "DELETE"], [model.SNAPSHOT_PLURAL])
    ]
    from ..operator.conftest import load_case

    body = load_case("minimal")
    body["metadata"]["uid"] = "u1"
    body["spec"]["snapshots"] = {"location": "s3a://b/wc", "interval": "1h"}
    app = model.StreamingApp.from_body(body)
    meta = snapshotschedule.snapshot(app, datetime(2026, 11, 29, 6, 0, tzinfo=UTC))["metadata"]
    assert meta["labels"][operator_render.MANAGED_BY] == operator_render.FIELD_MANAGER
    (ref,) = meta["ownerReferences"]
    assert (ref["kind"], ref["apiVersion"].split("/")[0], ref["uid"]) == (model.KIND, model.GROUP, "u1")


def _snapshot() -> model.StreamingAppSnapshot:
    return model.StreamingAppSnapshot(
        name="s", namespace="n", uid="u", spec=model.SnapshotSpec(app="a", location="s3a://b/p")
    )


def test_role_bindings_bind_only_the_drivers_role_to_their_service_account(render: chartkit.Render) -> None:
    text = expressions(one(render(), "ValidatingAdmissionPolicy"))
    # What render.spark_rbac writes: the Role and the ServiceAccount named like the binding.
    assert "object.roleRef.kind == 'Role' && object.roleRef.name == object.metadata.name" in text
    assert "s.kind == 'ServiceAccount'" in text
    assert "s.name == object.metadata.name && s.namespace == request.namespace" in text


def test_protected_and_watched_namespaces(render: chartkit.Render) -> None:
    text = expressions(one(render(), "ValidatingAdmissionPolicy"))
    assert "!(request.namespace in ['kube-system','kube-public','kube-node-lease'])" in text
    assert "request.namespace in [" not in text.replace("!(request.namespace in [", "")
    values = {"operator": {"watchNamespaces": ["a", "b"]}, "admissionPolicy": {"protectedNamespaces": []}}
    text = expressions(one(render(values), "ValidatingAdmissionPolicy"))
    assert "kube-system" not in text
    assert "request.namespace in ['a','b']" in text


def test_policy_off(render: chartkit.Render) -> None:
    docs = render({"admissionPolicy": {"enabled": False}})
    assert not by_kind(docs, "ValidatingAdmissionPolicy")
    assert not by_kind(docs, "ValidatingAdmissionPolicyBinding")


@pytest.mark.parametrize(
    "values, key",
    [
        ({"admissionPolicy": {"enabled": "yes"}}, "enabled"),
        ({"admissionPolicy": {"protectedNamespaces": ["Kube_System"]}}, "protectedNamespaces"),
        ({"admissionPolicy": {"protectedNamespace": []}}, "protectedNamespace"),
    ],
)
def test_bad_values_are_refused_naming_the_key(render: chartkit.Render, values: dict[str, Any], key: str) -> None:
    with pytest.raises(RenderError, match=key):
        render(values)
