"""Restore Jobs, and what they say: a new app started from a snapshot (spec.restoreFrom), and a
snapshot restored into a running app, in place (spec.stateRestore, or an automatic rollback's
state). Pure, like `snapshotjob`, whose pod they run.

The restore runs once, before the app's first replica: `floe-job restore --from <location>` with
the app's own image and configuration loads the snapshot's store rows and positions into the
app's (new) id, refusing a snapshot whose stages, input topics or stores do not match, with the
difference named (`floe_jobs.snapshots.restore`). Until it has succeeded the reconciler applies
every child but the Deployment (the Job's pod reads the app's ConfigMap and runs as its
ServiceAccount) and the app says why it waits (`conditions.RESTORING`), or that the restore
failed (`conditions.RESTORE_FAILED`, with the Job's last words). Once it succeeded,
status.restore records it and the app rolls out as any other; an app whose offsets rows exist
(a restore whose record in status was lost: the positions are written last) counts as restored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from floe_operator import conditions, model, render, snapshotjob

RESTORE_LABEL = f"{model.GROUP}/restore"
COMPONENT = "restore"
# An interrupted restore leaves no positions, and the next attempt completes it (docs/snapshots.md).
BACKOFF_LIMIT = 2
DEADLINE_SECONDS = 3600
# Children that wait for the restore: the pods, and what would scale them.
HELD_KINDS = frozenset({"Deployment", "HorizontalPodAutoscaler", "ScaledObject"})

SUCCEEDED, FAILED, RUNNING = snapshotjob.SUCCEEDED, snapshotjob.FAILED, snapshotjob.RUNNING


def job_name(app: model.StreamingApp) -> str:
    return f"{app.name}-restore"


def done(app: model.StreamingApp) -> bool:
    """Whether the app needs no restore (any more): no spec.restoreFrom, or one recorded done."""
    return app.spec.restore_from is None or (app.status.get("restore") or {}).get("phase") == SUCCEEDED


def job(app: model.StreamingApp) -> dict[str, Any]:
    """The Job that restores spec.restoreFrom into the app, owned by the app."""
    source = app.spec.restore_from
    assert source is not None
    return _job(app, name=job_name(app), location=source.location, volume=source.volume, replace=False)


def _job(app: model.StreamingApp, *, name: str, location: str, volume: model.SnapshotVolume | None,
         replace: bool) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/name": app.name,
        "app.kubernetes.io/instance": app.name,
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": "floe",
        render.MANAGED_BY: render.FIELD_MANAGER,
        RESTORE_LABEL: app.name,
    }
    own = {k: v for k, v in app.spec.pod.labels.items() if k != render.APP_LABEL}
    pod_labels = {**own, **render.network_peer_labels(app), "app.kubernetes.io/component": COMPONENT,
                  RESTORE_LABEL: app.name}
    arguments = ["restore", "--from", location, *(["--replace"] if replace else []),
                 "--summary-file", snapshotjob.TERMINATION_LOG]
    return snapshotjob.pod_job(app, name=name, labels=labels, owner=render.owner_reference(app),
                               pod_labels=pod_labels, arguments=arguments, volume=volume,
                               backoff_limit=BACKOFF_LIMIT, deadline=DEADLINE_SECONDS)


def held(kind: str) -> bool:
    return kind in HELD_KINDS


def verdict(app: model.StreamingApp, job_body: Mapping[str, Any], pod: Mapping[str, Any] | None
            ) -> tuple[str, conditions.Fault | None, dict[str, Any]]:
    """(phase, why the app waits or that the restore failed (None once it succeeded), the status.restore
    fields) from the restore Job and its newest pod."""
    source = app.spec.restore_from
    assert source is not None
    name = job_name(app)
    failed = (f"Restoring {source.location} into the app failed (Job {name}): {{said}}. "
              "Fix spec.restoreFrom or the snapshot in a new app; this one keeps no replica running")
    waiting = f"Restoring {source.location} into the app (Job {name}) before its first replica starts"
    return _verdict(job_body, pod, {"from": source.location, "job": name}, failed=failed, waiting=waiting)


def _verdict(job_body: Mapping[str, Any], pod: Mapping[str, Any] | None, record: dict[str, Any], *, failed: str,
             waiting: str) -> tuple[str, conditions.Fault | None, dict[str, Any]]:
    seen = snapshotjob.from_job(job_body, pod)
    if seen.phase == SUCCEEDED:
        summary = snapshotjob.reported(snapshotjob.terminated_message(pod), key="from_app")
        record.update({"phase": SUCCEEDED, "time": seen.fields.get("completionTime")})
        if summary is not None:
            record.update({"rows": int(summary.get("rows", 0)), "seconds": float(summary.get("seconds", 0.0)),
                           "fromApp": str(summary.get("from_app", ""))})
        return SUCCEEDED, None, record
    if seen.phase == FAILED:
        said = snapshotjob.last_words(snapshotjob.terminated_message(pod))
        message = failed.replace("{said}", said or seen.message)
        record.update({"phase": FAILED, "message": message[: snapshotjob.MESSAGE_CHARS]})
        return FAILED, conditions.Fault(conditions.RESTORE_FAILED, record["message"]), record
    record["phase"] = seen.phase
    return seen.phase, conditions.Fault(conditions.RESTORING, waiting), record


# --- in place: spec.stateRestore, and an automatic rollback's state -----------------------------

# status fields: the last spec.stateRestore acted on, and the last rollback's restore (apart, so
# that neither record hides the other: a declared id done before a rollback is never run again)
STATE_RESTORE = "stateRestore"
ROLLBACK_RESTORE = "rollbackRestore"
# every field status.stateRestore may hold
RECORD_FIELDS = ("id", "from", "cause", "job", "volume", "phase", "message", "time", "rows", "seconds", "fromApp")
# status.stateRestore.phase before its Job exists: the app's pods or consumer group are still there
WAITING = "Waiting"


@dataclass(frozen=True)
class InPlace:
    """A snapshot to restore into the app, in place: `id` runs once (status.stateRestore records
    it); `cause` says who asked (spec.stateRestore, or the rollback of a generation)."""

    id: str
    location: str
    volume: model.SnapshotVolume | None
    cause: str
    # the status field that records it: STATE_RESTORE or ROLLBACK_RESTORE
    field: str = STATE_RESTORE


def declared(app: model.StreamingApp) -> InPlace | None:
    spec = app.spec.state_restore
    if spec is None:
        return None
    return InPlace(spec.id, spec.location, spec.volume, "spec.stateRestore")


def for_rollback(generation: int, snapshot: Mapping[str, Any]) -> InPlace:
    """The state half of rolling back `generation`: the snapshot taken before it rolled out."""
    spec = snapshot.get("spec") or {}
    name = (snapshot.get("metadata") or {}).get("name", "")
    return InPlace(
        f"rollback-{generation}",
        str(spec.get("location", "")),
        _volume(spec.get("volume")),
        f"the rollback of generation {generation} (snapshot {name}, taken before it rolled out)",
        ROLLBACK_RESTORE,
    )


def rollback_done(app: model.StreamingApp, generation: int) -> bool:
    """Whether the restore of `generation`'s rollback is recorded as succeeded."""
    record = app.status.get(ROLLBACK_RESTORE) or {}
    return record.get("id") == f"rollback-{generation}" and record.get("phase") == SUCCEEDED


