"""Automatic rollback (`floe_operator.rollback`): which spec a pass renders, and what status keeps."""

from __future__ import annotations

from typing import Any

import pytest
from floe_operator import conditions, model, podfaults, rollback

from .conftest import load_case

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
CRASH = conditions.Fault(podfaults.CRASH_LOOPING, "Pod p keeps exiting: 3 restarts, last exit code 2")


def _app(
    *, generation: int, auto: bool = True, status: dict[str, Any] | None = None, **spec: Any
) -> model.StreamingApp:
    body = load_case("minimal")
    body["metadata"]["generation"] = generation
    body["spec"]["rollout"]["autoRollback"] = auto
    body["spec"].update(spec)
    body["status"] = status or {}
    return model.StreamingApp.from_body(body)


def _ready_at(app: model.StreamingApp) -> dict[str, Any]:
    return {"lastReady": {"generation": app.generation, "spec": rollback.spec_record(app.spec)}}


def _rolling(*, deadline: bool = False, complete: bool = False) -> dict[str, Any]:
    conds = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}] if deadline else []
    done = 1 if complete else 0
    return {
        "metadata": {"generation": 2},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 2,
            "replicas": 1 + (1 - done),
            "updatedReplicas": done,
            "availableReplicas": 1,
            "conditions": conds,
        },
    }


def test_a_failing_generation_runs_the_last_ready_spec_with_its_current_replicas_and_says_why() -> None:
    good = _app(generation=4, image="floe-job:good")
    app = _app(generation=6, image="floe-job:bad", replicas=3, status=_ready_at(good))
    run, rolled = rollback.effective(app, deployment=_rolling(), pods_fault=CRASH, now=T0)
    assert rolled is not None
    assert run.spec.image == "floe-job:good" and run.spec.replicas == 3 and run.generation == 6
    assert (rolled.generation, rolled.to_generation, rolled.reason, rolled.time) == (6, 4, "CrashLooping", T0)
    assert rolled.spec_digest == rollback.digest(app.spec.model_dump(mode="json", by_alias=True))
    assert "Generation 6 failed (Pod p keeps exiting" in rolled.message and "generation 4's spec" in rolled.message


@pytest.mark.parametrize("reason", sorted(rollback.FAILURES))
def test_each_pod_failure_of_a_rollout_rolls_back(reason: str) -> None:
    app = _app(generation=2, image="floe-job:bad", status=_ready_at(_app(generation=1)))
    _, rolled = rollback.effective(app, deployment=_rolling(), pods_fault=conditions.Fault(reason, "m"), now=T0)
    assert rolled is not None and rolled.reason == reason


def test_a_rollout_past_its_deadline_rolls_back() -> None:
    app = _app(generation=2, image="floe-job:bad", status=_ready_at(_app(generation=1)))
    _, rolled = rollback.effective(app, deployment=_rolling(deadline=True), pods_fault=None, now=T0)
    assert rolled is not None and rolled.reason == conditions.PROGRESS_DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("deployment", "fault"),
    [
        (_rolling(), None),  # still rolling out, nothing failed yet
        (_rolling(), conditions.Fault(podfaults.UNSCHEDULABLE, "no node")),  # a node may be added
        (_rolling(complete=True), CRASH),  # rolled out: a later crash is not this rollout's failure
        (None, CRASH),
    ],
)
def test_what_is_not_a_failed_rollout_is_not_rolled_back(
    deployment: dict[str, Any] | None, fault: conditions.Fault | None
) -> None:
    app = _app(generation=2, image="floe-job:bad", status=_ready_at(_app(generation=1)))
    run, rolled = rollback.effective(app, deployment=deployment, pods_fault=fault, now=T0)
    assert rolled is None and run is app


def test_off_by_default_and_without_a_ready_generation_nothing_rolls_back() -> None:
    body = load_case("minimal")
    assert model.StreamingApp.from_body(body).spec.rollout.auto_rollback is False
    off = _app(generation=2, auto=False, image="floe-job:bad", status=_ready_at(_app(generation=1)))
    never_ready = _app(generation=2, image="floe-job:bad")
    for app in (off, never_ready):
        run, rolled = rollback.effective(app, deployment=_rolling(), pods_fault=CRASH, now=T0)
        assert rolled is None and run is app


def test_a_generation_that_only_scaled_or_suspended_is_not_rolled_back() -> None:
    app = _app(generation=2, replicas=4, suspend=True, status=_ready_at(_app(generation=1)))
    run, rolled = rollback.effective(app, deployment=_rolling(), pods_fault=CRASH, now=T0)
    assert rolled is None and run is app


