"""Where a process handover's time goes (`runtime_bench.py handover`): the phases from the SIGTERM
of the leaving replica to the first commit of each of its partitions by the replicas that stay,
read from the replicas' own log files and from the offsets table as the bench watched it.

Every figure is seconds after the bench sent the SIGTERM, on one machine's wall clock (log lines
carry milliseconds; the offsets table is read every 100 ms, so the commit phases are late by up
to that). What the pod bench reads of pods (`podphases`) has no counterpart here: no kubelet,
no replacement.

The remaining replicas' batches are told apart by their `Committed` lines: a line's time less
its `seconds` is when the batch started, so the batches that were running when the assignment
came (`running_at_assignment_end_s`: what a taken-over partition waited for before it could be
planned) and the first one planned after it (`first_planned_after_assignment_s`) can be told.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from podphases import first, last

SIGTERM = "Received signal=15"
COMMITTED = "Committed stage="
LEFT = "Left group"
ASSIGNED = "Assigned partitions=["
SECONDS = re.compile(r" seconds=([0-9.]+)")
STAGE = re.compile(r"Committed stage=(\S+)")

Line = tuple[float, str]


def log_lines(path: Path, *, since: float) -> list[Line]:
    """(time, text) of the lines of a replica's log written at or after `since` (epoch seconds);
    lines without the text format's time (`2026-11-28 14:14:20,123 ...`) are skipped."""
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            continue
        if at >= since:
            out.append((at, line[24:]))
    return out


def batches(lines: Sequence[Line]) -> list[tuple[float, float, str]]:
    """(start, end, stage) of each committed batch in `lines`."""
    out = []
    for t, text in lines:
        if COMMITTED in text and (m := SECONDS.search(text)) and (s := STAGE.search(text)):
            out.append((t - float(m.group(1)), t, s.group(1)))
    return out


def handover(
    t_term: float,
    *,
    victim_log: Sequence[Line],
    survivor_logs: Mapping[str, Sequence[Line]],
    victim: str,
    moves: Sequence[tuple[float, tuple[str, int], str]],
    theirs: Sequence[tuple[str, int]],
) -> dict[str, float | None]:
    """The phases of one process handover, seconds after `t_term` (the bench's SIGTERM, wall).

    `moves`: (time, partition, owner) of every advance of a watched partition's committed offset
    as the bench saw it; `theirs`: the partitions the leaving replica owned at the SIGTERM."""
    survivors = sorted(line for lines in survivor_logs.values() for line in lines)
    assigned = first(survivors, ASSIGNED, since=t_term)
    # each remaining replica learns of the leave at its own next heartbeat: the last one to be
    # assigned is what the slowest taken partition waited for
    each = [first(lines, ASSIGNED, since=t_term) for lines in survivor_logs.values()]
    survivor_batches = [b for lines in survivor_logs.values() for b in batches(lines)]

    def first_commit(tp: tuple[str, int], by_victim: bool) -> float | None:
        return next(
            (t for t, moved, owner in moves if t >= t_term and moved == tp and (owner == victim) == by_victim), None
        )

    taken = [first_commit(tp, by_victim=False) for tp in theirs]
    phases: dict[str, float | None] = {
        # a log line's time is cut to the millisecond: the signal's may read just before `t_term`
        "sigterm_s": first(victim_log, SIGTERM, since=t_term - 0.001),
        "drain_last_commit_s": last(victim_log, COMMITTED, since=t_term),
        "left_group_s": first(victim_log, LEFT, since=t_term),
        "assigned_s": assigned,
        "all_assigned_s": max((t for t in each if t is not None), default=None),
        "running_at_assignment_end_s": None,
        "first_planned_after_assignment_s": None,
        "taken_first_commit_s": min((t for t in taken if t is not None), default=None),
        "taken_all_committed_s": max(taken) if taken and all(t is not None for t in taken) else None,  # type: ignore[type-var]
    }
    if assigned is not None:
        running = [end for start, end, _ in survivor_batches if start < assigned <= end]
        after = [start for start, _, _ in survivor_batches if start >= assigned]
        phases["running_at_assignment_end_s"] = max(running, default=None)
        phases["first_planned_after_assignment_s"] = min(after, default=None)
    return {k: None if v is None else round(v - t_term, 3) for k, v in phases.items()}
