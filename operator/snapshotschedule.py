"""Scheduled snapshots (spec.snapshots): when the next one is due, the StreamingAppSnapshot it
is, and which older ones retention deletes. Pure, like `render`: `reconcile` creates what
`due` and `snapshot` say, and `snapshots` deletes what `expired` names once a scheduled
snapshot ends.

Why snapshots are resources of their own and not a field of the app: each is a one-shot action
with its own Job, status and data; the app only asks for them on a schedule. They carry the
app's owner reference (deleting the app removes the resources, never their data, since the Jobs
that would delete it run the app's image and configuration, which are gone then) and
deletionPolicy Delete (retention deleting one deletes its data: `snapshots.finalize`).

Before an upgrade (spec.rollout.upgradeMode: snapshot): a generation whose image or job differs
from the last Ready one (status.lastReady, `rollback`) rolls out only once a snapshot of the
running app, `<app>-upgrade-<generation>`, has succeeded; until then the reconciler keeps
rendering the last Ready spec (`upgrade_pending`, `upgrade_snapshot`). It is labelled and kept
like the scheduled ones, so retention counts it among them.

Time is the API server's, as metadata.creationTimestamp and status.snapshots.lastScheduleTime
write it (RFC 3339, whole seconds): the next snapshot is due `interval` after the last one was
created, at the operator's first pass after that (its resync period bounds the delay). One runs
at a time: while the last is Pending or Running, nothing new is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from floe_operator import conditions, model, render, rollback, snapshotjob

SCHEDULED_LABEL = f"{model.GROUP}/scheduled-by"
# <app>-<yyyymmdd>-<hhmmss>: 44 + 1 + 15 characters, within a snapshot's (and its Job's) 63
NAME_PREFIX_CHARS = 44
def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def format_time(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def name_for(app_name: str, at: datetime) -> str:
    return f"{app_name[:NAME_PREFIX_CHARS].rstrip('-')}-{at:%Y%m%d-%H%M%S}"


def due(app: model.StreamingApp, now: datetime) -> bool:
    """Whether a scheduled snapshot of `app` is due at `now` (before checking that none runs):
    it has spec.snapshots, runs (not suspended, not paused) and is Ready, and none was created on
    schedule within the last interval."""
    spec = app.spec.snapshots
    if spec is None or spec.interval is None or app.spec.suspend or app.reconcile_paused:
        return False
    ready = conditions.find(app.status.get("conditions") or [], conditions.READY) or {}
    if ready.get("status") != "True":
        return False
    last = (app.status.get("snapshots") or {}).get("lastScheduleTime")
    if not last:
        return True
    return now >= parse_time(str(last)) + timedelta(seconds=model.duration_seconds(spec.interval))


def selector(app: model.StreamingApp) -> str:
    """The label selector of the app's scheduled snapshots."""
    return f"{SCHEDULED_LABEL}={app.name}"


def owned(snap: Mapping[str, Any], app: model.StreamingApp) -> bool:
    """Whether `snap` is one of this app's scheduled snapshots (not of an earlier app of its name)."""
    meta = snap.get("metadata") or {}
    return (meta.get("labels") or {}).get(SCHEDULED_LABEL) == app.name and any(
        ref.get("uid") == app.uid for ref in meta.get("ownerReferences") or []
    )


