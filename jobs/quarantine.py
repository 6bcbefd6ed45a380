"""Poison records: a batch that keeps failing is narrowed to the records it fails on, which are
dead-lettered or stop their partitions (`job.errors`, `spec.errors` of a StreamingApp).

Exactly-once rests on a plan in flight being replayed with exactly its range under its sequence
(`floe_jobs.planning`), so narrowing never runs the failing records for real. It reads the
batch's plans in flight again and runs the stage over subsets of their records as trials
(`stagepass.trial`): the helpers read the stores but write nothing, what the stage emits is
collected and dropped. `poison.isolate` bisects with them down to the records that fail alone.
Then, per partition:

- `deadLetter`: each poison record is produced to `<app-id>-dlq` (headers `floe.error`,
  `floe.topic`, `floe.partition`, `floe.offset`, `floe.stage`), and the plan is replayed whole,
  under its sequence, without those records. Every other record is applied exactly once: a key
  that an earlier attempt wrote carries the plan's fence and is skipped, a key it did not is
  written from the other records. The poison record's own effect is at most once (an attempt may
  have written some of it before failing).
- `stop`: the partition stops just before its first poison record. When the plan was claimed as
  new by this process and none of its attempts had an effect (no state write, nothing produced),
  nothing of it was applied yet, so the replay is cut there: the records before it are applied
  and committed, and the commit records `stopped_at` and `stopped_error` in the offsets row (the
  cut replay is claimed only while the row still names this process: `OffsetsTable.claim`). Else
  (another process ran the plan before, or an attempt wrote state) the plan stays in flight,
  whole, and the row is marked stopped where it starts: committing part of it could drop or
  repeat effects of records after the poison one.

A stopped partition is left alone by the process that stopped it; another process (a new pod
after a fix, or an offset reset, which clears the mark) plans it again, and a commit clears the
mark. A group of records that fails only together stops its partitions whatever the policy. A
batch of which no part passes its trial (every record fails: a fault of the stage or of what it
reaches, such as a store table dropped under it, not of its records) is not blamed on records:
stopping or dead-lettering them would drop good ones, so the lane retries it as a whole, out of
readiness, and gives up as before. Neither is a failure that no trial reproduces (a write
refused by Kafka or Cassandra).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from floe_jobs import health, planning, poison, records, stagepass
from floe_jobs.replica import ReplicaContext

if TYPE_CHECKING:
    from floe_jobs.api import Stage

log = logging.getLogger("floe_jobs")


class Lane(stagepass.LaneIO, Protocol):
    """What narrowing uses of a lane (`lanes.Lane`): what a pass uses, and the topics it holds
    in the group while it tries the records."""

    @property
    def topics(self) -> frozenset[str]: ...


def narrow(ctx: ReplicaContext, lane: Lane, stage: Stage) -> bool:
    """Narrow `stage`'s failing batch (its plans in flight that this process holds) to its poison
    records and deal with them by `job.errors`; False when nothing was found to act on."""
    assert ctx.offsets is not None and ctx.membership is not None and lane.reader is not None
    topics = ctx.stage_topics(stage)
    # held like a batch: the partitions cannot be revoked while their records are tried
    with ctx.membership.batch(lane.topics) as owned:
        rows = ctx.offsets.read(topics, stage=stage.name)
        plans = _in_flight(ctx, rows, owned)
        if not plans:
            log.warning("Not narrowing stage=%s: no batch in flight held by this replica", stage.name)
            return False
        started = time.monotonic()
        batch_records = lane.reader.read(plans)
        if stage.source is not None:
            before = {tp: dict(row.source_positions) for tp, row in rows.items()}
            batch_records, _seen = records.drop_applied(batch_records, before)
        by_item = {(rec.topic, rec.partition, rec.offset): rec for rec in batch_records}
        seqs = {p.tp: p.seq for p in plans}
        stamps = {p.tp: p.stamp for p in plans}

        def trial(items: Sequence[poison.Item]) -> str | None:
            chosen = [by_item[i] for i in items]
            return stagepass.trial(ctx, lane, stage, chosen, seqs=seqs, stamps=stamps)

        found = poison.isolate(sorted(by_item), trial)
        log.warning(
            "Narrowed stage=%s records=%d trials=%d seconds=%.1f poison=%s unresolved=%s",
            stage.name,
            len(by_item),
            found.trials,
            time.monotonic() - started,
            [(t, p, o) for (t, p, o), _ in found.poison],
            [(g[0], len(g)) for g, _ in found.unresolved],
        )
        if not found.found:
            log.warning(
                "The failure of stage=%s is in none of its records (the batch passes without effects); "
                "it is retried as a whole",
                stage.name,
            )
            return False
        if found.every_record_fails:
            log.warning(
                "The failure of stage=%s is in every record tried (a fault of the stage or of what it "
                "reaches, not of a record); it is retried as a whole",
                stage.name,
            )
            return False
        return _act(ctx, lane, stage, plans, found, by_item)


def _in_flight(
    ctx: ReplicaContext, rows: dict[tuple[str, int], planning.OffsetRow], owned: list[tuple[str, int]]
) -> list[planning.PartitionPlan]:
    """The plans in flight of the stage's offsets `rows` that this process holds, on partitions it
    owns and that are not stopped: what narrowing replays as trials."""
    return [
        planning.PartitionPlan(
            row.topic,
            row.partition,
            row.planned_seq,
            row.planned_from if row.planned_from is not None else row.next_offset,
            row.planned_to if row.planned_to is not None else row.next_offset,
            replay=True,
            stamp=row.planned_ts or 0,
        )
        for tp, row in sorted(rows.items())
        if tp in owned and row.in_flight and row.owner == ctx.owner and not row.stopped
    ]


def _act(
    ctx: ReplicaContext,
    lane: Lane,
    stage: Stage,
    plans: list[planning.PartitionPlan],
    found: poison.Isolation,
    by_item: dict[tuple[str, int, int], records.Record],
) -> bool:
    """Deal with the poison records `found` in each plan by `job.errors`; False when no plan had
    any."""
    acted = False
    for p in plans:
        first = found.first_failure(p.topic, p.partition)
        if first is None:
            continue
        acted = True
        if ctx.cfg.job.errors == "deadLetter":
            _dead_letter(ctx, lane, stage, p, found, by_item, before_offset=_unresolved_start(found, p))
        if ctx.cfg.job.errors == "stop" or _unresolved_start(found, p) is not None:
            at, error = first if ctx.cfg.job.errors == "stop" else _unresolved_first(found, p)
            _stop(ctx, lane, stage, p, at=at, error=error)
    return acted


def _unresolved_start(found: poison.Isolation, p: planning.PartitionPlan) -> int | None:
    """The first offset of the partition's records that fail only together, if any."""
    starts = [g[0][2] for g, _ in found.unresolved if g[0][:2] == p.tp]
    return min(starts, default=None)


