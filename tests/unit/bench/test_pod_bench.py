"""The pod bench's pure parts: the autoscale row's summary of its runs and the feed's truth."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import pod_bench  # a script's module, on its folder's path
from floe_stack import localrun


def run(first_commit: float | None, decision: float | None, created: float = 20.0) -> dict[str, Any]:
    return {"phases_s": {"decision_s": decision, "new_pod_created_s": created, "new_first_commit_s": first_commit}}


def test_the_reaction_summary_is_the_native_runs_median_against_kubectl_scale() -> None:
    native = [run(40.0, 20.0), run(50.0, 30.0), run(44.0, 10.0)]
    scaled = [run(20.0, 0.2), run(22.0, 0.3), run(30.0, 0.2)]
    got = pod_bench.reaction_summary(native, scaled)
    assert got["value"] == 44.0
    assert got["value_max"] == 50.0
    assert got["baseline_value"] == 22.0
    assert got["ratio"] == 2.0
    assert got["decision_s"] == 20.0
    assert got["decision_share"] == 0.45
    assert got["target_met"] is False  # first commit 44 s <= 45 s, but the decision 20 s > 15 s
    assert got["spread"]["value"] == {"min": 40.0, "median": 44.0, "max": 50.0, "runs": 3}
    assert got["spread"]["decision_s"] == {"min": 10.0, "median": 20.0, "max": 30.0, "runs": 3}
    assert (got["p50_s"], got["p99_s"]) == (44.0, 50.0)
    assert got["phases_median_s"]["native"] == {"decision_s": 20.0, "new_pod_created_s": 20.0,
                                                "new_first_commit_s": 44.0}
    assert got["phases_median_s"]["kubectl_scale"]["decision_s"] == 0.2


def test_the_reaction_target_is_met_when_both_medians_are_within_it() -> None:
    got = pod_bench.reaction_summary([run(45.0, 15.0)], [run(30.0, 0.1)])
    assert got["target_met"] is True


def test_a_run_without_the_new_pods_first_commit_leaves_no_figure() -> None:
    with pytest.raises(ValueError, match="new_first_commit_s missing"):
        pod_bench.reaction_summary([run(40.0, 20.0), run(None, 20.0)], [run(20.0, 0.2)])


def test_the_feeds_truth_counts_every_line_produced_over_its_cycles() -> None:
    feed = pod_bench.Feed({"FLOE_KAFKA_BOOTSTRAP": "unused:9092"}, ["t"])
    feed.produced = 2 * len(feed.lines) + 7
    assert feed.truth() == localrun.word_truth(feed.lines * 2 + feed.lines[:7])


def test_the_feeds_sent_lines_are_its_own_lines_in_order_over_their_cycles() -> None:
    feed = pod_bench.Feed({"FLOE_KAFKA_BOOTSTRAP": "unused:9092"}, ["t"], lines=["a b", "c", "d e f"])
    feed.produced = 7
    assert feed.sent() == ["a b", "c", "d e f", "a b", "c", "d e f", "a b"]
    assert feed.truth() == localrun.word_truth(feed.sent())
