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

The app's scheduled snapshots (spec.snapshots) are created here too, after a pass over the app
(`schedule`), and retention deletes the ones `snapshotschedule.expired` names whenever one of
them ends (`_retain`). Deleting a snapshot whose deletionPolicy is Delete runs a second Job that
deletes its data, and the resource goes only once that Job has ended (`finalize`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
from floe_operator import k8s, model, reconcile, snapshotjob, snapshotschedule

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
            # a status without the Job: the operator stopped between creating it and recording it
            started = None if snap.status.get("job") else snapshotjob.started_of(job)
            await _report(deps, body, snap, snapshotjob.from_job(job, await reconcile.job_pod(deps, job)),
                          extra=started)
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
        app = snapshotschedule.as_running(model.StreamingApp.from_body(app_body))
    except pydantic.ValidationError as exc:
        await _report(deps, body, snap, snapshotjob.failed(
            snapshotjob.APP_INVALID, f"StreamingApp {snap.spec.app} has a spec the operator cannot read: {exc}"
        ))
        return
    if await reconcile.has_positions(deps, app) is False:
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
    name = manifest["metadata"]["name"]
    started = {"job": name, **snapshotjob.started_fields(snap, app), "startTime": reconcile.now()}
    await _report(deps, body, snap, snapshotjob.Verdict(
        snapshotjob.PENDING, snapshotjob.JOB_PENDING, f"Job {name} is created; its pod has not started yet"
    ), extra=started)


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
        scheduler = ((body.get("metadata") or {}).get("labels") or {}).get(snapshotschedule.SCHEDULED_LABEL)
        if verdict.phase in snapshotjob.TERMINAL and scheduler:
            await _retain_for(deps, snap.namespace, scheduler)


# --- scheduled snapshots and retention (spec.snapshots) --------------------------------------


async def schedule(deps: reconcile.Deps, body: Mapping[str, Any]) -> None:
    """After a pass over the app `body` (its status as that pass left it): create its scheduled
    snapshot when one is due and none runs, record it in status.snapshots, and apply retention.
    Costs no API call unless one is due, and no parse of the app without a schedule (every pass
    of every app comes here)."""
    if not ((body.get("spec") or {}).get("snapshots") or {}).get("interval"):
        return
    try:
        app = model.StreamingApp.from_body(body)
    except pydantic.ValidationError:
        return
    now = datetime.now(UTC).replace(microsecond=0)
    if not snapshotschedule.due(app, now):
        return
    assert app.spec.snapshots is not None and app.spec.snapshots.interval is not None
    snaps = await _scheduled(deps, app)
    await _retain(deps, app, snaps)
    if snapshotschedule.running(snaps):
        return
    interval = timedelta(seconds=model.duration_seconds(app.spec.snapshots.interval))
    newest = max((str(s["metadata"].get("creationTimestamp") or "") for s in snaps), default="")
    if newest and now < snapshotschedule.parse_time(newest) + interval:
        # taken on schedule already, and its record in status lost (an operator stopped between
        # the two writes): record it rather than take another
        last = max(snaps, key=lambda s: str(s["metadata"].get("creationTimestamp") or ""))
        await _record(deps, app, snapshotschedule.record(last["metadata"]["name"], snapshotschedule.parse_time(newest)))
        return
    manifest = snapshotschedule.snapshot(app, now)
    name = manifest["metadata"]["name"]
    try:
        await deps.cluster.create(manifest)
    except k8s.ApiError as exc:
        if exc.status == 409:
            return
        log.warning("Creating a scheduled snapshot failed app=%s/%s snapshot=%s error=%s",
                    app.namespace, app.name, name, exc)
        await deps.cluster.post_event(body, "Warning", "SnapshotNotScheduled",
                                      f"Creating StreamingAppSnapshot {name} failed (HTTP {exc.status}): {exc.message}")
        return
    log.info("Scheduled snapshot app=%s/%s snapshot=%s location=%s",
             app.namespace, app.name, name, manifest["spec"]["location"])
    await _record(deps, app, snapshotschedule.record(name, now))
    await deps.cluster.post_event(body, "Normal", "SnapshotScheduled",
                                  f"Created StreamingAppSnapshot {name} to {manifest['spec']['location']}")


async def _record(deps: reconcile.Deps, app: model.StreamingApp, record: Mapping[str, Any]) -> None:
    before = app.status.get("snapshots") or {}
    if all(before.get(k) == v for k, v in record.items()):
        return
    try:
        deps.recent.remember(await deps.cluster.patch_status(app.namespace, app.name, {"snapshots": dict(record)}))
    except k8s.ApiError as exc:
        if exc.status != 404:
            raise


async def _scheduled(deps: reconcile.Deps, app: model.StreamingApp) -> list[dict[str, Any]]:
    found = await deps.cluster.list_objects(
        model.API_VERSION, model.SNAPSHOT_KIND, app.namespace, selector=snapshotschedule.selector(app)
    )
    return [s for s in found if snapshotschedule.owned(s, app)]


async def _retain_for(deps: reconcile.Deps, namespace: str, app_name: str) -> None:
    body = await deps.cluster.get(model.API_VERSION, model.KIND, namespace, app_name)
    if body is None:
        return
    try:
        app = model.StreamingApp.from_body(body)
    except pydantic.ValidationError:
        return
    if app.spec.snapshots is not None:
        snaps = await _scheduled(deps, app)
        await _record(deps, app, snapshotschedule.outcome(snaps, app.status.get("snapshots") or {}))
        await _retain(deps, app, snaps)


async def _retain(deps: reconcile.Deps, app: model.StreamingApp, snaps: list[dict[str, Any]]) -> None:
    """Delete the scheduled snapshots retention no longer keeps (their data goes with them:
    deletionPolicy Delete)."""
    assert app.spec.snapshots is not None
    for name in snapshotschedule.expired(snaps, app.spec.snapshots.keep):
        log.info("Retention deletes snapshot=%s/%s app=%s keep=%d", app.namespace, name, app.name,
                 app.spec.snapshots.keep)
        await deps.cluster.delete(model.API_VERSION, model.SNAPSHOT_KIND, app.namespace, name)


# --- deleting a snapshot's data (deletionPolicy Delete) --------------------------------------


async def finalize(deps: reconcile.Deps, body: Mapping[str, Any]) -> str:
    """Delete the data of the snapshot `body`, which is being deleted: wait for its own Job to
    end, then run the Job that deletes its location and wait for that one. Raises Retry while
    either runs; returns what happened (an Event has said so) once the resource may go. Data
    that cannot be deleted (the app is gone, the location is not a snapshot of it, the Job
    failed) is kept, with a Warning event: the resource is never held forever."""
    snap = model.StreamingAppSnapshot.from_body(body)
    location = snap.spec.location
    own = await deps.cluster.get("batch/v1", "Job", snap.namespace, snapshotjob.job_name(snap))
    if own is not None and snapshotjob.owned_by(own, snap) and not snapshotjob.job_ended(own):
        raise Retry(f"the snapshot's Job {snapshotjob.job_name(snap)} still runs; its data is deleted once it ends")
    name = snapshotjob.delete_job_name(snap)
    job = await deps.cluster.get("batch/v1", "Job", snap.namespace, name)
    if job is not None and not snapshotjob.owned_by(job, snap):
        raise Retry(f"Job {snap.namespace}/{name} of an earlier snapshot of that name is still being deleted")
    if job is None:
        # from the API, not the index: an app being deleted (its snapshots are deleted with it)
        # must not be taken for one that runs
        app_body = await deps.cluster.get(model.API_VERSION, model.KIND, snap.namespace, snap.spec.app)
        app = None
        if app_body is not None and not (app_body.get("metadata") or {}).get("deletionTimestamp"):
            try:
                app = model.StreamingApp.from_body(app_body)
            except pydantic.ValidationError:
                app = None
        if app is None:
            return await _kept(deps, body, f"StreamingApp {snap.spec.app} is gone or unreadable, and the Job that "
                               f"deletes a snapshot runs as the app: the data at {location} stays; delete it by hand")
        try:
            await deps.cluster.create(snapshotjob.delete_job(snap, app))
        except k8s.ApiError as exc:
            if exc.status in REFUSED_STATUSES:
                return await _kept(deps, body, f"Creating Job {name} was refused (HTTP {exc.status}): {exc.message}; "
                                   f"the data at {location} stays")
            raise
        log.info("Deleting snapshot data snapshot=%s/%s location=%s job=%s", snap.namespace, snap.name, location, name)
        raise Retry(f"Job {name} deletes the data at {location}")
    verdict = snapshotjob.from_job(job, await reconcile.job_pod(deps, job))
    if verdict.phase == snapshotjob.SUCCEEDED:
        message = f"Deleted the data at {location} (Job {name})"
        await deps.cluster.post_event(body, "Normal", "SnapshotDataDeleted", message)
        return message
    if verdict.phase == snapshotjob.FAILED:
        return await _kept(deps, body, f"Job {name} did not delete the data at {location}: {verdict.message}")
    raise Retry(f"Job {name} deletes the data at {location}")


async def _kept(deps: reconcile.Deps, body: Mapping[str, Any], message: str) -> str:
    await deps.cluster.post_event(body, "Warning", "SnapshotDataKept", message)
    log.warning("Snapshot data kept snapshot=%s/%s: %s", (body.get("metadata") or {}).get("namespace"),
                (body.get("metadata") or {}).get("name"), message)
    return message
