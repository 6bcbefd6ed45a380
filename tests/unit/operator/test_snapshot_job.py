"""A StreamingAppSnapshot's Job (`snapshotjob.job`) and the snapshot's status read back from the
Job and its pod (`snapshotjob.from_job`, `snapshotjob.status`): pure, no cluster."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest
from floe_operator import model, render, snapshotjob

from .conftest import CASES, load_case

CASE_NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))


def _app(name: str = "minimal") -> model.StreamingApp:
    return model.StreamingApp.from_body(load_case(name))


def _snap(app: model.StreamingApp, **spec: Any) -> model.StreamingAppSnapshot:
    body = {
        "metadata": {"name": "nightly-1", "namespace": app.namespace, "uid": "snap-uid", "generation": 1},
        "spec": {"app": app.name, "location": "file:///snapshots/nightly-1",
                 "volume": {"claimName": "backups", "mountPath": "/snapshots"}, **spec},
    }
    return model.StreamingAppSnapshot.from_body(body)


def _pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"])


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod_spec(job)["containers"]
    return dict(container)


def _replica(app: model.StreamingApp) -> tuple[dict[str, Any], dict[str, Any]]:
    """The app's Deployment pod spec and its `app` container, as the reconcile renders them."""
    pod = render.deployment(app, config_digest="")["spec"]["template"]["spec"]
    (main,) = (c for c in pod["containers"] if c["name"] == render.CONTAINER)
    return pod, main


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_job_is_a_valid_kubernetes_object_for_every_example_app(name: str) -> None:
    app = _app(name)
    kubernetes_validate.validate(snapshotjob.job(_snap(app), app), "1.34", strict=True)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_job_runs_the_apps_image_environment_and_security_as_its_replicas_do(name: str) -> None:
    app = _app(name)
    job = snapshotjob.job(_snap(app), app)
    pod, main = _replica(app)
    container = _container(job)
    for key in ("image", "imagePullPolicy", "command", "env", "resources", "securityContext"):
        assert container[key] == main[key], key
    assert container.get("envFrom") == main.get("envFrom")
    spec = _pod_spec(job)
    assert spec["serviceAccountName"] == pod["serviceAccountName"]
    assert spec.get("automountServiceAccountToken") == pod.get("automountServiceAccountToken")
    assert {k: v for k, v in spec["securityContext"].items() if not k.startswith("fsGroup")} == {
        k: v for k, v in pod["securityContext"].items() if not k.startswith("fsGroup")
    }
    # the restricted profile, whatever the app's template adds
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/tmp"]] == {"name": "tmp", "emptyDir": {}}
    assert volumes[mounts[render.CONFIG_DIR]] == {"name": "config", "configMap": {"name": render.config_map_name(app)}}
    for key in ("nodeSelector", "tolerations", "imagePullSecrets", "priorityClassName"):
        assert spec.get(key) == pod.get(key), key


def test_the_job_is_the_snapshots_child_and_runs_once() -> None:
    app = _app()
    job = snapshotjob.job(_snap(app, activeDeadlineSeconds=900), app)
    meta = job["metadata"]
    assert (meta["name"], meta["namespace"]) == ("nightly-1", app.namespace)
    assert meta["ownerReferences"] == [{
        "apiVersion": model.API_VERSION, "kind": model.SNAPSHOT_KIND, "name": "nightly-1", "uid": "snap-uid",
        "controller": True, "blockOwnerDeletion": True,
    }]
    # what the admission policy and the operator's watch of Jobs look for
    assert meta["labels"][render.MANAGED_BY] == render.FIELD_MANAGER
    assert meta["labels"][snapshotjob.SNAPSHOT_LABEL] == "nightly-1"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 900
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert _pod_spec(job)["restartPolicy"] == "Never"


