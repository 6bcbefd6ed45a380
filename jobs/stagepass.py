"""One pass of one stage over the partitions a replica owns: plan, read, apply, emit, commit.

The order is what makes a batch's state effect happen once (docs/runtime.md, "The batch loop and
exactly-once state"): the plan is stored and claimed before anything of the batch has an effect,
the partitions are checked to be still this replica's before its output and again before its
commit, and the commit is refused unless this replica still holds every plan. Whatever happens
in between, the plan stays in flight and the next owner replays exactly that range under the
same sequence.

Where the batch runs (driver or Spark) is decided once per batch (`floe_jobs.placement`); the
read, the stage's helpers and the sink follow that decision.

A pass receives the replica context (`floe_jobs.replica`), what it uses of its lane (`LaneIO`) and
the state the passes keep between batches (`PassState`: what the last reads taught of a stage's
records, and the positions mirrored into the group), which lives here, with its only user.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from floe_jobs import api, faults, health, kafkaio, offsets, outages, placement, planning, poison, records, statecache
from floe_jobs.replica import ReplicaContext

if TYPE_CHECKING:
    from floe_jobs.config import FloeConfig

log = logging.getLogger("floe_jobs")

Positions = dict[tuple[str, int], dict[str, tuple[int, int]]]


class LaneIO(Protocol):
    """What a pass uses of its lane (`lanes.Lane`): the lane's Kafka clients, and the poison
    records found in its batches (`floe_jobs.quarantine`)."""

    @property
    def reader(self) -> kafkaio.RangeReader | None: ...

    @property
    def sink(self) -> kafkaio.KafkaSink | None: ...

    @property
    def narrowed(self) -> poison.Narrowed: ...


@dataclass
class PassState:
    """What a replica's stage passes keep between batches."""

    # per stage, what its last read taught of its records (`budget`)
    avg_bytes: dict[str, float] = field(default_factory=dict)
    rows_per_record: dict[str, float] = field(default_factory=dict)
    # (stage, (topic, partition)) → the stage's committed position as last read or committed
    # here: the group mirrors the lowest of a partition's stages (`group_positions`)
    positions: dict[tuple[str, tuple[str, int]], int] = field(default_factory=dict)


@dataclass(frozen=True)
class StageRead:
    """What one pass of a stage read: the frame, the plans as cut to what was read, the records
    read, each partition's source positions once the batch commits (repartition topics), and
    where the batch runs."""

    df: Any
    parts: list[planning.PartitionPlan]
    size: int
    positions: Positions
    where: placement.Placement


def run(ctx: ReplicaContext, passes: PassState, stage: api.Stage, tps: list[tuple[str, int]], lane: LaneIO) -> int:
    """One pass of `stage` over the partitions `tps`: plan, read, apply, emit, commit. The
    records of the batch; 0 when there was nothing to read."""
    assert ctx.offsets is not None and ctx.membership is not None
    assert lane.reader is not None and lane.sink is not None
    clock = api.BatchClock()
    planned = _plan(ctx, passes, stage, tps, lane.reader)
    if planned is None:
        return 0
    plan, rows = planned
    # a replay this lane narrowed to its poison records: cut where its partition stops, without
    # the records it dead-lettered (`floe_jobs.quarantine`)
    others = {tp for tp, row in rows.items() if row.owner != ctx.owner}
    lane.narrowed.taken(stage.name, others)
    narrowed, leave_out, stops = lane.narrowed.apply(stage.name, plan.partitions)
    plan = replace(plan, partitions=narrowed)
    clock.lap("plan")
    held = ctx.membership.assignments(p.tp for p in plan.partitions)
    # a cut replay is claimed only if no other process took its plan since this one held it
    got = _read(ctx, passes, stage, plan, rows, lane.reader, clock, own=set(stops))
    parts, size = got.parts, got.size
    lane.narrowed.claimed(stage.name, parts, taken_from_another=others)
    df = _without(got.df, leave_out, stage=stage.name)
    batch = _batch_of(ctx, lane, stage, df, got, clock)
    batch.on_effect = lambda: lane.narrowed.dirty(stage.name, parts)
    result = stage.fn(batch)
    clock.lap("fn")
    faults.point(f"{stage.name}:after-state")
    check_owned(ctx, stage, parts, held, ask_cassandra=True)
    outputs = emitted(ctx.cfg, result)
    if outputs:
        lane.narrowed.dirty(stage.name, parts)
    out = sum(write(lane.sink, e, large=got.where.spark_sink) for e in outputs)
    clock.lap("emit")
    faults.point(f"{stage.name}:after-emit")
    check_owned(ctx, stage, parts, held, ask_cassandra=False)
    if not ctx.offsets.commit(parts, got.positions, stops=stops, stage=stage.name):
        raise offsets.OwnershipLost([p.tp for p in parts], stage=stage.name)
    lane.narrowed.committed(stage.name, parts)
    clock.lap("commit")
    mirrored = group_positions(ctx, passes, stage, parts)
    ctx.membership.commit(mirrored)
    clock.lap("group")
    for (topic, partition), error in sorted(stops.items()):
        at = next(p.end for p in parts if p.tp == (topic, partition))
        log.error("Stopped stage=%s %s", stage.name, poison.stop_message(topic, partition, at, error))
    replay = any(p.replay for p in plan.partitions)
    _committed(ctx, stage, parts, mirrored, size=size, out=out, dlq=batch.dlq_records, replay=replay, clock=clock)
    return size


