"""A StreamingAppSnapshot's Job, and its status read back from that Job: pure, like `render`.

The Job runs `floe-job snapshot` once, as the app's replicas would run it: the app's image, its
pod's security settings, ServiceAccount and scheduling, its container's environment (the
ConfigMap and every Secret reference, exactly as `render.deployment` renders them), mounts and
init containers, plus the snapshot's volume for a file:// location; not the replicas' sidecars,
probes or ports. Its pods never carry the app's selector
label, so the app's Deployment, Services, PodDisruptionBudget and the operator's view of the
app's pods never count them.

The container writes a short JSON summary to its termination log (`floe-job snapshot
--summary-file`), which the kubelet keeps in the pod's status; on a failure the kubelet keeps
the tail of its log there instead (FallbackToLogsOnError). So the status below is filled from
the Job and its pod alone, without reading the data.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from floe_operator import conditions, model, podfaults, render

SNAPSHOT_LABEL = f"{model.GROUP}/snapshot"
COMPONENT = "snapshot"
CONTAINER = "snapshot"
VOLUME = "floe-snapshot"
TERMINATION_LOG = "/dev/termination-log"
# A failed Job's pod (and its log) stays a day for `kubectl logs job/<name>`; the status already
# holds what the operator read of it, so nothing depends on the Job after that.
TTL_SECONDS_AFTER_FINISHED = 86400
# Exit codes of `floe-job snapshot` (floe_jobs.exitcodes), named here since the operator does not
# import the runtime's CLI.
EXIT_REFUSED = 2
EXIT_UNREACHABLE = 3

# Phases.
PENDING = "Pending"
RUNNING = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
TERMINAL = (SUCCEEDED, FAILED)
# Condition types (Ready as Argo CD and kstatus read it; Failed as a Job says it) and reasons.
READY = conditions.READY
FAILED_CONDITION = "Failed"
JOB_PENDING = "JobPending"
JOB_RUNNING = "JobRunning"
SNAPSHOT_TAKEN = "SnapshotTaken"
APP_NOT_FOUND = "AppNotFound"
APP_INVALID = "AppInvalid"
APP_NEVER_RAN = "AppNeverRan"
JOB_FAILED = "JobFailed"
SNAPSHOT_REFUSED = "SnapshotRefused"
CASSANDRA_UNAVAILABLE = conditions.CASSANDRA_UNAVAILABLE
DEADLINE_EXCEEDED = "DeadlineExceeded"
JOB_DELETED = "JobDeleted"
JOB_REFUSED = "JobRefused"
NOT_FAILED = "NotFailed"
# A line `floe-job <command>` prints when it refuses (`last_words`).
OWN_LINE = re.compile(r"^floe-job (snapshot|restore|delete-snapshot):")
# The longest failure message kept in a condition.
MESSAGE_CHARS = 1500
# A Job's name is a label value of its pods (63 characters at most).
JOB_NAME_CHARS = 63
# The data-deleting Job retries once: a file system that refused a delete may not refuse twice.
DELETE_BACKOFF_LIMIT = 1
DELETE_DEADLINE_SECONDS = 3600

Manifest = dict[str, Any]


def job_name(snap: model.StreamingAppSnapshot) -> str:
    """The snapshot's own name (the CRD keeps it at 63 characters, a Job's limit)."""
    return snap.name


def delete_job_name(snap: model.StreamingAppSnapshot) -> str:
    """The Job that deletes the snapshot's data: `<name>-delete`, or, for a name too long for
    that, a cut of it made unique by a digest of the whole."""
    name = f"{snap.name}-delete"
    if len(name) <= JOB_NAME_CHARS:
        return name
    digest = hashlib.sha256(snap.name.encode()).hexdigest()[:6]
    return f"{snap.name[: JOB_NAME_CHARS - 14].rstrip('-')}-{digest}-delete"


def owner_reference(snap: model.StreamingAppSnapshot) -> dict[str, Any]:
    return render.controller_reference(model.SNAPSHOT_KIND, snap.name, snap.uid)


def pod_labels(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> dict[str, str]:
    """spec.pod.labels (a workload identity, say), then the labels the app's NetworkPolicy admits
    its own pods by (under a k8s:// master the snapshot's executors talk to its driver), then the
    snapshot's own; never the app's selector label."""
    own = {k: v for k, v in app.spec.pod.labels.items() if k != render.APP_LABEL}
    return {
        **own,
        **render.network_peer_labels(app),
        "app.kubernetes.io/component": COMPONENT,
        SNAPSHOT_LABEL: snap.name,
    }


def labels(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> dict[str, str]:
    """The Job's labels: a Floe child (what the admission policy lets the operator write, and what
    the operator's watch of Jobs selects), named for its snapshot."""
    return {
        "app.kubernetes.io/name": app.name,
        "app.kubernetes.io/instance": snap.name,
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": "floe",
        render.MANAGED_BY: render.FIELD_MANAGER,
        SNAPSHOT_LABEL: snap.name,
    }


def args(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> list[str]:
    """`floe-job snapshot` with the app's generation and image for the manifest."""
    spec = snap.spec
    out = [
        "snapshot",
        "--to", spec.location,
        "--settle-timeout", str(spec.settle_timeout_seconds),
        "--generation", str(app.generation),
        "--image", app.spec.image,
        "--summary-file", TERMINATION_LOG,
    ]
    for store, stage in sorted(spec.writers.items()):
        out += ["--writer", f"{store}={stage}"]
    return out


def job(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> Manifest:
    """The batch/v1 Job that takes the snapshot, owned by the snapshot resource, carrying what
    the snapshot's status records of its start (`started_of`).

    backoffLimit 0: a snapshot that failed halfway left files at its location, which a second
    attempt would refuse to write over (Spark's errorifexists); a new snapshot resource, at a new
    location, is the retry."""
    out = pod_job(app, name=job_name(snap), labels=labels(snap, app), owner=owner_reference(snap),
                  pod_labels=pod_labels(snap, app), arguments=args(snap, app), volume=snap.spec.volume,
                  backoff_limit=0, deadline=snap.spec.active_deadline_seconds)
    out["metadata"]["annotations"] = {STARTED_ANNOTATION: json.dumps(started_fields(snap, app), sort_keys=True)}
    return out


# On the snapshot's Job: the status fields of its start, as JSON. The operator writes them into the
# snapshot's status right after creating the Job; one stopped in between reads them from here.
STARTED_ANNOTATION = "streaming.floe.dev/started"


def started_fields(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> dict[str, Any]:
    """What a snapshot's status says of the app it cuts, from the moment its Job exists."""
    return {"appId": app.app_id, "image": app.spec.image, "appGeneration": app.generation,
            "location": snap.spec.location}


def started_of(job_body: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields of a snapshot's start, read back from its Job: its name, what the
    operator put on it (`STARTED_ANNOTATION`; none on a Job of an operator before it) and its
    creation as the start time."""
    meta = job_body.get("metadata") or {}
    try:
        fields = json.loads((meta.get("annotations") or {}).get(STARTED_ANNOTATION) or "{}")
    except ValueError:
        fields = {}
    out = {"job": meta.get("name"), **(fields if isinstance(fields, dict) else {})}
    if meta.get("creationTimestamp"):
        out["startTime"] = meta["creationTimestamp"]
    return out


def delete_job(snap: model.StreamingAppSnapshot, app: model.StreamingApp) -> Manifest:
    """The Job that deletes the data at the snapshot's location (deletionPolicy Delete): the
    same pod as the snapshot's, running `floe-job delete-snapshot`, which refuses a location
    that is not a snapshot of this app (`floe_jobs.snapshots.delete`)."""
    return pod_job(app, name=delete_job_name(snap), labels=labels(snap, app), owner=owner_reference(snap),
                   pod_labels=pod_labels(snap, app), arguments=["delete-snapshot", "--at", snap.spec.location],
                   volume=snap.spec.volume, backoff_limit=DELETE_BACKOFF_LIMIT, deadline=DELETE_DEADLINE_SECONDS)


def pod_job(
    app: model.StreamingApp,
    *,
    name: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
    pod_labels: Mapping[str, str],
    arguments: list[str],
    volume: model.SnapshotVolume | None,
    backoff_limit: int,
    deadline: int,
) -> Manifest:
    """A Job of `app`'s pod running `floe-job <arguments>` once, with the claim `volume` mounted
    (a file:// location): a snapshot's, the one deleting its data, or a restore's (`restorejob`)."""
    pod_spec = _pod_spec(app, arguments, volume)
    template_meta: dict[str, Any] = {"labels": dict(pod_labels)}
    if app.spec.pod.annotations:
        template_meta["annotations"] = dict(app.spec.pod.annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": app.namespace,
            "labels": dict(labels),
            "ownerReferences": [dict(owner)],
        },
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "template": {"metadata": template_meta, "spec": pod_spec},
        },
    }


def _pod_spec(app: model.StreamingApp, arguments: list[str], volume: model.SnapshotVolume | None) -> dict[str, Any]:
    """The Job's pod: the app's rendered pod with its one container running the snapshot, its
    init containers, the volumes they mount and the snapshot's claim; the pod never restarts."""
    rendered = render.deployment(app, config_digest="")["spec"]["template"]["spec"]
    (main,) = (c for c in rendered["containers"] if c["name"] == render.CONTAINER)
    # The init containers prepare what the app's container reads (spec.podTemplate); the other
    # containers are sidecars of a replica, which would keep a Job's pod from ever finishing.
    init = [dict(c) for c in rendered.get("initContainers") or []]
    mounts = [dict(m) for m in main.get("volumeMounts") or []]
    mounted = {m["name"] for c in (main, *init) for m in c.get("volumeMounts") or []}
    volumes = [dict(v) for v in rendered.get("volumes") or [] if v["name"] in mounted]
    if volume is not None:
        mounts.append({"name": VOLUME, "mountPath": volume.mount_path})
        volumes.append({"name": VOLUME, "persistentVolumeClaim": {"claimName": volume.claim_name}})
    container: dict[str, Any] = {
        "name": CONTAINER,
        **{k: main[k] for k in ("image", "imagePullPolicy", "command", "env", "resources", "securityContext")},
        "args": arguments,
        "volumeMounts": mounts,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if main.get("envFrom"):
        container["envFrom"] = main["envFrom"]
    security = dict(rendered["securityContext"])
    # A claim of a block device is writable by the pod's group only once the kubelet sets its
    # group; checked at the volume's root only, so a large snapshot volume is not walked at mount.
    security.setdefault("fsGroup", security.get("runAsGroup", app.spec.pod.run_as_user))
    security.setdefault("fsGroupChangePolicy", "OnRootMismatch")
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "serviceAccountName": rendered["serviceAccountName"],
        "securityContext": security,
        "containers": [container],
        "volumes": volumes,
        **render.placement(rendered),
    }
    if init:
        pod_spec["initContainers"] = init
    if "automountServiceAccountToken" in rendered:
        pod_spec["automountServiceAccountToken"] = rendered["automountServiceAccountToken"]
    return pod_spec


def owned_by(obj: Mapping[str, Any], snap: model.StreamingAppSnapshot) -> bool:
    """Whether `obj` is this snapshot's (not the Job of a deleted snapshot of the same name)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == snap.uid for ref in refs)


# --- status ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """The phase, the reason and message of the Ready (or Failed) condition, and the fields read
    from the Job and its pod."""

    phase: str
    reason: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


def failed(reason: str, message: str) -> Verdict:
    return Verdict(FAILED, reason, message[:MESSAGE_CHARS])


def _job_condition(job_body: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (job_body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def _started(pod: Mapping[str, Any] | None) -> bool:
    """Whether the Job's container has started: it runs, or it has ended and the Job has not said
    so yet (a pod is no longer Ready then, and the snapshot must not look Pending again)."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            state = cs.get("state") or {}
            return "running" in state or "terminated" in state
    return False


def _terminated(pod: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The snapshot container's terminated state ({} while it runs or when there is no pod)."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            return dict((cs.get("state") or {}).get("terminated") or {})
    return {}


def reported(message: str, *, key: str = "bytes") -> dict[str, Any] | None:
    """The summary `floe-job snapshot --summary-file` wrote (a restore's: with `key` from_app), or
    None when the text is not one."""
    try:
        found = json.loads(message)
    except (TypeError, ValueError):
        return None
    return found if isinstance(found, dict) and key in found else None


def summary_fields(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The status fields of a snapshot's summary (what `floe-job snapshot` reported)."""
    out: dict[str, Any] = {
        "sizeBytes": int(summary.get("bytes", 0)),
        "rows": int(summary.get("rows", 0)),
        "durationSeconds": float(summary.get("seconds", 0.0)),
    }
    if "attempts" in summary:
        out["attempts"] = int(summary["attempts"])
    stages = summary.get("stages")
    if isinstance(stages, Mapping):
        out["stages"] = [
            {
                "name": name,
                "topic": str(s.get("topic", "")),
                "partitions": int(s.get("partitions", 0)),
                "nextOffsets": int(s.get("next_offsets", 0)),
                "inFlight": int(s.get("in_flight", 0)),
            }
            for name, s in sorted(stages.items())
            if isinstance(s, Mapping)
        ]
    stores = summary.get("stores")
    if isinstance(stores, Mapping):
        out["stores"] = [
            {"name": name, "rows": int(s.get("rows", 0)), "bytes": int(s.get("bytes", 0))}
            for name, s in sorted(stores.items())
            if isinstance(s, Mapping)
        ]
    return out


def last_words(log_tail: str) -> str:
    """What a failed `floe-job` command said last: its own refusal line when it printed one
    (`floe-job snapshot: ...`, `floe-job restore: ...`), else the last line of its log."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    own = [line for line in lines if OWN_LINE.match(line)]
    if own:
        return own[-1]
    return lines[-1] if lines else ""


def _failure(job_body: Mapping[str, Any], pod: Mapping[str, Any] | None, cond: Mapping[str, Any]) -> Verdict:
    name = (job_body.get("metadata") or {}).get("name", "")
    done = _terminated(pod)
    said = last_words(str(done.get("message") or ""))
    code = done.get("exitCode")
    if cond.get("reason") == DEADLINE_EXCEEDED:
        limit = (job_body.get("spec") or {}).get("activeDeadlineSeconds")
        return failed(
            DEADLINE_EXCEEDED,
            f"Job {name} ran past spec.activeDeadlineSeconds ({limit} s) and was stopped"
            + (f"; it last said: {said}" if said else "")
            + "; raise spec.activeDeadlineSeconds in a new snapshot, or suspend the app while it is taken",
        )
    if code == EXIT_REFUSED:
        return failed(SNAPSHOT_REFUSED, f"floe-job snapshot refused (exit code 2): {said}")
    if code == EXIT_UNREACHABLE:
        return failed(CASSANDRA_UNAVAILABLE, f"floe-job snapshot could not reach Cassandra (exit code 3): {said}")
    if pod is None or not done:
        return failed(
            JOB_FAILED, f"Job {name} failed ({cond.get('reason', '')}: {cond.get('message', '')}); no pod left to read"
        )
    exit_ = f"exit code {code}" + (f" ({done['reason']})" if done.get("reason") else "")
    return failed(JOB_FAILED, f"Job {name}'s pod failed, {exit_}: {said}; see kubectl logs job/{name}")


def from_job(job_body: Mapping[str, Any], pod: Mapping[str, Any] | None) -> Verdict:
    """The snapshot's phase from its Job and the Job's pod (None: no pod, or not read)."""
    status = job_body.get("status") or {}
    name = (job_body.get("metadata") or {}).get("name", "")
    complete = _job_condition(job_body, "Complete")
    if complete is not None:
        finished = {"completionTime": status.get("completionTime") or complete.get("lastTransitionTime")}
        summary = reported(str(_terminated(pod).get("message") or ""))
        if summary is None:
            return Verdict(
                SUCCEEDED,
                SNAPSHOT_TAKEN,
                f"Job {name} completed but reported no summary (an app image whose floe-job has no "
                "--summary-file?): size and rows are unknown",
                finished,
            )
        fields = {**finished, **summary_fields(summary)}
        return Verdict(
            SUCCEEDED,
            SNAPSHOT_TAKEN,
            f"Snapshot written: {fields['rows']} rows, {fields['sizeBytes']} bytes in {fields['durationSeconds']} s",
            fields,
        )
    failure = _job_condition(job_body, "Failed")
    if failure is not None:
        verdict = _failure(job_body, pod, failure)
        when = failure.get("lastTransitionTime")
        return Verdict(verdict.phase, verdict.reason, verdict.message, {"completionTime": when} if when else {})
    if int(status.get("ready") or 0) > 0 or _started(pod):
        return Verdict(RUNNING, JOB_RUNNING, f"Job {name} is taking the snapshot")
    if pod is not None:
        blocked = podfaults.fault([podfaults.summary(pod)], image="")
        if blocked is not None:
            return Verdict(PENDING, blocked.reason, blocked.message)
    return Verdict(PENDING, JOB_PENDING, f"Job {name} is created; its pod has not started yet")


def status(
    snap: model.StreamingAppSnapshot, verdict: Verdict, *, now: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The whole status for `verdict`: the fields kept from before, `extra` (what the operator set
    when it created the Job), the verdict's fields, and the Ready and Failed conditions."""
    conds = list(snap.status.get("conditions") or [])
    if verdict.phase == PENDING and snap.status.get("phase") == RUNNING:
        # never back: a Job read before its status moved on, or a pod before the kubelet's update
        said = conditions.find(conds, READY) or {}
        verdict = Verdict(RUNNING, JOB_RUNNING, str(said.get("message") or "The Job is taking the snapshot"))
    gen = snap.generation
    ready = ("True", verdict.reason, verdict.message) if verdict.phase == SUCCEEDED else (
        "False", verdict.reason, verdict.message)
    failure = ("True", verdict.reason, verdict.message) if verdict.phase == FAILED else (
        "False", NOT_FAILED, "The snapshot has not failed")
    for type_, (state, reason, message) in ((READY, ready), (FAILED_CONDITION, failure)):
        conds = conditions.set_condition(
            conds, type_=type_, status=state, reason=reason, message=message, generation=gen, now=now
        )
    kept = {k: v for k, v in snap.status.items() if k not in ("conditions", "phase", "observedGeneration")}
    return {
        **kept,
        **(extra or {}),
        **verdict.fields,
        "phase": verdict.phase,
        "observedGeneration": gen,
        "conditions": conds,
    }


def terminal(snap: model.StreamingAppSnapshot) -> bool:
    """Whether the snapshot is done, either way: nothing runs or changes for it any more."""
    return snap.status.get("phase") in TERMINAL


def job_ended(job_body: Mapping[str, Any]) -> bool:
    """Whether a Job has completed or failed (its pod runs no more)."""
    return _job_condition(job_body, "Complete") is not None or _job_condition(job_body, "Failed") is not None


def terminated_message(pod: Mapping[str, Any] | None) -> str:
    """What the Job's container left in its termination log (its summary, or its log's tail)."""
    return str(_terminated(pod).get("message") or "")
