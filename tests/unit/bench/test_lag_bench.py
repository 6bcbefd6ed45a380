"""The lag accuracy bench's pure parts: the truth of a scrape, the relative errors, the behind
regime's selection and verdict, and the surge schedule that makes the replica fall behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import lag_bench  # a script's module, on its folder's path
from lag_bench import Judged, Sample


def sample(committed: int, end: int, estimate: float, *, at: float = 100.0, naive: float = 1.0) -> Sample:
    return Sample(committed, end, estimate, True, naive, at, 1.0)


def test_the_truth_is_the_age_of_the_record_at_the_committed_offset() -> None:
    got = lag_bench.judged(sample(10, 20, 5.5, at=100.0, naive=3.0), create_time=94.0)
    assert got == Judged(truth=6.0, estimate=5.5, naive=3.0)


def test_a_caught_up_scrape_is_true_zero_and_so_is_its_naive_estimate() -> None:
    got = lag_bench.judged(sample(20, 20, 0.0, naive=float("nan")), create_time=None)
    assert got == Judged(truth=0.0, estimate=0.0, naive=0.0)


def test_relative_errors_skip_scrapes_that_were_caught_up() -> None:
    rows = [Judged(0.0, 0.0, 0.0), Judged(10.0, 9.0, 5.0), Judged(4.0, 5.0, 4.0)]
    assert lag_bench.relative_errors(rows) == ([0.1, 0.25], [0.5, 0.0])


def test_the_quiet_verdict_is_the_99th_percentile_of_the_absolute_error_against_the_naive_estimate() -> None:
    got = lag_bench.quiet_verdict([Judged(0.2, 0.25, 0.4)] * 100)
    assert (got["value"], got["baseline_value"], got["ratio"], got["target_met"]) == (0.05, 0.2, 0.25, True)


def test_a_quiet_row_off_by_more_than_half_a_scrape_or_worse_than_the_naive_estimate_misses() -> None:
    assert lag_bench.quiet_verdict([Judged(0.2, 0.8, 0.0)] * 100)["target_met"] is False  # 0.6 s > 0.5 s
    worse = lag_bench.quiet_verdict([Judged(0.2, 0.5, 0.3)] * 100)  # 0.3 s, but the naive one is 0.1 s
    assert worse["value"] == 0.3 and worse["target_met"] is False


def test_the_behind_regime_is_the_scrapes_with_a_true_lag_of_5_s_or_more() -> None:
    rows = [Judged(4.99, 5.0, 5.0), Judged(5.0, 5.0, 1.0), Judged(30.0, 29.0, 3.0), Judged(0.0, 0.0, 0.0)]
    assert lag_bench.behind_regime(rows) == [Judged(5.0, 5.0, 1.0), Judged(30.0, 29.0, 3.0)]


def test_the_behind_verdict_is_the_99th_percentile_over_the_regime_against_the_naive_estimate() -> None:
    quiet = [Judged(0.2, 0.0, 0.1)] * 50  # large relative errors the behind row must not count
    behind = [Judged(10.0, 10.5, 5.0)] * 40
    got = lag_bench.behind_verdict(quiet + behind)
    assert got["scrapes_in_regime"] == 40
    assert got["value"] == 0.05
    assert got["baseline_value"] == 0.5
    assert got["ratio"] == 0.1
    assert got["target_met"] is True
    assert "note" not in got


def test_a_behind_row_with_too_few_scrapes_in_the_regime_says_so_and_misses() -> None:
    got = lag_bench.behind_verdict([Judged(10.0, 10.0, 10.0)] * 29 + [Judged(1.0, 1.0, 1.0)] * 100)
    assert got["value"] == 0.0  # a perfect estimate, yet
    assert got["target_met"] is False
    assert got["scrapes_in_regime"] == 29
    assert "only 29 scrapes found a true lag >= 5 s" in got["note"]


def test_a_run_that_never_fell_behind_has_no_value_and_misses() -> None:
    got = lag_bench.behind_verdict([Judged(0.3, 0.3, 0.1)] * 120)
    assert got["value"] is None
    assert got["target_met"] is False
    assert got["scrapes_in_regime"] == 0


def test_a_behind_row_over_target_misses() -> None:
    got = lag_bench.behind_verdict([Judged(10.0, 8.0, 5.0)] * 40)
    assert got["value"] == 0.2
    assert got["target_met"] is False


def surges(*, quiet_s: float = 5.0, max_surge_s: float = 60.0, behind_scrapes: int = 3) -> lag_bench.Surges:
    return lag_bench.Surges(
        low=100.0,
        high=10_000.0,
        quiet_s=quiet_s,
        drain_s=20.0,
        max_surge_s=max_surge_s,
        behind_scrapes=behind_scrapes,
        max_s=600.0,
    )


def test_a_surge_starts_after_the_quiet_seconds_and_ends_once_its_backlog_needs_the_drain_seconds() -> None:
    s = surges()
    s.observe(0.0, end=1_000, committed=1_000, estimate=0.0)
    assert s.rate(0.0) == 100.0
    s.observe(5.0, end=1_500, committed=1_500, estimate=0.0)
    assert s.phase == "surge"
    assert s.rate(5.4) == 100.0 and s.rate(5.5) == 10_000.0  # half a scrape interval later
    # the replica consumes 2,000 lines/s during the surge; the backlog grows by 8,000 a second
    for t in range(1, 5):
        s.observe(5.0 + t, end=1_500 + 10_000 * t, committed=1_500 + 2_000 * t, estimate=float(t))
        assert s.phase == "surge"  # 8,000 * t / 2,000 < 20 s of draining
    s.observe(10.0, end=51_500, committed=11_500, estimate=4.0)  # 40,000 behind: 20 s at 2,000/s
    assert s.phase == "drain"
    assert s.rate(10.4) == 10_000.0 and s.rate(10.5) == 100.0
    assert s.surges == [
        {"seconds": 5.0, "input_lines_per_s": 10_000.0, "consumed_lines_per_s": 2_000.0, "backlog_lines": 40_000}
    ]


def test_a_surge_runs_2_s_before_judging_the_replicas_rate() -> None:
    s = surges(quiet_s=0.0)
    s.observe(0.0, end=0, committed=0, estimate=0.0)  # the surge starts
    s.observe(1.0, end=10_000, committed=10, estimate=1.0)  # a backlog of 1,000 s at 10 lines/s
    assert s.phase == "surge"
    s.observe(2.0, end=20_000, committed=20, estimate=2.0)
    assert s.phase == "drain"


def test_a_surge_the_replica_keeps_up_with_ends_after_the_longest_surge() -> None:
    s = surges(quiet_s=0.0, max_surge_s=10.0)
    s.observe(0.0, end=0, committed=0, estimate=0.0)  # the surge starts
    for t in range(1, 10):
        s.observe(float(t), end=10_000 * t, committed=10_000 * t - 100, estimate=0.01)
        assert s.phase == "surge"
    s.observe(10.0, end=100_000, committed=99_900, estimate=0.01)
    assert s.phase == "drain"


def test_the_run_ends_once_enough_scrapes_were_behind_and_the_replica_caught_up() -> None:
    s = surges(quiet_s=0.0, behind_scrapes=2)
    s.observe(0.0, end=0, committed=0, estimate=0.0)  # the surge starts
    s.observe(1.0, end=10_000, committed=500, estimate=1.0)
    s.observe(3.0, end=30_000, committed=1_000, estimate=5.0)  # 29,000 behind at 250 lines/s: the surge ends
    assert s.phase == "drain" and not s.done([], 3.0)
    s.observe(4.0, end=30_100, committed=20_000, estimate=6.0)
    assert s.phase == "drain" and not s.done([], 4.0)
    s.observe(5.0, end=30_200, committed=30_000, estimate=1.0)  # 200 behind: 2 s of the low rate
    assert s.phase == "quiet"
    assert s.done([], 5.0)


def test_the_run_ends_after_its_longest_time_whatever_it_saw() -> None:
    s = surges()
    s.observe(10.0, end=0, committed=0, estimate=0.0)
    assert not s.done([], 609.0)
    assert s.done([], 610.0)


@pytest.mark.parametrize("scrapes", [0, 1])
def test_the_quiet_run_ends_after_its_scrapes(scrapes: int) -> None:
    b = lag_bench.Bursty(low=100.0, step_s=10.0, scrapes=1)
    assert b.done([sample(1, 2, 0.1)] * scrapes, 0.0) is (scrapes == 1)
    assert b.rate(50.0) == 100.0 and b.rate(60.0) == 1000.0  # steps counted from its first call


def test_after_a_surge_that_found_the_replica_slow_the_next_runs_at_six_times_its_rate() -> None:
    s = surges(quiet_s=0.0)
    s.observe(0.0, end=0, committed=0, estimate=0.0)  # the surge starts
    s.observe(1.0, end=5_000, committed=100, estimate=0.5)
    s.observe(2.0, end=15_000, committed=1_100, estimate=1.0)  # 1,000 lines/s: 13,900 behind is 13.9 s
    assert s.phase == "surge"
    s.observe(3.0, end=25_000, committed=2_100, estimate=1.5)  # 22,900 behind: 22.9 s
    assert s.phase == "drain"
    assert s.rate(10.0) == 100.0
    s.observe(30.0, end=27_000, committed=26_900, estimate=0.1)  # caught up
    s.observe(30.0, end=27_000, committed=27_000, estimate=0.0)  # the next surge starts
    assert s.rate(31.0) == 6_000.0