def _batch_of(
    ctx: ReplicaContext, lane: LaneIO, stage: api.Stage, df: Any, got: StageRead, clock: api.BatchClock
) -> api.Batch:
    """What the stage function receives for the batch read as `got` (its frame `df`): the
    sequences and stamps of its plans, where it runs, and the assignments of its partitions, so
    that what the state cache keeps of them is dropped if they change hands (`statecache`)."""
    assert ctx.membership is not None
    parts = got.parts
    assignments = ctx.membership.assignments(p.tp for p in parts)
    return batch_for(
        ctx,
        lane,
        stage,
        df,
        clock,
        seqs={p.tp: p.seq for p in parts},
        stamps={p.tp: p.stamp for p in parts},
        records=got.size,
        where=got.where,
        owned=statecache.Ownership(ctx.state_cache, {p: n for (_t, p), n in assignments.items()}),
    )


def _without(df: Any, leave_out: dict[tuple[str, int], set[int]], *, stage: str) -> Any:
    """The batch's frame without the records dead-lettered at these offsets (a run of re-keyed
    rows is one record: its rows share its offset)."""
    if not leave_out:
        return df
    from pyspark.sql import functions as F

    cond: Any = None
    for (topic, partition), offsets_left_out in sorted(leave_out.items()):
        log.info(
            "Leaving out dead-lettered records stage=%s topic=%s partition=%d offsets=%s",
            stage,
            topic,
            partition,
            sorted(offsets_left_out),
        )
        one = (
            (F.col("topic") == topic)
            & (F.col("partition") == partition)
            & F.col("offset").isin(sorted(offsets_left_out))
        )
        cond = one if cond is None else cond | one
    return df.where(~cond)


def trial(
    ctx: ReplicaContext,
    lane: LaneIO,
    stage: api.Stage,
    batch_records: list[records.Record],
    *,
    seqs: dict[tuple[str, int], int],
    stamps: dict[tuple[str, int], int],
) -> str | None:
    """Run `stage` over these records without any effect: its helpers read the stores but write
    nothing, what it emits is collected and dropped (`Batch.trial`). None when it passes, else
    the error (an outage of a dependency is raised: it says nothing of the records)."""
    assert lane.sink is not None
    clock = api.BatchClock()
    df = records.to_dataframe(ctx.spark, batch_records)
    batch = batch_for(
        ctx, lane, stage, df, clock, seqs=seqs, stamps=stamps, records=records.row_count(batch_records), trial=True
    )
    try:
        for e in emitted(ctx.cfg, stage.fn(batch)):
            write(lane.sink, e, dry_run=True)
    except Exception as exc:
        if outages.unavailable(exc) is not None:
            raise
        return poison.describe(exc)
    return None


