"""Lanes of stages: which stages may run side by side, and how long a lane waits after a pass
(pure functions, no Spark)."""

from __future__ import annotations

import pytest
from floe_jobs import api
from floe_jobs.config import KafkaSettings
from floe_jobs.lanes import group_lanes, pause_after


def _kafka(**settings: int) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers="b:9092", topics=["in"], **settings)


def _stage(name: str, source: str | None = None) -> api.Stage:
    return api.Stage(name=name, fn=lambda batch: None, source=source)


def _topics(stage: api.Stage) -> list[str]:
    return ["in-a", "in-b"] if stage.source is None else [f"app-{stage.source}-repartition"]


def test_word_count_stages_run_in_two_lanes() -> None:
    split, count = _stage("split"), _stage("count", source="words")
    lanes = group_lanes([split, count], _topics)
    assert [[s.name for s in stages] for stages, _ in lanes] == [["split"], ["count"]]
    assert lanes[1][1] == frozenset({"app-words-repartition"})


def test_stages_reading_a_common_topic_share_a_lane_in_job_order() -> None:
    # two stages over the input topics run one after the other (each keeps its own offsets rows)
    first, other, second = _stage("first"), _stage("other", source="x"), _stage("second")
    lanes = group_lanes([first, other, second], _topics)
    assert [[s.name for s in stages] for stages, _ in lanes] == [["first", "second"], ["other"]]
    assert lanes[0][1] == frozenset({"in-a", "in-b"})


def test_groups_merge_through_a_stage_that_bridges_them() -> None:
    topics = {"a": ["t1"], "b": ["t2"], "c": ["t1", "t2"]}
    stages = [_stage(n) for n in "abc"]
    lanes = group_lanes(stages, lambda s: topics[s.name])
    assert [[s.name for s in st] for st, _ in lanes] == [["a", "b", "c"]]
    assert lanes[0][1] == frozenset({"t1", "t2"})


@pytest.mark.parametrize(
    ("worked", "wait"),
    [
        (0, 0.2),  # nothing read: the poll interval
        (1, 0.2),  # a trickle: the linger
        (499, 0.2),
        (500, 0.0),  # a hundredth of the 50,000-record cap: the next pass at once
        (50_000, 0.0),
    ],
)
def test_a_lane_waits_the_poll_interval_when_idle_and_the_linger_after_a_trickle(worked: int, wait: float) -> None:
    assert pause_after(_kafka(max_records_per_batch=50_000), worked) == wait


def test_a_trickle_follows_the_batch_cap_and_a_linger_of_0_runs_passes_back_to_back() -> None:
    kafka = _kafka(max_records_per_batch=1_000, poll_interval_ms=50, linger_ms=300)
    assert [pause_after(kafka, n) for n in (0, 9, 10)] == [0.05, 0.3, 0.0]
    assert pause_after(_kafka(linger_ms=0), 1) == 0.0