def test_the_jobs_pod_is_never_counted_as_one_of_the_apps_replicas() -> None:
    app = _app("pod-template")
    labels = snapshotjob.job(_snap(app), app)["spec"]["template"]["metadata"]["labels"]
    assert render.APP_LABEL not in labels  # the Deployment's, Services' and PDB's selector
    assert render.MANAGED_BY not in labels  # the operator's index of the app's pods
    assert labels[snapshotjob.SNAPSHOT_LABEL] == "nightly-1"
    assert labels.items() >= render.network_peer_labels(app).items()  # what the app's NetworkPolicy admits
    assert labels["team"] == "payments"  # spec.pod.labels, a workload identity say


def test_the_command_takes_the_snapshot_with_the_spec_and_writes_the_summary_to_the_termination_log() -> None:
    app = _app()
    job = snapshotjob.job(_snap(app, writers={"word-count": "count", "a": "split"}, settleTimeoutSeconds=30), app)
    container = _container(job)
    assert container["command"] == ["floe-job"]
    assert container["args"] == [
        "snapshot", "--to", "file:///snapshots/nightly-1", "--settle-timeout", "30",
        "--generation", str(app.generation), "--image", app.spec.image,
        "--summary-file", "/dev/termination-log",
        "--writer", "a=split", "--writer", "word-count=count",
    ]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "livenessProbe" not in container and "readinessProbe" not in container and "ports" not in container


def test_a_file_location_mounts_its_claim_and_an_object_store_none() -> None:
    app = _app()
    job = snapshotjob.job(_snap(app), app)
    volumes = {v["name"]: v for v in _pod_spec(job)["volumes"]}
    claim = {"name": snapshotjob.VOLUME, "persistentVolumeClaim": {"claimName": "backups"}}
    assert volumes[snapshotjob.VOLUME] == claim
    assert {"name": snapshotjob.VOLUME, "mountPath": "/snapshots"} in _container(job)["volumeMounts"]
    # the claim is writable by the pod's group, checked at its root only
    security = _pod_spec(job)["securityContext"]
    assert security["fsGroup"] == app.spec.pod.run_as_user
    assert security["fsGroupChangePolicy"] == "OnRootMismatch"
    remote = snapshotjob.job(_snap(app, location="s3a://backups/shop/1", volume=None), app)
    assert snapshotjob.VOLUME not in {v["name"] for v in _pod_spec(remote)["volumes"]}


def test_init_containers_are_kept_and_sidecars_left_out() -> None:
    app = _app("pod-template")
    spec = _pod_spec(snapshotjob.job(_snap(app), app))
    assert [c["name"] for c in spec["containers"]] == [snapshotjob.CONTAINER]
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-rules"]
    assert {"rules", "certs"} <= {v["name"] for v in spec["volumes"]}


# --- status from the Job and its pod ---------------------------------------------------------


def _job(*, ready: int = 0, complete: bool = False, failed: str | None = None) -> dict[str, Any]:
    conds = []
    if complete:
        conds.append({"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-28T12:01:00Z"})
    if failed is not None:
        conds.append({"type": "Failed", "status": "True", "reason": failed, "message": "Job has reached the limit",
                      "lastTransitionTime": "2026-11-28T12:02:00Z"})
    status: dict[str, Any] = {"ready": ready, "conditions": conds}
    if complete:
        status["completionTime"] = "2026-11-28T12:01:00Z"
    return {"metadata": {"name": "nightly-1", "uid": "job-uid"}, "spec": {"activeDeadlineSeconds": 900},
            "status": status}


def _pod(*, terminated: dict[str, Any] | None = None, waiting: dict[str, Any] | None = None) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated is not None else {"waiting": waiting} if waiting else {}
    return {"metadata": {"name": "nightly-1-x7k2p", "creationTimestamp": "2026-11-28T12:00:00Z"},
            "spec": {"containers": [{"name": snapshotjob.CONTAINER}]},
            "status": {"containerStatuses": [{"name": snapshotjob.CONTAINER, "image": "img", "state": state}]}}