def group_positions(
    ctx: ReplicaContext, passes: PassState, stage: api.Stage, parts: list[planning.PartitionPlan]
) -> dict[tuple[str, int], int]:
    """What to mirror into the Kafka group once `stage` committed `parts`: per partition, the
    lowest position known here among the stages that read its topic (each keeps its own,
    `floe_jobs.offsets`; the group has one offset per partition, and the tools that read it should
    see the lag of the stage furthest behind). Stages that read a common topic share a lane
    (`floe_jobs.lanes`), so no other thread changes these entries meanwhile."""
    for p in parts:
        passes.positions[(stage.name, p.tp)] = p.end
    readers = ctx.readers()
    out = {}
    for p in parts:
        known = [
            passes.positions[(s, p.tp)] for s in readers.get(p.topic, [stage.name]) if (s, p.tp) in passes.positions
        ]
        out[p.tp] = min(known)
    return out


def row_cap(ctx: ReplicaContext, stage: api.Stage) -> int:
    """Rows one batch of `stage` may read: the batch cap, times `repartition_rows_per_record` for
    a stage fed by a repartition topic."""
    k = ctx.cfg.kafka
    return k.max_records_per_batch * (k.repartition_rows_per_record if stage.source else 1)


def budget(ctx: ReplicaContext, passes: PassState, stage: api.Stage) -> int:
    """Records the stage's next batch may plan: the caps, over what its last read taught of the
    records' size and rows per record."""
    k = ctx.cfg.kafka
    return planning.record_budget(
        max_records=row_cap(ctx, stage),
        max_bytes=k.max_bytes_per_batch,
        avg_record_bytes=passes.avg_bytes.get(stage.name),
        rows_per_record=passes.rows_per_record.get(stage.name),
    )


def _plan(
    ctx: ReplicaContext, passes: PassState, stage: api.Stage, tps: list[tuple[str, int]], reader: kafkaio.RangeReader
) -> tuple[planning.BatchPlan, dict[tuple[str, int], planning.OffsetRow]] | None:
    """The stage's next batch over `tps` (an in-flight plan replayed exactly, or a new capped
    range) and the offsets rows it was planned from; None when there is nothing to read."""
    assert ctx.offsets is not None and ctx.membership is not None
    topics = ctx.stage_topics(stage)
    ctx.state_cache.retain(set(ctx.membership.assignments(ctx.membership.owned).values()))
    rows = ctx.offsets.read(topics, stage=stage.name)
    passes.positions.update({(stage.name, tp): row.next_offset for tp, row in rows.items()})
    # partitions a poison record stopped in this process wait for a fix or an offset reset;
    # another process (a new pod, a fixed image) tries them again (`floe_jobs.quarantine`)
    tps = [tp for tp in tps if not ((row := rows.get(tp)) is not None and row.stopped and row.owner == ctx.owner)]
    if not tps:
        return None
    # rows another process claimed last: what this replica kept of their state may be stale
    forget_state_of(ctx, [tp for tp, row in rows.items() if tp in tps and row.owner != ctx.owner])
    marks = reader.watermarks(tps)
    for (topic, partition), m in marks.items():
        health.END_OFFSET.labels(ctx.metrics_app, topic, str(partition)).set(m.high)
    plan = planning.plan_batch(
        owned=tps,
        rows=rows,
        watermarks=marks,
        starting_offsets=ctx.cfg.kafka.starting_offsets,
        budget=budget(ctx, passes, stage),
        now_us=faults.clock_us(),
    )
    for warning in plan.warnings:
        log.warning(warning)
    if plan.new_rows:
        ctx.offsets.create(plan.new_rows, stage=stage.name)
    if not plan.partitions:
        return None
    replays = [p for p in plan.partitions if p.replay]
    if replays:
        log.info(
            "Replaying stage=%s plans=%s",
            stage.name,
            [(p.topic, p.partition, p.seq, p.start, p.end) for p in replays],
        )
    return plan, rows


