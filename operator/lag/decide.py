"""The native autoscaler: a pure function from a recorded window of lag samples to a decision.

Symbols, per app, at each sample (rates measured over `rate_seconds`):

    λ   input rate       = Δ(Σ end offsets) / Δt                 records/s
    κ   consumption rate = Δ(Σ committed offsets) / Δt           records/s
    L   lag              = Σ end offsets - Σ committed offsets    records
    R   replicas running
    μ   capacity of one replica (records/s), measured while the app was saturated:
        μ = κ / R over a rate window in which the lag stayed above the saturation floor
        (max(activation lag, κ·saturation_seconds)) at every sample, or over the last
        `up_seconds` if the lag grew at each of their samples with input at least
        `growth_ratio` times consumption there.
        A micro-batch app that keeps up always looks busy, so μ is never taken from an
        app that keeps up; the last measured μ is carried from decision to decision.
    u   target utilization (spec.autoscaling.targetUtilization / 100)
    T   catch-up time (spec.autoscaling.catchUpSeconds)

    recommendation  R* = ⌈ (λ + L / T) / (μ · u) ⌉
    bounds          R* ← max(minReplicas, min(R*, maxReplicas, partitions unless allowIdle))

Hysteresis: scale up only when, at every sample of the last `up_seconds`, even the upper
edge of the utilization band (u + band) needs more than R replicas; the app is then sized
to the lowest R* of those samples, so a single spike never scales. Scale down only when
the highest R* of the whole stabilization window is below R, the window has been observed
in full, the last scale is at least a window ago and no backlog is being worked off (the
lag would take more than `saturation_seconds` to drain at the current R); the step down
is at most `max_down_fraction` of R. A count chosen for the busiest sample of the window
at u needs a load above that peak by the band before it moves up again. Without a
measured μ the autoscaler only reacts to lag that grows at every sample
(R* = ⌈R · λ / κ⌉, at least R + 1) and never scales down.

What is summed. An app that re-keys reads its own repartition topics too, and a backlog there
is as much output still to come as one in the input: the stage after the re-key works it off
with the same replicas (one consumer group reads all of an app's topics). So a sample sums end
and committed offsets over every partition the app reads, input and repartition, and λ, κ, L
and μ are all in records of any of its topics: μ measured while the stage after a re-key works
off a backlog is that stage's pace, and a repartition backlog holds a scale down exactly as an
input one does (it needs the replicas its drain takes, and no step down while it takes more
than `saturation_seconds`). Counting only the input let the app scale down (WithinTarget, input
lag 38) while that stage still had thousands of records to go. The rates shown as inputRate and
consumptionRate in the decision are these sums' rates; the exported
`floe_consumergroup_*_records_per_second` series are the input's alone.

What a partition is, for the cap. Replicas stay capped at the input partitions, as the
ReplicasWithinPartitions condition and the HPA's and KEDA's caps count them: each repartition
topic has as many partitions as the widest input topic (`floe_jobs.startup.ensure_topics`), so
up to the cap every replica can own a partition of each stage, and one rule holds in all three
modes. Counting the repartition partitions too would let the native autoscaler alone run
replicas that own no input partition (the condition would warn about them); whether such
replicas, owning repartition partitions only, would speed the stage after a re-key is not
measured, so the cap does not assume it.

No decision is made for a suspended app (spec.suspend), an app whose reconciliation is paused
(`streaming.floe.dev/reconcile: paused`), on stale metrics or while a rollout is in progress. Replica counts
outside [minReplicas, cap] are corrected at once.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from floe_operator import model

Action = Literal["ScaleUp", "ScaleDown", "Hold"]

# Reasons (CamelCase, as in events and status.autoscaling.reason).
METRICS_STALE = "MetricsStale"
ROLLOUT_IN_PROGRESS = "RolloutInProgress"
COLLECTING = "CollectingMetrics"
OUTSIDE_BOUNDS = "OutsideBounds"
EXCEEDS_PARTITIONS = "ReplicasExceedPartitions"
LAG_ABOVE_CAPACITY = "LagAboveCapacity"
LAG_GROWING = "LagGrowing"
INPUT_WHILE_ZERO = "InputWhileScaledToZero"
LOW_LOAD = "SustainedLowLoad"
STABILIZING = "Stabilizing"
WORKING_OFF_BACKLOG = "WorkingOffBacklog"
NO_PROGRESS = "NoProgress"
WITHIN_TARGET = "WithinTarget"
AT_LIMIT = "AtLimit"
SUSPENDED = "Suspended"
RESTORING = "Restoring"
RECONCILE_PAUSED = "ReconcilePaused"


@dataclass(frozen=True)
class Sample:
    """One scrape of one app, summed over its input and repartition partitions."""

    at: float
    replicas: int  # replicas running (ready) when the sample was taken
    end: int  # Σ end offsets
    committed: int  # Σ committed offsets
    repartition_lag: int = 0  # the share of the lag in repartition topics (reported, not decided on)

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


UP_SECONDS_MIN = 10.0


@dataclass(frozen=True)
class Policy:
    min_replicas: int
    max_replicas: int
    catch_up_seconds: float = 300.0
    target_utilization: float = 0.7
    allow_idle: bool = False
    stabilization_seconds: float = 300.0
    up_seconds: float = 20.0
    rate_seconds: float = 60.0
    saturation_seconds: float = 30.0
    activation_lag: int = 100
    growth_ratio: float = 1.5
    band: float = 0.1
    max_down_fraction: float = 0.5
    # seconds between samples (the lag loop's interval): the up window reaches back half a tick
    # further, so that jitter in the ticks cannot drop the sample it was sized to hold
    tick_seconds: float = 10.0

    @staticmethod
    def up_seconds_for(tick_seconds: float) -> float:
        """The up window at a lag interval of `tick_seconds`: two ticks, so that three samples in a
        row must agree, and never under 10 s, so that one sample that needs more replicas never scales
        (a burst that leaves a backlog still can: the rates are over the 60 s rate window). At
        the default 5 s interval a surge is acted on about 10-15 s after it starts (HPA's own
        period is 15 s)."""
        return max(UP_SECONDS_MIN, 2 * tick_seconds)

    def up_since(self, now: float) -> float:
        """The oldest time a sample of the up window (`up_seconds`, meant as whole ticks) may have."""
        return now - self.up_seconds - self.tick_seconds / 2

    @classmethod
    def from_spec(cls, spec: model.AutoscalingSpec, **overrides: Any) -> Policy:
        base = cls(
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            catch_up_seconds=float(spec.catch_up_seconds),
            target_utilization=spec.target_utilization / 100.0,
            allow_idle=spec.allow_idle,
            stabilization_seconds=float(spec.stabilization_window_seconds),
        )
        return dataclasses.replace(base, **overrides)


@dataclass(frozen=True)
class Context:
    now: float
    replicas: int  # spec.replicas now
    partitions: int
    stale: bool = False
    rollout: bool = False
    last_scale_at: float | None = None
    capacity: float | None = None  # μ carried from the previous decision
    suspended: bool = False  # spec.suspend: nothing may scale the app
    restoring: bool = False  # a restore holds the pods at zero (under way, or failed): nor then
    paused: bool = False  # streaming.floe.dev/reconcile: paused: the operator changes nothing of the app


@dataclass(frozen=True)
class Decision:
    replicas: int
    action: Action
    reason: str
    message: str
    capacity: float | None = None
    inputs: Mapping[str, float | int | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    """Rates and recommendation at one sample."""

    at: float
    input_rate: float
    consumption_rate: float
    lag: int
    replicas: int
    saturated: bool
    growing: bool
    capacity: float | None
    want: int | None  # recommendation at u (before bounds)
    want_up: int | None  # recommendation at u + band (before bounds): the scale-up trigger


def _base(times: Sequence[float], i: int, seconds: float) -> int:
    """Index of the latest sample at least `seconds` before sample i (or the oldest one)."""
    return max(0, bisect.bisect_right(times, times[i] - seconds, 0, i) - 1)


def _mean_replicas(window: Sequence[Sample]) -> float:
    """Replicas running over the window, weighted by time.

    An interval counts the larger of the counts at its ends: pods started or stopped during it
    are counted as running throughout, which errs towards a lower capacity, so more replicas.
    """
    total = window[-1].at - window[0].at
    if total <= 0:
        return float(max(1, window[-1].replicas))
    weighted = sum((b.at - a.at) * max(a.replicas, b.replicas) for a, b in itertools.pairwise(window))
    return max(1.0, weighted / total)


def _recommend(rate: float, lag: int, capacity: float, *, catch_up: float, utilization: float) -> int:
    needed = rate + lag / catch_up
    if needed <= 0:
        return 0
    return math.ceil(needed / (capacity * utilization) - 1e-9)


def points(samples: Sequence[Sample], policy: Policy, capacity: float | None = None) -> list[Point]:
    """Rates, saturation, capacity and recommendations at every sample (μ carried forward)."""
    out: list[Point] = []
    mu = capacity
    high = min(1.0, policy.target_utilization + policy.band)
    times = [x.at for x in samples]
    for i, s in enumerate(samples):
        if i == 0:
            continue
        j = _base(times, i, policy.rate_seconds)
        dt = s.at - samples[j].at
        if dt <= 0:
            continue
        lam = max(0.0, (s.end - samples[j].end) / dt)
        kappa = max(0.0, (s.committed - samples[j].committed) / dt)
        window = samples[j : i + 1]
        floor = max(policy.activation_lag, kappa * policy.saturation_seconds)
        backlog = all(w.lag >= floor for w in window)
        # Growth is judged over the up window only, so a burst after a quiet spell is seen at once.
        k = bisect.bisect_left(times, policy.up_since(s.at), 0, i)
        recent = samples[k : i + 1]
        span = s.at - samples[k].at
        recent_lambda = (s.end - samples[k].end) / span if span > 0 else 0.0
        recent_kappa = (s.committed - samples[k].committed) / span if span > 0 else 0.0
        # Growth that counts: at every sample, and input clearly above consumption, so the
        # ripple of a micro-batch app that keeps up is not taken for saturation.
        growing = (
            len(recent) >= 3
            and all(b.lag > a.lag for a, b in itertools.pairwise(recent))
            and s.lag > policy.activation_lag
            and recent_lambda >= policy.growth_ratio * recent_kappa
        )
        if s.replicas > 0:
            if backlog and kappa > 0:
                mu = kappa / _mean_replicas(window)
            elif growing and recent_kappa > 0:
                mu = recent_kappa / _mean_replicas(recent)
        saturated = backlog or growing
        want = want_up = None
        if mu is not None and mu > 0:
            want = _recommend(lam, s.lag, mu, catch_up=policy.catch_up_seconds, utilization=policy.target_utilization)
            want_up = _recommend(lam, s.lag, mu, catch_up=policy.catch_up_seconds, utilization=high)
        out.append(Point(s.at, lam, kappa, s.lag, s.replicas, saturated, growing, mu, want, want_up))
    return out


def _cap(policy: Policy, partitions: int) -> int:
    top = policy.max_replicas
    if not policy.allow_idle and partitions > 0:
        top = min(top, partitions)
    return max(policy.min_replicas, top)


def _bound(value: int, policy: Policy, partitions: int) -> int:
    return max(policy.min_replicas, min(value, _cap(policy, partitions)))


@dataclass(frozen=True)
class _Frame:
    """What every step of one decision reads: the policy and context, the points of the window,
    the limit, μ, and the inputs each decision reports (the same whichever step decides)."""

    samples: Sequence[Sample]
    policy: Policy
    ctx: Context
    pts: list[Point]
    last: Point | None
    cap: int
    mu: float | None
    inputs: Mapping[str, float | int | None]

    @classmethod
    def of(cls, samples: Sequence[Sample], policy: Policy, ctx: Context) -> _Frame:
        pts = points(samples, policy, ctx.capacity)
        last = pts[-1] if pts else None
        mu = last.capacity if last is not None else ctx.capacity
        inputs: dict[str, float | int | None] = {
            "replicas": ctx.replicas,
            "partitions": ctx.partitions,
            "lag": last.lag if last else None,
            "repartitionLag": samples[-1].repartition_lag if samples and samples[-1].repartition_lag else None,
            "inputRate": round(last.input_rate, 3) if last else None,
            "consumptionRate": round(last.consumption_rate, 3) if last else None,
            "capacityPerReplica": round(mu, 3) if mu is not None else None,
            "recommended": last.want if last else None,
        }
        return cls(
            samples=samples,
            policy=policy,
            ctx=ctx,
            pts=pts,
            last=last,
            cap=_cap(policy, ctx.partitions),
            mu=mu,
            inputs=inputs,
        )

    @property
    def current(self) -> int:
        return self.ctx.replicas

    def hold(self, reason: str, message: str) -> Decision:
        return Decision(self.current, "Hold", reason, message, self.mu, self.inputs)

    def scale(self, to: int, reason: str, message: str) -> Decision:
        action: Action = "ScaleUp" if to > self.current else "ScaleDown"
        return Decision(to, action, reason, message, self.mu, self.inputs)

    def bound(self, value: int) -> int:
        return _bound(value, self.policy, self.ctx.partitions)


def decide(samples: Sequence[Sample], policy: Policy, ctx: Context) -> Decision:
    """The replicas the app should run now, and why. Pure: same inputs, same decision.

    The steps run in the order their reasons take precedence: what forbids or forces a count
    whatever the load, then scaling up (sustained over the up window), then scaling down
    (agreed over the whole stabilization window). A step that does not decide passes on.
    """
    f = _Frame.of(samples, policy, ctx)
    if (decided := _outside_the_load(f)) is not None:
        return decided
    last = f.last
    if last is None:
        return f.hold(COLLECTING, "Not enough samples yet")
    # Scaled to zero: any input or lag brings one replica (or minReplicas) back.
    if f.current == 0:
        if last.lag > 0 or last.input_rate > 0:
            return f.scale(max(1, policy.min_replicas), INPUT_WHILE_ZERO, f"Input arrived (lag {last.lag})")
        return f.hold(WITHIN_TARGET, "No input")
    up_pts = [p for p in f.pts if p.at >= policy.up_since(ctx.now)]
    if not up_pts:
        return f.hold(COLLECTING, "No recent samples")
    if (decided := _scale_up(f, last, up_pts)) is not None:
        return decided
    if last.lag > policy.activation_lag and last.consumption_rate == 0 and all(p.consumption_rate == 0 for p in up_pts):
        return f.hold(NO_PROGRESS, f"Lag {last.lag} but nothing was consumed; more replicas would not help")
    if f.mu is None:
        return f.hold(WITHIN_TARGET, "Capacity per replica not measured yet; scaling down needs it")
    return _scale_down(f, last, f.mu)


def _outside_the_load(f: _Frame) -> Decision | None:
    """A hold or a correction that no sample can change: the app is suspended, the samples are
    stale or mid-rollout, or spec.replicas lies outside [minReplicas, cap]."""
    ctx, policy, current = f.ctx, f.policy, f.current
    if ctx.suspended:
        return f.hold(SUSPENDED, "The app is suspended (spec.suspend); it is not scaled until it resumes")
    if ctx.restoring:
        return f.hold(RESTORING, "A restore holds the app's pods at zero (status.stateRestore or "
                                 "status.rollbackRestore, under way or failed; the Ready condition says why); it is "
                                 "not scaled until they run again")
    if ctx.paused:
        return f.hold(
            RECONCILE_PAUSED,
            f"Reconciliation is paused ({model.RECONCILE_ANNOTATION}: {model.RECONCILE_PAUSED}); the app is not "
            "scaled until the annotation is removed",
        )
    if ctx.stale:
        return f.hold(METRICS_STALE, "Lag metrics are stale; no scaling on old data")
    if ctx.rollout:
        return f.hold(ROLLOUT_IN_PROGRESS, "A rollout is in progress; waiting for it to finish")
    if current > f.cap:
        why = EXCEEDS_PARTITIONS if current <= policy.max_replicas else OUTSIDE_BOUNDS
        return f.scale(
            f.cap,
            why,
            f"{current} replicas exceed the limit of {f.cap} ({ctx.partitions} input partitions, "
            f"maxReplicas {policy.max_replicas})",
        )
    if current < policy.min_replicas:
        return f.scale(policy.min_replicas, OUTSIDE_BOUNDS, f"{current} replicas is below minReplicas")
    return None


def _scale_up(f: _Frame, last: Point, up_pts: Sequence[Point]) -> Decision | None:
    """Up when the need is sustained over the up window: every sample agrees, or the lag grew at
    each of them. The app is sized for the lowest need of the window, so one spike never scales.
    Without μ only lag growing at every sample scales, by the ratio of input to consumption."""
    policy, current, mu = f.policy, f.current, f.mu
    wants = [(p.want, p.want_up) for p in up_pts if p.want is not None and p.want_up is not None]
    if mu is not None and wants and (len(wants) == len(up_pts) or last.growing):
        lowest = min(w for w, _ in wants)
        trigger = min(u for _, u in wants)
        target = f.bound(lowest)
        if trigger > current and target > current:
            return f.scale(
                target,
                LAG_ABOVE_CAPACITY,
                f"Input {last.input_rate:.1f}/s and lag {last.lag} need {lowest} replicas at "
                f"{mu:.1f} records/s each and {policy.target_utilization:.0%} utilization",
            )
    elif mu is None and last.growing and last.consumption_rate > 0:
        want = max(current + 1, math.ceil(current * last.input_rate / last.consumption_rate - 1e-9))
        target = f.bound(want)
        if target > current:
            return f.scale(target, LAG_GROWING, f"Lag grew at every sample to {last.lag}; capacity not measured yet")
    return None


def _scale_down(f: _Frame, last: Point, mu: float) -> Decision:
    """Down only when the whole stabilization window agrees, has been observed in full, the last
    scale is a window ago and no backlog is being worked off; at most `max_down_fraction` a step."""
    policy, ctx, current = f.policy, f.ctx, f.current
    stab = [p for p in f.pts if p.at >= ctx.now - policy.stabilization_seconds]
    highest = max((p.want for p in stab if p.want is not None), default=None)
    if highest is None or f.bound(highest) >= current:
        if current >= f.cap and last.want is not None and last.want > f.cap:
            return f.hold(AT_LIMIT, f"{last.want} replicas recommended but the limit is {f.cap}")
        return f.hold(WITHIN_TARGET, f"{current} replicas fit the load")
    covered = f.samples[0].at <= ctx.now - policy.stabilization_seconds
    settled = ctx.last_scale_at is None or ctx.now - ctx.last_scale_at >= policy.stabilization_seconds
    if not (covered and settled):
        return f.hold(STABILIZING, f"Fewer replicas ({highest}) fit; waiting out the stabilization window")
    drain = last.lag / (mu * current)
    if drain > policy.saturation_seconds:
        share = f.samples[-1].repartition_lag
        where = f", {share} of them in repartition topics" if share else ""
        return f.hold(WORKING_OFF_BACKLOG, f"Working off a backlog of {last.lag} records{where} (~{drain:.0f} s)")
    step = max(1, math.floor(current * policy.max_down_fraction))
    target = max(f.bound(highest), current - step)
    return f.scale(
        target,
        LOW_LOAD,
        f"Input {last.input_rate:.1f}/s and lag {last.lag} fit {highest} replicas for "
        f"{policy.stabilization_seconds:.0f} s; stepping down to {target}",
    )
