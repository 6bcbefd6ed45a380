"""A new app started from a snapshot (spec.restoreFrom): its restore Job, and what the Job says.
Pure, like `snapshotjob`, whose pod it runs.

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

from collections.abc import Mapping
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
    arguments = ["restore", "--from", source.location, "--summary-file", snapshotjob.TERMINATION_LOG]
    return snapshotjob.pod_job(app, name=job_name(app), labels=labels, owner=render.owner_reference(app),
                               pod_labels=pod_labels, arguments=arguments, volume=source.volume,
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
    seen = snapshotjob.from_job(job_body, pod)
    record: dict[str, Any] = {"from": source.location, "job": name}
    if seen.phase == SUCCEEDED:
        summary = snapshotjob.reported(snapshotjob.terminated_message(pod), key="from_app")
        record.update({"phase": SUCCEEDED, "time": seen.fields.get("completionTime")})
        if summary is not None:
            record.update({"rows": int(summary.get("rows", 0)), "seconds": float(summary.get("seconds", 0.0)),
                           "fromApp": str(summary.get("from_app", ""))})
        return SUCCEEDED, None, record
    if seen.phase == FAILED:
        said = snapshotjob.last_words(snapshotjob.terminated_message(pod))
        message = (f"Restoring {source.location} into the app failed (Job {name}): {said or seen.message}. "
                   "Fix spec.restoreFrom or the snapshot in a new app; this one keeps no replica running")
        record.update({"phase": FAILED, "message": message[: snapshotjob.MESSAGE_CHARS]})
        return FAILED, conditions.Fault(conditions.RESTORE_FAILED, record["message"]), record
    record["phase"] = seen.phase
    waiting = f"Restoring {source.location} into the app (Job {name}) before its first replica starts"
    return seen.phase, conditions.Fault(conditions.RESTORING, waiting), record