def test_the_recorded_spec_is_text_so_a_merge_patch_replaces_it_whole() -> None:
    # a status write is a merge patch: an object would be merged into the last one recorded
    # (a field the new spec lacks kept) and lose its null fields
    with_scaling = _app(generation=1, autoscaling={"mode": "Native", "maxReplicas": 4})
    record = rollback.spec_record(with_scaling.spec)
    assert isinstance(record, str) and '"autoscaling":{' in record
    assert rollback.spec_record(_app(generation=2).spec).count('"autoscaling":null') == 1
    broken = _app(generation=2, image="floe-job:bad", status={"lastReady": {"generation": 1, "spec": "{not json"}})
    run, rolled = rollback.effective(broken, deployment=_rolling(), pods_fault=CRASH, now=T0)
    assert rolled is None and run is broken


def _bad_digest() -> str:
    return rollback.digest(_app(generation=2, image="floe-job:bad").spec.model_dump(mode="json", by_alias=True))


def test_a_rolled_back_generation_stays_rolled_back_once_its_failing_pods_are_gone() -> None:
    good = _app(generation=1, image="floe-job:good")
    earlier = rollback.RolledBack(2, 1, "ImageUnavailable", "Generation 2 failed (...)", T0, _bad_digest())
    app = _app(generation=2, image="floe-job:bad", status={**_ready_at(good), "rolledBack": earlier.record()})
    complete = _rolling(complete=True)
    run, rolled = rollback.effective(app, deployment=complete, pods_fault=None, now=T1)
    assert rolled == earlier and run.spec.image == "floe-job:good"
    # a scale step or a suspend (a new generation, the same failed spec) does not retry it
    scaled = _app(generation=3, image="floe-job:bad", replicas=4, suspend=True,
                  status={**_ready_at(good), "rolledBack": earlier.record()})
    run, rolled = rollback.effective(scaled, deployment=complete, pods_fault=None, now=T1)
    assert rolled == earlier and run.spec.image == "floe-job:good"
    assert (run.spec.replicas, run.spec.suspend, run.generation) == (4, True, 3)
    # the next generation is tried as declared
    fixed = _app(generation=4, image="floe-job:fixed", status={**_ready_at(good), "rolledBack": earlier.record()})
    run, rolled = rollback.effective(fixed, deployment=complete, pods_fault=None, now=T1)
    assert rolled is None and run is fixed


def _status(app: model.StreamingApp, *, ready: bool) -> dict[str, Any]:
    cond = {"type": "Ready", "status": "True" if ready else "False", "observedGeneration": app.generation}
    return {"conditions": [cond]}


def test_status_records_a_ready_generation_and_keeps_the_last_one_while_rolled_back() -> None:
    good = _app(generation=1, image="floe-job:good")
    fields = rollback.status_fields(good, None, _status(good, ready=True))
    assert fields == {"rolledBack": None, **_ready_at(good)}
    assert model.AppSpec.model_validate_json(fields["lastReady"]["spec"]) == good.spec  # it reads back whole

    bad = _app(generation=2, image="floe-job:bad", status=fields)
    assert rollback.status_fields(bad, None, _status(bad, ready=False))["lastReady"] == fields["lastReady"]
    rolled = rollback.RolledBack(2, 1, "CrashLooping", "m", T0, _bad_digest())
    after = rollback.status_fields(bad, rolled, _status(bad, ready=True))  # Ready again, on generation 1's spec
    assert after == {"rolledBack": rolled.record(), "lastReady": fields["lastReady"]}
    off = _app(generation=3, auto=False, status=fields)
    assert rollback.status_fields(off, None, _status(off, ready=True)) == {"rolledBack": None, "lastReady": None}


def test_a_rolled_back_app_is_degraded_and_stalled_with_the_reason_and_the_condition_clears_on_a_new_generation() -> (
    None
):
    app = _app(generation=2)
    rolled = conditions.Fault(podfaults.CRASH_LOOPING, "Generation 2 failed (...)")
    status = conditions.status_for(app, conditions.Observed(rolled_back=rolled), now=T0)
    by = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert by["Degraded"] == ("True", conditions.ROLLED_BACK)
    assert by["Stalled"] == ("True", conditions.ROLLED_BACK)
    assert by[conditions.ROLLED_BACK] == ("True", podfaults.CRASH_LOOPING)
    events = conditions.transitions(conditions.status_for(app, conditions.Observed(), now=T0)["conditions"],
                                    status["conditions"])
    assert conditions.Event("Warning", conditions.ROLLED_BACK, rolled.message) in events
    later = _app(generation=3, status=status)
    status = conditions.status_for(later, conditions.Observed(), now=T1)
    by = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert by[conditions.ROLLED_BACK] == ("False", conditions.NEW_GENERATION)
    assert by["Degraded"][1] != conditions.ROLLED_BACK
    never = conditions.status_for(_app(generation=2), conditions.Observed(), now=T0)
    assert conditions.ROLLED_BACK not in {c["type"] for c in never["conditions"]}
