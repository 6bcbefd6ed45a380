"""A new app started from a snapshot (`restorejob`): its restore Job, the phase read back from
the Job and its pod, and the app's conditions meanwhile. Pure, no cluster."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from floe_operator import conditions, model, render, restorejob, snapshotjob

from .conftest import load_case

LOCATION = "file:///snapshots/wc/nightly-1"


def _app(*, status: dict[str, Any] | None = None) -> model.StreamingApp:
    body = load_case("minimal")
    body["metadata"]["uid"] = "app-uid"
    body["spec"]["restoreFrom"] = {"location": LOCATION, "volume": {"claimName": "backups"}}
    body["status"] = status or {}
    return model.StreamingApp.from_body(body)


def _job(*, complete: bool = False, failed: bool = False, ready: int = 0) -> dict[str, Any]:
    conds = []
    if complete:
        conds.append({"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-29T07:01:00Z"})
    if failed:
        conds.append(
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        )
    status: dict[str, Any] = {"conditions": conds, "ready": ready}
    if complete:
        status["completionTime"] = "2026-11-29T07:01:00Z"
    return {"metadata": {"name": "x-restore", "uid": "job-uid"}, "spec": {}, "status": status}


def _pod(*, exit_code: int, message: str) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "message": message}
    return {
        "metadata": {"name": "x-restore-abc", "creationTimestamp": "2026-11-29T07:00:00Z"},
        "status": {"containerStatuses": [{"name": snapshotjob.CONTAINER, "state": {"terminated": terminated}}]},
    }


def test_the_restore_job_runs_the_apps_pod_reading_the_snapshot_and_is_the_apps() -> None:
    app = _app()
    job = restorejob.job(app)
    kubernetes_validate.validate(job, "1.34", strict=True)
    assert job["metadata"]["name"] == f"{app.name}-restore"
    assert job["metadata"]["ownerReferences"] == [render.owner_reference(app)]
    assert job["metadata"]["labels"][restorejob.RESTORE_LABEL] == app.name
    pod = job["spec"]["template"]
    assert render.APP_LABEL not in pod["metadata"]["labels"]  # never one of the app's replicas
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["restore", "--from", LOCATION, "--summary-file", snapshotjob.TERMINATION_LOG]
    assert {"name": snapshotjob.VOLUME, "mountPath": "/snapshots"} in container["volumeMounts"]
    assert {"name": snapshotjob.VOLUME, "persistentVolumeClaim": {"claimName": "backups"}} in pod["spec"]["volumes"]
    replica = render.deployment(app, config_digest="")["spec"]["template"]["spec"]
    (main,) = (c for c in replica["containers"] if c["name"] == render.CONTAINER)
    for key in ("image", "env", "securityContext", "resources"):
        assert container[key] == main[key], key
    assert job["spec"]["backoffLimit"] == restorejob.BACKOFF_LIMIT


def test_an_app_needs_its_restore_until_one_succeeded() -> None:
    assert not restorejob.done(_app())
    assert not restorejob.done(_app(status={"restore": {"phase": "Failed"}}))
    assert restorejob.done(_app(status={"restore": {"phase": "Succeeded"}}))
    assert restorejob.done(model.StreamingApp.from_body(load_case("minimal")))
    assert restorejob.held("Deployment") and restorejob.held("ScaledObject") and not restorejob.held("ConfigMap")


def test_a_restore_that_runs_holds_the_pods_back_and_says_so() -> None:
    phase, fault, record = restorejob.verdict(_app(), _job(ready=1), None)
    assert phase == snapshotjob.RUNNING and fault is not None and fault.reason == conditions.RESTORING
    assert record == {"from": LOCATION, "job": "word-count-restore", "phase": snapshotjob.RUNNING}


def test_a_restore_that_succeeded_records_what_it_loaded() -> None:
    summary = {"uri": LOCATION, "app_id": "new", "from_app": "old", "rows": 407, "seconds": 3.5}
    phase, fault, record = restorejob.verdict(
        _app(), _job(complete=True), _pod(exit_code=0, message=json.dumps(summary))
    )
    assert (phase, fault) == (snapshotjob.SUCCEEDED, None)
    assert record == {
        "from": LOCATION,
        "job": "word-count-restore",
        "phase": "Succeeded",
        "time": "2026-11-29T07:01:00Z",
        "rows": 407,
        "seconds": 3.5,
        "fromApp": "old",
    }


def test_a_refused_restore_names_the_mismatch_and_holds_the_pods() -> None:
    said = (
        "2026-11-29 INFO starting\nfloe-job restore: snapshot at file:///s (app old) does not match app new: "
        "stage count: snapshot has 2, job has 1"
    )
    phase, fault, record = restorejob.verdict(_app(), _job(failed=True), _pod(exit_code=2, message=said))
    assert phase == snapshotjob.FAILED and fault is not None and fault.reason == conditions.RESTORE_FAILED
    assert "stage count: snapshot has 2, job has 1" in fault.message and record["message"] == fault.message


@pytest.mark.parametrize(
    ("reason", "ready", "progressing", "degraded", "stalled"),
    [
        (conditions.RESTORING, "False", "True", "False", "False"),
        (conditions.RESTORE_FAILED, "False", "False", "True", "True"),
    ],
)
def test_the_conditions_while_restoring_and_once_it_failed(
    reason: str, ready: str, progressing: str, degraded: str, stalled: str
) -> None:
    observed = conditions.Observed(deployment=None, held=conditions.Fault(reason, "the restore"))
    status = conditions.status_for(_app(), observed, now="2026-11-29T07:00:00Z")
    found = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert found["Ready"] == (ready, reason) and found["Progressing"] == (progressing, reason)
    assert found["Degraded"][0] == degraded and found["Stalled"][0] == stalled
