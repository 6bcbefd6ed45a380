"""Scheduled snapshots (`snapshotschedule`): when one is due, the resource it creates, which
older ones retention deletes; and the Job that deletes a snapshot's data
(`snapshotjob.delete_job`). Pure, no cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from floe_operator import conditions, model, render, rollback, snapshotjob, snapshotschedule

from .conftest import load_case

NOW = datetime(2026, 11, 29, 6, 0, 0, tzinfo=UTC)
READY = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
         "lastTransitionTime": "2026-11-29T05:00:00Z"}


def _app(*, status: dict[str, Any] | None = None, **snapshots: Any) -> model.StreamingApp:
    body = load_case("minimal")
    body["metadata"]["uid"] = "app-uid"
    body["spec"]["snapshots"] = {"location": "file:///snapshots/wc/", "interval": "1h",
                                 "volume": {"claimName": "backups", "mountPath": "/snapshots"}, **snapshots}
    body["status"] = {"conditions": [READY]} if status is None else status
    return model.StreamingApp.from_body(body)


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("6h", 21600), ("1h30m", 5400), ("1.5h", 5400),
                                               ("90s", 90)])
def test_intervals_read_as_the_crd_admits_them(text: str, seconds: float) -> None:
    assert model.duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1d", "h", "5 m", "1m-"])
def test_an_interval_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        model.duration_seconds(text)


def test_the_first_snapshot_is_due_once_the_app_is_ready() -> None:
    assert snapshotschedule.due(_app(), NOW)
    assert not snapshotschedule.due(_app(status={}), NOW)
    not_ready = {**READY, "status": "False"}
    assert not snapshotschedule.due(_app(status={"conditions": [not_ready]}), NOW)


def test_the_next_is_due_one_interval_after_the_last_was_created() -> None:
    def status(last: str) -> dict[str, Any]:
        return {"conditions": [READY], "snapshots": {"last": "x", "lastScheduleTime": last}}

    assert not snapshotschedule.due(_app(status=status("2026-11-29T05:00:01Z")), NOW)
    assert snapshotschedule.due(_app(status=status("2026-11-29T05:00:00Z")), NOW)
    assert snapshotschedule.due(_app(status=status("2026-11-29T05:59:00Z"), interval="1m"), NOW)


def test_no_snapshot_is_due_without_a_schedule_or_while_suspended_or_paused() -> None:
    body = load_case("minimal")
    body["status"] = {"conditions": [READY]}
    assert not snapshotschedule.due(model.StreamingApp.from_body(body), NOW)
    app = _app()
    assert not snapshotschedule.due(app.model_copy(update={"spec": app.spec.model_copy(update={"suspend": True})}), NOW)
    assert not snapshotschedule.due(app.model_copy(update={"reconcile_annotation": model.RECONCILE_PAUSED}), NOW)


def test_a_scheduled_snapshot_writes_below_the_location_under_its_own_name_and_deletes_its_data() -> None:
    app = _app(keep=3, writers={"word-count": "count"}, settleTimeoutSeconds=30, activeDeadlineSeconds=600)
    body = snapshotschedule.snapshot(app, NOW)
    name = f"{app.name}-20261129-060000"
    assert body["metadata"]["name"] == name
    assert body["metadata"]["labels"][snapshotschedule.SCHEDULED_LABEL] == app.name
    assert body["metadata"]["ownerReferences"] == [render.owner_reference(app)]
    assert body["spec"] == {
        "app": app.name, "location": f"file:///snapshots/wc/{name}", "deletionPolicy": "Delete",
        "volume": {"claimName": "backups", "mountPath": "/snapshots"}, "writers": {"word-count": "count"},
        "settleTimeoutSeconds": 30, "activeDeadlineSeconds": 600,
    }
    snap = model.StreamingAppSnapshot.from_body({**body, "metadata": {**body["metadata"], "uid": "s"}})
    assert snap.spec.deletion_policy == "Delete"
    assert snapshotschedule.owned(body, app)
    other = _app().model_copy(update={"uid": "an-earlier-app-of-that-name"})
    assert not snapshotschedule.owned(body, other)


def test_a_long_app_name_still_gives_a_snapshot_name_a_job_can_take() -> None:
    name = snapshotschedule.name_for("a" * 52, NOW)
    assert len(name) <= 63 and name.endswith("-20261129-060000")


def _snap(name: str, created: str, phase: str | None, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T06:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


def test_retention_keeps_the_newest_successes_and_drops_failures_older_than_the_newest_success() -> None:
    snaps = [
        _snap("s1", "2026-11-29T01:00:00Z", "Succeeded"),
        _snap("s2", "2026-11-29T02:00:00Z", "Failed"),
        _snap("s3", "2026-11-29T03:00:00Z", "Succeeded"),
        _snap("s4", "2026-11-29T04:00:00Z", "Succeeded"),
        _snap("s5", "2026-11-29T05:00:00Z", "Failed"),
        _snap("s6", "2026-11-29T06:00:00Z", "Running"),
    ]
    assert snapshotschedule.expired(snaps, keep=2) == ["s2", "s1"]
    assert snapshotschedule.expired(snaps, keep=1) == ["s3", "s2", "s1"]
    assert snapshotschedule.expired(snaps, keep=5) == ["s2"]
    # nothing succeeded yet: nothing is deleted, the failures stay to be looked at
    assert snapshotschedule.expired([_snap("f", "2026-11-29T01:00:00Z", "Failed")], keep=1) == []
    # one already being deleted is not counted among those kept
    snaps[3] = _snap("s4", "2026-11-29T04:00:00Z", "Succeeded", deleting=True)
    assert snapshotschedule.expired(snaps, keep=1) == ["s2", "s1"]
    assert snapshotschedule.running(snaps) == ["s6"]


def test_the_data_deleting_job_runs_the_snapshots_pod_with_its_own_name_and_arguments() -> None:
    app = _app()
    body = snapshotschedule.snapshot(app, NOW)
    snap = model.StreamingAppSnapshot.from_body({**body, "metadata": {**body["metadata"], "uid": "snap-uid"}})
    taking, deleting = snapshotjob.job(snap, app), snapshotjob.delete_job(snap, app)
    assert deleting["metadata"]["name"] == f"{snap.name}-delete"
    assert deleting["metadata"]["ownerReferences"] == taking["metadata"]["ownerReferences"]
    assert deleting["metadata"]["labels"] == taking["metadata"]["labels"]
    (container,) = deleting["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["delete-snapshot", "--at", snap.spec.location]
    (taker,) = taking["spec"]["template"]["spec"]["containers"]
    assert {k: v for k, v in container.items() if k != "args"} == {k: v for k, v in taker.items() if k != "args"}
    assert deleting["spec"]["backoffLimit"] == snapshotjob.DELETE_BACKOFF_LIMIT


def test_a_delete_jobs_name_fits_for_the_longest_snapshot_names() -> None:
    long = model.StreamingAppSnapshot.from_body({
        "metadata": {"name": "s" * 63, "namespace": "n", "uid": "u"}, "spec": {"app": "a", "location": "s3a://b/p"}})
    other = model.StreamingAppSnapshot.from_body({
        "metadata": {"name": "s" * 62 + "t", "namespace": "n", "uid": "u"}, "spec": {"app": "a", "location": "s3a://b/p"}})
    names = {snapshotjob.delete_job_name(long), snapshotjob.delete_job_name(other)}
    assert len(names) == 2 and all(len(n) <= 63 and n.endswith("-delete") for n in names)


# --- before an upgrade (spec.rollout.upgradeMode: snapshot) ---------------------------------


def _upgrading(*, generation: int, mode: str = "snapshot", last: model.StreamingApp | None = None,
               snapshots: bool = True, **spec: Any) -> model.StreamingApp:
    body = load_case("minimal")
    body["metadata"]["generation"] = generation
    body["metadata"]["uid"] = "app-uid"
    body["spec"]["rollout"]["upgradeMode"] = mode
    if snapshots:
        body["spec"]["snapshots"] = {"location": "s3a://backups/wc"}
    body["spec"].update(spec)
    if last is not None:
        body["status"] = {"lastReady": {"generation": last.generation, "spec": rollback.spec_record(last.spec)}}
    return model.StreamingApp.from_body(body)


def test_a_new_image_or_job_waits_for_a_snapshot_of_the_last_ready_generation() -> None:
    running = _upgrading(generation=3, image="floe-job:1")
    assert snapshotschedule.upgrade_pending(_upgrading(generation=4, image="floe-job:2", last=running)) == 3
    new_job = _upgrading(generation=4, image="floe-job:1", last=running, job={"entrypoint": "app:other"})
    assert snapshotschedule.upgrade_pending(new_job) == 3


def test_a_change_that_keeps_image_and_job_rolls_out_at_once() -> None:
    running = _upgrading(generation=3, image="floe-job:1")
    assert snapshotschedule.upgrade_pending(_upgrading(generation=4, image="floe-job:1", last=running,
                                                       replicas=5, errors="deadLetter")) is None


def test_no_snapshot_is_waited_for_in_direct_mode_without_a_record_or_for_the_recorded_generation() -> None:
    running = _upgrading(generation=3, image="floe-job:1")
    assert snapshotschedule.upgrade_pending(_upgrading(generation=4, image="floe-job:2", last=running,
                                                       mode="direct")) is None
    assert snapshotschedule.upgrade_pending(_upgrading(generation=4, image="floe-job:2")) is None
    assert snapshotschedule.upgrade_pending(_upgrading(generation=3, image="floe-job:1", last=running)) is None


def test_the_snapshot_before_an_upgrade_is_named_for_its_generation_and_kept_like_the_scheduled_ones() -> None:
    app = _upgrading(generation=12, image="floe-job:2", last=_upgrading(generation=11, image="floe-job:1"))
    body = snapshotschedule.upgrade_snapshot(app, NOW)
    assert body["metadata"]["name"] == f"{app.name}-upgrade-12"
    assert body["spec"]["location"] == f"s3a://backups/wc/{app.name}-upgrade-12"
    assert snapshotschedule.owned(body, app)
    assert len(snapshotschedule.upgrade_snapshot_name(app.model_copy(update={"name": "a" * 52,
                                                                             "generation": 10**9}))) <= 63


def _held_status(held: conditions.Fault) -> dict[str, dict[str, Any]]:
    app = _upgrading(generation=4, image="floe-job:2", last=_upgrading(generation=3, image="floe-job:1"))
    complete = {
        "metadata": {"generation": 7},
        "spec": {"replicas": 1},
        "status": {"observedGeneration": 7, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1, "conditions": [
                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]},
    }
    status = conditions.status_for(app, conditions.Observed(deployment=complete, held=held), now=NOW_TEXT)
    return {c["type"]: c for c in status["conditions"]}


NOW_TEXT = "2026-11-29T06:00:00Z"


def test_while_the_snapshot_runs_the_new_generation_is_progressing_and_not_ready() -> None:
    conds = _held_status(conditions.Fault(conditions.SNAPSHOT_BEFORE_UPGRADE, "Taking snapshot x"))
    assert (conds["Ready"]["status"], conds["Ready"]["reason"]) == ("False", conditions.SNAPSHOT_BEFORE_UPGRADE)
    assert (conds["Progressing"]["status"], conds["Progressing"]["reason"]) == ("True", "SnapshotBeforeUpgrade")
    assert conds["Degraded"]["status"] == "False"
    assert (conds["Reconciling"]["status"], conds["Stalled"]["status"]) == ("True", "False")


def test_a_failed_snapshot_before_an_upgrade_degrades_and_stalls_the_app() -> None:
    conds = _held_status(conditions.Fault(conditions.UPGRADE_SNAPSHOT_FAILED, "The snapshot x failed"))
    for type_, state in (("Ready", "False"), ("Progressing", "False"), ("Degraded", "True"), ("Stalled", "True")):
        assert (conds[type_]["status"], conds[type_]["reason"]) == (state, conditions.UPGRADE_SNAPSHOT_FAILED), type_


def test_a_snapshot_taken_while_an_upgrade_waits_runs_the_running_generation() -> None:
    running = _upgrading(generation=3, image="floe-job:1")
    app = _upgrading(generation=4, image="floe-job:2", last=running)
    as_run = snapshotschedule.as_running(app)
    assert (as_run.generation, as_run.spec.image) == (3, "floe-job:1")
    assert snapshotschedule.as_running(running) is running


def test_the_schedules_outcome_names_the_newest_ended_snapshot_while_it_failed_and_the_newest_success() -> None:
    def done(snap: dict[str, Any], at: str) -> dict[str, Any]:
        snap["status"]["completionTime"] = at
        return snap

    ok1 = done(_snap("s1", "2026-11-29T01:00:00Z", "Succeeded"), "2026-11-29T01:02:00Z")
    ok3 = done(_snap("s3", "2026-11-29T03:00:00Z", "Succeeded"), "2026-11-29T03:02:00Z")
    failed2, failed4 = _snap("s2", "2026-11-29T02:00:00Z", "Failed"), _snap("s4", "2026-11-29T04:00:00Z", "Failed")
    running5 = _snap("s5", "2026-11-29T05:00:00Z", "Running")
    # the newest that ended failed, whatever runs after it; the success is the newest one's completion
    assert snapshotschedule.outcome([ok1, failed2, ok3, failed4, running5], {}) == {
        "lastSuccessfulTime": "2026-11-29T03:02:00Z",
        "lastFailed": "s4",
    }
    # a later success clears the failure (None: the merge patch removes the field)
    assert snapshotschedule.outcome([ok1, failed2], {}) == {
        "lastSuccessfulTime": "2026-11-29T01:02:00Z",
        "lastFailed": "s2",
    }
    assert snapshotschedule.outcome([failed2, ok3], {})["lastFailed"] is None
    # every success deleted (by a person; retention keeps the newest): the last known time stays
    before = {"lastSuccessfulTime": "2026-11-28T00:00:00Z"}
    assert snapshotschedule.outcome([failed4], before) == {"lastSuccessfulTime": "2026-11-28T00:00:00Z",
                                                          "lastFailed": "s4"}
    assert snapshotschedule.outcome([], {}) == {"lastSuccessfulTime": None, "lastFailed": None}
