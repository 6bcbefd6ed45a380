"""The runtime benchmarks' pure parts: the handover gaps, spreads, the product's group settings,
the scale-out input and the lag bench's bursty rate."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import lag_bench  # a script's module, on its folder's path
import runtime_bench


def test_gap_runs_from_the_last_commit_before_the_sigterm_to_the_next_one() -> None:
    advances = {
        ("app-lines", 0): [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],  # never stalls
        ("app-words-repartition", 1): [1.0, 2.0, 3.0, 14.5, 15.0],  # stalled from 3.0 to 14.5
    }
    got = runtime_bench.gaps_around(advances, t_term=3.5, t_end=20.0, steady_from=0.0)
    assert got["per_partition_gap_s"] == {"input/0": 14.0, "words/1": 11.5}
    assert got["max_gap_s"] == 14.0  # input/0: nothing after 6.0 until the window's end
    assert got["steady_max_gap_s"] == 1.0


def test_a_partition_that_never_commits_after_the_sigterm_stalls_until_the_window_ends() -> None:
    got = runtime_bench.gaps_around({("t", 0): [1.0, 2.0]}, t_term=2.5, t_end=30.0, steady_from=0.0)
    assert got["max_gap_s"] == 28.0


def test_spread_is_min_median_max() -> None:
    assert runtime_bench.spread([3.0, 1.0, 2.0, 10.0]) == {"min": 1.0, "median": 2.5, "max": 10.0, "runs": 4}


def test_both_handover_sides_run_the_operators_rendered_defaults() -> None:
    from floe_operator import model

    got = runtime_bench.product_membership()
    assert got == {
        "FLOE_KAFKA_SESSION_TIMEOUT_MS": str(model.ShutdownSpec().session_timeout_ms),
        "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": str(model.ShutdownSpec().heartbeat_interval_ms),
    }


def test_scaleout_input_names_every_key_the_same_number_of_times() -> None:
    keys = runtime_bench.store_keys(25)
    lines = runtime_bench.lines_of(keys, per_line=10, repeat=2, seed=1)
    assert Counter(w for line in lines for w in line.split()) == Counter({k: 2 for k in keys})
    assert max(len(line.split()) for line in lines) == 10


def test_first_batch_seconds_counts_from_the_start_line() -> None:
    log = (
        "2026-01-01 10:00:00,000 INFO floe_jobs Starting app=a\n"
        "2026-01-01 10:00:04,250 INFO floe_jobs Committed stage=split partitions=2 records=5 out=9 seconds=0.1 x\n"
    )
    assert runtime_bench.first_batch_seconds(log) == 4.25


@pytest.mark.parametrize(("t", "rate"), [(0.0, 100.0), (9.9, 100.0), (10.0, 1000.0), (19.9, 1000.0), (20.0, 100.0)])
def test_bursty_rate_steps_tenfold_up_and_down(t: float, rate: float) -> None:
    assert lag_bench.bursty_rate(t, low=100.0, step_s=10.0) == rate


def test_floes_clock_runs_from_its_warm_up_to_its_last_commit() -> None:
    log = (
        "2026-01-01 10:00:10,000 INFO floe_jobs Warmed up stage=split records=50 seconds=4.00 read=0.1\n"
        "2026-01-01 10:00:11,000 INFO floe_jobs Warmed up stage=count records=0 seconds=1.00 read=0.1\n"
        "2026-01-01 10:00:15,000 INFO floe_jobs Committed stage=split partitions=6 records=9 out=9 seconds=2.00 x\n"
        "2026-01-01 10:00:20,500 INFO floe_jobs Committed stage=count partitions=6 records=9 out=9 seconds=1.00 x\n"
    )
    got = runtime_bench.floe_processing_seconds(log)
    assert got == {"seconds": 14.5, "warm_up_s": 5.0, "batches_s": 7.5, "batches": 2}


def test_cpu_per_record_leaves_out_cassandra_and_strangers() -> None:
    cpu = {"spark-jvm": 10.0, "floe-replica": 2.0, "kafka": 1.0, "cassandra": 5.0, "kubernetes": 0.5, "other": 3.0}
    assert runtime_bench.own_cpu(cpu) == 13.0
