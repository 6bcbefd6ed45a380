"""Where a pod handover's or a scale-up's time goes: the phases from `kubectl delete pod` to the
replacement's first commit (`handover`), or from a surge of input to the first commit of the pod
the autoscaler added (`scale_up`), read from the pods' own logs, their status, watches of the
objects' spec.replicas and the offsets table.

Every figure is seconds after the delete or the surge's start, on the node's wall clock (the
bench, the kubelet and the pods share one machine). Log times are the container runtime's own (`kubectl logs
--timestamps`, nanoseconds); the pod's status times are the API's (whole seconds), so the
phases taken from them (`new_pod_*`) are within a second. A phase that did not happen in the
window is None.

The deleted pod's logs are gone once it is, so they are followed from before the delete
(`LogFollower`); a change of spec.replicas is seen by a watch (`Follower` of `kubectl get -w`),
each line stamped with the time it arrived (the watch's delay, tens of milliseconds, included).
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

# what the runtime logs at each step (floe_jobs.stopping, .membership, .warmup)
SIGTERM = "Received signal=15"
STOPPED = "Stopped app="
ASSIGNED = "Assigned partitions=["
WARMED = "Warmed up stage="


def wall(stamp: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (`2026-11-27T21:45:01.123456789Z`, or whole
    seconds as the API writes them); digits past microseconds are dropped."""
    text = stamp.strip().replace("Z", "+00:00")
    if "." in text:
        head, rest = text.split(".", 1)
        digits = rest[: next((i for i, c in enumerate(rest) if not c.isdigit()), len(rest))]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    return datetime.fromisoformat(text).timestamp()


def stamped(lines: Iterable[str]) -> list[tuple[float, str]]:
    """(time, text) of each `kubectl logs --timestamps` line; lines without a time are skipped."""
    out = []
    for line in lines:
        stamp, _, text = line.partition(" ")
        try:
            out.append((wall(stamp), text))
        except ValueError:
            continue
    return out


def first(lines: Sequence[tuple[float, str]], marker: str, *, since: float) -> float | None:
    return next((t for t, text in lines if t >= since and marker in text), None)


def last(lines: Sequence[tuple[float, str]], marker: str, *, since: float) -> float | None:
    return max((t for t, text in lines if t >= since and marker in text), default=None)


def _condition(pod: Mapping[str, Any], kind: str) -> float | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True" and c.get("lastTransitionTime"):
            return wall(c["lastTransitionTime"])
    return None


def _started(pod: Mapping[str, Any]) -> float | None:
    for s in pod.get("status", {}).get("containerStatuses") or []:
        at = s.get("state", {}).get("running", {}).get("startedAt")
        if at:
            return wall(at)
    return None


def new_pod_phases(
    pod: Mapping[str, Any] | None,
    log: Sequence[str],
    moves: Sequence[tuple[float, tuple[str, int], str]],
    *,
    since: float,
) -> dict[str, float | None]:
    """The phases of a pod started at or after `since` (wall times, not yet relative): created,
    scheduled, container started, first log line, warmed up, assigned partitions, its first
    committed batch (its first ownership change in `moves`) and Ready."""
    lines = stamped(log)
    name = (pod or {}).get("metadata", {}).get("name")
    created = (pod or {}).get("metadata", {}).get("creationTimestamp")
    return {
        "new_pod_created_s": wall(created) if created else None,
        "new_pod_scheduled_s": _condition(pod or {}, "PodScheduled"),
        "new_container_started_s": _started(pod or {}),
        "new_first_log_s": lines[0][0] if lines else None,
        "new_warmed_up_s": last(lines, WARMED, since=since),
        "new_assigned_s": first(lines, ASSIGNED, since=since),
        "new_first_commit_s": min((t for t, _tp, owner in moves if t >= since and owner == name), default=None),
        "new_ready_s": _condition(pod or {}, "Ready"),
    }


def _relative(phases: Mapping[str, float | None], t0: float) -> dict[str, float | None]:
    return {k: None if v is None else round(v - t0, 3) for k, v in phases.items()}