def _read(
    ctx: ReplicaContext,
    passes: PassState,
    stage: api.Stage,
    plan: planning.BatchPlan,
    rows: dict[tuple[str, int], planning.OffsetRow],
    reader: kafkaio.RangeReader,
    clock: api.BatchClock,
    *,
    own: set[tuple[str, int]] | None = None,
) -> StageRead:
    """Claim the planned partitions and read their records into a DataFrame: through Spark's
    Kafka source for a large batch of an input topic, else in the driver (where a repartition
    topic's records already applied are dropped). `own`: replays claimed only while this
    process still holds them (`OffsetsTable.claim`)."""
    before = {tp: dict(rows[tp].source_positions) for tp in (p.tp for p in plan.partitions) if tp in rows}
    # what each claim expects to find: the row as read, or as just created
    expected = {**{(row.topic, row.partition): row for row in plan.new_rows}, **rows}
    where = None
    if stage.source is None:
        # an input topic's batch is sized by its plan, before its read (`floe_jobs.placement`)
        where = placement.decide(ctx.cfg, records=plan.records, spark_source=ctx.spark_reads)
        if where.spark_read:
            # records read are not counted (that would be a job): the plan's size is what is read
            _claim(ctx, stage, plan.partitions, expected, own=own)
            df = kafkaio.read_with_spark(ctx.spark, ctx.cfg, plan.partitions)
            clock.lap("read")
            return StageRead(df=df, parts=plan.partitions, size=plan.records, positions={}, where=where)
    return _read_in_driver(
        ctx, passes, stage, plan, reader, clock, where=where, before=before, expected=expected, own=own
    )


def _read_in_driver(
    ctx: ReplicaContext,
    passes: PassState,
    stage: api.Stage,
    plan: planning.BatchPlan,
    reader: kafkaio.RangeReader,
    clock: api.BatchClock,
    *,
    where: placement.Placement | None,
    before: Positions,
    expected: dict[tuple[str, int], planning.OffsetRow],
    own: set[tuple[str, int]] | None = None,
) -> StageRead:
    """The batch read by the lane's consumer. A repartition topic's records may be runs of rows:
    its read stops at the row cap, the plans are claimed as cut, before anything of the batch has
    effects, the rows whose source position was already applied are dropped, and where the batch
    runs is decided from the rows read (`where` None)."""
    parts = plan.partitions
    limits = planning.row_limits(parts, row_cap(ctx, stage)) if stage.source else None
    batch_records, stopped = reader.read_rows(parts, limits)
    parts = planning.cut(parts, stopped)
    _claim(ctx, stage, parts, expected, own=own)
    size = records.row_count(batch_records)
    average = records.average_bytes(batch_records)
    if average is not None:
        passes.avg_bytes[stage.name] = average
        passes.rows_per_record[stage.name] = size / len(batch_records)
    if stage.source is None:
        assert where is not None  # decided from the plan (`_read`)
        clock.lap("read")
        df = records.to_dataframe(ctx.spark, batch_records)
        clock.lap("frame")
        return StageRead(df=df, parts=parts, size=size, positions={}, where=where)
    read = len(batch_records)
    batch_records, seen = records.drop_applied(batch_records, before)
    skipped = read - len(batch_records)
    clock.lap("read")
    df = records.to_dataframe(ctx.spark, batch_records)
    clock.lap("frame")
    if skipped > 0:
        health.RECORDS_DEDUPED.labels(ctx.metrics_app).inc(skipped)
        log.info("Dropped already-applied repartition records stage=%s records=%d", stage.name, skipped)
    positions = {p.tp: planning.advance_positions(before.get(p.tp, {}), seen.get(p.tp, {})) for p in parts}
    if where is None:  # a repartition topic's batch is sized by the rows it read
        where = placement.for_rows(ctx.cfg, size)
    return StageRead(df=df, parts=parts, size=size, positions=positions, where=where)


def _committed(
    ctx: ReplicaContext,
    stage: api.Stage,
    parts: list[planning.PartitionPlan],
    mirrored: dict[tuple[str, int], int],
    *,
    size: int,
    out: int,
    dlq: int,
    replay: bool,
    clock: api.BatchClock,
) -> None:
    """The metrics and the log line of a committed batch; the committed offset gauge shows, like
    the group, the lowest position of the partition's stages (`mirrored`)."""
    app = ctx.metrics_app
    for (topic, partition), offset in mirrored.items():
        health.COMMITTED.labels(app, topic, str(partition)).set(offset)
    health.RECORDS_IN.labels(app, stage.name).inc(size)
    health.RECORDS_OUT.labels(app, stage.name).inc(out)
    health.RECORDS_DLQ.labels(app).inc(dlq)
    health.BATCHES.labels(app, stage.name, "replay" if replay else "new").inc()
    health.BATCH_SECONDS.labels(app, stage.name).observe(clock.total)
    health.BATCH_RECORDS.labels(app, stage.name).observe(size)
    health.LAST_BATCH.labels(app).set(time.time())
    health.STATE_CACHE_KEYS.labels(app).set(ctx.state_cache.keys)
    log.info(
        "Committed stage=%s partitions=%d records=%d out=%d seconds=%.2f %s",
        stage.name,
        len(parts),
        size,
        out,
        clock.total,
        clock.summary(),
    )