def running(snaps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The snapshots among `snaps` that have not ended (no phase yet, Pending or Running)."""
    return [
        str(s["metadata"]["name"])
        for s in snaps
        if (s.get("status") or {}).get("phase") not in snapshotjob.TERMINAL
        and not (s.get("metadata") or {}).get("deletionTimestamp")
    ]


def snapshot(app: model.StreamingApp, now: datetime, *, name: str | None = None) -> dict[str, Any]:
    """The StreamingAppSnapshot the schedule creates at `now` (named `name` when given)."""
    spec = app.spec.snapshots
    assert spec is not None
    name = name or name_for(app.name, now)
    body: dict[str, Any] = {
        "app": app.name,
        "location": f"{spec.location.rstrip('/')}/{name}",
        "settleTimeoutSeconds": spec.settle_timeout_seconds,
        "activeDeadlineSeconds": spec.active_deadline_seconds,
        "deletionPolicy": "Delete",
    }
    if spec.writers:
        body["writers"] = dict(spec.writers)
    if spec.volume is not None:
        body["volume"] = {"claimName": spec.volume.claim_name, "mountPath": spec.volume.mount_path}
    return {
        "apiVersion": model.API_VERSION,
        "kind": model.SNAPSHOT_KIND,
        "metadata": {
            "name": name,
            "namespace": app.namespace,
            "labels": {
                "app.kubernetes.io/name": app.name,
                "app.kubernetes.io/component": snapshotjob.COMPONENT,
                "app.kubernetes.io/part-of": "floe",
                render.MANAGED_BY: render.FIELD_MANAGER,
                SCHEDULED_LABEL: app.name,
            },
            "ownerReferences": [render.owner_reference(app)],
        },
        "spec": body,
    }


def record(name: str, now: datetime) -> dict[str, Any]:
    """status.snapshots once `name` was created at `now`."""
    return {"last": name, "lastScheduleTime": format_time(now)}


def _newest_first(snaps: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The snapshots not being deleted, newest first (by creation time, then name)."""

    def created(s: Mapping[str, Any]) -> tuple[str, str]:
        meta = s.get("metadata") or {}
        return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    return sorted((s for s in snaps if not (s.get("metadata") or {}).get("deletionTimestamp")), key=created,
                  reverse=True)


def _phase(snap: Mapping[str, Any]) -> Any:
    return (snap.get("status") or {}).get("phase")


def outcome(snaps: Sequence[Mapping[str, Any]], before: Mapping[str, Any]) -> dict[str, Any]:
    """What status.snapshots says of the schedule's results, for alerts
    (`floe_app_snapshot_failing`, `floe_app_snapshot_last_success_timestamp_seconds`):
    `lastSuccessfulTime`, when the newest scheduled snapshot that succeeded completed (kept from
    `before` once retention or a person deleted every success), and `lastFailed`, the newest
    ended one's name while it failed (None once a later one succeeded)."""
    ended = [s for s in _newest_first(snaps) if _phase(s) in snapshotjob.TERMINAL]
    success = next((s for s in ended if _phase(s) == snapshotjob.SUCCEEDED), None)
    done = (success.get("status") or {}).get("completionTime") if success is not None else None
    failed = ended and _phase(ended[0]) == snapshotjob.FAILED
    return {
        "lastSuccessfulTime": done or before.get("lastSuccessfulTime"),
        "lastFailed": ended[0]["metadata"]["name"] if failed else None,
    }


def expired(snaps: Sequence[Mapping[str, Any]], keep: int) -> list[str]:
    """The scheduled snapshots retention deletes: those that succeeded, beyond the newest `keep`,
    and those that failed before the newest success (a later failure stays to be looked at).
    Snapshots not ended are never named."""
    ordered = _newest_first(snaps)
    phase = [_phase(s) for s in ordered]
    succeeded = [i for i, p in enumerate(phase) if p == snapshotjob.SUCCEEDED]
    if not succeeded:
        return []
    newest = succeeded[0]
    gone = set(succeeded[keep:]) | {i for i, p in enumerate(phase) if p == snapshotjob.FAILED and i > newest}
    return [str(ordered[i]["metadata"]["name"]) for i in sorted(gone)]


# --- before an upgrade (spec.rollout.upgradeMode: snapshot) ----------------------------------

# The fields of a spec whose change restarts the pods with other code: what a snapshot before an
# upgrade is for (a change of resources, replicas or Kafka settings needs none).
UPGRADED = ("image", "job")


def upgrade_pending(app: model.StreamingApp) -> int | None:
    """The last Ready generation, when the current one must wait for a snapshot of it before it
    rolls out: upgradeMode snapshot with spec.snapshots, a recorded Ready generation other than
    the current one, and an image or job that differs from its. None: roll out as declared."""
    if app.spec.rollout.upgrade_mode != "snapshot" or app.spec.snapshots is None:
        return None
    last = rollback.last_ready(app)
    if last is None or last[0] == app.generation:
        return None
    current = app.spec.model_dump(mode="json", by_alias=True)
    if all(last[1].get(field) == current[field] for field in UPGRADED):
        return None
    return last[0]


def upgrade_done(app: model.StreamingApp) -> bool:
    """Whether the snapshot before the current generation's upgrade is recorded as succeeded."""
    return (app.status.get("snapshots") or {}).get("beforeUpgrade") == app.generation


def upgrade_snapshot_name(app: model.StreamingApp, *, generation: int | None = None) -> str:
    """The snapshot taken before `generation` (default: the app's) rolls out."""
    return f"{app.name[:NAME_PREFIX_CHARS].rstrip('-')}-upgrade-{generation or app.generation}"


def upgrade_snapshot(app: model.StreamingApp, now: datetime) -> dict[str, Any]:
    """The snapshot taken of the running app before generation `app.generation` rolls out."""
    return snapshot(app, now, name=upgrade_snapshot_name(app))


def as_running(app: model.StreamingApp) -> model.StreamingApp:
    """The app as its pods run it: while a new image or job waits for its snapshot, the last
    Ready generation (its spec and generation number), so that the snapshot's Job runs the code
    that wrote the state it cuts and its manifest names that generation and image."""
    last_generation = upgrade_pending(app)
    last = rollback.last_ready(app)
    if last_generation is None or last is None:
        return app
    return rollback.last_ready_app(app, last[1]).model_copy(update={"generation": last_generation})
