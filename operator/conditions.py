"""Status conditions per the Kubernetes API conventions, computed from observed facts.

Pure: the reconciler hands in what it saw (the Deployment, a fault, provisioning, the
partition count) and gets the whole status back. `lastTransitionTime` moves only when a
condition's status flips, so recomputing an unchanged app yields an identical status and
no write.

Reconciling and Stalled are the abnormal-true pair that kstatus (Flux, kpt, cli-utils) reads
beside Ready; `kstatus` derives both from Ready, Progressing and Degraded after those are set,
so the two vocabularies cannot disagree. Progressing and Degraded stay for the tools and
alerts that already read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from floe_operator import model, render

Condition = dict[str, Any]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
# kstatus: True while the app is on its way to Ready; True when it will not get there unaided.
RECONCILING = "Reconciling"
STALLED = "Stalled"
STATE_PROVISIONED = "StateProvisioned"
REPLICAS_WITHIN_PARTITIONS = "ReplicasWithinPartitions"
OWNED_TYPES = (READY, PROGRESSING, DEGRADED, RECONCILING, STALLED, STATE_PROVISIONED, REPLICAS_WITHIN_PARTITIONS)
# Written by the lag loop, from the offsets rows it reads (`partitions_stopped`): present once a
# poison record stopped a partition (spec.errors: stop); True while one is stopped.
PARTITIONS_STOPPED = "PartitionsStopped"
POISON_RECORD = "PoisonRecord"
NONE_STOPPED = "NoneStopped"
# longest message of the condition (the partitions are listed in order up to it)
STOPPED_MESSAGE_CHARS = 1500

# Reasons (CamelCase, stable: tools and alerts match on them).
ALL_REPLICAS_READY = "AllReplicasReady"
SCALED_TO_ZERO = "ScaledToZero"
REPLICAS_NOT_READY = "ReplicasNotReady"
ROLLING_OUT = "RollingOut"
ROLLOUT_COMPLETE = "RolloutComplete"
CREATING = "Creating"
AS_EXPECTED = "AsExpected"
PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
PROVISIONED = "Provisioned"
PENDING = "Pending"
PARTITIONS_UNKNOWN = "PartitionsUnknown"
REPLICAS_EXCEED_PARTITIONS = "ReplicasExceedPartitions"
# Faults: what only the operator can know.
SECRET_NOT_FOUND = "SecretNotFound"
SECRET_KEY_NOT_FOUND = "SecretKeyNotFound"
SECRET_UNREADABLE = "SecretUnreadable"
CASSANDRA_UNAVAILABLE = "CassandraUnavailable"
PROVISIONING_FAILED = "ProvisioningFailed"
KAFKA_UNAVAILABLE = "KafkaUnavailable"
TOPIC_NOT_FOUND = "TopicNotFound"
APPLY_FAILED = "ApplyFailed"
INVALID_SPEC = "InvalidSpec"
STORE_IN_USE = "StoreInUse"
# An elder app already has this app's id (offsets rows, internal topics): see `appids`.
APP_ID_CONFLICT = "AppIdConflict"
# The cluster refused the credentials or certificates the app's Secrets hold (or the app's CA
# refused the cluster's certificate): fixed by changing a Secret, which rolls the pods.
KAFKA_CREDENTIALS_REJECTED = "KafkaCredentialsRejected"
CASSANDRA_CREDENTIALS_REJECTED = "CassandraCredentialsRejected"
# A k8s:// master: the operator may not create the drivers' ServiceAccount, Role or RoleBinding
# (the chart's rbac.sparkOnKubernetes is off), or executor pods wait for a node.
SPARK_RBAC_MISSING = "SparkRBACMissing"
EXECUTORS_UNSCHEDULABLE = "ExecutorsUnschedulable"
# The TLS handshake failed: the app's CA did not sign the servers' certificates, or a
# certificate (theirs, the app's CA or its client certificate) has expired or names another host.
KAFKA_TLS_FAILED = "KafkaTLSFailed"
CASSANDRA_TLS_FAILED = "CassandraTLSFailed"

# Degraded reasons that clear by waiting, with no change to the app, its Secrets or the
# cluster: an outage ends, a node is added (a cluster autoscaler). The Deployment's progress
# deadline turns pods that wait for a node for too long into ProgressDeadlineExceeded, which
# stalls. Every other Degraded reason stalls the app: a spec, a Secret, an image, RBAC or a
# certificate must change first.
UNSCHEDULABLE = "Unschedulable"  # podfaults.UNSCHEDULABLE (podfaults imports this module)
TRANSIENT_FAULTS = frozenset({KAFKA_UNAVAILABLE, CASSANDRA_UNAVAILABLE, UNSCHEDULABLE, EXECUTORS_UNSCHEDULABLE})

PROVISIONING_FAULTS = (CASSANDRA_UNAVAILABLE, PROVISIONING_FAILED, CASSANDRA_CREDENTIALS_REJECTED, CASSANDRA_TLS_FAILED)

# Platform controls. Suspended appears once an app was suspended (True while spec.suspend, then
# False with reason Resumed); OffsetReset once spec.offsetReset was set (see `offsetreset`).
SUSPENDED = "Suspended"
RESUMED = "Resumed"
OFFSET_RESET = "OffsetReset"
INVALID_POD_TEMPLATE = "InvalidPodTemplate"
# The pause annotation (`model.RECONCILE_ANNOTATION`). ReconcilePaused appears once an app was
# annotated: True (reason ReconcilePaused) while `paused`, False (ReconcileResumed) once removed,
# False (InvalidReconcileAnnotation) while it holds a value that pauses nothing.
RECONCILE_PAUSED = "ReconcilePaused"
RECONCILE_RESUMED = "ReconcileResumed"
INVALID_RECONCILE_ANNOTATION = "InvalidReconcileAnnotation"

# spec.rollout.autoRollback (`rollback`). RolledBack appears once a generation was rolled back:
# True while the app runs its last Ready spec instead (reason: why the generation failed, as a
# pod fault or ProgressDeadlineExceeded names it), False (NewGeneration) once a later generation
# is tried. Degraded is True with reason RolledBack meanwhile, so the app is Stalled until the
# spec changes.
ROLLED_BACK = "RolledBack"
NEW_GENERATION = "NewGeneration"

# spec.rollout.upgradeMode: snapshot (`snapshotschedule.upgrade_pending`): while the snapshot
# of the running generation is taken, the new one waits (Progressing True, Ready False); if the
# snapshot fails, it does not roll out (Degraded True, Progressing False), until the spec changes.
SNAPSHOT_BEFORE_UPGRADE = "SnapshotBeforeUpgrade"
UPGRADE_SNAPSHOT_FAILED = "UpgradeSnapshotFailed"
# spec.restoreFrom (`restorejob`): no replica runs while the snapshot is restored into the new
# app, nor after the restore failed.
RESTORING = "Restoring"
RESTORE_FAILED = "RestoreFailed"
# Reasons of `Observed.held` that no waiting clears: Degraded, hence Stalled, until the spec changes.
FAILED_HOLDS = frozenset({UPGRADE_SNAPSHOT_FAILED, RESTORE_FAILED})

# Whether the app's namespace holds every pod to a Pod Security Standard: Floe's admission rules
# cover what a StreamingApp asks for, not pods made otherwise in the namespace (docs/security.md).
POD_SECURITY = "PodSecurity"
POD_SECURITY_ENFORCED = "Enforced"
POD_SECURITY_NOT_ENFORCED = "NotEnforced"
NAMESPACE_UNREADABLE = "NamespaceUnreadable"
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCING_LEVELS = ("restricted", "baseline")


@dataclass(frozen=True)
class Fault:
    """Something that stops the app from converging; `reason` is a condition reason."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    """What the reconciler saw in this pass."""

    deployment: Mapping[str, Any] | None = None
    fault: Fault | None = None
    # Why the app's pods do not run (image, scheduling, crash loop): Degraded, but never a block
    # on applying the children, since the fix is a spec change that must be applied.
    pods_fault: Fault | None = None
    # Container restarts of the app's pods (None: not known, the status keeps what it had).
    restarts: int | None = None
    provisioned_keyspace: str | None = None
    provisioned_hash: str | None = None
    partitions: int | None = None
    # why executor pods wait for a node (`podfaults.unschedulable_executors`); None: none waits
    executors_unschedulable: str | None = None
    # the PodSecurity condition (`pod_security`); None leaves it as it is
    pod_security: Verdict | None = None
    # the current generation failed and its last Ready spec runs instead (`rollback.RolledBack`):
    # reason, why it failed; message, what the operator did
    rolled_back: Fault | None = None
    # what the current generation waits for before it runs: a snapshot of the running one
    # (SNAPSHOT_BEFORE_UPGRADE) or the restore of spec.restoreFrom (RESTORING); or that it
    # failed (FAILED_HOLDS)
    held: Fault | None = None


def set_condition(
    conditions: Sequence[Condition],
    *,
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> list[Condition]:
    """The list with one condition replaced; keeps lastTransitionTime unless status flipped."""
    result: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type_:
            result.append(dict(cond))
            continue
        found = True
        since = cond.get("lastTransitionTime") if cond.get("status") == status else now
        result.append(_condition(type_, status, reason, message, generation, since or now))
    if not found:
        result.append(_condition(type_, status, reason, message, generation, now))
    return result


def _condition(type_: str, status: str, reason: str, message: str, generation: int, since: str) -> Condition:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


def find(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


@dataclass(frozen=True)
class Rollout:
    """The Deployment's rollout as the deployment controller reports it."""

    desired: int
    replicas: int
    ready: int
    updated: int
    available: int
    observed: bool
    deadline_exceeded: bool

    @property
    def complete(self) -> bool:
        return (
            self.observed
            and self.updated >= self.desired
            and self.available >= self.desired
            and self.replicas == self.desired
        )


