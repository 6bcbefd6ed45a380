"""Where a pod handover's time goes: the phases from `kubectl delete pod` to the replacement's
first commit, read from the pods' own logs, their status and the offsets table.

Every figure is seconds after the delete, on the node's wall clock (the bench, the kubelet and
the pods share one machine). Log times are the container runtime's own (`kubectl logs
--timestamps`, nanoseconds); the pod's status times are the API's (whole seconds), so the
phases taken from them (`new_pod_*`) are within a second. A phase that did not happen in the
window is None.

The deleted pod's logs are gone once it is, so they are followed from before the delete
(`LogFollower`).
"""

from __future__ import annotations

import statistics
import subprocess
import threading
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
    new = stamped(new_log)
    new_name = (new_pod or {}).get("metadata", {}).get("name")
    theirs = [tp for tp, owner in owned_before.items() if owner == victim]

    def took(tp: tuple[str, int], owners: set[str] | None) -> float | None:
        return next((t for t, moved, owner in moves if t >= t_delete and moved == tp
                     and (owners is None or owner in owners)), None)

    to_survivors = [took(tp, set(survivor_logs)) for tp in theirs]
    to_new = [t for t, _tp, owner in moves if t >= t_delete and owner == new_name]
    created = (new_pod or {}).get("metadata", {}).get("creationTimestamp")
    phases: dict[str, float | None] = {
        "sigterm_s": first(old, SIGTERM, since=t_delete),
        "left_group_s": first(old, STOPPED, since=t_delete),
        "survivors_assigned_s": first(survivors, ASSIGNED, since=t_delete),
        "survivors_first_commit_s": min((t for t in to_survivors if t is not None), default=None),
        "survivors_all_committed_s": (max(t for t in to_survivors if t is not None)  # type: ignore[type-var]
                                      if theirs and all(t is not None for t in to_survivors) else None),
        "new_pod_created_s": wall(created) if created else None,
        "new_pod_scheduled_s": _condition(new_pod or {}, "PodScheduled"),
        "new_container_started_s": _started(new_pod or {}),
        "new_first_log_s": new[0][0] if new else None,
        "new_warmed_up_s": last(new, WARMED, since=t_delete),
        "new_assigned_s": first(new, ASSIGNED, since=t_delete),
        "new_first_commit_s": min(to_new, default=None),
        "new_ready_s": _condition(new_pod or {}, "Ready"),
    }
    return {k: None if v is None else round(v - t_delete, 3) for k, v in phases.items()}


def medians(runs: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Each phase's median over the runs it happened in (None if in none), in the phases' order."""
    names = list(dict.fromkeys(k for run in runs for k in run))
    out: dict[str, float | None] = {}
    for name in names:
        got = sorted(v for run in runs if (v := run.get(name)) is not None)
        out[name] = round(statistics.median(got), 3) if got else None
    return out


class LogFollower:
    """`kubectl logs -f --timestamps` of one pod, kept in memory from `since_s` ago."""

    def __init__(self, command: list[str], *, since_s: int = 30) -> None:
        self.lines: list[str] = []
        self._proc = subprocess.Popen([*command, "-f", "--timestamps", f"--since={since_s}s"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> list[str]:
        """The lines read so far; the follow ends (it ends by itself when the pod's container does)."""
        if self._proc.poll() is None:
            self._proc.terminate()
        self._proc.wait(10)
        self._thread.join(5)
        return list(self.lines)
