"""The native scale actuator: one sample per tick, `decide.decide`, the scale subresource, events.

Apps in spec.autoscaling.mode Native are scaled here; HPA and KEDA scale through the children
of `scalers`. A change of replicas is written through the StreamingApp's scale subresource (so
spec.replicas stays the one number the reconcile rolls out), logged and posted as an event
with the decision's inputs; a hold is posted only when its reason is one a person acts on.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from floe_operator import conditions, k8s, model
from floe_operator.lag import decide, metrics, scrape

log = logging.getLogger(__name__)

# A 24 h stabilization window (the CRD's longest) and its rate window at the default 5 s lag
# interval. At a shorter interval such a window is never seen in full, so the app never scales
# down (the safe side); the operator's docs say so.
MAX_SAMPLES = 18000

EventSink = Callable[[Mapping[str, Any], str, str, str], Awaitable[None]]

# Holds worth an event: a person may have to act on them.
WARNED_HOLDS = (decide.METRICS_STALE, decide.AT_LIMIT, decide.NO_PROGRESS)


@dataclass
class ScaleMemory:
    """What the actuator remembers of one app between ticks (bounded)."""

    samples: deque[decide.Sample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    last_scale_at: float | None = None
    capacity: float | None = None
    last_reason: str | None = None
    pending: tuple[int, float] | None = None  # replicas written, when; until the watch shows them
    restored: bool = False
    # the partitions the samples are summed over; samples of other partitions are dropped
    measured: frozenset[tuple[str, int]] | None = None

    def restore(self, app: model.StreamingApp) -> None:
        """Carry capacity and the last scale time across operator restarts (from status.autoscaling)."""
        self.restored = True
        previous = app.status.get("autoscaling") or {}
        capacity = previous.get("capacityPerReplica")
        if isinstance(capacity, int | float) and capacity > 0:
            self.capacity = float(capacity)
        self.last_scale_at = parse_time(previous.get("lastScaleTime"))


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def rollout_in_progress(app: model.StreamingApp, replicas: int) -> bool:
    """The Deployment is still converging: Progressing, or fewer pods running or ready than asked for."""
    status = app.status
    progressing = conditions.find(status.get("conditions") or [], conditions.PROGRESSING)
    if progressing is not None and progressing.get("status") == "True":
        return True
    for key in ("replicas", "readyReplicas", "updatedReplicas"):
        if key in status and int(status[key]) != replicas:
            return True
    return False


def running_replicas(app: model.StreamingApp) -> int:
    return int(app.status.get("readyReplicas", app.spec.replicas))


def sample_of(result: scrape.AppLag, *, at: float, replicas: int) -> decide.Sample:
    """The autoscaler's sample of a scrape: sums over every partition the app reads, its
    repartition topics' included (`decide.Sample` says why)."""
    return decide.Sample(
        at=at,
        replicas=replicas,
        end=result.end_total,
        committed=result.committed_total,
        repartition_lag=result.repartition_total,
    )


def keep_comparable(mem: ScaleMemory, result: scrape.AppLag) -> None:
    """Drop the samples when the partitions summed changed (a repartition topic first counted, a
    partition added): sums over other partitions are not comparable, and their difference would
    read as a burst of input and consumption. The window then fills again, which holds any scale
    down for a stabilization window (the safe side)."""
    partitions = frozenset((p.topic, p.partition) for p in result.partitions)
    if mem.measured is not None and partitions != mem.measured:
        mem.samples.clear()
    mem.measured = partitions


def held_by_restore(app: model.StreamingApp) -> bool:
    """Whether the reconcile holds the app's pods at zero for a restore, as its Ready condition
    says (`Restoring`, or `RestoreFailed`: a failed restore whose positions may be gone,
    `restorejob.holds`). A restore's record cannot tell alone: one that failed before it deleted
    anything leaves the app running with the failure recorded."""
    ready = conditions.find(app.status.get("conditions") or [], conditions.READY) or {}
    return ready.get("status") == "False" and ready.get("reason") in (conditions.RESTORING, conditions.RESTORE_FAILED)


@dataclass(frozen=True)
class Actuator:
    """Decides and writes the replicas of apps in Native mode."""

    cluster: k8s.Cluster
    metrics: metrics.LagMetrics
    emit: EventSink
    interval_seconds: float
    rate_seconds: float

    def context(
        self, app: model.StreamingApp, result: scrape.AppLag, now: float, mem: ScaleMemory, policy: decide.Policy
    ) -> decide.Context:
        """Record this tick's sample and say what the decision starts from."""
        replicas = app.spec.replicas
        if mem.pending is not None:
            if mem.pending[0] == replicas or now - mem.pending[1] > 6 * self.interval_seconds:
                mem.pending = None
            else:
                replicas = mem.pending[0]
        if not result.stale:
            keep_comparable(mem, result)
            mem.samples.append(sample_of(result, at=now, replicas=running_replicas(app)))
        keep = policy.stabilization_seconds + policy.rate_seconds + 3 * self.interval_seconds
        while mem.samples and mem.samples[0].at < now - keep:
            mem.samples.popleft()
        return decide.Context(
            now=now,
            replicas=replicas,
            partitions=result.input_partitions if not result.stale else int(app.status.get("partitions") or 0),
            stale=result.stale,
            rollout=rollout_in_progress(app, replicas),
            last_scale_at=mem.last_scale_at,
            capacity=mem.capacity,
            suspended=app.spec.suspend,
            restoring=app.restoring_in_place or held_by_restore(app),
            paused=app.reconcile_paused,
        )

    async def native(
        self,
        app: model.StreamingApp,
        auto: model.AutoscalingSpec,
        result: scrape.AppLag,
        *,
        now: float,
        mem: ScaleMemory,
        body: Mapping[str, Any],
    ) -> decide.Decision:
        """Decide the app's replicas and act on the decision; `body` is the app's, for events."""
        policy = decide.Policy.from_spec(
            auto,
            rate_seconds=self.rate_seconds,
            tick_seconds=self.interval_seconds,
            up_seconds=decide.Policy.up_seconds_for(self.interval_seconds),
        )
        ctx = self.context(app, result, now, mem, policy)
        decision = decide.decide(list(mem.samples), policy, ctx)
        mem.capacity = decision.capacity
        self.metrics.record_decision(app.namespace, app.name, decision)
        inputs = " ".join(f"{k}={v}" for k, v in decision.inputs.items())
        if decision.action != "Hold":
            await self.cluster.scale(app.namespace, app.name, decision.replicas)
            mem.pending = (decision.replicas, now)
            mem.last_scale_at = now
            log.info(
                "Scaled app=%s/%s from=%d to=%d reason=%s %s",
                app.namespace,
                app.name,
                ctx.replicas,
                decision.replicas,
                decision.reason,
                inputs,
            )
            await self.emit(
                body,
                "Normal",
                decision.reason,
                f"Scaled from {ctx.replicas} to {decision.replicas}: {decision.message} ({inputs})",
            )
        else:
            log.debug("Held app=%s/%s reason=%s %s", app.namespace, app.name, decision.reason, inputs)
            if decision.reason != mem.last_reason and decision.reason in WARNED_HOLDS:
                await self.emit(
                    body, "Warning", decision.reason, f"Holding {ctx.replicas} replicas: {decision.message} ({inputs})"
                )
        mem.last_reason = decision.reason
        return decision
