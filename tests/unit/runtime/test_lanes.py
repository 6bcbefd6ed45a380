"""Lanes of stages: which stages may run side by side (pure grouping, no Spark)."""

from __future__ import annotations

from floe_jobs import api
from floe_jobs.lanes import group_lanes


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