def rollout_of(deployment: Mapping[str, Any]) -> Rollout:
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    meta = deployment.get("metadata") or {}
    progressing = find(status.get("conditions") or [], "Progressing") or {}
    return Rollout(
        desired=int(spec.get("replicas", 1)),
        replicas=int(status.get("replicas", 0)),
        ready=int(status.get("readyReplicas", 0)),
        updated=int(status.get("updatedReplicas", 0)),
        available=int(status.get("availableReplicas", 0)),
        observed=int(status.get("observedGeneration", 0)) >= int(meta.get("generation", 1)),
        deadline_exceeded=progressing.get("status") == "False"
        and progressing.get("reason") == PROGRESS_DEADLINE_EXCEEDED,
    )


# A condition's status, reason and message.
Verdict = tuple[str, str, str]


def status_for(app: model.StreamingApp, observed: Observed, *, now: str) -> dict[str, Any]:
    """The status Floe owns for `app`, given what was observed (lag and autoscaling are left alone)."""
    gen = app.generation
    conds: list[Condition] = list(app.status.get("conditions") or [])
    rollout = rollout_of(observed.deployment) if observed.deployment is not None else None
    desired = app.spec.running_replicas

    def put(type_: str, status: str, reason: str, message: str) -> None:
        nonlocal conds
        conds = set_condition(
            conds, type_=type_, status=status, reason=reason, message=message, generation=gen, now=now
        )

    verdicts: list[tuple[str, Verdict | None]] = [
        (STATE_PROVISIONED, _state_provisioned(app, observed, first=find(conds, STATE_PROVISIONED) is None)),
        (DEGRADED, _degraded(app, observed, rollout)),
        (PROGRESSING, _progressing(observed, rollout, desired)),
        (READY, _ready(app, observed, rollout, desired)),
        (
            REPLICAS_WITHIN_PARTITIONS,
            _within_partitions(observed, desired, first=find(conds, REPLICAS_WITHIN_PARTITIONS) is None),
        ),
    ]
    for type_, verdict in verdicts:
        if verdict is not None:
            put(type_, *verdict)
    _held(observed, put=put)
    if observed.pod_security is not None:
        put(POD_SECURITY, *observed.pod_security)
    _suspension(app, was_suspended=find(conds, SUSPENDED) is not None, put=put)
    _reconcile_pause(app, was_annotated=find(conds, RECONCILE_PAUSED) is not None, put=put)
    _rollback(app, observed.rolled_back, was_rolled_back=find(conds, ROLLED_BACK) is not None, put=put)
    # While paused, a spec changed since the last pass is not acted on (observedGeneration stays).
    stale = app.reconcile_paused and app.status.get("observedGeneration") != gen
    reconciling, stalled = kstatus(conds, paused_generation=gen if stale else None)
    put(RECONCILING, *reconciling)
    put(STALLED, *stalled)

    order = {t: i for i, t in enumerate(OWNED_TYPES)}
    conds.sort(key=lambda c: (order.get(str(c.get("type")), len(order)), str(c.get("type"))))
    status: dict[str, Any] = {
        # While reconciliation is paused the spec is not acted on: the generation last acted on
        # stays, so kstatus, `kubectl wait` and GitOps tools see a change as not rolled out, and
        # the pass after the pause prunes what the changed spec no longer asks for.
        "observedGeneration": app.status.get("observedGeneration") if app.reconcile_paused else gen,
        # recorded once, so that every later pass, the lag loop and the finalizer use this id
        "appId": app.app_id,
        "conditions": conds,
        "replicas": rollout.replicas if rollout else 0,
        "readyReplicas": rollout.ready if rollout else 0,
        "updatedReplicas": rollout.updated if rollout else 0,
        "availableReplicas": rollout.available if rollout else 0,
        "labelSelector": render.label_selector(app),
    }
    if status["observedGeneration"] is None:
        del status["observedGeneration"]
    status.update(_kept_facts(app, observed))
    status["suspension"] = suspension_status(app, now=now)
    return status


