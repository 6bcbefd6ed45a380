"""Kopf entry points: each one gathers what Kopf hands it and calls one reconcile function.

Create, update, resume, the periodic resync and every change of an app's Deployment go
through `reconcile.reconcile`; deletion goes through `reconcile.finalize`. Children are
seen through watch-fed indexes, so a resync of an unchanged app reads nothing it does not
have to and writes nothing.

StreamingAppSnapshots go through `snapshots.converge`: when one is created or found at start,
and whenever its Job or the Job's pod changes (label-filtered watches). They carry no finalizer:
their Job goes with them through its owner reference.

Only apps with `deletionPolicy: Delete` carry a finalizer: one with Retain has nothing to do
when it goes, so it can be deleted even while the operator is down, and a burst of new apps
costs no finalizer round trip. That is also why the resync is one loop over the indexed apps
rather than a Kopf timer per app (a timer makes Kopf put a finalizer on every app).

The handlers are module-level functions that read what they share from Kopf's memo: the
long-lived clients (`memo.deps`, made by `configure`) and what the watches saw last
(`memo.marks`). `register` puts them on a registry built from `Options`, so the CLI, the tests
and the benchmark run exactly the same operator.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from floe_operator import (
    cassandra,
    k8s,
    kafka,
    loops,
    model,
    podfaults,
    reconcile,
    render,
    restorejob,
    snapshotjob,
    snapshots,
)

log = logging.getLogger(__name__)

FINALIZER = f"{model.GROUP}/finalizer"
MANAGED = {render.MANAGED_BY: render.FIELD_MANAGER}
CHILD_INDEXES: tuple[tuple[str, str, str, str], ...] = (
    # (group, version, plural, kind)
    ("", "v1", "configmaps", "ConfigMap"),
    ("", "v1", "services", "Service"),
    ("apps", "v1", "deployments", "Deployment"),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
)
# The app's pods (the Deployment's, labelled like every child): slim summaries of why they do
# not run, for the Degraded condition (`podfaults`). Not a child: never applied or pruned.
POD_INDEX = ("", "v1", "pods", "Pod")
# The executor pods that the drivers of a k8s:// app start, labelled with the app they serve
# (`render.executor_labels`; Spark adds spark-role): slim summaries of why they wait for a node.
EXECUTOR_INDEX = ("", "v1", "pods", reconcile.EXECUTOR_POD)
EXECUTORS: Mapping[str, Any] = {render.EXECUTOR_OF: kopf.PRESENT, "spark-role": "executor"}
MAX_DELETE_RETRIES = 8
RESYNC_CONCURRENCY = 8


@dataclass(frozen=True)
class Options:
    """How the operator runs; main() fills it from flags and environment variables."""

    resync_seconds: float = 60.0
    check_kafka: bool = True
    api_workers: int = 48
    # Set once the operator is configured; lets an embedding process (tests, benchmarks) wait for it.
    started: threading.Event | None = None


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's diff base (the app's spec, labels and annotations) without first deep-copying what
    it then throws away: Kopf copies the whole body, status and managedFields included, on every
    event, which was a tenth of the operator's CPU in a burst of new apps. Same essence."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean = {k: v for k, v in body.items() if k not in ("status", "metadata")}
        lean["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return super().build(body=kopf.Body(lean), extra_fields=extra_fields)  # type: ignore[arg-type]


def backoff(retry: int) -> float:
    """Seconds before Kopf's retry number `retry` (0-based): 5, 10, 20 … capped at 5 minutes."""
    return loops.backoff_seconds(retry + 1, base=5.0, cap=300.0)


def _index_name(kind: str) -> str:
    return f"{kind.lower()}_idx"


def _slim(body: Mapping[str, Any], *, keep_status: bool) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    slim: dict[str, Any] = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "labels", "annotations", "generation", "ownerReferences")
            if k in meta
        },
    }
    for key in ("spec", "data", "rules", "roleRef", "subjects"):
        if key in body:
            slim[key] = body[key]
    if keep_status and "status" in body:
        slim["status"] = body["status"]
    return slim


