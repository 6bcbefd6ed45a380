"""Suspend, restart nonce, offset reset and pod template, as pure functions: what each renders,
what status says, and that what Floe must own is refused with the field named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from floe_operator import conditions, model, offsetreset, podtemplate, reconcile, render
from floe_operator.lag import decide, scalers

from .conftest import load_case

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def _app(name: str = "minimal", **spec: Any) -> model.StreamingApp:
    body = load_case(name)
    body["spec"].update(spec)
    return model.StreamingApp.from_body(body)


def _deployment(app: model.StreamingApp) -> dict[str, Any]:
    return next(o for o in render.children(app) if o["kind"] == "Deployment")


def _settled(replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"generation": 1},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "readyReplicas": replicas,
        },
    }


# --- suspend ---------------------------------------------------------------------------


def test_suspend_runs_no_replica_and_keeps_spec_replicas() -> None:
    app = _app(replicas=4, suspend=True)
    assert _deployment(app)["spec"]["replicas"] == 0
    assert app.spec.replicas == 4
    assert _deployment(_app(replicas=4))["spec"]["replicas"] == 4


def test_suspended_status_then_resumed() -> None:
    app = _app(replicas=4, suspend=True)
    status = conditions.status_for(app, conditions.Observed(deployment=_settled(0)), now=T0)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert (by_type["Suspended"]["status"], by_type["Suspended"]["reason"]) == ("True", "Suspended")
    assert "4 replica(s) run again on resume" in by_type["Suspended"]["message"]
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("True", "Suspended")
    assert status["suspension"] == {"since": T0, "replicas": 4}

    # a later pass keeps the time it was first seen suspended
    again = conditions.status_for(_with_status(app, status), conditions.Observed(deployment=_settled(0)), now=T1)
    assert again["suspension"] == {"since": T0, "replicas": 4}
    assert conditions.status_patch(status, again) == {}

    resumed = _with_status(_app(replicas=4), status)
    after = conditions.status_for(resumed, conditions.Observed(deployment=_settled(4)), now=T1)
    cond = conditions.find(after["conditions"], "Suspended")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "Resumed")
    assert after["suspension"] is None  # a merge patch removes it
    assert conditions.status_patch(status, after)["suspension"] is None


def test_an_app_never_suspended_gets_no_suspended_condition() -> None:
    status = conditions.status_for(_app(), conditions.Observed(deployment=_settled(1)), now=T0)
    assert conditions.find(status["conditions"], "Suspended") is None
    assert conditions.status_patch({**status, "suspension": None}, status) == {}


def _with_status(app: model.StreamingApp, status: dict[str, Any]) -> model.StreamingApp:
    return app.model_copy(update={"status": copy.deepcopy(status)})


def test_no_autoscaler_scales_a_suspended_app() -> None:
    hpa = _app(autoscaling={"mode": "HPA", "maxReplicas": 8}, suspend=True)
    assert scalers.children(hpa, keda_available=True, partitions=8) == []
    assert [
        o["kind"] for o in scalers.children(_app(autoscaling={"mode": "HPA", "maxReplicas": 8}), keda_available=True)
    ] == ["HorizontalPodAutoscaler"]

    keda = _app(autoscaling={"mode": "KEDA", "maxReplicas": 8}, suspend=True)
    (so,) = scalers.children(keda, keda_available=True)
    assert so["metadata"]["annotations"][scalers.KEDA_PAUSED] == "true"
    (running,) = scalers.children(_app(autoscaling={"mode": "KEDA", "maxReplicas": 8}), keda_available=True)
    assert scalers.KEDA_PAUSED not in running["metadata"]["annotations"]

    # Native: even far outside its bounds and with a backlog, a suspended app is held
    policy = decide.Policy(min_replicas=2, max_replicas=8)
    samples = [decide.Sample(at=float(t), replicas=0, end=1000 * t, committed=0) for t in range(0, 60, 10)]
    ctx = decide.Context(now=50.0, replicas=0, partitions=8, suspended=True)
    decision = decide.decide(samples, policy, ctx)
    assert (decision.action, decision.reason, decision.replicas) == ("Hold", decide.SUSPENDED, 0)
    assert decide.decide(samples, policy, decide.Context(now=50.0, replicas=0, partitions=8)).action == "ScaleUp"


def test_a_restore_in_place_holds_the_native_autoscaler_and_says_why() -> None:
    policy = decide.Policy(min_replicas=2, max_replicas=8)
    samples = [decide.Sample(at=float(t), replicas=0, end=1000 * t, committed=0) for t in range(0, 60, 10)]
    decision = decide.decide(samples, policy, decide.Context(now=50.0, replicas=3, partitions=8, restoring=True))
    assert (decision.action, decision.reason, decision.replicas) == ("Hold", decide.RESTORING, 3)
    assert "status.stateRestore" in decision.message
    # what the actuator passes: status.stateRestore while the restore waits or runs, not once it ended
    for phase, restoring in (("Waiting", True), ("Running", True), ("Succeeded", False), ("Failed", False)):
        app = _app().model_copy(update={"status": {"stateRestore": {"id": "x", "phase": phase}}})
        assert app.restoring_in_place is restoring, phase


# --- restart nonce ---------------------------------------------------------------------


def test_restart_nonce_changes_only_the_pod_template_annotation() -> None:
    before = render.children(_app())
    after = render.children(_app(restartNonce="2026-02-01"))
    changed = [b["kind"] for b, a in zip(before, after, strict=True) if b != a]
    assert changed == ["Deployment"]
    dep_before, dep_after = before[-1], after[-1]
    assert dep_after["spec"]["template"]["metadata"]["annotations"][render.RESTART_NONCE] == "2026-02-01"
    assert render.RESTART_NONCE not in dep_before["spec"]["template"]["metadata"]["annotations"]
    strip = {render.RESTART_NONCE}
    for dep in (dep_before, dep_after):
        dep["metadata"]["annotations"].pop(render.APPLIED_HASH)
        notes = dep["spec"]["template"]["metadata"]["annotations"]
        dep["spec"]["template"]["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in strip}
    assert dep_before == dep_after


# --- pod template --------------------------------------------------------------------


def _template(**spec: Any) -> model.StreamingApp:
    return _app(podTemplate={"spec": spec})


def _problems(app: model.StreamingApp) -> list[str]:
    return podtemplate.problems(app, render.pod_template_owned(app))


def test_the_example_pod_template_has_no_problem() -> None:
    app = model.StreamingApp.from_body(load_case("pod-template"))
    assert _problems(app) == []
    assert reconcile.pod_template_fault(app) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"containers": [{"name": "app", "command": ["sh"]}]}, "spec.podTemplate.spec.containers[0].command"),
        (
            {"containers": [{"name": "app", "env": []}]},
            "containers[0].env: Floe owns this field of its container 'app'; set spec.env",
        ),
        ({"containers": [{"name": "app", "readinessProbe": {}}]}, "containers[0].readinessProbe"),
        (
            {"containers": [{"name": "app", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}]},
            "volumeMounts[0].name: no volume 'x'",
        ),
        (
            {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "containers": [{"name": "app", "volumeMounts": [{"name": "x", "mountPath": "/etc/floe/x"}]}],
            },
            "containers[0].volumeMounts[0].mountPath",
        ),
        (
            {"containers": [{"name": "app", "volumeMounts": [{"name": "config", "mountPath": "/c"}]}]},
            "volumeMounts[0].name: 'config' is Floe's own",
        ),
        ({"volumes": [{"name": "tmp", "emptyDir": {}}]}, "spec.podTemplate.spec.volumes[0].name"),
        ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "spec.podTemplate.spec.volumes[0].hostPath"),
        (
            {"containers": [{"name": "s", "image": "i", "securityContext": {"privileged": True}}]},
            "containers[0].securityContext.privileged",
        ),
        (
            {"containers": [{"name": "s", "image": "i", "securityContext": {"runAsUser": 0}}]},
            "containers[0].securityContext.runAsUser",
        ),
        (
            {
                "initContainers": [
                    {"name": "s", "image": "i", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
                ]
            },
            "initContainers[0].securityContext.capabilities.add: SYS_ADMIN",
        ),
        (
            {"containers": [{"name": "s", "image": "i", "ports": [{"containerPort": 9400}]}]},
            "containers[0].ports[0].containerPort: 9400",
        ),
        (
            {"containers": [{"name": "s", "image": "i", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
            "containers[0].ports[0].hostPort",
        ),
        ({"initContainers": [{"name": "app", "image": "i"}]}, "initContainers[0].name"),
        ({"securityContext": {"runAsUser": 0}}, "spec.podTemplate.spec.securityContext.runAsUser"),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "securityContext.seccompProfile.type"),
    ],
)
def test_what_floe_owns_or_the_restricted_profile_forbids_is_refused(spec: dict[str, Any], field: str) -> None:
    found = _problems(_template(**spec))
    assert any(field in p for p in found), found
    fault = reconcile.pod_template_fault(_template(**spec))
    assert fault is not None and fault.reason == conditions.INVALID_POD_TEMPLATE and field in fault.message


def test_merge_adds_to_floes_pod_and_keeps_what_floe_owns() -> None:
    app = model.StreamingApp.from_body(load_case("pod-template"))
    plain = _deployment(_app())["spec"]["template"]["spec"]
    pod = _deployment(app)["spec"]["template"]["spec"]
    floe, shipper = pod["containers"]
    assert floe["name"] == render.CONTAINER
    assert [m["mountPath"] for m in floe["volumeMounts"]] == ["/etc/floe", "/tmp", "/opt/rules", "/etc/ssl/payments"]
    assert floe["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert floe["securityContext"]["readOnlyRootFilesystem"] is True
    for key in ("command", "readinessProbe", "livenessProbe", "startupProbe", "lifecycle"):
        assert floe.get(key) == plain["containers"][0].get(key)  # lifecycle: absent in both by default
    assert floe["envFrom"][0] == {"configMapRef": {"name": "enricher-settings"}}
    # sidecars and init containers get the restricted profile's settings; one that adds a
    # capability keeps all the others dropped
    assert pod["initContainers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert shipper["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "appArmorProfile": {"type": "RuntimeDefault"},
        "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
    }
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp", "rules", "certs"]
    assert pod["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": render.selector_labels(app)}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["fsGroup"] == 185
    labels = _deployment(app)["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "payments"  # spec.pod wins over the template
    assert labels["cost-center"] == "42"


def test_pod_template_secrets_must_exist() -> None:
    app = _template(
        containers=[
            {
                "name": "app",
                "envFrom": [{"secretRef": {"name": "tokens"}}, {"secretRef": {"name": "opt", "optional": True}}],
            }
        ],
        volumes=[{"name": "certs", "secret": {"secretName": "certs"}}],
    )
    refs = model.referenced_secrets(app.spec)
    assert refs["tokens"] == [] and refs["certs"] == []
    assert "opt" not in refs


# --- offset reset --------------------------------------------------------------------


def _reset(**reset: Any) -> model.StreamingApp:
    return _app(offsetReset={"id": "r1", **reset}, suspend=True)


MARKS = {("words", 0): (5, 100), ("words", 1): (0, 40)}


def test_positions_from_the_log() -> None:
    app = _app(kafka={**load_case("minimal")["spec"]["kafka"], "topics": ["words"]})
    spec = model.OffsetResetSpec(id="r", to="earliest")
    assert offsetreset.positions(app, spec, MARKS) == {("words", 0): 5, ("words", 1): 0}
    spec = model.OffsetResetSpec(id="r", to="latest")
    assert offsetreset.positions(app, spec, MARKS) == {("words", 0): 100, ("words", 1): 40}
    spec = model.OffsetResetSpec(id="r", to="timestamp", timestamp="2026-01-01T00:00:00Z")
    assert offsetreset.positions(app, spec, MARKS, {("words", 0): 7, ("words", 1): 40}) == {
        ("words", 0): 7,
        ("words", 1): 40,
    }
    assert offsetreset.timestamp_ms(spec) == 1767225600000
    explicit = model.OffsetResetSpec(id="r", to="offsets", offsets=[{"topic": "words", "partition": 1, "offset": 12}])
    assert offsetreset.positions(app, explicit, MARKS) == {("words", 1): 12}


@pytest.mark.parametrize(
    ("offsets", "field"),
    [
        (
            [{"topic": "words", "partition": 2, "offset": 0}],
            "spec.offsetReset.offsets[0].partition: topic words has no partition 2",
        ),
        (
            [{"topic": "words", "partition": 0, "offset": 1}],
            "spec.offsetReset.offsets[0].offset: 1 is outside the log of words/0 (5 to 100)",
        ),
        ([{"topic": "words", "partition": 1, "offset": 41}], "spec.offsetReset.offsets[0].offset"),
        (
            [{"topic": "other", "partition": 0, "offset": 0}],
            "spec.offsetReset.topics: other not among spec.kafka.topics",
        ),
    ],
)
def test_offsets_outside_the_log_are_refused_naming_the_field(offsets: list[dict[str, Any]], field: str) -> None:
    app = _app(kafka={**load_case("minimal")["spec"]["kafka"], "topics": ["words"]})
    spec = model.OffsetResetSpec(id="r", to="offsets", offsets=offsets)
    found = offsetreset.positions(app, spec, MARKS)
    assert isinstance(found, str) and field in found


def test_a_reset_runs_once_per_id() -> None:
    app = _reset(to="latest")
    assert offsetreset.pending(app) is not None
    done = app.model_copy(update={"status": {"offsetReset": {"id": "r1", "phase": "Done"}}})
    assert offsetreset.pending(done) is None
    waiting = app.model_copy(update={"status": {"offsetReset": {"id": "r1", "phase": "Waiting"}}})
    assert offsetreset.pending(waiting) is not None
    newer = _app(offsetReset={"id": "r2", "to": "latest"}).model_copy(update={"status": done.status})
    assert offsetreset.pending(newer) is not None
    assert offsetreset.pending(_app()) is None


async def test_a_reset_waits_for_suspend_without_touching_anything() -> None:
    app = _app(offsetReset={"id": "r1", "to": "latest"})
    # no collaborator is called: any call would fail on these placeholders
    result = await offsetreset.run(
        app,
        cluster=None,
        provisioner=None,
        inspector=None,
        secrets={},
        now=T0,  # type: ignore[arg-type]
    )
    assert result is not None
    assert (result.phase, result.reason) == (offsetreset.WAITING, offsetreset.NOT_SUSPENDED)
    assert "spec.suspend: true" in result.message and "spec.offsetReset" in result.message
    status = conditions.status_for(app, conditions.Observed(), now=T0)
    offsetreset.put_status(app, status, result, now=T0)
    cond = conditions.find(status["conditions"], "OffsetReset")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "AppNotSuspended")
    assert status["offsetReset"] == {"id": "r1", "phase": "Waiting", "to": "latest", "reason": "AppNotSuspended"}
