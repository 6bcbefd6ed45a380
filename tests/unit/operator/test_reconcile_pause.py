"""The pause annotation as pure functions: the ReconcilePaused condition, the generation left as
last acted on, and the native autoscaler holding."""

from __future__ import annotations

import copy
from typing import Any

from floe_operator import conditions, model
from floe_operator.lag import decide

from .conftest import load_case

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def _app(
    annotation: str | None = None, *, generation: int = 1, status: dict[str, Any] | None = None
) -> model.StreamingApp:
    body = load_case("minimal")
    meta = body.setdefault("metadata", {})
    meta["generation"] = generation
    if annotation is not None:
        meta.setdefault("annotations", {})[model.RECONCILE_ANNOTATION] = annotation
    body["status"] = copy.deepcopy(status or {})
    return model.StreamingApp.from_body(body)


def _settled() -> dict[str, Any]:
    return {
        "metadata": {"generation": 1},
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
                   "readyReplicas": 1},
    }


def _status(app: model.StreamingApp, now: str = T0) -> dict[str, Any]:
    return conditions.status_for(app, conditions.Observed(deployment=_settled()), now=now)


def test_the_annotation_is_read_from_the_body() -> None:
    assert _app("paused").reconcile_paused
    assert not _app().reconcile_paused
    assert not _app("Paused").reconcile_paused


def test_a_paused_app_reports_reconcile_paused_and_keeps_the_generation_last_acted_on() -> None:
    before = _status(_app(generation=1))
    paused = _status(_app("paused", generation=2, status=before), now=T1)
    cond = conditions.find(paused["conditions"], conditions.RECONCILE_PAUSED)
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("True", "ReconcilePaused")
    assert model.RECONCILE_ANNOTATION in cond["message"]
    assert paused["observedGeneration"] == 1
    events = conditions.transitions(before["conditions"], paused["conditions"])
    assert ("Normal", "ReconcilePaused") in [(e.type, e.reason) for e in events]


def test_removing_the_annotation_resumes_and_says_so() -> None:
    paused = _status(_app("paused", generation=2, status=_status(_app())))
    resumed = _status(_app(generation=2, status=paused), now=T1)
    cond = conditions.find(resumed["conditions"], conditions.RECONCILE_PAUSED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "ReconcileResumed")
    assert resumed["observedGeneration"] == 2


def test_an_app_never_paused_gets_no_reconcile_paused_condition() -> None:
    assert conditions.find(_status(_app())["conditions"], conditions.RECONCILE_PAUSED) is None


def test_another_annotation_value_is_named_in_the_condition() -> None:
    status = _status(_app("true"))
    cond = conditions.find(status["conditions"], conditions.RECONCILE_PAUSED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "InvalidReconcileAnnotation")
    assert "'true', which pauses nothing: set it to 'paused'" in cond["message"]


def test_the_native_autoscaler_holds_a_paused_app() -> None:
    policy = decide.Policy(min_replicas=2, max_replicas=8)
    samples = [decide.Sample(at=float(t), replicas=1, end=1000 * t, committed=0) for t in range(0, 60, 10)]
    decision = decide.decide(samples, policy, decide.Context(now=50.0, replicas=1, partitions=8, paused=True))
    assert (decision.action, decision.reason, decision.replicas) == ("Hold", decide.RECONCILE_PAUSED, 1)
    assert decide.decide(samples, policy, decide.Context(now=50.0, replicas=1, partitions=8)).action == "ScaleUp"