def _deployment_mark(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a Deployment that a reconcile reacts to."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    conds = tuple((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or [])
    return (
        meta.get("generation"),
        (meta.get("annotations") or {}).get(render.APPLIED_HASH),
        (body.get("spec") or {}).get("replicas"),
        tuple(
            status.get(k)
            for k in ("observedGeneration", "replicas", "readyReplicas", "updatedReplicas", "availableReplicas")
        ),
        conds,
    )


def _children(namespace: str, name: str, indexes: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """The app's children from their indexes, and its pods' and executor pods' summaries
    (`podfaults.summary`) as "Pod" and `reconcile.EXECUTOR_POD`."""
    result: dict[str, list[Mapping[str, Any]]] = {}
    for _, _, _, kind in (*CHILD_INDEXES, POD_INDEX, EXECUTOR_INDEX):
        index = indexes.get(_index_name(kind))
        store = index.get((namespace, name)) if index is not None else None
        result[kind] = list(store) if store is not None else []
    return result


def _indexed(apps: Any, namespace: str, name: str) -> Mapping[str, Any] | None:
    """The app's latest body as the apps index holds it (status included), or None."""
    store = apps.get((namespace, name)) if apps is not None else None
    found = list(store) if store is not None else []
    return found[0] if found else None


def _all_apps(indexes: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every StreamingApp body in the apps index."""
    return list(model.indexed_bodies(indexes.get(model.APPS_INDEX)).values())


def _deletes_data(spec: kopf.Spec, **_: Any) -> bool:
    """Whether deleting a snapshot has work to do, hence needs the finalizer (deletionPolicy Delete)."""
    return bool(spec.get("deletionPolicy", "Retain") == "Delete")


def _deletes_state(spec: kopf.Spec, **_: Any) -> bool:
    """Whether deleting the app has work to do, hence needs the finalizer (deletionPolicy Delete)."""
    return bool((spec.get("state") or {}).get("deletionPolicy", "Retain") == "Delete")


def _observed(memo: kopf.Memo, namespace: str | None, kind: str, name: str, body: kopf.Body) -> None:
    """Tell the memory of recent writes which version a watch has just delivered.

    Called from the index handlers, which are coroutines for that reason: Kopf runs a plain
    function in a worker thread, and the reconciles on the event loop change the same memory
    (a write during a burst of creates failed with "dictionary changed size during iteration")."""
    deps: reconcile.Deps | None = getattr(memo, "deps", None)
    if deps is not None:
        deps.recent.observed(namespace or "", kind, name, body)


async def _report(deps: reconcile.Deps, body: Mapping[str, Any], outcome: reconcile.Outcome) -> None:
    meta = body.get("metadata") or {}
    if outcome.status_patch:
        try:
            deps.recent.remember(await deps.cluster.patch_status(meta["namespace"], meta["name"], outcome.status_patch))
        except k8s.ApiError as exc:
            if exc.status != 404:
                raise
    for event in outcome.events:
        await deps.cluster.post_event(body, event.type, event.reason, event.message)


@dataclass
class Marks:
    """What the watch handlers saw last of each Deployment and pod (by namespace and name), so
    that only a change the app's status reads asks for a reconcile."""

    deployments: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)
    pods: dict[tuple[str, str], podfaults.Mark] = field(default_factory=dict)


# --- start-up and shutdown -------------------------------------------------------------------


async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, options: Options, **kwargs: Any) -> None:
    """Kopf's settings, the shared clients in `memo.deps`, and the resync loop (`options` bound by `register`)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=model.GROUP)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(prefix=model.GROUP, key="last-handled-configuration")
    # Kopf's own "handler succeeded" notes would be a write per object per change;
    # Floe posts its own events for the transitions that matter (`k8s.Cluster.post_event`).
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(max_workers=options.api_workers, thread_name_prefix="floe-api")
    )
    memo.deps = reconcile.Deps(
        cluster=k8s.Cluster(k8s.load_client(pool_size=options.api_workers * 2)),
        provisioner=cassandra.Provisioner(),
        kafka=kafka.Inspector(),
        check_kafka=options.check_kafka,
    )
    memo.marks = Marks()
    memo.resync = asyncio.create_task(
        loops.keep_running(
            lambda: resync_forever(memo.deps, kwargs, seconds=options.resync_seconds),
            what="Resync loop",
            base=options.resync_seconds,
        ),
        name="floe-resync",
    )
    log.info("Started floe-operator resync_seconds=%s check_kafka=%s", options.resync_seconds, options.check_kafka)
    if options.started is not None:
        options.started.set()


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: the file named by KUBECONFIG (read now, not at import)."""
    in_pod = kopf.login_with_service_account(**kwargs)
    if in_pod is not None:
        return in_cluster_server(in_pod, os.environ)
    return kopf.login_with_kubeconfig(**kwargs)


async def close(memo: kopf.Memo, **_: Any) -> None:
    await loops.stop(getattr(memo, "resync", None))
    deps = getattr(memo, "deps", None)
    if deps is not None:
        await asyncio.to_thread(deps.provisioner.close)


# --- indexes: what the watches hold of the apps, their children and their pods ---------------


async def apps_idx(
    namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    _observed(memo, namespace, model.KIND, name, body)
    meta = {k: v for k, v in body.metadata.items() if k != "managedFields"}
    return {(namespace or "", name): _slim(body, keep_status=True) | {"metadata": meta}}


async def child_idx(
    namespace: str | None,
    name: str,
    labels: Mapping[str, str],
    body: kopf.Body,
    memo: kopf.Memo,
    child_kind: str,
    keep_status: bool,
    **_: Any,
) -> dict[tuple[str, str], dict[str, Any]]:
    """A child of kind `child_kind`, slimmed, by its app (`child_kind` and `keep_status` bound by `register`)."""
    _observed(memo, namespace, child_kind, name, body)
    app = labels.get(render.APP_LABEL)
    return {(namespace or "", app): _slim(body, keep_status=keep_status)} if app else {}


async def pod_idx(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    app = labels.get(render.APP_LABEL)
    return {(namespace or "", app): podfaults.summary(body)} if app else {}


async def executor_idx(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    app = labels.get(render.EXECUTOR_OF)
    return {(namespace or "", app): podfaults.summary(body)} if app else {}


# --- reconciles ------------------------------------------------------------------------------


async def converge(
    deps: reconcile.Deps, namespace: str, name: str, current: Callable[[], Mapping[str, Any] | None], indexes: Any
) -> reconcile.Outcome | None:
    """One pass, status write included, under the app's lock; `current` is read once the lock
    is held, so the pass starts from what the previous one wrote. None: the app is gone."""
    async with deps.lock(f"{namespace}/{name}"):
        body = current()
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            return None
        # Our own latest status write may be newer than the body at hand.
        body = deps.recent.fresher(body)
        outcome = await reconcile.reconcile(
            body, deps=deps, children=_children(namespace, name, indexes), others=_all_apps(indexes)
        )
        await _report(deps, body, outcome)
        if outcome.fault is None:
            status = {**(body.get("status") or {}), **outcome.status_patch}
            await snapshots.schedule(deps, {**body, "status": status})
        return outcome


async def converge_indexed(deps: reconcile.Deps, namespace: str, name: str, indexes: Any) -> None:
    """A pass over the app as the apps index holds it, if it holds it."""
    apps = indexes.get(model.APPS_INDEX)
    if apps is None or _indexed(apps, namespace, name) is None:
        return
    await converge(deps, namespace, name, lambda: _indexed(apps, namespace, name), indexes)


async def on_change(body: kopf.Body, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
    """Create, update, resume: one pass; a fault is retried by Kopf with backoff."""
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    outcome = await converge(memo.deps, namespace, name, lambda: body, kwargs)
    if outcome is not None and outcome.fault is not None:
        raise kopf.TemporaryError(f"{outcome.fault.reason}: {outcome.fault.message}", delay=backoff(retry))


async def resync_forever(deps: reconcile.Deps, indexes: Mapping[str, Any], *, seconds: float) -> None:
    """Every `seconds`, one pass over every indexed app, a few at a time: drift in what is not
    watched (Spark RBAC, ServiceMonitor, Secrets) is repaired and faults retried. An unchanged
    app costs no API call."""
    slots = asyncio.Semaphore(RESYNC_CONCURRENCY)

    async def one(namespace: str, name: str) -> None:
        async with slots:
            try:
                await converge_indexed(deps, namespace, name, indexes)
            except Exception:  # one app's failure never stops the others' resync
                log.exception("Resync failed app=%s/%s", namespace, name)

    while True:
        await asyncio.sleep(seconds)
        apps = indexes.get(model.APPS_INDEX)
        keys = [key for key, store in (apps.items() if apps is not None else []) if list(store)]
        deps.prune_locks({f"{namespace}/{name}" for namespace, name in keys})
        await asyncio.gather(*(one(namespace, name) for namespace, name in keys))


async def deployment_changed(
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    labels: Mapping[str, str],
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """An app's Deployment changed in what its status or drift checks read: reconcile the app."""
    name = labels.get(render.APP_LABEL)
    deps: reconcile.Deps | None = getattr(memo, "deps", None)
    marks: Marks | None = getattr(memo, "marks", None)
    if not name or not namespace or deps is None or marks is None:
        return
    key = (namespace, name)
    if type == "DELETED":
        marks.deployments.pop(key, None)
    # Kopf's initial listing is left to resume.
    mark = _deployment_mark(body)
    if type is None or marks.deployments.get(key) == mark:
        marks.deployments[key] = mark
        return
    marks.deployments[key] = mark
    await converge_indexed(deps, namespace, name, kwargs)


async def pod_changed(
    type: str | None,
    body: kopf.Body,
    namespace: str | None,
    name: str | None,
    labels: Mapping[str, str],
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """A pod started or stopped giving a reason not to run (image, scheduling, crash loop), or
    restarted: reconcile its app, so that its status says so within a watch event, not a resync."""
    app = labels.get(render.APP_LABEL)
    deps: reconcile.Deps | None = getattr(memo, "deps", None)
    marks: Marks | None = getattr(memo, "marks", None)
    if not app or not namespace or not name or deps is None or marks is None:
        return
    key = (namespace, name)
    before = marks.pods.pop(key, None) if type == "DELETED" else marks.pods.get(key)
    mark = None if type == "DELETED" else podfaults.mark(body)
    if mark is not None:
        marks.pods[key] = mark
    # A new healthy pod, Kopf's initial listing, a phase change: nothing the status shows.
    if not podfaults.changes_status(before, mark):
        return
    await converge_indexed(deps, namespace, app, kwargs)


async def finalize(body: kopf.Body, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
    """Drop the app's state (deletionPolicy Delete), retried with backoff, then given up with an event."""
    deps: reconcile.Deps = memo.deps
    try:
        done = await reconcile.finalize(body, deps=deps, others=_all_apps(kwargs))
    except (cassandra.CassandraUnavailable, cassandra.ProvisioningRejected, kafka.KafkaUnavailable) as exc:
        if retry < MAX_DELETE_RETRIES:
            raise kopf.TemporaryError(f"Dropping state failed: {exc}", delay=backoff(retry)) from exc
        await deps.cluster.post_event(body, "Warning", "StateDropFailed", f"Gave up dropping state, tables kept: {exc}")
        return
    await deps.cluster.post_event(body, "Normal", "StateDropped", done)
    log.info("Finalized app=%s/%s result=%s", body.metadata.namespace, body.metadata.name, done)


# --- StreamingAppSnapshots: one Job each, followed through its events and its pod's ---------

SNAPSHOT_JOBS: Mapping[str, Any] = {**MANAGED, snapshotjob.SNAPSHOT_LABEL: kopf.PRESENT}
SNAPSHOT_PODS: Mapping[str, Any] = {snapshotjob.SNAPSHOT_LABEL: kopf.PRESENT}
RESTORE_JOBS: Mapping[str, Any] = {**MANAGED, restorejob.RESTORE_LABEL: kopf.PRESENT}
# How often a snapshot being deleted looks again at the Jobs it waits for.
SNAPSHOT_DELETE_POLL_SECONDS = 5.0


def _app_lookup(indexes: Mapping[str, Any]) -> snapshots.AppLookup:
    apps = indexes.get(model.APPS_INDEX)
    return lambda namespace, name: _indexed(apps, namespace, name)


async def snapshot_changed(body: kopf.Body, memo: kopf.Memo, retry: int, **kwargs: Any) -> None:
    """A snapshot created, or found at start: one pass; retried by Kopf with backoff."""
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    try:
        await snapshots.converge(memo.deps, namespace, name, app_of=_app_lookup(kwargs))
    except (snapshots.Retry, k8s.ApiError) as exc:
        raise kopf.TemporaryError(str(exc), delay=backoff(retry)) from exc


async def restore_job_changed(namespace: str | None, labels: Mapping[str, str], memo: kopf.Memo,
                              **kwargs: Any) -> None:
    """An app's restore Job changed (spec.restoreFrom): a pass over the app, whose first replica
    starts once the Job has succeeded."""
    app = labels.get(restorejob.RESTORE_LABEL)
    deps: reconcile.Deps | None = getattr(memo, "deps", None)
    if app and namespace and deps is not None:
        await converge_indexed(deps, namespace, app, kwargs)


async def snapshot_finalize(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    """Delete a snapshot's data (deletionPolicy Delete) before Kopf lets the resource go."""
    try:
        await snapshots.finalize(memo.deps, body)
    except (snapshots.Retry, k8s.ApiError) as exc:
        raise kopf.TemporaryError(str(exc), delay=min(backoff(retry), SNAPSHOT_DELETE_POLL_SECONDS)) from exc


async def snapshot_job_changed(namespace: str | None, labels: Mapping[str, str], memo: kopf.Memo,
                               **kwargs: Any) -> None:
    """A snapshot's Job or its pod changed: a pass over the snapshot it is labelled with. A failed
    pass is left to the next event (a Job sends one when it finishes) and to the operator's start."""
    name = labels.get(snapshotjob.SNAPSHOT_LABEL)
    deps: reconcile.Deps | None = getattr(memo, "deps", None)
    if not name or not namespace or deps is None:
        return
    try:
        await snapshots.converge(deps, namespace, name, app_of=_app_lookup(kwargs))
    except (snapshots.Retry, k8s.ApiError) as exc:
        log.warning("Following a snapshot's job failed snapshot=%s/%s error=%s", namespace, name, exc)
    # an app waiting for a snapshot before its upgrade (spec.rollout.upgradeMode: snapshot) rolls
    # out as soon as the snapshot's Job ends, not at the next resync
    app = labels.get("app.kubernetes.io/name")
    if app and (kwargs.get("body") or {}).get("kind") == "Job":
        await converge_indexed(deps, namespace, app, kwargs)


def register(registry: kopf.OperatorRegistry, options: Options) -> kopf.OperatorRegistry:
    """Put every Floe handler on `registry` and return it."""
    app_kind = (model.GROUP, model.VERSION, model.PLURAL)
    kopf.on.startup(registry=registry, id="configure")(functools.partial(configure, options=options))
    kopf.on.login(registry=registry, id="login")(login)
    kopf.on.cleanup(registry=registry, id="close")(close)
    kopf.index(*app_kind, registry=registry, id=model.APPS_INDEX)(apps_idx)
    for group, version, plural, kind in CHILD_INDEXES:
        indexed = functools.partial(child_idx, child_kind=kind, keep_status=kind == "Deployment")
        kopf.index(group, version, plural, labels=MANAGED, registry=registry, id=_index_name(kind))(indexed)
    kopf.index(*POD_INDEX[:3], labels=MANAGED, registry=registry, id=_index_name("Pod"))(pod_idx)
    kopf.index(*EXECUTOR_INDEX[:3], labels=EXECUTORS, registry=registry, id=_index_name(EXECUTOR_INDEX[3]))(
        executor_idx
    )
    kopf.on.resume(*app_kind, registry=registry, id="reconcile_resume")(on_change)
    kopf.on.create(*app_kind, registry=registry, id="reconcile_create")(on_change)
    kopf.on.update(*app_kind, registry=registry, id="reconcile_update")(on_change)
    kopf.on.event("apps", "v1", "deployments", labels=MANAGED, registry=registry, id="deployment_changed")(
        deployment_changed
    )
    kopf.on.event("", "v1", "pods", labels=MANAGED, registry=registry, id="pod_changed")(pod_changed)
    kopf.on.delete(*app_kind, registry=registry, id="finalize", when=_deletes_state)(finalize)
    snapshot_kind = (model.GROUP, model.VERSION, model.SNAPSHOT_PLURAL)
    kopf.on.resume(*snapshot_kind, registry=registry, id="snapshot_resume")(snapshot_changed)
    kopf.on.create(*snapshot_kind, registry=registry, id="snapshot_create")(snapshot_changed)
    kopf.on.delete(*snapshot_kind, registry=registry, id="snapshot_finalize", when=_deletes_data)(snapshot_finalize)
    kopf.on.event("batch", "v1", "jobs", labels=SNAPSHOT_JOBS, registry=registry, id="snapshot_job_changed")(
        snapshot_job_changed
    )
    kopf.on.event("", "v1", "pods", labels=SNAPSHOT_PODS, registry=registry, id="snapshot_pod_changed")(
        snapshot_job_changed
    )
    kopf.on.event("batch", "v1", "jobs", labels=RESTORE_JOBS, registry=registry, id="restore_job_changed")(
        restore_job_changed
    )
    return registry


def build_registry(options: Options) -> kopf.OperatorRegistry:
    return register(kopf.OperatorRegistry(), options)


def in_cluster_server(info: kopf.ConnectionInfo, environ: Mapping[str, str]) -> kopf.ConnectionInfo:
    """Kopf's service-account login names the API server https://kubernetes.default.svc, which
    needs cluster DNS; the kubelet also hands every pod the `kubernetes` Service's address in
    KUBERNETES_SERVICE_HOST/PORT, which client-go and the Python client use and which work
    without DNS. Use them when they are there."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return info
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return replace(info, server=f"https://{host}:{port}")
