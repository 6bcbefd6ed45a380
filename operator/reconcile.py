"""One level-based reconcile per StreamingApp: observe, converge, report.

Create, update, resume, the periodic resync and changes of the app's Deployment all call
`reconcile`. It never asks which event happened: it checks what only the operator can
check (Secrets, topics, Cassandra), provisions state before the first rollout, applies the
children whose desired digest differs from what is live, and computes the status. When
nothing changed it makes no write at all.

An app annotated `streaming.floe.dev/reconcile: paused` (`model.RECONCILE_ANNOTATION`) is only
observed: no check that writes (Cassandra DDL, the query token), no apply, no prune, no offset
reset; its status is still computed from what is live, with the ReconcilePaused condition.
Unlike spec.suspend, its pods keep running as they are.

Faults stop the pass before any child is applied, so a half-valid app never rolls out
halfway; the caller retries with backoff. An apply refused by a race that the next attempt
wins (a RoleBinding whose Role is not stored yet) is tried again within the pass instead, so
it never shows as Degraded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from secrets import token_urlsafe
from typing import Any, Literal

import pydantic
from floe_jobs import config, pem
from floe_operator import (
    appids,
    cassandra,
    conditions,
    desired,
    k8s,
    kafka,
    model,
    offsetreset,
    podfaults,
    podtemplate,
    recent,
    render,
    restorejob,
    rollback,
    snapshotjob,
    snapshotschedule,
)
from floe_operator.lag import scalers
from kubernetes.utils import parse_quantity

log = logging.getLogger(__name__)

SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
# Kinds the handlers keep in watch-fed indexes; other kinds are read on demand.
INDEXED_KINDS = ("ConfigMap", "Deployment", "Service", "PodDisruptionBudget")
# Applied before the others: a pod needs them to start. The ConfigMap only once a Deployment
# exists (its pods would read the old content); a new app's goes with its Deployment, since the
# kubelet waits for a missing ConfigMap volume and no pod can read stale content.
MOUNTED_KINDS = ("ConfigMap", "ServiceAccount", "Role", "RoleBinding")
# Applied after the rest of MOUNTED_KINDS, once their Role is stored: unless the writer may `bind`
# it, the API server reads the Role a RoleBinding refers to (to check that the writer holds
# everything it grants) and refuses the binding while the Role is not there. Applied in one
# batch with the Role, a new app's binding raced it and lost in about two passes of three.
BINDING_KINDS = ("RoleBinding",)
# Refusals an apply meets when it races another write (a Role not stored yet: 404; a concurrent
# writer: 409) or the API server is busy (429, 5xx): tried again within the pass, after these
# pauses, before the pass reports it. An unreachable API server (0) is not: nor is the status.
TRANSIENT_STATUSES = frozenset({404, 409, 429, 500, 502, 503, 504})
APPLY_RETRY_DELAYS = (0.2, 0.5, 1.0, 2.0)
# Sent to the API server before other writes (k8s.Urgency): what a new app's pods need.
URGENT_KINDS = ("Deployment", *MOUNTED_KINDS)
# What the drivers of a k8s:// master run as: refused when the operator lacks the Spark RBAC.
SPARK_RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding")
# Children that exist only for some specs; removed when the spec stops asking for them.
OPTIONAL_CHILDREN: tuple[tuple[str, str], ...] = (
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "Service"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    *scalers.CHILD_KINDS,
)

# The app's children by kind as the watch-fed indexes hold them; besides the kinds applied, "Pod"
# (summaries of the Deployment's pods) and EXECUTOR_POD (summaries of the drivers' executor pods
# under a k8s:// master), both from `podfaults.summary`.
Children = Mapping[str, Sequence[Mapping[str, Any]]]
EXECUTOR_POD = "ExecutorPod"


@dataclass
class Deps:
    """Long-lived collaborators, created once at operator start."""

    cluster: k8s.Cluster
    provisioner: cassandra.Provisioner
    kafka: kafka.Inspector
    check_kafka: bool = True
    provisioned: dict[str, str] = field(default_factory=dict)
    recent: recent.RecentWrites = field(default_factory=recent.RecentWrites)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, key: str) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def prune_locks(self, alive: set[str]) -> None:
        """Forget the locks of apps that are gone (and not held), so churn does not grow the map."""
        for key in [k for k, lock in self.locks.items() if k not in alive and not lock.locked()]:
            del self.locks[key]


@dataclass(frozen=True)
class Outcome:
    """What a pass did: the status fields to write, events to post, the fault if any."""

    status_patch: dict[str, Any]
    events: list[conditions.Event]
    fault: conditions.Fault | None
    applied: list[str]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity_equal(a: Any, b: Any) -> bool:
    try:
        return bool(parse_quantity(a) == parse_quantity(b))  # type: ignore[no-untyped-call]
    except (ValueError, TypeError):
        return False


def is_subset(desired: Any, live: Any, *, quantities: bool = False) -> bool:
    """Whether every field of `desired` has the same value in `live` (API defaults may add more)."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return False
        # The API server omits empty lists and maps, so an empty desired value matches absence.
        return all(
            (k in live and is_subset(v, live[k], quantities=quantities or k in ("requests", "limits")))
            or (k not in live and v in ([], {}))
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(is_subset(d, v, quantities=quantities) for d, v in zip(desired, live, strict=True))
        )
    if desired == live:
        return True
    return quantities and _quantity_equal(desired, live)