def _claim(
    ctx: ReplicaContext,
    stage: api.Stage,
    parts: list[planning.PartitionPlan],
    expected: dict[tuple[str, int], planning.OffsetRow],
    *,
    own: set[tuple[str, int]] | None = None,
) -> None:
    """Claim the batch's partitions before it has any effect (`OffsetsTable.claim`)."""
    assert ctx.offsets is not None
    if not ctx.offsets.claim(parts, expected, stage=stage.name, own=own):
        raise offsets.OwnershipLost([p.tp for p in parts], stage=stage.name)
    faults.point(f"{stage.name}:after-claim")


def check_owned(
    ctx: ReplicaContext,
    stage: api.Stage,
    parts: list[planning.PartitionPlan],
    held: dict[tuple[str, int], int],
    *,
    ask_cassandra: bool,
) -> None:
    """Give the batch up if its partitions changed hands since it started: the group took them
    (`held`: their assignments then), or, `ask_cassandra`, another replica claimed them. The
    group's word can come late to a replica that was paused; Cassandra's cannot."""
    assert ctx.offsets is not None and ctx.membership is not None
    now = ctx.membership.assignments(held)
    lost = [tp for tp, number in held.items() if now.get(tp) != number]
    if not lost and ask_cassandra:
        lost = ctx.offsets.lost(parts, stage=stage.name)
    if lost:
        raise offsets.OwnershipLost(lost, stage=stage.name)


def forget_state_of(ctx: ReplicaContext, tps: list[tuple[str, int]]) -> None:
    """Drop what this replica kept of the state of these input partitions' store partitions."""
    for _topic, partition in tps:
        ctx.state_cache.forget_partition(partition)


def batch_for(
    ctx: ReplicaContext,
    lane: LaneIO,
    stage: api.Stage,
    df: Any,
    clock: api.BatchClock,
    *,
    seqs: dict[tuple[str, int], int],
    stamps: dict[tuple[str, int], int] | None = None,
    dry_run: bool = False,
    records: int | None = None,
    where: placement.Placement | None = None,
    owned: statecache.Ownership | None = None,
    trial: bool = False,
) -> api.Batch:
    """What a stage function receives: its records, the session, the lane's sink and a clock.
    A warm-up's batch has no record count: it runs where a full batch would
    (`placement.for_warm_up`)."""
    assert lane.sink is not None
    return api.Batch(
        spark=ctx.spark,
        df=df,
        stage=stage.name,
        cfg=ctx.cfg,
        args=list(ctx.cfg.job.args),
        seqs=seqs,
        stamps=stamps or {},
        sink=lane.sink,
        clock=clock,
        dry_run=dry_run,
        records=records,
        where=where,
        owned=owned,
        writers=ctx.store_writers,
        trial=trial,
    )


def emitted(cfg: FloeConfig, result: Any) -> list[api.Emit]:
    """What a stage returned, as `Emit`s."""
    from pyspark.sql import DataFrame

    if result is None:
        return []
    out: list[api.Emit] = []
    for item in result if isinstance(result, list | tuple) else [result]:
        if isinstance(item, DataFrame):
            if "topic" in item.columns:
                item = api.Emit(item, None)
            elif cfg.kafka.output_topics:
                item = api.Emit(item, cfg.kafka.output_topics[0])
            else:
                raise ValueError("the stage returned rows but kafka.output_topics is empty")
        if not isinstance(item, api.Emit):
            raise TypeError(f"a stage returns DataFrame, Emit, a list of them or None; got {type(item).__name__}")
        out.append(item)
    return out


def write(sink: kafkaio.KafkaSink, e: api.Emit, *, large: bool = False, dry_run: bool = False) -> int:
    """What a stage emitted, written by the lane's sink (`KafkaSink.write`); the rows written.
    `large`: the batch's output goes to Spark's Kafka sink (`Placement.spark_sink`)."""
    return sink.write(
        e.df,
        topic=e.topic,
        large=large,
        order=e.order,
        positions=e.positions,
        dry_run=dry_run,
        rows=e.rows,
        table=e.table,
    )
