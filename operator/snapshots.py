"""One level-based pass over a StreamingAppSnapshot: create its Job once, then follow it.

A snapshot is a declared one-shot action, like spec.offsetReset, with its own resource: it runs
once, and its status says how far it got. A pass reads the snapshot and its Job and converges:

- done (Succeeded or Failed): nothing, ever again; deleting the snapshot deletes its Job (owner
  reference), never the data written;
- a Job of its own: the phase and the fields read from the Job and its pod (`snapshotjob.from_job`);
- a Job recorded in status but gone: Failed (JobDeleted);
- no Job yet: the app must exist and have run (committed positions in Cassandra: an app
  suspended since it was created has nothing to cut), else Failed, naming it; then the Job is
  created and the snapshot is Pending.

Passes over one snapshot hold its lock, so the pass that creates the Job writes Pending before
any pass driven by the Job's events writes what the Job did next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
from floe_operator import cassandra, k8s, model, reconcile, snapshotjob

log = logging.getLogger(__name__)

# What the admission chain answers when it refuses an object: the Job is not created, and a
# retry would be refused again.
REFUSED_STATUSES = frozenset({400, 403, 422})

AppLookup = Callable[[str, str], Mapping[str, Any] | None]


class Retry(Exception):
    """A pass that must be tried again later (the caller backs off)."""


def lock_key(namespace: str, name: str) -> str:
    return f"{model.SNAPSHOT_KIND}/{namespace}/{name}"


async def converge(deps: reconcile.Deps, namespace: str, name: str, *, app_of: AppLookup) -> None:
    """One pass over the snapshot `namespace/name`; `app_of(namespace, name)`: a StreamingApp's
    body as the operator's index holds it (None: not known there, then read from the API)."""
    async with deps.lock(lock_key(namespace, name)):
        body = await deps.cluster.get(model.API_VERSION, model.SNAPSHOT_KIND, namespace, name)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return
        snap = model.StreamingAppSnapshot.from_body(body)
        if snapshotjob.terminal(snap):
            return
        job = await deps.cluster.get("batch/v1", "Job", namespace, snapshotjob.job_name(snap))
        if job is not None and not snapshotjob.owned_by(job, snap):
            raise Retry(f"Job {namespace}/{snapshotjob.job_name(snap)} of an earlier snapshot of that name is"
                        " still being deleted")
        if job is not None:
            await _report(deps, body, snap, snapshotjob.from_job(job, await _pod_of(deps, job)))
            return
        if snap.status.get("job"):
            await _report(deps, body, snap, snapshotjob.failed(
                snapshotjob.JOB_DELETED,
                f"Job {snap.status['job']} is gone and the operator did not see it finish (deleted, or removed"
                " by its TTL while the operator was down); the location may hold a partial snapshot (no"
                " manifest): delete that, or take a new snapshot to another location",
            ))
            return
        await _start(deps, body, snap, app_of=app_of)


async def _start(deps: reconcile.Deps, body: Mapping[str, Any], snap: model.StreamingAppSnapshot, *,
                 app_of: AppLookup) -> None:
    """Check the app, then create the Job and record it (Pending); or fail, saying why."""
    app_body = app_of(snap.namespace, snap.spec.app)
    if app_body is None:
        app_body = await deps.cluster.get(model.API_VERSION, model.KIND, snap.namespace, snap.spec.app)
    if app_body is None:
        await _report(deps, body, snap, snapshotjob.failed(
            snapshotjob.APP_NOT_FOUND,
            f"StreamingApp {snap.spec.app} not found in namespace {snap.namespace}; fix spec.app in a new snapshot",
        ))
        return
    try:
        app = model.StreamingApp.from_body(app_body)
    except pydantic.ValidationError as exc:
        await _report(deps, body, snap, snapshotjob.failed(
            snapshotjob.APP_INVALID, f"StreamingApp {snap.spec.app} has a spec the operator cannot read: {exc}"
        ))
        return
    if await _has_positions(deps, app) is False:
        await _report(deps, body, snap, snapshotjob.failed(
            snapshotjob.APP_NEVER_RAN,
            f"StreamingApp {app.name} (app id {app.app_id}) has no committed positions: it has never run "
            "(suspended since it was created, or not started yet), so there is nothing to cut; take the "
            "snapshot once it has processed input",
        ))
        return
    manifest = snapshotjob.job(snap, app)
    try:
        await deps.cluster.create(manifest)
    except k8s.ApiError as exc:
        if exc.status == 409:
            raise Retry(f"Job {snap.namespace}/{manifest['metadata']['name']} appeared meanwhile") from exc
        if exc.status in REFUSED_STATUSES:
            await _report(deps, body, snap, snapshotjob.failed(
                snapshotjob.JOB_REFUSED,
                f"Creating Job {manifest['metadata']['name']} was refused (HTTP {exc.status}): {exc.message}",
            ))
            return
        raise
    log.info("Created snapshot job snapshot=%s/%s app=%s location=%s",
             snap.namespace, snap.name, app.name, snap.spec.location)
    started = {
        "job": manifest["metadata"]["name"],
        "appId": app.app_id,
        "image": app.spec.image,
        "appGeneration": app.generation,
        "location": snap.spec.location,
        "startTime": reconcile.now(),
    }
    name = manifest["metadata"]["name"]
    await _report(deps, body, snap, snapshotjob.Verdict(
        snapshotjob.PENDING, snapshotjob.JOB_PENDING, f"Job {name} is created; its pod has not started yet"
    ), extra=started)


async def _has_positions(deps: reconcile.Deps, app: model.StreamingApp) -> bool | None:
    """Whether the app has offsets rows in Cassandra; None when that cannot be told now (a Secret
    or Cassandra the operator cannot read): then the Job tries, and says what it finds."""
    secrets, fault = await reconcile.check_secrets(app, deps)
    if fault is not None:
        return None
    try:
        topics = await deps.provisioner.recorded_topics(cassandra.target_of(app, secrets.data), app)
    except cassandra.CassandraUnavailable as exc:
        log.warning("Reading positions failed app=%s/%s error=%s", app.namespace, app.name, exc)
        return None
    return bool(topics)


async def _pod_of(deps: reconcile.Deps, job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Job's newest pod (one, with backoffLimit 0), or None."""
    meta = job.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        return None
    pods = await deps.cluster.list_objects(
        "v1", "Pod", str(meta.get("namespace", "")), selector=f"batch.kubernetes.io/controller-uid={uid}"
    )
    if not pods:
        return None
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))


async def _report(
    deps: reconcile.Deps,
    body: Mapping[str, Any],
    snap: model.StreamingAppSnapshot,
    verdict: snapshotjob.Verdict,
    *,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Write the status for `verdict` when it differs from the one stored, with an Event when
    the phase changes."""
    status = snapshotjob.status(snap, verdict, now=reconcile.now(), extra=extra)
    if status == snap.status:
        return
    try:
        await deps.cluster.patch_status(snap.namespace, snap.name, status, kind=model.SNAPSHOT_KIND)
    except k8s.ApiError as exc:
        if exc.status == 404:  # deleted meanwhile
            return
        raise
    if snap.status.get("phase") != verdict.phase:
        type_ = "Warning" if verdict.phase == snapshotjob.FAILED else "Normal"
        await deps.cluster.post_event(body, type_, verdict.reason, verdict.message)
        log.info("Snapshot phase snapshot=%s/%s phase=%s reason=%s",
                 snap.namespace, snap.name, verdict.phase, verdict.reason)
