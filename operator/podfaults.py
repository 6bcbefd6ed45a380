"""Why an app's pods do not run, read from the pods themselves.

A Deployment's status says only that replicas are unavailable; the reason a user must act on
is on its pods: an image that cannot be pulled (or, with `imagePullPolicy: Never`, is not on
the node), a pod the scheduler cannot place, a container that keeps exiting (an OOM kill
among them). The operator watches the app's pods through a label-filtered index of slim
summaries, and `fault` turns them into one condition reason and a message that names what to
change. Pods that admission refuses (a Pod Security level, a quota, a policy) never exist:
`rejected` reads that from the Deployment's ReplicaFailure condition instead.

None of these stops the operator from applying the app's children: the fix is a change of the
spec (or of the cluster), which a reconcile then applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from floe_operator import model
from floe_operator.conditions import Fault

IMAGE_UNAVAILABLE = "ImageUnavailable"
UNSCHEDULABLE = "Unschedulable"
CRASH_LOOPING = "CrashLooping"
PODS_REJECTED = "PodsRejected"

# What a condition quotes of a container's termination message: the runtime writes at most a
# few lines there (a configuration it refuses, a dependency it cannot reach at start).
LAST_MESSAGE_LIMIT = 600

# Container waiting reasons of the kubelet's image manager.
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})


def summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What `fault` reads of a pod, small enough to keep in an index for every pod of every app."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers = []
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        waiting = state.get("waiting") or {}
        containers.append({
            "name": cs.get("name"),
            "image": cs.get("image"),
            "waiting": waiting.get("reason"),
            "waitingMessage": waiting.get("message", ""),
            "restarts": int(cs.get("restartCount", 0)),
            "lastExit": last.get("exitCode"),
            "lastReason": last.get("reason"),
            # the runtime's own words on why it stopped at start (its termination log), bounded
            "lastMessage": str(last.get("message") or "").strip()[:LAST_MESSAGE_LIMIT],
        })
    scheduled: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    containers_spec = (pod.get("spec") or {}).get("containers") or [{}]
    return {
        "name": meta.get("name"),
        "requests": dict((containers_spec[0].get("resources") or {}).get("requests") or {}),
        "created": meta.get("creationTimestamp", ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        "unschedulable": scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable",
        "schedulingMessage": scheduled.get("message", ""),
        "containers": containers,
    }


def fault(pods: Iterable[Mapping[str, Any]], *, image: str) -> Fault | None:
    """The reason the newest pod that has one gives for not running (the newest: during a rollout
    that fixes one problem, the old pods still show it while the new ones meet the next)."""
    live = [p for p in pods if not p.get("deleting")]
    for pod in sorted(live, key=lambda p: (str(p.get("created")), str(p.get("name"))), reverse=True):
        found = _fault_of(pod, image=image)
        if found is not None:
            return found
    return None


def _fault_of(pod: Mapping[str, Any], *, image: str) -> Fault | None:
    """One pod's reason, in the order a user fixes them: image, scheduling, crashes."""
    for c in pod["containers"]:
        if c["waiting"] in IMAGE_REASONS:
            return Fault(
                IMAGE_UNAVAILABLE,
                f"Pod {pod['name']} cannot start image {c['image'] or image}: {c['waiting']}"
                f"{_detail(c['waitingMessage'])}; fix spec.image, spec.imagePullPolicy or spec.imagePullSecrets",
            )
    if pod["unschedulable"]:
        return Fault(
            UNSCHEDULABLE,
            f"Pod {pod['name']} cannot be scheduled{_detail(pod['schedulingMessage'])}; lower "
            "spec.resources.requests or spec.replicas, or add capacity",
        )
    for c in pod["containers"]:
        if c["waiting"] == "CrashLoopBackOff":
            last = f"exit code {c['lastExit']}" + (f" ({c['lastReason']})" if c["lastReason"] else "")
            hint = ("raise spec.resources.limits.memory (or lower spec.spark.driver.memory)"
                    if c["lastReason"] == "OOMKilled" else f"see kubectl logs --previous {pod['name']}")
            said = f": {c['lastMessage']}" if c.get("lastMessage") else ""
            message = f"Pod {pod['name']} keeps exiting: {c['restarts']} restarts, last {last}{said}; {hint}"
            return Fault(CRASH_LOOPING, message)
    return None


def unschedulable_executors(app: model.StreamingApp, executors: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the app's executor pods wait for a node, naming what each requests and where that
    comes from; None when none waits. `executors` are the pods' summaries (`summary`), from the
    operator's index of executor pods. The drivers keep running: batches they group themselves
    (`spec.spark.driverBatchMaxRecords`) go on, larger ones wait for executors."""
    waiting = [p for p in executors if p["unschedulable"] and not p["deleting"]]
    if not waiting:
        return None
    pod = waiting[0]
    asked = ", ".join(f"{k} {v}" for k, v in sorted(pod["requests"].items())) or "nothing"
    executor = app.spec.spark.executor or model.SparkExecutor()
    return (
        f"{len(waiting)} of {len(executors)} executor pod(s) cannot be scheduled; each requests {asked} "
        f"(spec.spark.executor: {executor.cores} core(s), memory {executor.memory} plus Spark's memory overhead). "
        f"The scheduler says of {pod['name'] or 'one'}: {pod['schedulingMessage'] or 'no node fits'}. Lower "
        "spec.spark.executor (or spark.kubernetes.executor.request.cores in spec.spark.conf) or make room on the "
        "nodes; until then batches larger than the drivers group themselves wait for executors"
    )


def rejected(deployment: Mapping[str, Any] | None) -> Fault | None:
    """The Deployment's controller cannot create pods: admission refused them."""
    conds = ((deployment or {}).get("status") or {}).get("conditions") or []
    failure = next((c for c in conds if c.get("type") == "ReplicaFailure" and c.get("status") == "True"), None)
    if failure is None:
        return None
    name = ((deployment or {}).get("metadata") or {}).get("name")
    return Fault(
        PODS_REJECTED,
        f"Deployment {name} cannot create pods{_detail(str(failure.get('message', '')))}; change what the "
        "message names (spec.pod, spec.resources, spec.image) or the namespace's policy",
    )


Mark = tuple[bool, bool, bool, bool, int]


def mark(pod: Mapping[str, Any]) -> Mark:
    """(deleting, unschedulable, an image failure, a crash loop, restarts): the parts of a pod
    that the app's status reads."""
    s = summary(pod)
    waiting = {c["waiting"] for c in s["containers"]}
    return (s["deleting"], s["unschedulable"], bool(waiting & IMAGE_REASONS), "CrashLoopBackOff" in waiting,
            sum(c["restarts"] for c in s["containers"]))


def troubled(mark: Mark | None) -> bool:
    """Whether a pod with this mark gives its app a reason not to run."""
    return mark is not None and not mark[0] and any(mark[1:4])


def changes_status(before: Mark | None, after: Mark | None) -> bool:
    """Whether a pod going from `before` to `after` (None: not there) changes its app's status:
    a fault starts or ends, or its restarts count changes. A new healthy pod does not."""
    if before == after:
        return False
    if troubled(before) or troubled(after):
        return True
    return (before[4] if before else 0) != (after[4] if after else 0)


def restarts(pods: Iterable[Mapping[str, Any]]) -> int:
    """Container restarts of the app's pods together (pods being deleted left out)."""
    return sum(c["restarts"] for p in pods if not p.get("deleting") for c in p["containers"])


def _detail(message: str) -> str:
    return f" ({message.strip()})" if message.strip() else ""
