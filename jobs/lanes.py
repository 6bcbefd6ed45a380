"""Lanes: the threads a replica runs its stages in, and the loop each of them turns.

Stages that read a common topic share a lane and run one after the other in it. Each has offsets
rows of its own (`floe_jobs.offsets`), so this is not what keeps them exact; it keeps to one thread
the positions this replica mirrors into the group for the topic's partitions (the lowest of its
stages', `stagepass.group_positions`) and the one-time takeover of a row an earlier release wrote
for all of them. The others run side by side, so word count's
`split` commits its input partitions once per batch of its own instead of once per turn of both
stages, and its batches overlap `count`'s on the machine's cores. Each lane has its own Kafka
reader and producer and its own Spark scheduler pool (FAIR between lanes, so one lane's job does
not queue behind another's tasks); lanes share the Spark session, the Cassandra sessions and the
group member.

Between two batches of a lane is a boundary for revocations (`Membership.batch`). A lane's
failed batch is retried with a backoff; an outage of a dependency is waited out without being
counted (`floe_jobs.outages`). A batch that keeps failing otherwise is narrowed to the records
it fails on (`floe_jobs.quarantine`), which are dead-lettered or stop their partitions; the lane
gives up, stopping the replica, only when the failure is in no record.

The lanes receive the replica context (`floe_jobs.replica`), the stop flags (`stopping.Stops`)
and the stage passes' state (`stagepass.PassState`); the readiness they keep together lives here
(`Readiness`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from floe_jobs import api, health, kafkaio, offsets, outages, poison, quarantine, stagepass
from floe_jobs.config import FloeConfig, KafkaSettings
from floe_jobs.replica import ReplicaContext
from floe_jobs.stopping import Stops

log = logging.getLogger("floe_jobs")

# consecutive failed passes (outages not counted) after which a lane gives up
MAX_FAILURES = 5
# consecutive failed passes after which the failing batch is narrowed to its poison records
NARROW_AFTER = 3
# narrowings without a full pass in between after which a lane stops narrowing (what it found
# did not make the batch pass: the failure is not only in those records)
MAX_NARROWINGS = 3


@dataclass
class Lane:
    """Stages run one after the other by one thread, with the Kafka clients only it uses."""

    name: str
    stages: list[api.Stage]
    topics: frozenset[str]
    reader: kafkaio.RangeReader | None = None
    sink: kafkaio.KafkaSink | None = None
    # assignment generation (`Membership.rebalances`) seen at the start of its last full pass
    passed_generation: int = -1
    failures: int = 0
    # the stage of the lane's running (or last failed) batch
    current: api.Stage | None = None
    # narrowings since the lane's last full pass, and whether the current failures were narrowed
    narrowings: int = 0
    narrowed_streak: bool = False
    # poison records found in this lane's batches, for the replays of their plans
    narrowed: poison.Narrowed = field(default_factory=poison.Narrowed)


@dataclass
class Readiness:
    """What the lanes keep together for the replica's readiness: the assignment last counted,
    under the lock that guards it and every lane's `passed_generation` (`_passed`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    last_owned: list[tuple[str, int]] = field(default_factory=list)


def group_lanes(
    stages: list[api.Stage], topics_of: Callable[[api.Stage], Iterable[str]]
) -> list[tuple[list[api.Stage], frozenset[str]]]:
    """Stages grouped so that no two groups read a common topic (such stages run one after the
    other, see the module docstring); stage order is kept within a group."""
    groups: list[tuple[list[api.Stage], frozenset[str]]] = []
    for stage in stages:
        topics = frozenset(topics_of(stage))
        merged = [g for g in groups if g[1] & topics]
        rest = [g for g in groups if not g[1] & topics]
        members = [s for g in merged for s in g[0]] + [stage]
        members.sort(key=stages.index)
        groups = [*rest, (members, topics.union(*(g[1] for g in merged)))]
    groups.sort(key=lambda g: stages.index(g[0][0]))
    return groups


def build(
    cfg: FloeConfig, stages: list[api.Stage], topics_of: Callable[[api.Stage], Iterable[str]], *, client_id: str
) -> list[Lane]:
    """The job's lanes with their Kafka clients; the first lane's clients carry `client_id`, the
    others a numbered one, so the brokers' logs tell them apart."""
    lanes = []
    for i, (members, topics) in enumerate(group_lanes(stages, topics_of)):
        lane_client = client_id if i == 0 else f"{client_id}-{i}"
        lanes.append(
            Lane(
                name="+".join(s.name for s in members),
                stages=members,
                topics=topics,
                reader=kafkaio.RangeReader(cfg, client_id=lane_client),
                sink=kafkaio.KafkaSink(cfg, client_id=lane_client),
            )
        )
    return lanes


def run_all(
    ctx: ReplicaContext, lanes: list[Lane], *, ready: Readiness, passes: stagepass.PassState, stops: Stops
) -> None:
    """Run every lane in its own thread until SIGTERM or a lane gives up. The calling thread
    only waits, so signals are handled at once."""
    threads = [
        threading.Thread(
            target=run_lane,
            args=(ctx, lane),
            kwargs={"lanes": lanes, "ready": ready, "passes": passes, "stops": stops},
            name=f"floe-lane-{lane.name}",
            daemon=True,
        )
        for lane in lanes
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)