def in_sync(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """An unchanged child: same applied digest, and nobody changed the fields Floe sets."""
    if live is None or render.applied_hash(live) != render.applied_hash(desired):
        return False
    labels = (live.get("metadata") or {}).get("labels") or {}
    if not is_subset(desired["metadata"].get("labels", {}), labels):
        return False
    fields = ("spec", "data", "rules", "roleRef", "subjects")
    return all(is_subset(desired[k], live.get(k)) for k in fields if k in desired)


async def _converge_child(
    app: model.StreamingApp, deps: Deps, children: Children, obj: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, k8s.ApiError | None]:
    """Apply one child unless it is in sync; returns (stored object or None if untouched, error)."""
    kind, name = obj["kind"], obj["metadata"]["name"]
    try:
        if kind in INDEXED_KINDS:
            live = _find(children, kind, name, app.uid)
            # The index may not have caught up with our own last write yet.
            if not in_sync(obj, live) and in_sync(obj, deps.recent.get(app.namespace, kind, name)):
                return None, None
        else:
            # what no new app's pods wait for (a NetworkPolicy, a ServiceMonitor) is read after
            # the urgent writes of a burst, as it is then applied
            urgent = kind in URGENT_KINDS
            live = await deps.cluster.get(obj["apiVersion"], kind, app.namespace, name, deferred=not urgent)
        if in_sync(obj, live):
            return None, None
        stored = await _apply(deps, obj, urgent=kind in URGENT_KINDS)
        if kind in INDEXED_KINDS:
            deps.recent.remember(stored)
        return stored, None
    except k8s.ApiError as exc:
        return None, exc


async def _apply(deps: Deps, obj: Mapping[str, Any], *, urgent: bool) -> dict[str, Any]:
    """Apply one child; a transient refusal (TRANSIENT_STATUSES) is tried again within the pass,
    so a race that the next attempt wins never reaches the app's conditions as Degraded."""
    for delay in (*APPLY_RETRY_DELAYS, None):
        try:
            return await deps.cluster.apply(obj, urgent=urgent)
        except k8s.ApiError as exc:
            if delay is None or exc.status not in TRANSIENT_STATUSES:
                raise
            meta = obj["metadata"]
            log.info(
                "Applying again after a transient refusal namespace=%s kind=%s name=%s status=%s in=%.1fs error=%s",
                meta["namespace"], obj["kind"], meta["name"], exc.status, delay, exc.message,
            )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _find(children: Children, kind: str, name: str, owner: str) -> Mapping[str, Any] | None:
    """The child `name`, preferring the one owned by app uid `owner`: right after an app is
    deleted and created again, the index can still hold the old app's child of the same name
    until the garbage collector's deletion reaches the watch."""
    found = None
    for obj in children.get(kind, ()):
        meta = obj.get("metadata") or {}
        if meta.get("name") != name:
            continue
        if any(ref.get("uid") == owner for ref in meta.get("ownerReferences") or []):
            return obj
        found = found or obj
    return found


@dataclass
class SecretsSeen:
    """The referenced Secrets' data by name, and their resourceVersions (for the pods' digest)."""

    data: dict[str, dict[str, str]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)


async def check_secrets(app: model.StreamingApp, deps: Deps) -> tuple[SecretsSeen, conditions.Fault | None]:
    """The Secrets the app's pods reference, read (their data for the operator's own clients, their
    versions for the pods' digest), or the first one missing or unreadable, as a fault."""
    seen = SecretsSeen()
    for name, keys in model.referenced_secrets(app.spec).items():
        try:
            found = await deps.cluster.secret(app.namespace, name)
        except k8s.ApiError as exc:
            return seen, conditions.Fault(conditions.SECRET_UNREADABLE, _unreadable(name, app.namespace, exc))
        if found is None:
            return seen, conditions.Fault(
                conditions.SECRET_NOT_FOUND,
                f"Secret {name} not found in namespace {app.namespace}; create it or fix the spec reference to it",
            )
        data, version = found
        missing = [k for k in keys if k not in data]
        if missing:
            refs = render.secret_refs(render.process(app)["env"])
            read_into = sorted(v for v, ref in refs.items() if ref.name == name and ref.key in missing)
            into = f" (read into {', '.join(read_into)})" if read_into else ""
            return seen, conditions.Fault(
                conditions.SECRET_KEY_NOT_FOUND,
                f"Secret {name} has no key {', '.join(missing)}{into}; add it or fix the key in the spec reference",
            )
        seen.data[name] = data
        seen.versions[name] = version
    return seen, None


def _check_material(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> conditions.Fault | None:
    """The TLS material the app's Secrets hold, read as its replicas will read it: a certificate
    past its date, an encrypted or unreadable key, text that is no certificate. Reported before
    any client is made from it (a broker answers an expired certificate with a bare alert)."""
    kafka_tls = kafka.target_of(app, secrets).security
    cassandra_ca = cassandra.target_of(app, secrets).connection.tls_ca_pem
    material: tuple[tuple[tuple[str, str], str | None, Literal["ca", "certificate", "key"], str], ...] = (
        (("kafka", "ssl_ca_pem"), kafka_tls.ca_pem, "ca", conditions.KAFKA_TLS_FAILED),
        (("kafka", "ssl_cert_pem"), kafka_tls.cert_pem, "certificate", conditions.KAFKA_TLS_FAILED),
        (("kafka", "ssl_key_pem"), kafka_tls.key_pem, "key", conditions.KAFKA_TLS_FAILED),
        (("cassandra", "tls_ca_pem"), cassandra_ca, "ca", conditions.CASSANDRA_TLS_FAILED),
    )
    for path, text, kind, reason in material:
        if text is not None and (problem := pem.problem(text, kind=kind)) is not None:
            where = f"{'.'.join(path)} ({config.env_name(*path)})"
            return conditions.Fault(reason, _sourced(app, f"{where}: {problem}"))
    return None


def _sourced(app: model.StreamingApp, message: str) -> str:
    """A refusal's message with each variable it names followed by the Secret and key the pods set
    it from, as the replicas say it (`floe_jobs.config.sourced`)."""
    return config.sourced(message, render.secret_refs(render.process(app)["env"]))


def _unreadable(name: str, namespace: str, exc: k8s.ApiError) -> str:
    """Why a referenced Secret could not be read, and what to change: a refusal comes from the
    operator's RBAC (Secret access taken out of its Role), anything else is retried."""
    what = f"Reading Secret {name} in namespace {namespace} failed (HTTP {exc.status}: {exc.message})"
    if exc.status == 403:
        return f"{what}; grant the operator's ServiceAccount get on Secrets in namespace {namespace}"
    return f"{what}; retrying"


async def _check_kafka(
    app: model.StreamingApp, deps: Deps, secrets: Mapping[str, Mapping[str, str]]
) -> tuple[int | None, conditions.Fault | None]:
    target = kafka.target_of(app, secrets)
    try:
        counts = await deps.kafka.partitions(target, list(app.spec.kafka.topics))
    except kafka.CredentialsRejected as exc:
        reason = conditions.KAFKA_TLS_FAILED if exc.tls else conditions.KAFKA_CREDENTIALS_REJECTED
        return None, conditions.Fault(reason, _sourced(app, str(exc)))
    except kafka.KafkaUnavailable as exc:
        return None, conditions.Fault(conditions.KAFKA_UNAVAILABLE, str(exc))
    missing = [t for t, n in counts.items() if n is None]
    if missing:
        deps.kafka.forget(target)
        return None, conditions.Fault(
            conditions.TOPIC_NOT_FOUND,
            f"Input topic {', '.join(missing)} not found at {app.spec.kafka.bootstrap_servers}; "
            "create it or fix spec.kafka.topics",
        )
    return sum(n for n in counts.values() if n is not None), None


async def _no_check() -> tuple[int | None, conditions.Fault | None]:
    return None, None


async def _provision(
    app: model.StreamingApp, deps: Deps, secrets: Mapping[str, Mapping[str, str]]
) -> tuple[str | None, conditions.Fault | None]:
    want = cassandra.layout_hash(app)
    target = cassandra.target_of(app, secrets)
    provisioned = app.status.get("provisionedHash") == want or deps.provisioned.get(app.uid) == want
    try:
        if provisioned:
            # only whether the app's credentials still get in (its Secret may have changed)
            await deps.provisioner.check(target)
        else:
            await deps.provisioner.provision(target, app)
    except cassandra.CredentialsRejected as exc:
        reason = conditions.CASSANDRA_TLS_FAILED if exc.tls else conditions.CASSANDRA_CREDENTIALS_REJECTED
        return None, conditions.Fault(reason, _sourced(app, str(exc)))
    except cassandra.CassandraUnavailable as exc:
        if provisioned:
            return want, None  # the replicas wait an unreachable Cassandra out; nothing to provision
        return None, conditions.Fault(conditions.CASSANDRA_UNAVAILABLE, str(exc))
    except cassandra.ProvisioningRejected as exc:
        return None, conditions.Fault(conditions.PROVISIONING_FAILED, f"{exc}; fix spec.state")
    if provisioned:
        return want, None
    deps.provisioned[app.uid] = want
    log.info(
        "Provisioned state app=%s/%s keyspace=%s stores=%d",
        app.namespace,
        app.name,
        app.spec.state.cassandra.keyspace,
        len(app.spec.state.stores),
    )
    return want, None


async def _prune(app: model.StreamingApp, deps: Deps, wanted: Sequence[Mapping[str, Any]]) -> None:
    """Delete optional children this spec no longer asks for (only after a spec change)."""
    kept = {(o["kind"], o["metadata"]["name"]) for o in wanted}
    candidates = {
        ("ServiceAccount", render.spark_service_account_name(app)),
        ("Role", render.spark_service_account_name(app)),
        ("RoleBinding", render.spark_service_account_name(app)),
        ("Service", render.driver_service_name(app)),
        ("Service", render.spark_ui_service_name(app)),
        ("ServiceMonitor", app.name),
        ("NetworkPolicy", render.network_policy_name(app)),
        *((kind, name) for _, kind, name in scalers.candidates(app)),
    }
    for api_version, kind in OPTIONAL_CHILDREN:
        for cand_kind, name in candidates:
            if cand_kind != kind or (kind, name) in kept:
                continue
            if kind == "ServiceMonitor" and not await deps.cluster.crd_exists(SERVICE_MONITOR_CRD):
                continue
            live = await deps.cluster.get(api_version, kind, app.namespace, name)
            owners = ((live or {}).get("metadata") or {}).get("ownerReferences") or []
            if live is not None and any(o.get("uid") == app.uid for o in owners):
                await deps.cluster.delete(api_version, kind, app.namespace, name)
                log.info(
                    "Deleted child no longer needed app=%s/%s kind=%s name=%s", app.namespace, app.name, kind, name
                )


async def reconcile(
    body: Mapping[str, Any], *, deps: Deps, children: Children, others: Sequence[Mapping[str, Any]] = ()
) -> Outcome:
    """Converge one app and return its status patch (empty when nothing changed). `others`: the
    bodies of every StreamingApp the operator knows (this one may be among them).

    The caller holds the app's lock (`Deps.lock`) across this and the status write, and reads
    `children` under it, so two passes over one app never interleave.
    """
    try:
        app = model.StreamingApp.from_body(body)
    except pydantic.ValidationError as exc:
        return _invalid(body, exc)
    return await _reconcile(with_running_id(app, children), deps=deps, children=children, others=others)


def with_running_id(app: model.StreamingApp, children: Children) -> model.StreamingApp:
    """The app, knowing the id its replicas run under when status does not record one yet: the
    id its own ConfigMap (owned by this app's uid, as the watch holds it) names. That covers an
    operator stopped between applying a new app's children and writing its status, whatever
    version it was; the pass then records that id in status.appId (`conditions.status_for`)."""
    if appids.valid(app.status.get("appId")):
        return app
    name = render.config_map_name(app)
    for obj in children.get("ConfigMap", ()):
        meta = obj.get("metadata") or {}
        if meta.get("name") == name and any(ref.get("uid") == app.uid for ref in meta.get("ownerReferences") or []):
            running = appids.running_id(obj, render.CONFIG_FILE)
            return app if running is None else app.model_copy(update={"running_id": running})
    return app


async def _reconcile(
    app: model.StreamingApp, *, deps: Deps, children: Children, others: Sequence[Mapping[str, Any]] = ()
) -> Outcome:
    """Check, then converge the children, then report: the status is computed whether or not a
    fault stopped the pass, so a fault always reaches the app's conditions."""
    deployment = _find(children, "Deployment", render.deployment_name(app), app.uid)
    if app.reconcile_paused:
        return await _outcome(app, deps, children, _Checked(), deployment=deployment, fault=None, applied=[])
    # From here on `app` is what this pass renders: the declared app, or with its last Ready spec
    # while its generation is rolled back (spec.rollout.autoRollback).
    declared = app
    app, rolled = rollback.effective(
        declared, deployment=deployment, pods_fault=_pods_fault(declared, children, deployment), now=now()
    )
    held: conditions.Fault | None = None
    if rolled is None:
        app, held = await _snapshot_before_upgrade(declared, deps)
    in_place = await _in_place_request(declared, rolled, deps)
    shown = app  # what the status describes: a restore in place holds the pods, it does not suspend the app
    if restorejob.holds(declared, in_place):
        app = restorejob.suspended(app)
    # A first pass: no Deployment and no status written yet (a retry after a fault has one).
    checked = await _check(app, deps, others, new=deployment is None and "observedGeneration" not in app.status)
    applied: list[str] = []
    fault = checked.fault
    restore: dict[str, Any] | None = None
    state_restore: dict[str, Any] | None = None
    if fault is None:
        wanted = desired.desired(app, await _facts(app, deps, checked))
        if not restorejob.done(app):
            # the pods wait for spec.restoreFrom; what their Job mounts and runs as does not
            first = [o for o in wanted if not restorejob.held(o["kind"])]
            applied, deployment, fault = await _converge(app, deps, children, first, deployment=deployment)
            if fault is None:
                held, restore = await _restore(app, deps)
        if fault is None and (held is None or held.reason not in (conditions.RESTORING, conditions.RESTORE_FAILED)):
            more, deployment, fault = await _converge(app, deps, children, wanted, deployment=deployment)
            applied += more
        if fault is None and in_place is not None and restorejob.holds(declared, in_place):
            held, state_restore = await _restore_in_place(app, in_place, deps, checked.secrets.data)
            if held is None:  # it succeeded just now: the pods run again in this pass
                wanted = desired.desired(shown, await _facts(shown, deps, checked))
                more, deployment, fault = await _converge(shown, deps, children, wanted, deployment=deployment)
                applied += more
    outcome = await _outcome(
        shown, deps, children, checked, deployment=deployment, fault=fault, applied=applied, rolled=rolled, held=held
    )
    if restore is not None and restore != declared.status.get("restore"):
        outcome = dataclasses.replace(outcome, status_patch={**outcome.status_patch, "restore": restore})
    if in_place is not None and state_restore is not None and state_restore != declared.status.get(in_place.field):
        # whole: a merge patch would keep a field of the record before (a failure's message)
        whole = dict.fromkeys(restorejob.RECORD_FIELDS) | state_restore
        outcome = dataclasses.replace(outcome, status_patch={**outcome.status_patch, in_place.field: whole})
    if held is None and snapshotschedule.upgrade_pending(declared) and not snapshotschedule.upgrade_done(declared):
        # this pass found the generation's snapshot Succeeded
        record = {**(declared.status.get("snapshots") or {}), "beforeUpgrade": declared.generation}
        outcome = dataclasses.replace(outcome, status_patch={**outcome.status_patch, "snapshots": record})
    return _with_rollback(declared, rolled, outcome)


async def _restore(app: model.StreamingApp, deps: Deps) -> tuple[conditions.Fault | None, dict[str, Any]]:
    """Run spec.restoreFrom's Job once and follow it: why the pods still wait (None once the
    restore succeeded) and status.restore (`restorejob`)."""
    assert app.spec.restore_from is not None
    name = restorejob.job_name(app)
    job = await deps.cluster.get("batch/v1", "Job", app.namespace, name)
    if job is None and await has_positions(deps, app):
        # positions are written last: a restore whose record in status was lost
        return None, {"from": app.spec.restore_from.location, "job": name, "phase": snapshotjob.SUCCEEDED}
    job, refused = await _own_job(app, deps, job, restorejob.job(app))
    if refused is not None:
        return conditions.Fault(conditions.RESTORE_FAILED, refused), {
            "from": app.spec.restore_from.location, "phase": snapshotjob.FAILED, "message": refused}
    _, fault, record = restorejob.verdict(app, job, await job_pod(deps, job))
    return fault, record


async def _own_job(
    app: model.StreamingApp, deps: Deps, job: dict[str, Any] | None, wanted: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The app's restore Job `job` as read, or `wanted` created now; or why neither can be."""
    name = wanted["metadata"]["name"]
    if job is not None:
        if any(r.get("uid") == app.uid for r in job["metadata"].get("ownerReferences") or []):
            return job, None
        return job, f"Job {app.namespace}/{name} exists and is not this app's restore: delete it"
    try:
        job = await deps.cluster.create(wanted)
    except k8s.ApiError as exc:
        if exc.status != 409:
            return {}, f"Creating Job {name} was refused (HTTP {exc.status}): {exc.message}"
        job = await deps.cluster.get("batch/v1", "Job", app.namespace, name) or {}
    log.info("Created restore job app=%s/%s job=%s", app.namespace, app.name, name)
    return job, None


async def _in_place_request(
    declared: model.StreamingApp, rolled: rollback.RolledBack | None, deps: Deps
) -> restorejob.InPlace | None:
    """The restore in place this pass acts on: one whose Job is under way; else the state half of
    a rollback (upgradeMode snapshot: the snapshot taken before the failed generation rolled out,
    while it exists and succeeded); else spec.stateRestore."""
    running = restorejob.in_flight(declared)
    if running is not None:
        return running
    mine = restorejob.declared(declared)
    if restorejob.holds(declared, mine):
        return mine  # asked for by the user: before a rollback's
    if (rolled is not None and declared.spec.rollout.upgrade_mode == "snapshot"
            and not restorejob.rollback_done(declared, rolled.generation)):
        name = snapshotschedule.upgrade_snapshot_name(declared, generation=rolled.generation)
        snap = await deps.cluster.get(model.API_VERSION, model.SNAPSHOT_KIND, declared.namespace, name)
        if (snap is not None and snapshotschedule.owned(snap, declared)
                and (snap.get("status") or {}).get("phase") == snapshotjob.SUCCEEDED):
            return restorejob.for_rollback(rolled.generation, snap)
    if not restorejob.holds(declared, mine):
        standing = restorejob.failed(declared)
        # a failure that deleted the positions left the tables half written: it stands
        if standing is not None and await has_positions(deps, declared) is not True:
            return standing
    return mine


async def _restore_in_place(
    app: model.StreamingApp, request: restorejob.InPlace, deps: Deps, secrets: Mapping[str, Mapping[str, str]]
) -> tuple[conditions.Fault | None, dict[str, Any]]:
    """Follow a restore in place: its Job once the app's pods are gone and its consumer group
    is empty (`offsetreset.still_running`), created here; why the app waits, or that it failed."""
    name = restorejob.in_place_job_name(app, request)
    job = await deps.cluster.get("batch/v1", "Job", app.namespace, name)
    before = restorejob.recorded(app, request)
    if job is None and before.get("phase") == snapshotjob.FAILED:
        # its Job is gone (its TTL ran out): the failure stands until a new id, never retried unasked
        return conditions.Fault(conditions.RESTORE_FAILED, str(before.get("message") or "")), dict(before)
    if job is None:
        try:
            why = await offsetreset.still_running(app, cluster=deps.cluster, inspector=deps.kafka,
                                                  target=kafka.target_of(app, secrets))
        except kafka.KafkaUnavailable as exc:
            why = f"Kafka to tell whether the app's consumer group is empty ({exc})"
        if why is not None:
            return restorejob.waiting(app, request, why)
    job, refused = await _own_job(app, deps, job, restorejob.in_place_job(app, request))
    if refused is not None:
        record = {**restorejob.base_record(app, request), "phase": snapshotjob.FAILED, "message": refused}
        return conditions.Fault(conditions.RESTORE_FAILED, refused), record
    _, fault, record = restorejob.in_place_verdict(app, request, job, await job_pod(deps, job))
    return fault, record


async def has_positions(deps: Deps, app: model.StreamingApp) -> bool | None:
    """Whether the app has offsets rows in Cassandra; None when that cannot be told now (a Secret
    or Cassandra the operator cannot read)."""
    secrets, fault = await check_secrets(app, deps)
    if fault is not None:
        return None
    try:
        topics = await deps.provisioner.recorded_topics(cassandra.target_of(app, secrets.data), app)
    except cassandra.CassandraUnavailable as exc:
        log.warning("Reading positions failed app=%s/%s error=%s", app.namespace, app.name, exc)
        return None
    return bool(topics)


async def job_pod(deps: Deps, job: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Job's newest pod, or None."""
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


async def _snapshot_before_upgrade(
    declared: model.StreamingApp, deps: Deps
) -> tuple[model.StreamingApp, conditions.Fault | None]:
    """With spec.rollout.upgradeMode snapshot, a new image or job rolls out only once a snapshot
    of the running generation succeeded: until then the app to render is the last Ready one, and
    why it waits (or that the snapshot failed) is returned for its conditions."""
    last_generation = snapshotschedule.upgrade_pending(declared)
    # once its snapshot succeeded, a generation rolls out whatever becomes of the snapshot (retention
    # may delete it before the generation is Ready): status.snapshots.beforeUpgrade says so
    if last_generation is None or snapshotschedule.upgrade_done(declared):
        return declared, None
    last = rollback.last_ready(declared)
    assert last is not None
    running = rollback.last_ready_app(declared, last[1])
    name = snapshotschedule.upgrade_snapshot_name(declared)
    wanted = snapshotschedule.upgrade_snapshot(declared, datetime.now(UTC).replace(microsecond=0))
    snap = await deps.cluster.get(model.API_VERSION, model.SNAPSHOT_KIND, declared.namespace, name)
    if snap is not None and not snapshotschedule.owned(snap, declared):
        return running, conditions.Fault(
            conditions.UPGRADE_SNAPSHOT_FAILED,
            f"StreamingAppSnapshot {name}, which the snapshot before generation {declared.generation} is "
            "named, exists and is not this app's: delete it, or set spec.rollout.upgradeMode: direct",
        )
    if snap is None:
        try:
            await deps.cluster.create(wanted)
        except k8s.ApiError as exc:
            if exc.status != 409:
                return running, conditions.Fault(
                    conditions.UPGRADE_SNAPSHOT_FAILED,
                    f"Creating StreamingAppSnapshot {name} before generation {declared.generation} rolls out "
                    f"failed (HTTP {exc.status}): {exc.message}",
                )
        log.info("Snapshot before upgrade app=%s/%s snapshot=%s generation=%d running=%d",
                 declared.namespace, declared.name, name, declared.generation, last_generation)
    status = (snap or {}).get("status") or {}
    phase = status.get("phase")
    if phase == snapshotjob.SUCCEEDED:
        return declared, None
    if phase == snapshotjob.FAILED:
        said = (conditions.find(status.get("conditions") or [], conditions.READY) or {}).get("message", "")
        return running, conditions.Fault(
            conditions.UPGRADE_SNAPSHOT_FAILED,
            f"The snapshot {name} of generation {last_generation}, taken before generation {declared.generation}'s "
            f"new image or job rolls out, failed: {said}. Generation {last_generation} keeps running; change the "
            "spec to try again, or set spec.rollout.upgradeMode: direct to roll out without a snapshot",
        )
    return running, conditions.Fault(
        conditions.SNAPSHOT_BEFORE_UPGRADE,
        f"Taking snapshot {name} of generation {last_generation} before generation {declared.generation}'s new "
        "image or job rolls out (spec.rollout.upgradeMode: snapshot)",
    )


def _pods_fault(
    app: model.StreamingApp, children: Children, deployment: Mapping[str, Any] | None
) -> conditions.Fault | None:
    """Why the app's pods do not run: read from the pods, else from the Deployment's refusal."""
    return podfaults.fault(children.get("Pod", ()), image=app.spec.image) or podfaults.rejected(deployment)


def _with_rollback(declared: model.StreamingApp, rolled: rollback.RolledBack | None, outcome: Outcome) -> Outcome:
    """`outcome` with status.lastReady and status.rolledBack as this pass leaves them."""
    merged = {**declared.status, **outcome.status_patch}
    fields = rollback.status_fields(declared, rolled, merged)
    patch = {**outcome.status_patch, **{k: v for k, v in fields.items() if declared.status.get(k) != v}}
    return dataclasses.replace(outcome, status_patch=patch)


@dataclass(frozen=True)
class _Checked:
    """What the checks before any apply found: the Secrets read, the input partitions (None when
    Kafka was not asked), the table layout provisioned, and the first fault."""

    secrets: SecretsSeen = field(default_factory=SecretsSeen)
    partitions: int | None = None
    provisioned: str | None = None
    fault: conditions.Fault | None = None


async def _check(
    app: model.StreamingApp, deps: Deps, others: Sequence[Mapping[str, Any]], *, new: bool = False
) -> _Checked:
    """What only the operator can check: the spec against the other apps and the pod profile,
    the Secrets and their key material, then Kafka, Cassandra and the query token together. The
    first fault ends the checks, so a half-valid app never rolls out halfway. `new`: the app's
    first pass (see `ensure_query_token`)."""
    written = _written_tables(app)
    fault = (
        app_id_conflict(app, others)
        # Only an app with a partitioned store can meet StoreInUse: the others (most apps, and
        # every app of the benchmark's bursts) parse no other app's spec for it.
        or (store_in_use(app, neighbours(app, others, writing=set(written))) if written else None)
        or pod_template_fault(app)
        or spark_fault(app)
    )
    if fault is not None:
        return _Checked(fault=fault)
    secrets, fault = await check_secrets(app, deps)
    if fault is None:
        fault = _check_material(app, secrets.data)
    if fault is not None:
        return _Checked(secrets=secrets, fault=fault)
    # Independent round trips, so a new app waits for the slowest of them, not their sum (a new
    # app's query token is created while the first app of a burst provisions the keyspace).
    # The token's fault is reported first, then Kafka's; tables made meanwhile are kept
    # (provisioning is idempotent), and so is a token made meanwhile.
    token_fault, (partitions, fault), (provisioned, cassandra_fault) = await asyncio.gather(
        ensure_query_token(app, deps, new=new),
        _check_kafka(app, deps, secrets.data) if deps.check_kafka else _no_check(),
        _provision(app, deps, secrets.data),
    )
    fault = token_fault or fault or cassandra_fault
    return _Checked(
        secrets=secrets, partitions=partitions, provisioned=provisioned if fault is None else None, fault=fault
    )


async def _facts(app: model.StreamingApp, deps: Deps, checked: _Checked) -> desired.Facts:
    """What rendering needs from the cluster. A CRD is asked about only when the spec wants its
    child; without this pass's partition count (Kafka not asked) the last one recorded in status
    stands."""
    service_monitor = app.spec.metrics.service_monitor.enabled and await deps.cluster.crd_exists(SERVICE_MONITOR_CRD)
    keda = scalers.wants_keda(app) and await deps.cluster.crd_exists(scalers.KEDA_CRD)
    return desired.Facts(
        service_monitor_crd=service_monitor,
        keda_crd=keda,
        partitions=checked.partitions or app.status.get("partitions"),
        secret_versions=checked.secrets.versions,
    )


async def _converge(
    app: model.StreamingApp,
    deps: Deps,
    children: Children,
    wanted: Sequence[Mapping[str, Any]],
    *,
    deployment: Mapping[str, Any] | None,
) -> tuple[list[str], Mapping[str, Any] | None, conditions.Fault | None]:
    """Apply what differs from the live children, then prune what a changed spec no longer asks
    for. Returns the children applied ("Kind/name"), the Deployment as now stored, and the first
    refusal: it stops the pass before the next batch, so the pods' mounts come before the pods."""
    applied: list[str] = []
    fault: conditions.Fault | None = None
    # What the pods mount (ConfigMap, ServiceAccount, Role) first, then the RoleBinding of that
    # Role (BINDING_KINDS), then the rest together.
    mounted = set(MOUNTED_KINDS) - set(BINDING_KINDS) - ({"ConfigMap"} if deployment is None else set())
    first = [o for o in wanted if o["kind"] in mounted]
    bindings = [o for o in wanted if o["kind"] in BINDING_KINDS]
    rest = [o for o in wanted if o["kind"] not in mounted and o["kind"] not in BINDING_KINDS]
    for batch in (first, bindings, rest):
        results = await asyncio.gather(*(_converge_child(app, deps, children, obj) for obj in batch))
        for obj, (stored, error) in zip(batch, results, strict=True):
            kind, name = obj["kind"], obj["metadata"]["name"]
            if error is not None:
                fault = fault or _apply_fault(kind, name, error)
            elif stored is not None:
                applied.append(f"{kind}/{name}")
                if kind == "Deployment":
                    deployment = stored
        if fault is not None:
            break
    previous = app.status.get("observedGeneration")
    # After a spec change; and when the Deployment changes: a generation held back (a snapshot
    # before its upgrade, a rollback) rolls out in a later pass than the one that observed it.
    rolled = any(a.startswith("Deployment/") for a in applied)
    if fault is None and previous is not None and (app.generation != previous or rolled):
        try:
            await _prune(app, deps, wanted)
        except k8s.ApiError as exc:
            fault = conditions.Fault(conditions.APPLY_FAILED, f"Removing an unneeded child failed: {exc.message}")
    if applied:
        log.info("Applied children app=%s/%s objects=%s", app.namespace, app.name, ",".join(applied))
    return applied, deployment, fault


async def _outcome(
    app: model.StreamingApp,
    deps: Deps,
    children: Children,
    checked: _Checked,
    *,
    deployment: Mapping[str, Any] | None,
    fault: conditions.Fault | None,
    applied: list[str],
    rolled: rollback.RolledBack | None = None,
    held: conditions.Fault | None = None,
) -> Outcome:
    """The declared offset reset (only on a pass without fault, once the children are in place, and
    not while reconciliation is paused),
    then the status from what was observed, and the events of its transitions."""
    reset = None
    if fault is None and not app.reconcile_paused:
        reset = await offsetreset.run(
            app,
            cluster=deps.cluster,
            provisioner=deps.provisioner,
            inspector=deps.kafka,
            secrets=checked.secrets.data,
            now=now(),
        )
    executors = None
    if fault is None and deployment is not None and app.spec.spark.on_kubernetes:
        executors = podfaults.unschedulable_executors(app, children.get(EXECUTOR_POD, ()))
    observed = conditions.Observed(
        deployment=deployment,
        fault=fault,
        pods_fault=_pods_fault(app, children, deployment),
        restarts=podfaults.restarts(children.get("Pod", ())) if "Pod" in children else None,
        provisioned_keyspace=app.spec.state.cassandra.keyspace if checked.provisioned else None,
        provisioned_hash=checked.provisioned,
        partitions=checked.partitions,
        executors_unschedulable=executors,
        pod_security=conditions.pod_security(app.namespace, await deps.cluster.namespace_labels(app.namespace)),
        rolled_back=conditions.Fault(rolled.reason, rolled.message) if rolled is not None else None,
        held=held,
    )
    status = conditions.status_for(app, observed, now=now())
    if reset is not None:
        offsetreset.put_status(app, status, reset, now=now())
    events = conditions.transitions(app.status.get("conditions") or [], status["conditions"])
    if reset is not None and (app.status.get("offsetReset") or {}) != reset.record:
        events.append(offsetreset.event(reset))
    return Outcome(conditions.status_patch(app.status, status), events, fault, applied)


def pod_template_fault(app: model.StreamingApp) -> conditions.Fault | None:
    """spec.podTemplate asks for what Floe must own or what the restricted profile forbids."""
    found = podtemplate.problems(app, render.pod_template_owned(app))
    if not found:
        return None
    return conditions.Fault(conditions.INVALID_POD_TEMPLATE, "; ".join(found))


def spark_fault(app: model.StreamingApp) -> conditions.Fault | None:
    """spec.spark asks for what an app author must not have (an app admitted by an older CRD):
    a Spark setting that changes the executor pods' shape or identity, or a ServiceAccount of
    the author's choosing for drivers whose Role would then be that account's."""
    found = [f"spec.spark.conf: {p}" for p in config.spark_conf_problems(app.spec.spark.conf, rendered=False)]
    if app.spec.spark.on_kubernetes and app.spec.pod.service_account_name:
        found.append(
            "spec.pod.serviceAccountName: not with a k8s:// spec.spark.master; the drivers run as the "
            "ServiceAccount Floe creates for the app, the only one their Role is bound to"
        )
    if not found:
        return None
    return conditions.Fault(conditions.INVALID_SPEC, "; ".join(found))


async def ensure_query_token(app: model.StreamingApp, deps: Deps, *, new: bool = False) -> conditions.Fault | None:
    """Create the Secret of the query endpoint's bearer token (`render.query_token_secret`) once,
    with 32 random bytes, before the pods that read it; an existing one is kept as it is, so a
    token never changes under its clients (delete the Secret to rotate it: the next pass makes a
    new one, and the pods read it when they restart).

    On a `new` app's first pass (no Deployment, no status yet) it is created without being read
    first: it almost never exists then, and one that does answers 409 and is kept, so a new app's
    Deployment waits for one round trip, not two. Later passes read it (after a burst's urgent
    writes: `k8s.Urgency`), so that an unchanged or retried app sends no write."""
    if not app.spec.metrics.query_port:
        return None
    name = render.query_token_secret_name(app)
    if not new:
        try:
            found = await deps.cluster.get("v1", "Secret", app.namespace, name, deferred=True)
        except k8s.ApiError as exc:
            return conditions.Fault(conditions.SECRET_UNREADABLE, _unreadable(name, app.namespace, exc))
        if found is not None:
            return None
    try:
        # urgent: a new app's Deployment waits for it (`k8s.Urgency`)
        await deps.cluster.create(render.query_token_secret(app, token_urlsafe(32)), urgent=True)
        log.info("Created the query token Secret app=%s/%s name=%s", app.namespace, app.name, name)
    except k8s.ApiError as exc:
        if exc.status != 409:  # made meanwhile by another pass, or before this app's Deployment: kept
            return _apply_fault("Secret", name, exc)
    return None


def _apply_fault(kind: str, name: str, error: k8s.ApiError) -> conditions.Fault:
    """A refused apply; for the drivers' RBAC of a k8s:// master, what the operator lacks and how
    to grant it (the API server's message names the refused verb and resource)."""
    if error.status == 403 and kind in SPARK_RBAC_KINDS:
        return conditions.Fault(
            conditions.SPARK_RBAC_MISSING,
            f"Applying {kind} {name} was refused: {error.message}. A k8s:// spec.spark.master needs the operator "
            "to create its drivers' ServiceAccount, Role and RoleBinding and to hold what that Role grants (pods, "
            "configmaps in this namespace): install the chart with "
            "rbac.sparkOnKubernetes=true (its default), or use a local[*] master",
        )
    return conditions.Fault(conditions.APPLY_FAILED, f"Applying {kind} {name} failed: {error.message}")


def _invalid(body: Mapping[str, Any], exc: pydantic.ValidationError) -> Outcome:
    """A spec the schema let through but the operator cannot read (e.g. an older CRD)."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    where = ".".join(str(p) for p in first.get("loc", ()))
    fault = conditions.Fault(conditions.INVALID_SPEC, f"spec.{where}: {first.get('msg')}")
    meta = body.get("metadata") or {}
    current = dict(body.get("status") or {})
    conds = conditions.set_condition(
        current.get("conditions") or [],
        type_=conditions.DEGRADED,
        status="True",
        reason=fault.reason,
        message=fault.message,
        generation=int(meta.get("generation", 1)),
        now=now(),
    )
    conds = conditions.with_kstatus(conds, generation=int(meta.get("generation", 1)), now=now())
    app_id = appids.app_id_of(str(meta.get("namespace", "")), str(meta.get("name", "")), current)
    target = {"observedGeneration": int(meta.get("generation", 1)), "appId": app_id, "conditions": conds}
    events = conditions.transitions(current.get("conditions") or [], conds)
    return Outcome(conditions.status_patch(current, target), events, fault, [])


# --- deletion ---------------------------------------------------------------------------


def neighbours(
    app: model.StreamingApp, others: Sequence[Mapping[str, Any]], *, writing: set[str] | None = None
) -> list[model.StreamingApp]:
    """The other apps whose state lives in the same keyspace of the same Cassandra cluster (a
    host in common), from raw bodies; those being deleted and those the operator cannot read are
    left out. With `writing`, only those whose spec names a store of one of these tables. The
    keyspace (and the store names) are compared before a body is parsed, so a pass over many
    apps stays cheap: parsing every app of a keyspace cost 9 ms per pass with 200 apps."""
    cass = app.spec.state.cassandra
    found = []
    for body in others:
        state = (body.get("spec") or {}).get("state") or {}
        spec_cass = state.get("cassandra") or {}
        meta = body.get("metadata") or {}
        if spec_cass.get("keyspace") != cass.keyspace or meta.get("uid") == app.uid or meta.get("deletionTimestamp"):
            continue  # another keyspace, the app itself, or an app on its way out
        if writing is not None and not writing & _raw_store_tables(state.get("stores")):
            continue
        try:
            other = model.StreamingApp.from_body(body)
        except (pydantic.ValidationError, KeyError):
            continue
        if set(other.spec.state.cassandra.hosts) & set(cass.hosts):
            found.append(other)
    return found


def app_id_conflict(app: model.StreamingApp, others: Sequence[Mapping[str, Any]]) -> conditions.Fault | None:
    """A fault when an elder app (by creation, then namespace/name) already has this app's id:
    the two would share offsets rows and internal topics, so nothing of the younger is applied.
    Only apps an older operator named `<namespace>-<name>` can meet this by accident."""
    meta = {"uid": app.uid, "namespace": app.namespace, "name": app.name, "creationTimestamp": app.created}
    elder = appids.conflict(app.app_id, meta, others)
    if elder is None:
        return None
    app_id = app.app_id
    return conditions.Fault(
        conditions.APP_ID_CONFLICT,
        f"StreamingApp {app.namespace}/{app.name} has app id {app_id}, which StreamingApp {elder[0]}/{elder[1]} "
        f"(created earlier) has too: the two would share offsets rows in keyspace "
        f"{app.spec.state.cassandra.keyspace}, the topics {app_id}-dlq and {app_id}-<name>-repartition, offset "
        "resets and what deletionPolicy Delete removes, so nothing of this app is applied. Delete this app and "
        "create it again (an app created now gets an id with a digest of its namespace/name), or under another "
        "name; deleting it leaves the shared offsets and topics alone",
    )


def _raw_store_tables(stores: Any) -> set[str]:
    """The tables of the stores a raw spec names (whatever their type)."""
    from floe_jobs.stores import schema

    if not isinstance(stores, list):
        return set()
    return {schema.table_name(str(s.get("name"))) for s in stores if isinstance(s, Mapping) and s.get("name")}


def _written_tables(app: model.StreamingApp) -> dict[str, str]:
    """Table → store name of the app's partitioned stores: the ones its batches write, fenced."""
    tables = cassandra.store_tables(app)
    return {tables[s.name]: s.name for s in app.spec.state.stores if s.type == "partitioned"}


def store_in_use(app: model.StreamingApp, neighbours: Sequence[model.StreamingApp]) -> conditions.Fault | None:
    """A fault when an elder app (by creation, then namespace/name) of the same keyspace already
    writes one of this app's partitioned store tables. Fences are kept per input partition, not
    per app, so two apps writing one table would each skip the other's updates as applied;
    global stores are only read by batches and may be shared."""
    mine = _written_tables(app)
    rank = (app.created, app.namespace, app.name)
    for other in sorted(neighbours, key=lambda o: (o.created, o.namespace, o.name)):
        if (other.created, other.namespace, other.name) >= rank:
            continue
        common = sorted(set(mine) & set(_written_tables(other)))
        if common:
            keyspace = app.spec.state.cassandra.keyspace
            stores = ", ".join(f"{mine[t]!r} (table {keyspace}.{t})" for t in common)
            return conditions.Fault(
                conditions.STORE_IN_USE,
                f"store {stores} is already written by StreamingApp {other.namespace}/{other.name}; two apps "
                "writing one table would skip each other's updates: rename the store in spec.state.stores "
                "or use another spec.state.cassandra.keyspace",
            )
    return None


def tables_to_drop(app: model.StreamingApp, others: Sequence[model.StreamingApp]) -> list[str]:
    """The app's store tables that no other app on the same keyspace uses."""
    mine = cassandra.store_tables(app)
    shared: set[str] = set()
    for other in others:
        oc, cass = other.spec.state.cassandra, app.spec.state.cassandra
        if other.uid == app.uid or oc.keyspace != cass.keyspace or not set(oc.hosts) & set(cass.hosts):
            continue
        shared.update(cassandra.store_tables(other).values())
    return sorted({t for t in mine.values() if t not in shared})


async def finalize(body: Mapping[str, Any], *, deps: Deps, others: Sequence[Mapping[str, Any]]) -> str:
    """Apply spec.state.deletionPolicy; returns what was done. Raises on a retryable failure."""
    app = model.StreamingApp.from_body(body)
    keyspace = app.spec.state.cassandra.keyspace
    if app.spec.state.deletion_policy == "Retain":
        return f"Retained state in keyspace {keyspace} (deletionPolicy Retain)"
    other_apps = []
    for other in others:
        try:
            other_apps.append(model.StreamingApp.from_body(other))
        except (pydantic.ValidationError, KeyError):
            continue
    tables = tables_to_drop(app, other_apps)
    secrets, fault = await check_secrets(app, deps)
    if fault is not None:
        raise cassandra.CassandraUnavailable(fault.message)
    target = cassandra.target_of(app, secrets.data)
    sharing = appids.sharers(app.app_id, app.uid, others)
    if sharing:
        # Another app has the same id (two apps an older operator named alike): the offsets rows
        # and internal topics may be its own, so they stay.
        await deps.provisioner.drop(target, keyspace=keyspace, tables=tables)
        deps.provisioned.pop(app.uid, None)
        kept = ", ".join(f"{namespace}/{name}" for namespace, name in sharing)
        only = ", ".join(f"{keyspace}.{t}" for t in tables) or "no table"
        return (
            f"Dropped {only} (deletionPolicy Delete); kept the offsets and topics of app id {app.app_id}, "
            f"which StreamingApp {kept} has too"
        )
    # Repartition topics first, while the offsets rows still name them: an app created again
    # under the same name would otherwise re-read their old records into fresh state.
    topics = repartition_topics(app, await deps.provisioner.recorded_topics(target, app))
    await deps.kafka.delete_topics(kafka.target_of(app, secrets.data), topics)
    await deps.provisioner.drop(target, keyspace=keyspace, tables=tables)
    await deps.provisioner.forget_offsets(target, app)
    deps.provisioned.pop(app.uid, None)
    dropped = [f"{keyspace}.{t}" for t in tables] + [f"its offsets in {keyspace}"]
    dropped += [f"topic {t}" for t in topics]
    return f"Dropped {', '.join(dropped)} (deletionPolicy Delete)"


def repartition_topics(app: model.StreamingApp, recorded: Sequence[str]) -> list[str]:
    """The app's internal topics among those its offsets table records: `<app-id>-<name>-repartition`
    (the runtime's naming), never one of the spec's own input or output topics."""
    own = set(app.spec.kafka.topics) | set(app.spec.kafka.output_topics)
    prefix = f"{app.app_id}-"
    return [t for t in recorded if t.startswith(prefix) and t.endswith("-repartition") and t not in own]
