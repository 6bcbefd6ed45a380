"""Pure batch planning: which offset range of each owned partition the next micro-batch reads.

Kept free of I/O so the rules that exactly-once rests on are unit-tested on their own:

- a partition whose stored plan is still in flight (planned_seq > committed_seq) is replayed
  with exactly the stored range and sequence, whatever the current caps say — the same input
  gives the same state deltas, and the fence makes the second application a no-op; only
  records that retention deleted before the replay are left out of it (its range starts at the
  log start), since no reader can have them any more;
- otherwise a new plan starts at the stored next offset and ends at the end offset, capped
  so that the whole batch stays under the record budget (itself derived from the record and
  byte caps), shared fairly between partitions with a backlog;
- a committed partition that a snapshot holds (`OffsetRow.held`) gets no new plan until the
  hold is released or runs out;
- a partition with no stored row starts by policy (earliest = low watermark, latest = high
  watermark), and that starting point is stored before anything is planned from it;
- every attempt of a batch carries a write timestamp (`stamp_for`) above every earlier
  attempt's and batch's of its partition, whatever the planner's clock says; each state row it
  writes goes out under that stamp, or just above the row's latest cell when something else
  stamped that cell higher (`row_stamp`), so a stale owner's late writes lose to newer ones and
  no cell written outside the batch loop can swallow a batch's write (`floe_jobs.offsets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRow:
    """One row of the offsets table (see `floe_jobs.offsets`)."""

    topic: str
    partition: int
    next_offset: int
    committed_seq: int = 0
    planned_seq: int = 0
    planned_from: int | None = None
    planned_to: int | None = None
    source_positions: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # write timestamp (µs) of the latest planned batch's effects, None before any was stamped
    planned_ts: int | None = None
    # the claimer of the latest planned batch (`ReplicaContext.owner`: member name and process token)
    owner: str = ""
    # where a poison record stopped the partition (`floe_jobs.quarantine`), and its error
    stopped_at: int | None = None
    stopped_error: str | None = None
    # a snapshot copying the partition holds new plans back until then (µs since the epoch,
    # `floe_jobs.snapshots.cut`); None: not held
    held_until: int | None = None

    def held(self, now_us: int) -> bool:
        """A snapshot holds the partition at its committed position: no new plan until the hold
        is released or runs out (a plan in flight is still replayed, which it never is while
        held: a hold is only set at a committed batch)."""
        return self.held_until is not None and self.held_until > now_us

    @property
    def stopped(self) -> bool:
        """A poison record holds the partition at its committed position (where a plan in flight
        starts, too): every commit and an offset reset clear the mark."""
        return self.stopped_at is not None and self.stopped_at == self.next_offset

    @property
    def in_flight(self) -> bool:
        return self.planned_seq > self.committed_seq and self.planned_from is not None


@dataclass(frozen=True)
class PartitionPlan:
    topic: str
    partition: int
    seq: int
    start: int
    end: int
    replay: bool
    # the write timestamp (µs) of this attempt's state rows in Cassandra (a row that another writer
    # stamped higher is written just above that instead, see `row_stamp`). It grows with the
    # sequence and with each replay, so a write of an older batch or attempt, from an owner that
    # lost the partition, can never overwrite what a newer one wrote (see `stamp_for`)
    stamp: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Watermarks:
    low: int
    high: int


@dataclass
class BatchPlan:
    partitions: list[PartitionPlan]
    # rows to create before planning (partitions seen for the first time)
    new_rows: list[OffsetRow]
    # partitions whose stored position fell outside the log (retention, topic re-created)
    warnings: list[str]

    @property
    def records(self) -> int:
        return sum(p.size for p in self.partitions)

    @property
    def fresh(self) -> list[PartitionPlan]:
        return [p for p in self.partitions if not p.replay]


def stamp_for(row: OffsetRow | None, *, now_us: int) -> int:
    """The write timestamp of the next attempt after `row`'s latest (a new batch, or the replay of
    the one in flight): the clock, but always above the latest attempt's, so timestamps grow with
    sequences and attempts even when owners' clocks differ or the clock is set back."""
    last = row.planned_ts if row is not None and row.planned_ts is not None else 0
    return max(now_us, last + 1)


