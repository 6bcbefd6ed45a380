"""Whether the cluster says a pod cannot run, and for how long it has said so.

A wait on pods (a test's, or the demo's) polls for a state that only running pods make. When
the scheduler finds no node for a pod, its image cannot be pulled, or its container keeps
exiting or cannot be created, and the cluster keeps saying so for `BLOCKED_SECONDS`, waiting
longer only repeats the reason: the wait ends with the cluster's reason and message. A pod left
Pending with `Insufficient cpu` says at once what ten more minutes of waiting would; the grace
only lets a passing state pass (a pod scheduled once a terminating one frees its CPU, a crashed
container's first back-off).

`why_blocked` reads the reason out of one pod object; it is pure, and deliberately not the
operator's own reading of pod faults (`floe_operator.podfaults`): the tests check that code,
so their waits do not lean on it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

# How long a pod may stay blocked before a wait on it fails: under the minute a test gets to say
# why, above a crashed container's second back-off (10 s, then 20 s) and a scheduling retry.
BLOCKED_SECONDS = 30.0

UNSCHEDULABLE = "Unschedulable"
# Container waiting reasons that waiting does not clear: the image (pulled, or with
# imagePullPolicy Never, missing from the node), a container that keeps exiting, one whose
# ConfigMap, Secret or settings the kubelet cannot turn into a container.
BLOCKING_WAITS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
    "CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
})


def why_blocked(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, the cluster's message) for a pod the cluster says cannot run; None while nothing
    stops it (also for a pod being deleted or finished: a wait on it has other reasons to end)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    for cond in status.get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == ("PodScheduled", "False", UNSCHEDULABLE):
            return UNSCHEDULABLE, str(cond.get("message") or "no node fits")
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in BLOCKING_WAITS:
            message = f"container {cs.get('name')}: {waiting.get('message') or 'no message'}"
            last = (cs.get("lastState") or {}).get("terminated")
            if last:
                why = f", {last['reason']}" if last.get("reason") else ""
                message += f" (last exit code {last.get('exitCode')}{why})"
            return str(reason), message
    return None


class PodWatch:
    """Which watched pods have been blocked, for the same reason, since when (monotonic seconds)."""

    def __init__(self, *, blocked_seconds: float, tolerate: Collection[str]) -> None:
        self.blocked_seconds = blocked_seconds
        self.tolerate = frozenset(tolerate)
        self.since: dict[str, tuple[str, float]] = {}

    def check(self, pods: Iterable[Mapping[str, Any]], now: float) -> str | None:
        """What stops a pod that has been blocked for `blocked_seconds` by `now`; None otherwise."""
        seen: dict[str, tuple[str, float]] = {}
        worst: str | None = None
        for pod in pods:
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            found = why_blocked(pod)
            if found is None or found[0] in self.tolerate:
                continue
            reason, message = found
            before = self.since.get(key)
            first = before[1] if before is not None and before[0] == reason else now
            seen[key] = (reason, first)
            if worst is None and now - first >= self.blocked_seconds:
                worst = f"pod {key} is {reason} for {now - first:.0f} s; the cluster says: {message}"
        self.since = seen
        return worst
