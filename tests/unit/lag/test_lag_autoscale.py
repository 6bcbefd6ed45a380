"""The native autoscaler over recorded scenarios: each is a window of samples of a simulated app
with a known capacity per replica, replayed through `decide.decide` every scrape; the
decisions are applied as the operator would (the Deployment follows within one scrape).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from floe_operator.lag import decide

STEP = 10.0  # seconds between scrapes


@dataclass
class Run:
    decisions: list[tuple[float, decide.Decision]] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)

    @property
    def changes(self) -> list[tuple[float, int, int, str]]:
        out = []
        for at, d in self.decisions:
            if d.action != "Hold":
                out.append((at, d.inputs["replicas"], d.replicas, d.reason))
        return out


def simulate(
    *,
    rate: Callable[[float], float],
    capacity: float,
    replicas: int,
    policy: decide.Policy,
    partitions: int = 12,
    seconds: float = 1800.0,
    lag: int = 0,
    known_capacity: float | None = None,
    step: float = STEP,
) -> Run:
    """Replay an app: input at `rate(t)` records/s, each replica works off `capacity` records/s."""
    end, committed = lag, 0
    samples: list[decide.Sample] = []
    run = Run()
    mu = known_capacity
    last_scale: float | None = None
    t = 0.0
    while t <= seconds:
        samples.append(decide.Sample(at=t, replicas=replicas, end=end, committed=committed))
        window = [s for s in samples if s.at >= t - policy.stabilization_seconds - 2 * step]
        ctx = decide.Context(now=t, replicas=replicas, partitions=partitions, last_scale_at=last_scale, capacity=mu)
        decision = decide.decide(window, policy, ctx)
        mu = decision.capacity
        run.decisions.append((t, decision))
        if decision.replicas != replicas:
            replicas = decision.replicas
            last_scale = t
        run.replicas.append(replicas)
        run.lags.append(end - committed)
        # advance one scrape interval
        produced = int(rate(t) * step)
        end += produced
        work = int(min(replicas, partitions) * capacity * step)
        committed = min(end, committed + work)
        t += step
    return run


def policy(**kw: object) -> decide.Policy:
    base: dict[str, object] = {"min_replicas": 1, "max_replicas": 12}
    base.update(kw)
    return decide.Policy(**base)  # type: ignore[arg-type]


def test_steady_load_never_scales() -> None:
    run = simulate(rate=lambda t: 500.0, capacity=200.0, replicas=4, policy=policy(), known_capacity=200.0)
    assert run.changes == []
    assert {d.reason for _, d in run.decisions[1:]} == {decide.WITHIN_TARGET}
    # 500/s at 200/s per replica and 70 %: ⌈500 / 140⌉ = 4
    assert run.decisions[-1][1].inputs["recommended"] == 4


def test_spike_scales_up_promptly_and_down_only_after_the_window_in_bounded_steps() -> None:
    def rate(t: float) -> float:
        return 2000.0 if 300 <= t < 600 else 400.0

    run = simulate(rate=rate, capacity=200.0, replicas=3, policy=policy(), known_capacity=200.0)
    changes = run.changes
    first_up = changes[0]
    assert first_up[3] == decide.LAG_ABOVE_CAPACITY
    # The spike starts at 300 s: up within the up window plus one rate sample, straight to the need.
    assert 300 < first_up[0] <= 340
    # ... and reaches what the spike needs within 90 s: ⌈(2000 + lag / 300) / 140⌉ ≥ 15, capped at 12.
    assert max(r for i, r in enumerate(run.replicas) if i * STEP <= 390) == 12
    downs = [c for c in changes if c[2] < c[1]]
    assert downs, changes
    last_up = max(c[0] for c in changes if c[2] > c[1])
    # Scale-down waits a full stabilization window after the last scale, and steps at most by half.
    assert downs[0][0] >= last_up + 300
    for _, before, after, reason in downs:
        assert reason == decide.LOW_LOAD
        assert after >= before - max(1, math.floor(before * 0.5))
    # Never down while the spike's backlog is still being worked off.
    for at, d in run.decisions:
        if d.action == "ScaleDown":
            assert run.lags[int(at / STEP)] < 200.0 * d.replicas * 30
    # Ends where the steady 400/s needs it: ⌈400 / 140⌉ = 3.
    assert run.replicas[-1] == 3


@pytest.mark.parametrize(("interval", "step"), [(10.0, 10.0), (10.0, 10.001), (10.0, 10.4), (5.0, 5.0), (5.0, 5.2)])
@pytest.mark.parametrize("known_capacity", [200.0, None])
def test_a_surge_scales_up_within_two_ticks_when_ticks_come_a_little_late(
    interval: float, step: float, known_capacity: float | None
) -> None:
    """The lag loop ticks every interval plus whatever a scrape takes: the up window (two
    intervals) must still hold the three samples it needs, or a surge waits for the 60 s rate
    window."""

    def rate(t: float) -> float:
        return 1000.0 if t >= 300 else 100.0

    at_interval = policy(tick_seconds=interval, up_seconds=decide.Policy.up_seconds_for(interval))
    run = simulate(
        rate=rate,
        capacity=200.0,
        replicas=1,
        policy=at_interval,
        known_capacity=known_capacity,
        seconds=600.0,
        step=step,
    )
    ups = [c for c in run.changes if c[2] > c[1]]
    assert ups, run.changes
    # the surge's input is produced after the first sample at or past 300 s, so the next one sees it
    surge_seen = min(at for at, _ in run.decisions if at >= 300) + step
    assert ups[0][0] <= surge_seen + 2 * step + 1e-6, (step, known_capacity, ups[0])


def test_the_up_window_is_two_intervals_and_never_under_ten_seconds() -> None:
    assert [decide.Policy.up_seconds_for(t) for t in (1.0, 5.0, 10.0, 30.0)] == [10.0, 10.0, 20.0, 60.0]


def test_slow_drain_holds_replicas_until_backlog_is_gone() -> None:
    # 8 replicas working off 900 000 records at 1 500/s net within an hour's catch-up: fewer would
    # do, but no scale-down until the backlog is gone.
    run = simulate(
        rate=lambda t: 100.0,
        capacity=200.0,
        replicas=8,
        lag=900_000,
        policy=policy(catch_up_seconds=3600.0),
        known_capacity=200.0,
        seconds=1200.0,
    )
    drained_at = next(i * STEP for i, lag in enumerate(run.lags) if lag == 0)
    assert drained_at > 500
    for at, d in run.decisions:
        if d.action == "ScaleDown":
            # Only once what is left drains in under saturation_seconds (30 s) at the current count.
            assert run.lags[int(at / STEP)] <= 200.0 * d.inputs["replicas"] * 30, (at, d)
    assert min(at for at, d in run.decisions if d.action == "ScaleDown") > 500
    assert any(d.reason == decide.WORKING_OFF_BACKLOG for _, d in run.decisions)


def test_slow_drain_without_enough_capacity_scales_up() -> None:
    # 2 replicas drain 600 000 records at 300/s net: 2 000 s > catchUpSeconds, so scale up.
    run = simulate(rate=lambda t: 100.0, capacity=200.0, replicas=2, lag=600_000, policy=policy(), seconds=120.0)
    up = run.changes[0]
    assert up[3] == decide.LAG_ABOVE_CAPACITY and up[1] == 2 and up[2] == 12
    assert up[0] <= 40


def test_idle_app_steps_down_to_min_replicas_one_window_at_a_time() -> None:
    run = simulate(rate=lambda t: 0.0, capacity=200.0, replicas=4, policy=policy(), known_capacity=200.0)
    changes = run.changes
    assert [(c[1], c[2]) for c in changes] == [(4, 2), (2, 1)]
    assert changes[0][0] >= 300 and changes[1][0] - changes[0][0] >= 300
    assert run.replicas[-1] == 1
    # Idle and caught up: lag 0, rates 0, never NaN.
    last = run.decisions[-1][1]
    assert last.inputs["lag"] == 0 and last.inputs["inputRate"] == 0.0


def test_idle_app_can_scale_to_zero_and_back() -> None:
    def rate(t: float) -> float:
        return 50.0 if t >= 1500 else 0.0

    run = simulate(
        rate=rate, capacity=200.0, replicas=1, policy=policy(min_replicas=0), known_capacity=200.0, seconds=1600
    )
    assert (1, 0) in [(c[1], c[2]) for c in run.changes]
    back = [c for c in run.changes if c[1] == 0]
    assert back and back[0][3] == decide.INPUT_WHILE_ZERO and back[0][0] <= 1520


@pytest.mark.parametrize("interval", [10.0, 5.0])
def test_noisy_rates_do_not_flap(interval: float) -> None:
    """Also at the default 5 s interval, whose up window (10 s) is half as long."""
    rng = random.Random(7)
    noise = [rng.uniform(0.5, 1.5) for _ in range(800)]

    def rate(t: float) -> float:
        return 500.0 * noise[int(t / interval)]

    at_interval = policy(tick_seconds=interval, up_seconds=decide.Policy.up_seconds_for(interval))
    run = simulate(
        rate=rate, capacity=200.0, replicas=5, policy=at_interval, known_capacity=200.0, seconds=3600, step=interval
    )
    actions = [d.action for _, d in run.decisions if d.action != "Hold"]
    # At most one move in an hour of ±50 % noise around a load that needs 4-5 replicas, and no reversal.
    assert len(actions) <= 1, run.changes


def test_more_replicas_than_partitions_is_corrected_at_once() -> None:
    run = simulate(rate=lambda t: 5000.0, capacity=200.0, replicas=10, partitions=6, policy=policy(), seconds=120)
    first = run.decisions[0][1]
    assert (first.action, first.replicas, first.reason) == ("ScaleDown", 6, decide.EXCEEDS_PARTITIONS)
    # Load would want far more, but the partition cap holds and says so.
    assert run.replicas[-1] == 6
    assert run.decisions[-1][1].reason == decide.AT_LIMIT


def test_allow_idle_lifts_the_partition_cap() -> None:
    run = simulate(
        rate=lambda t: 5000.0,
        capacity=200.0,
        replicas=4,
        partitions=6,
        policy=policy(allow_idle=True),
        seconds=120,
    )
    assert run.replicas[-1] == 12


def test_capacity_is_measured_while_saturated_and_carried() -> None:
    # No capacity known: a growing lag scales up and measures μ = κ / R on the way.
    run = simulate(rate=lambda t: 1000.0, capacity=150.0, replicas=2, policy=policy(), seconds=200)
    assert run.changes and run.changes[0][3] in (decide.LAG_GROWING, decide.LAG_ABOVE_CAPACITY)
    measured = [d.capacity for _, d in run.decisions if d.capacity is not None]
    assert measured and measured[0] == pytest.approx(150.0, rel=0.05)


def test_unknown_capacity_keeping_up_never_scales() -> None:
    run = simulate(rate=lambda t: 100.0, capacity=200.0, replicas=3, policy=policy(), seconds=900)
    assert run.changes == []


def test_stale_metrics_and_rollouts_hold() -> None:
    samples = [decide.Sample(at=t, replicas=1, end=int(t * 5000), committed=0) for t in range(0, 100, 10)]
    for ctx, reason in (
        (decide.Context(now=90, replicas=1, partitions=12, stale=True, capacity=100.0), decide.METRICS_STALE),
        (
            decide.Context(now=90, replicas=1, partitions=12, rollout=True, capacity=100.0),
            decide.ROLLOUT_IN_PROGRESS,
        ),
    ):
        d = decide.decide(samples, policy(), ctx)
        assert (d.action, d.replicas, d.reason) == ("Hold", 1, reason)


def test_stuck_app_is_not_scaled() -> None:
    samples = [decide.Sample(at=t, replicas=2, end=int(t * 100), committed=0) for t in range(0, 100, 10)]
    d = decide.decide(samples, policy(), decide.Context(now=90, replicas=2, partitions=12))
    assert (d.action, d.reason) == ("Hold", decide.NO_PROGRESS)


def test_policy_from_spec() -> None:
    from floe_operator import model

    spec = model.AutoscalingSpec(max_replicas=8, target_utilization=60, stabilization_window_seconds=120)
    p = decide.Policy.from_spec(spec, up_seconds=30.0)
    assert (p.max_replicas, p.target_utilization, p.stabilization_seconds, p.up_seconds) == (8, 0.6, 120.0, 30.0)
