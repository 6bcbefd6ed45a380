"""The warm-up: every stage run once as a dry run before the replica joins its group.

The first run of a stage in a process plans, compiles and loads everything it uses, several
times what a warm run costs, and it stalls the other lanes meanwhile; partitions a replica takes
over must not wait for that, in a handover or when the group protocol hands it a topic it did
not read before. An empty batch is not enough: what runs over no rows skips most of that work,
so the dry run reads the last records of one partition of the stage's topics (none for a new
app). With Spark's Kafka source in use for large batches of input topics, such a stage runs a
second time over the same records read by it (its first read in a process loads the Kafka
client).

Nothing is committed, written or produced: no plan is stored, the batch has no sequence, its
helpers read every key as absent and write nothing (`Batch.dry_run`), and what it emits is
collected and dropped. A stage that fails on this input starts cold; one that shows a
configuration error (`api.StageConfigError`: two stages writing one store, a helper opening a
store of a type it cannot use) stops the replica, exit code 2, before it joins its group. The
helpers check the declared types before the dry run skips the stores, so even a new app's run
over no records finds them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from floe_jobs import api, kafkaio, placement, planning, records, stagepass
from floe_jobs.lanes import Lane
from floe_jobs.replica import ReplicaContext

log = logging.getLogger("floe_jobs")

# records a stage's warm-up runs over (the last ones of one partition of its topics)
WARM_UP_RECORDS = 50


def warm_up(ctx: ReplicaContext, lanes: list[Lane]) -> None:
    """Run every stage of every lane once as a dry run, each lane in a thread of its own and in
    its scheduler pool, as the lanes then run their batches: a lane's first Spark jobs plan and
    compile while another lane's Python reads and frames its records, and the JVM compiles two
    jobs at once on two cores. The first configuration error stops the replica."""
    if len(lanes) < 2:
        for lane in lanes:
            _warm_up_lane(ctx, lane)
        return
    failed: list[BaseException] = []

    def run(lane: Lane) -> None:
        try:
            _warm_up_lane(ctx, lane)
        except BaseException as exc:  # raised again in the calling thread
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(lane,), name=f"floe-warm-up-{lane.name}") for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]


def _warm_up_lane(ctx: ReplicaContext, lane: Lane) -> None:
    """Every stage of `lane` once as a dry run, one after the other, in the lane's scheduler pool."""
    assert lane.reader is not None and lane.sink is not None
    ctx.spark.sparkContext.setLocalProperty("spark.scheduler.pool", lane.name)
    for stage in lane.stages:
        clock = api.BatchClock()
        try:
            plans = sample(lane.reader, ctx.stage_topics(stage))
            got = lane.reader.read(plans)
            clock.lap("read")
            _dry_run(ctx, lane, stage, records.to_dataframe(ctx.spark, got), clock)
            if ctx.spark_reads and plans and stage.source is None:
                df = kafkaio.read_with_spark(ctx.spark, ctx.cfg, plans)
                _dry_run(ctx, lane, stage, df, clock, lap="spark")
            log.info(
                "Warmed up stage=%s records=%d seconds=%.2f %s",
                stage.name,
                len(got),
                clock.total,
                clock.summary(),
            )
        except api.StageConfigError:  # a configuration error: the replica must not start
            raise
        except Exception as exc:  # a stage that refuses this input only starts cold
            log.warning("Warm-up of stage=%s failed (it starts cold) error=%s", stage.name, exc)
    ctx.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)


def _dry_run(
    ctx: ReplicaContext, lane: Lane, stage: api.Stage, df: Any, clock: api.BatchClock, *, lap: str = ""
) -> None:
    """Run `stage` over `df` as a dry run, its phases timed on `clock`."""
    assert lane.sink is not None
    where = placement.for_warm_up(ctx.cfg)
    result = stage.fn(stagepass.batch_for(ctx, lane, stage, df, clock, seqs={}, dry_run=True, where=where))
    clock.lap(lap + "fn")
    for e in stagepass.emitted(ctx.cfg, result):
        stagepass.write(lane.sink, e, dry_run=True)
    clock.lap(lap + "emit")


def sample(reader: kafkaio.RangeReader, topics: list[str]) -> list[planning.PartitionPlan]:
    """A plan over the last WARM_UP_RECORDS records of the first partition of `topics` that has any."""
    md = reader.partitions(topics)
    for topic in topics:
        for partition in sorted(md.get(topic, [])):
            marks = reader.watermarks([(topic, partition)])[(topic, partition)]
            if marks.high > marks.low:
                start = max(marks.low, marks.high - WARM_UP_RECORDS)
                return [planning.PartitionPlan(topic, partition, 0, start, marks.high, replay=False)]
    return []