def kstatus(conds: Sequence[Mapping[str, Any]], *, paused_generation: int | None = None) -> tuple[Verdict, Verdict]:
    """Reconciling and Stalled, as kstatus reads them, from the Ready, Progressing and Degraded
    in `conds` (already computed for this pass); `paused_generation`: a generation that
    reconciliation, paused by its annotation, does not act on.

    Stalled is True exactly when Degraded is True for a reason waiting does not clear (not in
    TRANSIENT_FAULTS): a missing Secret, a refused spec, a crash loop, a rollout past its
    deadline. Reconciling is True when the app is not stalled and not yet converged: Ready is
    not True, a rollout is under way (Progressing True), a transient fault is being retried,
    or a changed spec waits for reconciliation to be resumed. Both False: Ready, and nothing
    left to do. Never both True, as kstatus expects."""
    ready, progressing, degraded = find(conds, READY) or {}, find(conds, PROGRESSING) or {}, find(conds, DEGRADED) or {}

    def said(cond: Mapping[str, Any]) -> tuple[str, str]:
        return str(cond.get("reason") or ""), str(cond.get("message") or "")

    fault = said(degraded) if degraded.get("status") == "True" else None
    if fault is not None and fault[0] not in TRANSIENT_FAULTS:
        reason, message = fault
        return ("False", STALLED, f"Stalled by {reason}: {message}"), ("True", reason, message)
    not_stalled: Verdict = (
        ("False", fault[0], f"Retrying, no change needed: {fault[1]}")
        if fault is not None
        else ("False", AS_EXPECTED, "No fault that needs a change to the app")
    )
    if paused_generation is not None:
        reconciling: Verdict = (
            "True",
            RECONCILE_PAUSED,
            f"Generation {paused_generation} is not acted on while reconciliation is paused by "
            f"{model.RECONCILE_ANNOTATION}",
        )
    elif fault is not None:
        reconciling = ("True", *fault)
    elif progressing.get("status") == "True":
        reconciling = ("True", *said(progressing))
    elif ready.get("status") != "True":
        reason, message = said(ready)
        reconciling = ("True", reason or PENDING, message or "Ready is not reported yet")
    else:
        reconciling = ("False", *said(ready))
    return reconciling, not_stalled


