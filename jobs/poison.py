"""Poison records, pure: narrowing a failing batch to the records that fail, and naming them.

A batch that keeps failing for a reason other than an outage is retried, then narrowed to the
record(s) that make it fail (`floe_jobs.quarantine` runs the trials; this module decides which
to run). `isolate` bisects the batch's records: a group that fails is split in two halves and
each half is tried on its own, down to single records. A record that fails alone is poison;
a group that fails while neither half does fails only in company (a batch too large, records
that break only together) and is reported unresolved rather than blamed on one record.

Nothing here touches Kafka, Spark or Cassandra, so the rules are unit-tested on their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from floe_jobs.planning import PartitionPlan

# one record of a batch: (topic, partition, offset)
Item = tuple[str, int, int]
# a trial over some records: None when they pass, else the error they fail with
Trial = Callable[[Sequence[Item]], "str | None"]

# trials one narrowing may run (each a small Spark job): enough for several poison records in a
# batch of 50,000 (about 2 · log2(n) trials per record), bounded for a batch full of them
MAX_TRIALS = 120
# longest error text kept in a condition, a header or the offsets row
ERROR_CHARS = 400

TP = tuple[str, int]
# (stage, topic, partition)
Key = tuple[str, str, int]


@dataclass
class Isolation:
    """What narrowing found: each record that fails alone with its error (by position), the
    groups that fail only together (with the error), and the trials it ran and how many of them
    passed. `reproduced` is False when the whole batch passed its trial: the failure is not in the
    records."""

    poison: list[tuple[Item, str]] = field(default_factory=list)
    unresolved: list[tuple[list[Item], str]] = field(default_factory=list)
    trials: int = 0
    passed: int = 0
    reproduced: bool = True

    @property
    def every_record_fails(self) -> bool:
        """No trial of a batch of several records passed: whatever part of it was tried failed,
        a fault of the stage or of what it reaches (a store table dropped under it), not of a
        record. Blaming records for it would stop or dead-letter good ones."""
        return self.reproduced and self.trials > 1 and self.passed == 0

    @property
    def found(self) -> bool:
        return bool(self.poison or self.unresolved)

    def first_failure(self, topic: str, partition: int) -> tuple[int, str] | None:
        """The lowest offset of the partition that fails (alone or in a group), and its error."""
        offsets = [(item[2], err) for item, err in self.poison if item[:2] == (topic, partition)]
        offsets += [(group[0][2], err) for group, err in self.unresolved if group[0][:2] == (topic, partition)]
        return min(offsets, default=None)


def isolate(items: Sequence[Item], trial: Trial, *, max_trials: int = MAX_TRIALS) -> Isolation:
    """The records of `items` (in batch order) that fail `trial` on their own.

    The whole batch is tried first; when it passes, the failure could not be reproduced without
    side effects and nothing is blamed. Each failing group is halved and both halves tried:
    a failing half is narrowed further, a single failing record is poison, a group whose halves
    both pass is unresolved. Past `max_trials`, the groups still failing are unresolved."""
    out = Isolation()
    if not items:
        out.reproduced = False
        return out

    def tried(group: Sequence[Item]) -> str | None:
        out.trials += 1
        error = trial(group)
        if error is None:
            out.passed += 1
        return error

    first = tried(items)
    if first is None:
        out.reproduced = False
        return out
    pending: list[tuple[list[Item], str]] = [(list(items), first)]
    while pending:
        group, error = pending.pop(0)
        if len(group) == 1:
            out.poison.append((group[0], error))
            continue
        if out.trials + 2 > max_trials:
            out.unresolved.append((group, error))
            continue
        mid = len(group) // 2
        halves = [(half, tried(half)) for half in (group[:mid], group[mid:])]
        failing = [(half, err) for half, err in halves if err is not None]
        if not failing:
            out.unresolved.append((group, error))
        pending.extend(failing)
    out.poison.sort()
    out.unresolved.sort()
    return out


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning)|[A-Z]\w*Error)(: .*)?$")


def describe(exc: BaseException) -> str:
    """A short text of an error for people: a failure inside Spark's Python workers carries the
    worker's whole traceback, whose last `Name: message` line is the error itself."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return clip(line)
    first = lines[0] if lines else ""
    return clip(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


def clip(text: str) -> str:
    """`text` cut to `ERROR_CHARS` characters."""
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def stop_message(topic: str, partition: int, offset: int, error: str) -> str:
    """How a stopped partition is named in logs, the offsets row's reader and the condition."""
    return f"topic {topic} partition {partition} stopped at offset {offset}: {error}"


def dead_letter_headers(stage: str, topic: str, partition: int, offset: int, error: str) -> list[tuple[str, bytes]]:
    """Headers of a dead-lettered record: those `Batch.decode_json` writes, and the stage."""
    return [
        ("floe.error", clip(error).encode()),
        ("floe.topic", topic.encode()),
        ("floe.partition", str(partition).encode()),
        ("floe.offset", str(offset).encode()),
        ("floe.stage", stage.encode()),
    ]


@dataclass
class Narrowed:
    """What a lane keeps of the poison records it found, for the replay of the plan they were
    found in (by stage, topic and partition, with the plan's sequence: an entry of another plan
    is stale and dropped).

    - `skip`: dead-lettered records the replay leaves out (offset → error);
    - `cut`: the offset where the replay ends and the partition stops, and the error;
    - `clean`: plans this process claimed as new whose attempts had no effect yet (no state
      write, nothing produced): only such a plan may be cut short, since nothing of its records
      past the cut can have been applied."""

    skip: dict[Key, tuple[int, dict[int, str]]] = field(default_factory=dict)
    cut: dict[Key, tuple[int, int, str]] = field(default_factory=dict)
    clean: dict[Key, int] = field(default_factory=dict)

    def claimed(self, stage: str, plans: Iterable[PartitionPlan], *, taken_from_another: set[TP]) -> None:
        """The batch's plans were claimed: a new plan starts clean; a replay of a plan another
        process held last may have effects."""
        for p in plans:
            key = (stage, *p.tp)
            if not p.replay:
                self.clean[key] = p.seq
            elif p.tp in taken_from_another:
                self.clean.pop(key, None)

    def taken(self, stage: str, tps: Iterable[TP]) -> None:
        """Another process claimed these partitions last: their plans may have effects."""
        for tp in tps:
            self.clean.pop((stage, *tp), None)

    def dirty(self, stage: str, plans: Iterable[PartitionPlan]) -> None:
        """The batch is about to have an effect: its plans are no longer clean."""
        for p in plans:
            self.clean.pop((stage, *p.tp), None)

    def is_clean(self, stage: str, plan: PartitionPlan) -> bool:
        return self.clean.get((stage, *plan.tp)) == plan.seq

    def apply(
        self, stage: str, plans: Sequence[PartitionPlan]
    ) -> tuple[list[PartitionPlan], dict[TP, set[int]], dict[TP, str]]:
        """The plans with each replay this lane narrowed cut where it stops, the offsets to leave
        out of each partition's records, and the stops to record with the commit (tp → error).
        A cut of a plan no longer clean is dropped: the replay runs whole, fails again, and the
        next narrowing stops the partition where the plan starts."""
        out: list[PartitionPlan] = []
        leave_out: dict[TP, set[int]] = {}
        stops: dict[TP, str] = {}
        for p in plans:
            key = (stage, *p.tp)
            skipped = self.skip.get(key)
            if skipped is not None and (not p.replay or skipped[0] != p.seq):
                del self.skip[key]
                skipped = None
            cut = self.cut.get(key)
            # a cut needs the plan still clean: another process may have run it since
            if cut is not None and (not p.replay or cut[0] != p.seq or self.clean.get(key) != p.seq):
                del self.cut[key]
                cut = None
            if cut is not None:
                _seq, at, error = cut
                p = replace(p, end=max(p.start, min(at, p.end)))
                stops[p.tp] = error
            if skipped is not None:
                offsets = {o for o in skipped[1] if p.start <= o < p.end}
                if offsets:
                    leave_out[p.tp] = offsets
            out.append(p)
        return out, leave_out, stops

    def committed(self, stage: str, plans: Iterable[PartitionPlan]) -> None:
        """The plans committed: what was kept for them is done."""
        for p in plans:
            key = (stage, *p.tp)
            for kept in (self.skip, self.cut):
                if key in kept:
                    del kept[key]
            self.clean.pop(key, None)
