"""Scheduled snapshots (`snapshotschedule`): when one is due, the resource it creates, which
older ones retention deletes; and the Job that deletes a snapshot's data
(`snapshotjob.delete_job`). Pure, no cluster."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from floe_operator import model, render, snapshotjob, snapshotschedule

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
    assert snapshotschedule.interval_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1d", "h", "5 m", "1m-"])
def test_an_interval_that_is_no_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        snapshotschedule.interval_seconds(text)


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