def with_kstatus(conds: Sequence[Condition], *, generation: int, now: str) -> list[Condition]:
    """`conds` with Reconciling and Stalled set from their Ready, Progressing and Degraded."""
    reconciling, stalled = kstatus(conds)
    result = list(conds)
    for type_, (status, reason, message) in ((RECONCILING, reconciling), (STALLED, stalled)):
        result = set_condition(
            result, type_=type_, status=status, reason=reason, message=message, generation=generation, now=now
        )
    return result


def pod_security(namespace: str, labels: Mapping[str, str] | None) -> Verdict:
    """PodSecurity from the namespace's labels (None: they could not be read)."""
    if labels is None:
        return (
            "Unknown",
            NAMESPACE_UNREADABLE,
            f"The operator cannot read namespace {namespace} (it needs get on namespaces), so it cannot tell "
            f"whether the namespace enforces a Pod Security Standard ({ENFORCE_LABEL})",
        )
    level = labels.get(ENFORCE_LABEL)
    if level in ENFORCING_LEVELS:
        return "True", POD_SECURITY_ENFORCED, f"Namespace {namespace} enforces the {level} Pod Security Standard"
    return (
        "False",
        POD_SECURITY_NOT_ENFORCED,
        f"Namespace {namespace} does not enforce the restricted Pod Security Standard ({ENFORCE_LABEL}="
        f"{level or '<unset>'}): Floe renders the app's pods within it, but pods that the drivers' ServiceAccount "
        f"(k8s:// master) or anyone else creates in the namespace are held to nothing; label it: kubectl label "
        f"namespace {namespace} {ENFORCE_LABEL}=restricted",
    )