def _volume(volume: Mapping[str, Any] | None) -> model.SnapshotVolume | None:
    """A snapshot volume as a resource holds it (camelCase), or None."""
    if not volume:
        return None
    return model.SnapshotVolume(claim_name=volume["claimName"], mount_path=volume.get("mountPath", "/snapshots"))


def recorded(app: model.StreamingApp, request: InPlace) -> Mapping[str, Any]:
    """Its status field (status.stateRestore or status.rollbackRestore) when it is about `request`, else {}."""
    record = app.status.get(request.field) or {}
    return record if record.get("id") == request.id else {}


def holds(app: model.StreamingApp, request: InPlace | None) -> bool:
    """Whether `request` keeps the app at zero replicas: until it succeeded. One that failed holds
    too, while it stands: the app's positions may be gone and its tables half written."""
    return request is not None and recorded(app, request).get("phase") != SUCCEEDED


def in_place_job_name(app: model.StreamingApp, request: InPlace) -> str:
    digest = hashlib.sha256(request.id.encode()).hexdigest()[:8]
    return f"{app.name[:snapshotjob.JOB_NAME_CHARS - 17].rstrip('-')}-restore-{digest}"


def in_place_job(app: model.StreamingApp, request: InPlace) -> dict[str, Any]:
    """The Job that restores `request` into the app in place (`floe-job restore --replace`)."""
    return _job(app, name=in_place_job_name(app, request), location=request.location, volume=request.volume,
                replace=True)