SUMMARY = {
    "uri": "file:///snapshots/nightly-1", "app_id": "wc-1", "seconds": 4.2, "attempts": 7, "bytes": 25154,
    "rows": 442, "stores": {"word-count": {"rows": 407, "bytes": 21034}},
    "tails": {"count": {"rows": 35, "bytes": 4120}},
    "stages": {"split": {"topic": "wc-in", "partitions": 6, "next_offsets": 900, "in_flight": 2},
               "count": {"topic": "wc-1-count-repartition", "partitions": 6, "next_offsets": 410, "in_flight": 0}},
}


def test_a_job_whose_pod_has_not_started_is_pending_and_one_that_is_ready_running() -> None:
    assert snapshotjob.from_job(_job(), None).phase == snapshotjob.PENDING
    assert snapshotjob.from_job(_job(), None).reason == snapshotjob.JOB_PENDING
    running = snapshotjob.from_job(_job(ready=1), _pod())
    assert (running.phase, running.reason) == (snapshotjob.RUNNING, snapshotjob.JOB_RUNNING)


def test_a_pending_pod_that_cannot_start_says_why() -> None:
    pod = _pod(waiting={"reason": "ErrImageNeverPull", "message": "image not present with pull policy of Never"})
    verdict = snapshotjob.from_job(_job(), pod)
    assert verdict.phase == snapshotjob.PENDING
    assert verdict.reason == "ImageUnavailable"
    assert "ErrImageNeverPull" in verdict.message


def test_a_completed_job_fills_size_rows_duration_and_the_cut_from_its_summary() -> None:
    pod = _pod(terminated={"exitCode": 0, "reason": "Completed", "message": json.dumps(SUMMARY)})
    verdict = snapshotjob.from_job(_job(complete=True), pod)
    assert (verdict.phase, verdict.reason) == (snapshotjob.SUCCEEDED, snapshotjob.SNAPSHOT_TAKEN)
    assert verdict.fields == {
        "completionTime": "2026-11-28T12:01:00Z", "sizeBytes": 25154, "rows": 442, "durationSeconds": 4.2,
        "attempts": 7,
        "stages": [{"name": "count", "topic": "wc-1-count-repartition", "partitions": 6, "nextOffsets": 410,
                    "inFlight": 0},
                   {"name": "split", "topic": "wc-in", "partitions": 6, "nextOffsets": 900, "inFlight": 2}],
        "stores": [{"name": "word-count", "rows": 407, "bytes": 21034}],
    }
    assert "442 rows, 25154 bytes" in verdict.message


def test_a_completed_job_without_a_summary_succeeds_with_the_size_unknown() -> None:
    pod = _pod(terminated={"exitCode": 0, "reason": "Completed", "message": "some log line"})
    verdict = snapshotjob.from_job(_job(complete=True), pod)
    assert verdict.phase == snapshotjob.SUCCEEDED
    assert "sizeBytes" not in verdict.fields
    assert "no summary" in verdict.message


def test_a_refused_snapshot_fails_with_the_clis_own_words() -> None:
    log_tail = ("26/11/28 12:00:01 WARN NativeCodeLoader: Unable to load native-hadoop library\n"
                "floe-job snapshot: store word-count: name the stage that writes it (--writer word-count=<stage>;"
                " stages: ['split', 'count'])\n")
    pod = _pod(terminated={"exitCode": 2, "reason": "Error", "message": log_tail})
    verdict = snapshotjob.from_job(_job(failed="BackoffLimitExceeded"), pod)
    assert (verdict.phase, verdict.reason) == (snapshotjob.FAILED, snapshotjob.SNAPSHOT_REFUSED)
    assert verdict.message.endswith("stages: ['split', 'count'])")
    assert "NativeCodeLoader" not in verdict.message
    assert verdict.fields == {"completionTime": "2026-11-28T12:02:00Z"}