def _state_provisioned(app: model.StreamingApp, observed: Observed, *, first: bool) -> Verdict | None:
    """StateProvisioned; None keeps what the status says (`first`: it says nothing yet)."""
    fault = observed.fault
    if observed.provisioned_keyspace is not None:
        stores = len(app.spec.state.stores)
        return (
            "True",
            PROVISIONED,
            f"Keyspace {observed.provisioned_keyspace} has the offsets table and {stores} store table(s)",
        )
    if fault is not None and fault.reason in PROVISIONING_FAULTS:
        return "False", fault.reason, fault.message
    if first:
        return "Unknown", PENDING, "Cassandra provisioning has not run yet"
    return None


def _degraded(app: model.StreamingApp, observed: Observed, rollout: Rollout | None) -> Verdict:
    fault, pods_fault = observed.fault, observed.pods_fault
    if fault is not None:
        return "True", fault.reason, fault.message
    if observed.rolled_back is not None:
        return "True", ROLLED_BACK, observed.rolled_back.message
    if pods_fault is not None:
        return "True", pods_fault.reason, pods_fault.message
    if rollout is not None and rollout.deadline_exceeded:
        return (
            "True",
            PROGRESS_DEADLINE_EXCEEDED,
            f"Deployment {render.deployment_name(app)} made no progress within its deadline; "
            "check the pods' events and logs",
        )
    if observed.executors_unschedulable is not None:
        return "True", EXECUTORS_UNSCHEDULABLE, observed.executors_unschedulable
    return "False", AS_EXPECTED, "No fault observed"


def _progressing(observed: Observed, rollout: Rollout | None, desired: int) -> Verdict:
    fault = observed.fault
    if rollout is None:
        if fault is not None:
            return "False", fault.reason, f"Rollout is blocked: {fault.message}"
        return "True", CREATING, "Creating the Deployment"
    if rollout.complete:
        return "False", ROLLOUT_COMPLETE, f"Deployment has {desired} updated and available replica(s)"
    if rollout.deadline_exceeded:
        return "False", PROGRESS_DEADLINE_EXCEEDED, "Rollout stopped at its progress deadline"
    return "True", ROLLING_OUT, f"{rollout.updated} of {desired} replica(s) updated, {rollout.available} available"


def _ready(app: model.StreamingApp, observed: Observed, rollout: Rollout | None, desired: int) -> Verdict:
    fault, pods_fault = observed.fault, observed.pods_fault
    if rollout is None:
        if fault is not None:
            return "False", fault.reason, fault.message
        return "False", CREATING, "The Deployment does not exist yet"
    if rollout.complete and app.spec.suspend:
        return "True", SUSPENDED, "Suspended by spec.suspend; no replica runs"
    if rollout.complete and desired == 0:
        return "True", SCALED_TO_ZERO, "Scaled to zero replicas"
    if rollout.complete:
        return "True", ALL_REPLICAS_READY, f"{rollout.available} of {desired} replica(s) available"
    if pods_fault is not None:
        available = f"{rollout.available} of {desired} replica(s) available"
        return "False", pods_fault.reason, f"{available}: {pods_fault.message}"
    if not rollout.observed or rollout.updated < desired:
        return "False", ROLLING_OUT, f"{rollout.updated} of {desired} replica(s) updated, {rollout.available} available"
    return "False", REPLICAS_NOT_READY, f"{rollout.available} of {desired} replica(s) available"