def handover(
    t_delete: float,
    *,
    victim: str,
    victim_log: Sequence[str],
    survivor_logs: Mapping[str, Sequence[str]],
    new_pod: Mapping[str, Any] | None,
    new_log: Sequence[str],
    owned_before: Mapping[tuple[str, int], str],
    moves: Sequence[tuple[float, tuple[str, int], str]],
) -> dict[str, float | None]:
    """The phases of one handover, seconds after `t_delete`.

    `owned_before`: each watched partition's owning pod before the delete; `moves`: (time, partition,
    new owning pod) of each ownership change seen in the offsets table, which shows when a new
    owner committed its first batch of the partition.
    """
    old = stamped(victim_log)
    survivors = [line for lines in survivor_logs.values() for line in stamped(lines)]
    survivors.sort()
    theirs = [tp for tp, owner in owned_before.items() if owner == victim]

    def took(tp: tuple[str, int], owners: set[str] | None) -> float | None:
        return next((t for t, moved, owner in moves if t >= t_delete and moved == tp
                     and (owners is None or owner in owners)), None)

    to_survivors = [took(tp, set(survivor_logs)) for tp in theirs]
    phases: dict[str, float | None] = {
        "sigterm_s": first(old, SIGTERM, since=t_delete),
        "left_group_s": first(old, STOPPED, since=t_delete),
        "survivors_assigned_s": first(survivors, ASSIGNED, since=t_delete),
        "survivors_first_commit_s": min((t for t in to_survivors if t is not None), default=None),
        "survivors_all_committed_s": (max(t for t in to_survivors if t is not None)
                                      if theirs and all(t is not None for t in to_survivors) else None),
        **new_pod_phases(new_pod, new_log, moves, since=t_delete),
    }
    return _relative(phases, t_delete)


def arrived(lines: Sequence[tuple[float, str]], value: str, *, since: float) -> float | None:
    """When a watch (`Follower`) first printed `value` at or after `since`."""
    return next((t for t, text in lines if t >= since and text.strip() == value), None)


def scale_up(
    t_surge: float,
    *,
    to: int,
    app_replicas: Sequence[tuple[float, str]],
    deployment_replicas: Sequence[tuple[float, str]],
    new_pod: Mapping[str, Any] | None,
    new_log: Sequence[str],
    moves: Sequence[tuple[float, tuple[str, int], str]],
) -> dict[str, float | None]:
    """The phases of one scale-up, seconds after `t_surge` (the first record above the steady rate).

    `app_replicas`, `deployment_replicas`: the StreamingApp's and its Deployment's spec.replicas
    as watched, (arrival, value); `decision_s` is when the app's became `to` (the autoscaler's
    write through the scale subresource, or a `kubectl scale`), `deployment_scaled_s` when the
    operator's reconcile carried it to the Deployment. `moves` as in `handover`.
    """
    phases = {
        "decision_s": arrived(app_replicas, str(to), since=t_surge),
        "deployment_scaled_s": arrived(deployment_replicas, str(to), since=t_surge),
        **new_pod_phases(new_pod, new_log, moves, since=t_surge),
    }
    return _relative(phases, t_surge)


def medians(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Each phase's median over the runs it happened in (None if in none), in the phases' order."""
    names = list(dict.fromkeys(k for run in runs for k in run))
    out: dict[str, float | None] = {}
    for name in names:
        got = sorted(v for run in runs if (v := run.get(name)) is not None)
        out[name] = round(statistics.median(got), 3) if got else None
    return out


class Follower:
    """The output of a command that runs until stopped (`kubectl logs -f`, `kubectl get -w`), kept
    in memory line by line, each with the wall time it arrived."""

    def __init__(self, command: list[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def stop(self) -> list[tuple[float, str]]:
        """The lines read so far; the command ends (a follow also ends by itself when the pod's
        container does)."""
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.wait(10)
        self._thread.join(5)
        return list(self.lines)


class LogFollower:
    """`kubectl logs -f --timestamps` of one pod, kept in memory from `since_s` ago."""

    def __init__(self, command: list[str], *, since_s: int = 30) -> None:
        self._follow = Follower([*command, "-f", "--timestamps", f"--since={since_s}s"])

    def stop(self) -> list[str]:
        """The lines read so far (with the runtime's own timestamps); the follow ends."""
        return [line for _, line in self._follow.stop()]
