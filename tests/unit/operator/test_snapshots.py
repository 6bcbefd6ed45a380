"""A pass over a StreamingAppSnapshot (`snapshots.converge`) with in-memory stand-ins for the API
server and Cassandra: what it creates, when it creates nothing, and what it writes in status. The
integration test on the node drives the real Job."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from floe_operator import k8s, model, reconcile, snapshotjob, snapshots, snapshotschedule

from .conftest import load_case


class FakeCluster:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []
        self.refuse_create: k8s.ApiError | None = None
        self.stop_at_status = False  # the operator process ends at its next status write

    async def get(self, api_version: str, kind: str, namespace: str, name: str, *,
                  deferred: bool = False) -> dict[str, Any] | None:
        found = self.objects.get((kind, name))
        return copy.deepcopy(found) if found is not None else None

    async def secret(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        return None

    async def create(self, obj: Mapping[str, Any], *, urgent: bool = False) -> dict[str, Any]:
        if self.refuse_create is not None:
            raise self.refuse_create
        stored = copy.deepcopy(dict(obj)) | {"status": {}}
        stored["metadata"]["uid"] = "job-uid"
        stored["metadata"].setdefault("creationTimestamp", "2026-11-29T06:00:00Z")
        self.objects[(obj["kind"], obj["metadata"]["name"])] = stored
        self.created.append(stored)
        return stored

    async def list_objects(self, api_version: str, kind: str, namespace: str, *, selector: str) -> list[dict[str, Any]]:
        if kind == "Pod":
            return list(self.pods)
        key, _, value = selector.partition("=")
        return [copy.deepcopy(o) for (k, _n), o in self.objects.items()
                if k == kind and (o["metadata"].get("labels") or {}).get(key) == value]

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.deleted.append((kind, name))
        self.objects.pop((kind, name), None)

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any], *,
                           kind: str = model.KIND) -> dict[str, Any]:
        if self.stop_at_status:
            self.stop_at_status = False
            raise SystemExit("the operator stopped")
        self.statuses.append(dict(status))
        stored = self.objects[(kind, name)]
        stored["status"] = {**(stored.get("status") or {}), **copy.deepcopy(dict(status))}
        return stored

    async def post_event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason))


class FakeProvisioner:
    def __init__(self, topics: list[str]) -> None:
        self.topics = topics

    async def recorded_topics(self, target: Any, app: model.StreamingApp) -> list[str]:
        return self.topics


def _deps(cluster: FakeCluster, *, topics: list[str] | None = None) -> reconcile.Deps:
    return reconcile.Deps(
        cluster=cluster,  # type: ignore[arg-type]
        provisioner=FakeProvisioner(["lines"] if topics is None else topics),  # type: ignore[arg-type]
        kafka=None,  # type: ignore[arg-type]
    )


def _setup(*, app: bool = True, location: str = "s3a://backups/shop/1") -> tuple[FakeCluster, dict[str, Any]]:
    cluster = FakeCluster()
    body = load_case("minimal")
    snap = {
        "apiVersion": model.API_VERSION, "kind": model.SNAPSHOT_KIND,
        "metadata": {"name": "nightly-1", "namespace": body["metadata"]["namespace"], "uid": "snap-uid"},
        "spec": {"app": body["metadata"]["name"], "location": location},
    }
    cluster.objects[(model.SNAPSHOT_KIND, "nightly-1")] = snap
    if app:
        cluster.objects[(model.KIND, body["metadata"]["name"])] = body
    return cluster, snap


async def _pass(cluster: FakeCluster, snap: Mapping[str, Any], **kw: Any) -> None:
    await snapshots.converge(_deps(cluster, **kw), snap["metadata"]["namespace"], snap["metadata"]["name"],
                             app_of=lambda namespace, name: None)


def _status(cluster: FakeCluster) -> dict[str, Any]:
    return dict(cluster.objects[(model.SNAPSHOT_KIND, "nightly-1")].get("status") or {})


async def test_a_snapshot_of_a_running_app_creates_one_job_and_is_pending() -> None:
    cluster, snap = _setup()
    await _pass(cluster, snap)
    assert [j["kind"] for j in cluster.created] == ["Job"]
    status = _status(cluster)
    assert status["phase"] == snapshotjob.PENDING
    assert status["job"] == "nightly-1"
    assert status["location"] == "s3a://backups/shop/1"
    assert status["image"] == load_case("minimal")["spec"]["image"]
    assert cluster.events == [("Normal", snapshotjob.JOB_PENDING)]
    await _pass(cluster, snap)  # the Job's own events: nothing new to create or write
    assert len(cluster.created) == 1 and len(cluster.statuses) == 1


async def test_an_operator_stopped_between_creating_the_job_and_recording_it_records_the_start_from_the_job() -> None:
    cluster, snap = _setup()
    cluster.stop_at_status = True
    with pytest.raises(SystemExit):
        await _pass(cluster, snap)
    assert [j["kind"] for j in cluster.created] == ["Job"] and _status(cluster) == {}
    await _pass(cluster, snap)  # the next operator's first pass
    status = _status(cluster)
    assert len(cluster.created) == 1, "a second Job"
    assert status["phase"] == snapshotjob.PENDING
    assert status["job"] == "nightly-1"
    assert status["location"] == "s3a://backups/shop/1"
    assert status["image"] == load_case("minimal")["spec"]["image"]
    assert status["appId"] and status["appGeneration"] == load_case("minimal")["metadata"].get("generation", 1)
    assert status["startTime"] == cluster.created[0]["metadata"]["creationTimestamp"]


async def test_the_job_is_followed_to_succeeded_and_then_left_alone() -> None:
    cluster, snap = _setup()
    await _pass(cluster, snap)
    job = cluster.objects[("Job", "nightly-1")]
    job["status"] = {"ready": 1}
    await _pass(cluster, snap)
    assert _status(cluster)["phase"] == snapshotjob.RUNNING
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "completionTime": "2026-11-28T12:01:00Z"}
    cluster.pods = [{"metadata": {"name": "p", "creationTimestamp": "2026-11-28T12:00:00Z"}, "status": {
        "containerStatuses": [{"name": snapshotjob.CONTAINER, "state": {"terminated": {
            "exitCode": 0, "message": '{"bytes": 2048, "rows": 10, "seconds": 1.5}'}}}]}}]
    await _pass(cluster, snap)
    status = _status(cluster)
    assert (status["phase"], status["sizeBytes"], status["rows"]) == (snapshotjob.SUCCEEDED, 2048, 10)
    assert status["startTime"] and status["completionTime"] == "2026-11-28T12:01:00Z"
    del cluster.objects[("Job", "nightly-1")]  # its TTL ran out
    writes = len(cluster.statuses)
    await _pass(cluster, snap)
    assert len(cluster.statuses) == writes and len(cluster.created) == 1


async def test_a_snapshot_of_a_missing_app_fails_naming_it_and_creates_nothing() -> None:
    cluster, snap = _setup(app=False)
    await _pass(cluster, snap)
    assert cluster.created == []
    status = _status(cluster)
    assert status["phase"] == snapshotjob.FAILED
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == snapshotjob.APP_NOT_FOUND
    assert f"StreamingApp {snap['spec']['app']} not found in namespace {snap['metadata']['namespace']}" in (
        failed["message"])
    assert cluster.events == [("Warning", snapshotjob.APP_NOT_FOUND)]


async def test_a_snapshot_of_an_app_that_never_ran_fails_before_any_job() -> None:
    cluster, snap = _setup()
    await _pass(cluster, snap, topics=[])
    assert cluster.created == []
    failed = next(c for c in _status(cluster)["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == snapshotjob.APP_NEVER_RAN
    assert "has no committed positions" in failed["message"]


async def test_a_job_deleted_before_it_finished_fails_the_snapshot() -> None:
    cluster, snap = _setup()
    await _pass(cluster, snap)
    del cluster.objects[("Job", "nightly-1")]
    await _pass(cluster, snap)
    assert len(cluster.created) == 1
    assert _status(cluster)["phase"] == snapshotjob.FAILED
    assert next(c for c in _status(cluster)["conditions"] if c["type"] == "Failed")["reason"] == snapshotjob.JOB_DELETED


async def test_a_job_left_by_an_earlier_snapshot_of_that_name_is_waited_for() -> None:
    cluster, snap = _setup()
    await _pass(cluster, snap)
    cluster.objects[(model.SNAPSHOT_KIND, "nightly-1")]["metadata"]["uid"] = "a-new-one"
    cluster.objects[(model.SNAPSHOT_KIND, "nightly-1")]["status"] = {}
    with pytest.raises(snapshots.Retry, match="earlier snapshot"):
        await _pass(cluster, snap)


async def test_a_job_the_api_server_refuses_fails_the_snapshot_with_its_words() -> None:
    cluster, snap = _setup()
    cluster.refuse_create = k8s.ApiError(403, 'jobs.batch is forbidden: User "op" cannot create resource "jobs"')
    await _pass(cluster, snap)
    failed = next(c for c in _status(cluster)["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == snapshotjob.JOB_REFUSED
    assert "cannot create resource" in failed["message"]


# --- scheduled snapshots (spec.snapshots), retention and deleting a snapshot's data ------------

READY = {"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": ""}


def _scheduling_app(cluster: FakeCluster, *, keep: int = 2, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = load_case("minimal")
    body["metadata"]["uid"] = "app-uid"
    body["spec"]["snapshots"] = {"location": "s3a://backups/wc", "interval": "1h", "keep": keep}
    body["status"] = {"conditions": [READY], **(status or {})}
    cluster.objects[(model.KIND, body["metadata"]["name"])] = body
    return body


def _scheduled(cluster: FakeCluster, app: Mapping[str, Any], name: str, created: str, phase: str | None) -> None:
    snap = snapshotschedule.snapshot(model.StreamingApp.from_body(app), snapshotschedule.parse_time(created))
    snap["metadata"].update({"name": name, "uid": f"{name}-uid", "creationTimestamp": created})
    snap["status"] = {"phase": phase} if phase else {}
    cluster.objects[(model.SNAPSHOT_KIND, name)] = snap


async def test_a_ready_app_gets_its_first_scheduled_snapshot_recorded_in_status() -> None:
    cluster = FakeCluster()
    app = _scheduling_app(cluster)
    await snapshots.schedule(_deps(cluster), app)
    (created,) = cluster.created
    assert created["kind"] == model.SNAPSHOT_KIND and created["spec"]["deletionPolicy"] == "Delete"
    record = cluster.objects[(model.KIND, app["metadata"]["name"])]["status"]["snapshots"]
    assert record["last"] == created["metadata"]["name"]
    assert ("Normal", "SnapshotScheduled") in cluster.events


async def test_none_is_scheduled_while_the_last_one_runs_or_within_the_interval() -> None:
    cluster = FakeCluster()
    app = _scheduling_app(cluster)
    _scheduled(cluster, app, "s-running", "2026-11-28T00:00:00Z", "Running")
    await snapshots.schedule(_deps(cluster), app)
    assert cluster.created == []
    # its record in status lost, a snapshot taken within the interval stands in for it
    cluster = FakeCluster()
    app = _scheduling_app(cluster)
    just_now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    _scheduled(cluster, app, "s-recent", snapshotschedule.format_time(just_now), "Succeeded")
    await snapshots.schedule(_deps(cluster), app)
    assert cluster.created == []
    assert cluster.objects[(model.KIND, app["metadata"]["name"])]["status"]["snapshots"]["last"] == "s-recent"


async def test_retention_deletes_what_the_newest_keep_successes_leave_once_a_scheduled_one_ends() -> None:
    cluster = FakeCluster()
    app = _scheduling_app(cluster, keep=2)
    for i, phase in enumerate(["Succeeded", "Failed", "Succeeded", "Succeeded"]):
        _scheduled(cluster, app, f"s{i}", f"2026-11-2{i}T00:00:00Z", phase)
    mine = {"metadata": {"name": "s-other", "namespace": app["metadata"]["namespace"], "uid": "x",
                         "creationTimestamp": "2026-11-19T00:00:00Z"},
            "spec": {"app": app["metadata"]["name"], "location": "s3a://mine/1"}, "status": {"phase": "Succeeded"}}
    cluster.objects[(model.SNAPSHOT_KIND, "s-other")] = mine  # a team's own: never counted or deleted
    snap = cluster.objects[(model.SNAPSHOT_KIND, "s3")]
    snap["status"] = {}
    cluster.objects[("Job", "s3")] = {"metadata": {"name": "s3", "uid": "j", "ownerReferences": [
        {"uid": "s3-uid"}]}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    await snapshots.converge(_deps(cluster), app["metadata"]["namespace"], "s3", app_of=lambda ns, n: None)
    assert sorted(cluster.deleted) == [(model.SNAPSHOT_KIND, "s0"), (model.SNAPSHOT_KIND, "s1")]


def _deleting(cluster: FakeCluster, *, app: bool = True) -> dict[str, Any]:
    body = load_case("minimal")
    body["metadata"]["uid"] = "app-uid"
    if app:
        cluster.objects[(model.KIND, body["metadata"]["name"])] = body
    snap = {"apiVersion": model.API_VERSION, "kind": model.SNAPSHOT_KIND,
            "metadata": {"name": "old-1", "namespace": body["metadata"]["namespace"], "uid": "snap-uid",
                         "deletionTimestamp": "2026-11-29T06:00:00Z"},
            "spec": {"app": body["metadata"]["name"], "location": "s3a://backups/old-1", "deletionPolicy": "Delete"},
            "status": {"phase": "Succeeded"}}
    return snap


async def test_deleting_a_snapshot_runs_the_job_that_deletes_its_data_and_waits_for_it() -> None:
    cluster = FakeCluster()
    snap = _deleting(cluster)
    with pytest.raises(snapshots.Retry, match="deletes the data at s3a://backups/old-1"):
        await snapshots.finalize(_deps(cluster), snap)
    (job,) = cluster.created
    assert job["metadata"]["name"] == "old-1-delete"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["delete-snapshot", "--at", "s3a://backups/old-1"]
    job["metadata"]["ownerReferences"] = [{"uid": "snap-uid"}]
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    said = await snapshots.finalize(_deps(cluster), snap)
    assert "Deleted the data at s3a://backups/old-1" in said
    assert cluster.events[-1] == ("Normal", "SnapshotDataDeleted")


async def test_a_snapshot_whose_app_is_gone_lets_go_and_keeps_its_data_saying_so() -> None:
    cluster = FakeCluster()
    snap = _deleting(cluster, app=False)
    said = await snapshots.finalize(_deps(cluster), snap)
    assert "the data at s3a://backups/old-1 stays" in said and cluster.created == []
    assert cluster.events == [("Warning", "SnapshotDataKept")]


async def test_a_snapshot_whose_own_job_still_runs_is_held_until_it_ends() -> None:
    cluster = FakeCluster()
    snap = _deleting(cluster)
    cluster.objects[("Job", "old-1")] = {"metadata": {"name": "old-1", "uid": "j",
                                                      "ownerReferences": [{"uid": "snap-uid"}]}, "status": {}}
    with pytest.raises(snapshots.Retry, match="still runs"):
        await snapshots.finalize(_deps(cluster), snap)
    assert cluster.created == []