def _within_partitions(observed: Observed, desired: int, *, first: bool) -> Verdict | None:
    """ReplicasWithinPartitions; None keeps what the status says (`first`: it says nothing yet)."""
    partitions = observed.partitions
    if partitions is None:
        return ("Unknown", PARTITIONS_UNKNOWN, "Input partitions not counted yet") if first else None
    if desired > partitions:
        return (
            "False",
            REPLICAS_EXCEED_PARTITIONS,
            f"{desired} replicas but the input topics have {partitions} partition(s): "
            f"at least {desired - partitions} replica(s) own no input partition; lower spec.replicas or add partitions",
        )
    return "True", AS_EXPECTED, f"{desired} replica(s) for {partitions} input partition(s)"


def _kept_facts(app: model.StreamingApp, observed: Observed) -> dict[str, Any]:
    """Restarts, partitions, keyspace and provisioned hash: as observed now, else as the status said."""
    facts: dict[str, Any] = {}
    if observed.restarts is not None:
        facts["restarts"] = observed.restarts
    elif "restarts" in app.status:
        facts["restarts"] = app.status["restarts"]
    if observed.partitions is not None:
        facts["partitions"] = observed.partitions
    elif "partitions" in app.status:
        facts["partitions"] = app.status["partitions"]
    keyspace = observed.provisioned_keyspace or app.status.get("keyspace")
    if keyspace:
        facts["keyspace"] = keyspace
    provisioned = observed.provisioned_hash or app.status.get("provisionedHash")
    if provisioned:
        facts["provisionedHash"] = provisioned
    return facts


def _suspension(app: model.StreamingApp, *, was_suspended: bool, put: Callable[[str, str, str, str], None]) -> None:
    """The Suspended condition: True while spec.suspend, False (Resumed) once an app that was
    suspended runs again, absent for an app never suspended (so no existing status changes)."""
    spec = app.spec
    if spec.suspend:
        put(
            SUSPENDED,
            "True",
            SUSPENDED,
            f"Suspended by spec.suspend: the Deployment runs no replica and no autoscaler scales the app; "
            f"{spec.replicas} replica(s) run again on resume",
        )
    elif was_suspended:
        put(SUSPENDED, "False", RESUMED, f"Resumed with {spec.replicas} replica(s)")


def _reconcile_pause(
    app: model.StreamingApp, *, was_annotated: bool, put: Callable[[str, str, str, str], None]
) -> None:
    """The ReconcilePaused condition: True while the app carries `streaming.floe.dev/reconcile:
    paused`, False once it is removed (absent for an app never annotated), False naming the
    annotation while it holds another value."""
    value, key = app.reconcile_annotation, model.RECONCILE_ANNOTATION
    if app.reconcile_paused:
        put(
            RECONCILE_PAUSED,
            "True",
            RECONCILE_PAUSED,
            f"Reconciliation is paused by the annotation {key}: {model.RECONCILE_PAUSED}; the operator changes "
            f"none of the app's objects, its scale or its offsets (the pods keep running) until it is removed",
        )
    elif value is not None:
        put(
            RECONCILE_PAUSED,
            "False",
            INVALID_RECONCILE_ANNOTATION,
            f"The annotation {key} is {value!r}, which pauses nothing: set it to {model.RECONCILE_PAUSED!r} to "
            f"pause reconciliation, or remove it",
        )
    elif was_annotated:
        put(RECONCILE_PAUSED, "False", RECONCILE_RESUMED, f"Reconciliation resumed: {key} was removed")


def _held(observed: Observed, *, put: Callable[[str, str, str, str], None]) -> None:
    """Progressing, Ready and Degraded while the generation waits for something before it runs
    (`Observed.held`): it is not rolled out, whatever the Deployment (if any) says of its pods."""
    held = observed.held
    if held is None:
        return
    failed = held.reason in FAILED_HOLDS
    put(PROGRESSING, "False" if failed else "True", held.reason, held.message)
    put(READY, "False", held.reason, held.message)
    if failed and observed.fault is None:
        put(DEGRADED, "True", held.reason, held.message)


def _rollback(
    app: model.StreamingApp,
    rolled_back: Fault | None,
    *,
    was_rolled_back: bool,
    put: Callable[[str, str, str, str], None],
) -> None:
    """The RolledBack condition: True while the current generation is rolled back, False once a
    later generation is tried (absent for an app never rolled back)."""
    if rolled_back is not None:
        put(ROLLED_BACK, "True", rolled_back.reason, rolled_back.message)
    elif was_rolled_back:
        put(
            ROLLED_BACK,
            "False",
            NEW_GENERATION,
            f"Generation {app.generation} runs as declared; an earlier generation was rolled back",
        )