def base_record(app: model.StreamingApp, request: InPlace) -> dict[str, Any]:
    record: dict[str, Any] = {"id": request.id, "from": request.location, "cause": request.cause,
                              "job": in_place_job_name(app, request)}
    if request.volume is not None:
        record["volume"] = {"claimName": request.volume.claim_name, "mountPath": request.volume.mount_path}
    return record


def in_flight(app: model.StreamingApp) -> InPlace | None:
    """The restore in place whose Job status last saw created and not ended: it is followed to
    its end, and holds the app meanwhile, whatever became of what asked for it (a
    spec.stateRestore removed, a rollback's snapshot deleted by retention)."""
    return _recorded_in(app, (snapshotjob.PENDING, RUNNING))


def failed(app: model.StreamingApp) -> InPlace | None:
    """A restore in place whose record says it failed, whatever became of what asked for it (a
    spec.stateRestore removed, a generation no longer rolled back). The reconciler holds the app
    on it while the app has no positions: the restore deletes them before it truncates the
    tables and writes them again last, so an app without them would run on what the failure
    left half written."""
    return _recorded_in(app, (FAILED,))


def _recorded_in(app: model.StreamingApp, phases: tuple[str, ...]) -> InPlace | None:
    """The restore in place that status records in one of `phases`, the rollback's first."""
    for field in (ROLLBACK_RESTORE, STATE_RESTORE):
        record = app.status.get(field) or {}
        if record.get("phase") in phases and record.get("id") and record.get("from"):
            return InPlace(str(record["id"]), str(record["from"]), _volume(record.get("volume")),
                           str(record.get("cause", "")), field)
    return None


def waiting(app: model.StreamingApp, request: InPlace, why: str) -> tuple[conditions.Fault, dict[str, Any]]:
    """The app's replicas are not all gone yet (`why`): the Job waits for them."""
    message = (f"Restoring {request.location} into the app in place for {request.cause} (id {request.id}): "
               f"the app runs no replica until it is done; waiting for {why}")
    return conditions.Fault(conditions.RESTORING, message), {**base_record(app, request), "phase": WAITING}


def in_place_verdict(app: model.StreamingApp, request: InPlace, job_body: Mapping[str, Any],
                     pod: Mapping[str, Any] | None) -> tuple[str, conditions.Fault | None, dict[str, Any]]:
    """(phase, why the app waits or that the restore failed (None once it succeeded), the
    status.stateRestore fields) from the Job and its newest pod."""
    name = in_place_job_name(app, request)
    failed = (f"Restoring {request.location} into the app in place for {request.cause} failed (Job {name}): "
              "{said}. The app runs no replica while this restore stands (its positions may be gone): fix the "
              "cause and set spec.stateRestore to a good snapshot with a new id; without positions, removing "
              "spec.stateRestore does not run the app on what the failure left (delete the app to start over)")
    running = (f"Restoring {request.location} into the app in place for {request.cause} (Job {name}): the app runs "
               "no replica until it is done")
    return _verdict(job_body, pod, base_record(app, request), failed=failed, waiting=running)


def suspended(app: model.StreamingApp) -> model.StreamingApp:
    """`app` rendered with no replica and no autoscaler, while a restore in place holds it."""
    return app.model_copy(update={"spec": app.spec.model_copy(update={"suspend": True})})