def _unresolved_first(found: poison.Isolation, p: planning.PartitionPlan) -> tuple[int, str]:
    """Where a dead-lettering partition stops all the same: its first group of records that fail
    only together."""
    groups = sorted((g[0][2], len(g), err) for g, err in found.unresolved if g[0][:2] == p.tp)
    at, size, error = groups[0]
    return at, f"{size} records from this offset fail together but none alone: {error}"


def _dead_letter(
    ctx: ReplicaContext,
    lane: Lane,
    stage: Stage,
    p: planning.PartitionPlan,
    found: poison.Isolation,
    by_item: dict[tuple[str, int, int], records.Record],
    *,
    before_offset: int | None,
) -> None:
    """Produce the partition's poison records (below `before_offset`, where it stops anyway) to
    the dead-letter topic and have the replay of its plan leave them out."""
    assert lane.sink is not None
    chosen = [
        (item, error)
        for item, error in found.poison
        if item[:2] == p.tp and (before_offset is None or item[2] < before_offset)
    ]
    if not chosen:
        return
    rows = []
    for (topic, partition, offset), error in chosen:
        rec = by_item[(topic, partition, offset)]
        headers = poison.dead_letter_headers(stage.name, topic, partition, offset, error)
        rows.append((rec.key, rec.value, headers, ctx.cfg.dlq_topic))
        log.error(
            "Dead-lettered stage=%s topic=%s partition=%d offset=%d error=%s",
            stage.name,
            topic,
            partition,
            offset,
            error,
        )
    lane.sink.write_rows(rows)
    health.RECORDS_DLQ.labels(ctx.metrics_app).inc(len(rows))
    key = (stage.name, *p.tp)
    kept = lane.narrowed.skip.get(key)
    offsets = dict(kept[1]) if kept is not None and kept[0] == p.seq else {}
    offsets.update({item[2]: error for item, error in chosen})
    lane.narrowed.skip[key] = (p.seq, offsets)


def _stop(ctx: ReplicaContext, lane: Lane, stage: Stage, p: planning.PartitionPlan, *, at: int, error: str) -> None:
    """Stop the partition just before offset `at`: by cutting the replay there when the plan had
    no effect, else where the plan starts, with the plan left in flight (see the module)."""
    assert ctx.offsets is not None
    if lane.narrowed.is_clean(stage.name, p):
        lane.narrowed.cut[(stage.name, *p.tp)] = (p.seq, at, error)
        log.error(
            "Stopping stage=%s %s; the records before it are committed",
            stage.name,
            poison.stop_message(p.topic, p.partition, at, error),
        )
        return
    held = poison.clip(
        f"record at offset {at} fails: {error} (its batch from offset {p.start} may have had effects, so it "
        "is kept whole, in flight)"
    )
    if ctx.offsets.stop(p, at=p.start, error=held, stage=stage.name):
        log.error("Stopped stage=%s %s", stage.name, poison.stop_message(p.topic, p.partition, p.start, held))