def suspension_status(app: model.StreamingApp, *, now: str) -> dict[str, Any] | None:
    """status.suspension while suspended: since when, and the replicas a resume brings back
    (spec.replicas, which no autoscaler moves while the app is suspended); None otherwise."""
    if not app.spec.suspend:
        return None
    previous = app.status.get("suspension") or {}
    return {"since": previous.get("since") or now, "replicas": app.spec.replicas}


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """Only the top-level status fields that differ; empty when nothing changed."""
    return {k: v for k, v in desired.items() if current.get(k) != v}


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the app: type Normal or Warning."""

    type: str
    reason: str
    message: str


def transitions(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[Event]:
    """Events for notable condition changes (none when nothing changed)."""
    events: list[Event] = []

    def changed(type_: str) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        old, new = find(before, type_), find(after, type_)
        if new is None:
            return old, None
        if old is not None and (old.get("status"), old.get("reason")) == (new.get("status"), new.get("reason")):
            return old, None
        return old, new

    _, degraded = changed(DEGRADED)
    if degraded is not None and degraded.get("status") == "True":
        events.append(Event("Warning", str(degraded["reason"]), str(degraded.get("message", ""))))
    old_ready, ready = changed(READY)
    if ready is not None and ready.get("status") == "True":
        events.append(Event("Normal", "Ready", str(ready.get("message", ""))))
    elif ready is not None and old_ready is not None and old_ready.get("status") == "True":
        events.append(Event("Warning", "NotReady", str(ready.get("message", ""))))
    _, provisioned = changed(STATE_PROVISIONED)
    if provisioned is not None and provisioned.get("status") == "True":
        events.append(Event("Normal", PROVISIONED, str(provisioned.get("message", ""))))
    _, partitions = changed(REPLICAS_WITHIN_PARTITIONS)
    if partitions is not None and partitions.get("status") == "False":
        events.append(Event("Warning", REPLICAS_EXCEED_PARTITIONS, str(partitions.get("message", ""))))
    _, paused = changed(RECONCILE_PAUSED)
    if paused is not None and paused.get("reason") in (RECONCILE_PAUSED, RECONCILE_RESUMED):
        events.append(Event("Normal", str(paused["reason"]), str(paused.get("message", ""))))
    elif paused is not None:
        events.append(Event("Warning", str(paused["reason"]), str(paused.get("message", ""))))
    _, progressing = changed(PROGRESSING)
    if progressing is not None and progressing.get("reason") == ROLLING_OUT:
        events.append(Event("Normal", "RolloutStarted", str(progressing.get("message", ""))))
    return events


def partitions_stopped(
    conditions: Sequence[Condition],
    stopped: Sequence[tuple[str, int, int, str]],
    *,
    generation: int,
    now: str,
) -> list[Condition] | None:
    """The conditions with PartitionsStopped set from the (topic, partition, offset, error) of
    the partitions a poison record stopped; None when nothing changes (no write). An app that
    never had a stopped partition gets no such condition; once it had one, the condition stays,
    False, after the partitions moved on (a fixed image, an offset reset)."""
    current = find(conditions, PARTITIONS_STOPPED)
    if stopped:
        listed = "; ".join(
            f"topic {topic} partition {partition} stopped at offset {offset}: {error}"
            for topic, partition, offset, error in sorted(stopped)
        )
        message = (
            f"{len(stopped)} partition(s) stopped by a record the job fails on (spec.errors: stop); the other "
            f"partitions go on. Fix the job and roll it out, or move past the record with spec.offsetReset: {listed}"
        )
        if len(message) > STOPPED_MESSAGE_CHARS:
            message = message[: STOPPED_MESSAGE_CHARS - 1] + "…"
        verdict: Verdict = ("True", POISON_RECORD, message)
    elif current is None:
        return None
    else:
        verdict = ("False", NONE_STOPPED, "No partition is stopped by a poison record")
    if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == verdict:
        return None
    status, reason, message = verdict
    return set_condition(
        conditions,
        type_=PARTITIONS_STOPPED,
        status=status,
        reason=reason,
        message=message,
        generation=generation,
        now=now,
    )