def row_stamp(stamp: int, written: int | None) -> int:
    """The write timestamp of one state row of a batch whose stamp is `stamp`, the row's cells as
    read last having `written` as their highest write timestamp (None: no cell): the batch's
    stamp, or just above `written` when another writer (the store library at its own clock, the
    Java library, a replica whose clock ran ahead) stamped the row at or above it. Cassandra keeps
    the cell with the highest timestamp, so a batch write under `written` or lower would be
    swallowed, value and fence alike. It is a function of what was read: an attempt that reads the
    same cell writes under the same timestamp, and a later batch, which reads this write, goes
    above it."""
    return stamp if written is None or written < stamp else written + 1


def record_budget(
    *, max_records: int, max_bytes: int, avg_record_bytes: float | None, rows_per_record: float | None = None
) -> int:
    """Records one batch may read: the record cap, lowered by the byte cap at the observed record
    size, and divided by the observed rows per record (a run of re-keyed rows counts as its rows)."""
    budget = max_records
    if rows_per_record and rows_per_record > 1:
        budget = max(1, int(max_records // rows_per_record))
    if not avg_record_bytes or avg_record_bytes <= 0:
        return budget
    return max(1, min(budget, int(max_bytes // avg_record_bytes)))


def row_limits(plans: Sequence[PartitionPlan], max_rows: int) -> dict[TopicPartition, int]:
    """Rows each fresh plan may read, `max_rows` shared in proportion to the planned records; a
    replay reads its stored range whatever it holds."""
    fresh = [p for p in plans if not p.replay and p.size > 0]
    total = sum(p.size for p in fresh)
    return {p.tp: max(1, max_rows * p.size // total) for p in fresh}


def cut(plans: Sequence[PartitionPlan], ends: Mapping[TopicPartition, int]) -> list[PartitionPlan]:
    """The plans with each fresh one in `ends` ending there (its read reached its row limit).
    Only plans not yet stored are cut: a stored plan may have been applied in part."""
    return [replace(p, end=ends[p.tp]) if p.tp in ends and not p.replay else p for p in plans]


def share_budget(backlogs: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    """Split `budget` records between partitions by water-filling: no partition gets more than its
    backlog, and what a small partition does not need goes to the others. Deterministic."""
    grant = {tp: 0 for tp in backlogs}
    remaining = max(0, budget)
    active = sorted(tp for tp, lag in backlogs.items() if lag > 0)
    while remaining > 0 and active:
        share = remaining // len(active)
        if share == 0:
            for tp in active[:remaining]:
                grant[tp] += 1
            break
        still = []
        for tp in active:
            take = min(share, backlogs[tp] - grant[tp])
            grant[tp] += take
            remaining -= take
            if grant[tp] < backlogs[tp]:
                still.append(tp)
        active = still
    return grant


def plan_batch(
    *,
    owned: Sequence[TopicPartition],
    rows: Mapping[TopicPartition, OffsetRow],
    watermarks: Mapping[TopicPartition, Watermarks],
    starting_offsets: Literal["earliest", "latest"],
    budget: int,
    now_us: int,
) -> BatchPlan:
    plans: list[PartitionPlan] = []
    new_rows: list[OffsetRow] = []
    warnings: list[str] = []
    backlog: dict[TopicPartition, int] = {}
    starts: dict[TopicPartition, tuple[int, int]] = {}
    starts_rows: dict[TopicPartition, OffsetRow] = {}

    for tp in sorted(owned):
        row = rows.get(tp)
        marks = watermarks.get(tp)
        if row is not None and row.in_flight:
            plans.append(_replay(tp, row, marks, now_us=now_us, warnings=warnings))
            continue
        if marks is None:
            continue
        if row is None:
            # created under a stamp below every plan's, and recording it: whichever replica plans
            # next stamps above it, so no commit can lose to the row's first cells
            start = marks.low if starting_offsets == "earliest" else marks.high
            row = OffsetRow(tp[0], tp[1], next_offset=start, planned_ts=now_us - 1)
            new_rows.append(row)
            starts_rows[tp] = row
            seq = 0
        elif row.held(now_us):
            continue
        else:
            start, seq = _resume_at(tp, row, marks, warnings=warnings), row.committed_seq
        lag = max(0, marks.high - start)
        if lag > 0:
            backlog[tp] = lag
            starts[tp] = (start, seq)

    replay_records = sum(p.size for p in plans)
    grants = share_budget(backlog, budget - replay_records)
    for tp, count in sorted(grants.items()):
        if count <= 0:
            continue
        start, seq = starts[tp]
        stamp = stamp_for(rows.get(tp) or starts_rows.get(tp), now_us=now_us)
        plans.append(PartitionPlan(tp[0], tp[1], seq + 1, start, start + count, replay=False, stamp=stamp))
    plans.sort(key=lambda p: p.tp)
    return BatchPlan(partitions=plans, new_rows=new_rows, warnings=warnings)


def _replay(
    tp: TopicPartition, row: OffsetRow, marks: Watermarks | None, *, now_us: int, warnings: list[str]
) -> PartitionPlan:
    """The replay of `row`'s plan in flight, over what retention left of its range."""
    assert row.planned_from is not None and row.planned_to is not None
    topic, partition = tp
    start = row.planned_from
    if marks is not None and start < marks.low:
        # Retention deleted the head of the plan (or all of it) before it committed: those
        # records are gone for every reader, so the replay applies what is left of its range,
        # under its sequence and stamp, as a committed position below the log start moves up
        # to it. Keys an earlier attempt wrote carry the plan's fence and are skipped, the
        # others get the surviving records; a replay of the whole range could only fail, on
        # every owner, for good.
        start = min(marks.low, row.planned_to)
        warnings.append(
            f"Replay of topic={topic} partition={partition} seq={row.planned_seq} starts at "
            f"offset={row.planned_from} below the log start {marks.low}: records were deleted by retention; "
            f"replaying [{start}, {row.planned_to}) ({start - row.planned_from} records lost)"
        )
    # a replay writes above every earlier attempt of its plan (the claim stores the new
    # stamp): an earlier attempt's late write then loses to it instead of tying, which
    # Cassandra would break by value, not by writer
    stamp = stamp_for(row, now_us=now_us)
    return PartitionPlan(topic, partition, row.planned_seq, start, row.planned_to, replay=True, stamp=stamp)


def _resume_at(tp: TopicPartition, row: OffsetRow, marks: Watermarks, *, warnings: list[str]) -> int:
    """Where a committed row's next batch starts: its next offset, or the log start when
    retention deleted records it had not read (said in `warnings`, as a position past the log
    end is, which the batch waits for)."""
    topic, partition = tp
    start = row.next_offset
    if start < marks.low:
        warnings.append(
            f"Stored offset={start} of topic={topic} partition={partition} is below the log start "
            f"{marks.low}: records were deleted by retention; continuing from {marks.low} "
            f"({marks.low - start} records lost)"
        )
        return marks.low
    if start > marks.high:
        warnings.append(
            f"Stored offset={start} of topic={topic} partition={partition} is past the log end "
            f"{marks.high}: waiting for the log to reach it"
        )
    return start


def advance_positions(
    before: Mapping[str, tuple[int, int]], seen: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """High-water marks of source positions after a batch: the larger of before and seen, per source."""
    after = dict(before)
    for source, pos in seen.items():
        if source not in after or pos > after[source]:
            after[source] = pos
    return after