def run_lane(
    ctx: ReplicaContext,
    lane: Lane,
    *,
    lanes: list[Lane],
    ready: Readiness,
    passes: stagepass.PassState,
    stops: Stops,
) -> None:
    """The loop of one lane: a pass over its stages, one batch each, until the replica stops."""
    assert ctx.membership is not None
    # jobs of this thread go to the lane's pool: FAIR scheduling between lanes
    ctx.spark.sparkContext.setLocalProperty("spark.scheduler.pool", lane.name)
    outage = outages.Wait(lane.name, readiness=ctx.health)
    while not stops.should_stop():
        ctx.health.beat(lane.name)
        worked = 0
        generation = ctx.membership.rebalances
        try:
            for stage in lane.stages:
                if stops.should_stop():
                    break
                lane.current = stage
                # one batch per stage; between two of them is a boundary for revocations
                with ctx.membership.batch(lane.topics) as owned:
                    tps = [tp for tp in owned if tp[0] in set(ctx.stage_topics(stage))]
                    if tps:
                        worked += stagepass.run(ctx, passes, stage, tps, lane)
            lane.failures = 0
            lane.narrowings = 0
            lane.narrowed_streak = False
            outage.succeeded()
            _passed(ctx, lane, generation, lanes=lanes, ready=ready)
        except offsets.OwnershipLost as lost:
            # not a failure: this replica was paused past its session and another one owns
            # the partitions now; the next pass plans only what the group gives it
            log.warning(
                "Abandoned batch stage=%s partitions=%s (another replica owns them now); "
                "this replica commits nothing of it",
                lost.stage,
                lost.tps,
            )
            stagepass.forget_state_of(ctx, lost.tps)
            continue
        except Exception as exc:
            if not _failed(ctx, lane, exc, outage, ready=ready, stops=stops):
                return
            continue
        if pause := pause_after(ctx.cfg.kafka, worked):
            # an assignment change or a stop ends the wait at once
            ctx.membership.wait(pause)


def pause_after(kafka: KafkaSettings, worked: int) -> float:
    """Seconds a lane waits after a pass that read `worked` records (a re-keyed run counts as its
    rows, as `stagepass.run` returns them). Nothing read: the poll interval, until new records
    are likely. A trickle (fewer than a hundredth of `max_records_per_batch`):
    the linger, so that records gather, since a small batch costs about the same whatever it
    reads (docs/runtime.md, "A trickle lingers"). More: none, the next pass starts at once."""
    if not worked:
        return kafka.poll_interval_ms / 1000
    if worked < kafka.max_records_per_batch / 100:
        return kafka.linger_ms / 1000
    return 0.0


def _passed(ctx: ReplicaContext, lane: Lane, generation: int, *, lanes: list[Lane], ready: Readiness) -> None:
    """A lane completed a pass over what it owned at `generation`: ready once every lane has
    done so since the last assignment change."""
    assert ctx.membership is not None
    owned = ctx.membership.owned
    with ready.lock:
        lane.passed_generation = generation
        if owned != ready.last_owned:
            ready.last_owned = owned
            health.OWNED.labels(ctx.metrics_app).set(len(owned))
            health.REBALANCES.labels(ctx.metrics_app).set(ctx.membership.rebalances)
        ctx.health.owned = len(owned)
        current = ctx.membership.rebalances
        ctx.health.batch_since_assignment = all(ln.passed_generation == current for ln in lanes)


def _failed(
    ctx: ReplicaContext, lane: Lane, exc: Exception, outage: outages.Wait, *, ready: Readiness, stops: Stops
) -> bool:
    """A lane's pass failed with `exc`: wait before the next pass; False when the lane gives up
    (the other lanes stop too). A dependency's outage is waited out and not counted: a restart
    would only add a Spark start to it. Otherwise the lane is not ready until a pass completes
    again, so that a replica whose batches keep failing leaves its Service's endpoints and holds
    up a rollout that brought it."""
    dependency = outages.unavailable(exc)
    if dependency is not None:
        stops.stop_requested.wait(outage.failed(dependency, exc))
        return True
    lane.failures += 1
    with ready.lock:
        lane.passed_generation = -1
        ctx.health.batch_since_assignment = False
    log.exception(
        "Batch failed lane=%s failures=%d; its plan stays in flight and is replayed",
        lane.name,
        lane.failures,
    )
    if (
        lane.failures >= NARROW_AFTER
        and not lane.narrowed_streak
        and lane.narrowings < MAX_NARROWINGS
        and lane.current is not None
    ):
        # a batch that keeps failing: narrow it to the records that fail (`floe_jobs.quarantine`);
        # once they are dead-lettered or their partitions stopped, the next pass goes on
        lane.narrowed_streak = True
        try:
            found = quarantine.narrow(ctx, lane, lane.current)
        except Exception:
            log.exception("Narrowing the failing batch of lane=%s failed; it is retried as a whole", lane.name)
            found = False
        if found:
            lane.narrowings += 1
            lane.failures = 0
            lane.narrowed_streak = False
            return True
    if lane.failures >= MAX_FAILURES:
        stops.halt.set()
        return False
    stops.stop_requested.wait(min(2**lane.failures, 30))
    return True