def test_cassandra_unreachable_a_crash_and_a_deadline_are_told_apart() -> None:
    down = _pod(terminated={"exitCode": 3, "message": "floe-job snapshot: Cassandra at cassandra:9042 did not answer"})
    assert snapshotjob.from_job(_job(failed="BackoffLimitExceeded"), down).reason == snapshotjob.CASSANDRA_UNAVAILABLE
    crash = _pod(terminated={"exitCode": 137, "reason": "OOMKilled", "message": "Traceback\nMemoryError"})
    verdict = snapshotjob.from_job(_job(failed="BackoffLimitExceeded"), crash)
    assert verdict.reason == snapshotjob.JOB_FAILED
    assert "exit code 137 (OOMKilled): MemoryError" in verdict.message
    late = snapshotjob.from_job(_job(failed="DeadlineExceeded"), _pod())
    assert late.reason == snapshotjob.DEADLINE_EXCEEDED
    assert "spec.activeDeadlineSeconds (900 s)" in late.message
    gone = snapshotjob.from_job(_job(failed="BackoffLimitExceeded"), None)
    assert gone.reason == snapshotjob.JOB_FAILED and "no pod left" in gone.message


def test_the_status_carries_ready_and_failed_conditions_and_keeps_what_was_recorded() -> None:
    app = _app()
    snap = _snap(app)
    started = {"job": "nightly-1", "startTime": "2026-11-28T12:00:00Z", "location": snap.spec.location}
    pending = snapshotjob.status(snap, snapshotjob.from_job(_job(), None), now="2026-11-28T12:00:00Z", extra=started)
    assert pending["phase"] == snapshotjob.PENDING
    assert {c["type"]: c["status"] for c in pending["conditions"]} == {"Ready": "False", "Failed": "False"}
    snap = snap.model_copy(update={"status": pending})
    pod = _pod(terminated={"exitCode": 0, "message": json.dumps(SUMMARY)})
    done = snapshotjob.status(snap, snapshotjob.from_job(_job(complete=True), pod), now="2026-11-28T12:01:05Z")
    assert done["phase"] == snapshotjob.SUCCEEDED
    assert done["startTime"] == "2026-11-28T12:00:00Z" and done["job"] == "nightly-1"
    ready = next(c for c in done["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True", snapshotjob.SNAPSHOT_TAKEN, "2026-11-28T12:01:05Z")
    failed = next(c for c in done["conditions"] if c["type"] == "Failed")
    assert failed["lastTransitionTime"] == "2026-11-28T12:00:00Z"  # unchanged: still False
    assert snapshotjob.terminal(snap.model_copy(update={"status": done}))
    refused = snapshotjob.status(snap, snapshotjob.failed(snapshotjob.APP_NOT_FOUND, "StreamingApp x not found"),
                                 now="2026-11-28T12:00:01Z")
    assert {c["type"]: (c["status"], c["reason"]) for c in refused["conditions"]} == {
        "Ready": ("False", snapshotjob.APP_NOT_FOUND), "Failed": ("True", snapshotjob.APP_NOT_FOUND)}


def test_only_the_snapshots_own_job_is_followed() -> None:
    app = _app()
    snap = _snap(app)
    job = snapshotjob.job(snap, app)
    assert snapshotjob.owned_by(job, snap)
    assert not snapshotjob.owned_by(job, snap.model_copy(update={"uid": "a-later-snapshot-of-that-name"}))


def test_a_pod_that_ended_before_its_job_said_so_is_still_running_and_running_never_turns_pending() -> None:
    ended = _pod(terminated={"exitCode": 1, "reason": "Error", "message": "boom"})
    assert snapshotjob.from_job(_job(ready=0), ended).phase == snapshotjob.RUNNING
    app = _app()
    snap = _snap(app)
    running = snapshotjob.status(snap, snapshotjob.from_job(_job(ready=1), _pod()), now="2026-11-28T12:00:05Z")
    snap = snap.model_copy(update={"status": running})
    again = snapshotjob.status(snap, snapshotjob.from_job(_job(), None), now="2026-11-28T12:00:06Z")
    assert again["phase"] == snapshotjob.RUNNING
    assert next(c for c in again["conditions"] if c["type"] == "Ready")["reason"] == snapshotjob.JOB_RUNNING
