"""The warm-up's order: each lane in a thread of its own, side by side, and the first
configuration error raised to the caller once every lane has finished; and where its dry run runs."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from floe_jobs import api, config, placement, warmup
from floe_jobs.lanes import Lane

from .appenv import WORD_COUNT_ENV


def _lanes(*names: str) -> list[Lane]:
    return [Lane(name=n, stages=[], topics=frozenset({n})) for n in names]


def test_lanes_warm_up_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    both = threading.Barrier(2, timeout=5)  # broken, and the test failed, if the lanes ran in turn
    seen: list[tuple[str, str]] = []

    def lane_warm_up(ctx: Any, lane: Lane) -> None:
        both.wait()
        seen.append((lane.name, threading.current_thread().name))

    monkeypatch.setattr(warmup, "_warm_up_lane", lane_warm_up)
    warmup.warm_up(object(), _lanes("split", "count"))  # type: ignore[arg-type]
    assert sorted(seen) == [("count", "floe-warm-up-count"), ("split", "floe-warm-up-split")]


def test_a_configuration_error_in_one_lane_is_raised_once_every_lane_has_warmed_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    finished: list[str] = []
    split_failed = threading.Event()

    def lane_warm_up(ctx: Any, lane: Lane) -> None:
        if lane.name == "split":
            split_failed.set()
            raise api.StageConfigError("stage 'split': store 'x' is written by stages 'split' and 'count'")
        split_failed.wait(5)
        time.sleep(0.2)  # still warming up when the error is raised: the caller must wait for it
        finished.append(lane.name)

    monkeypatch.setattr(warmup, "_warm_up_lane", lane_warm_up)
    with pytest.raises(api.StageConfigError, match="written by stages"):
        warmup.warm_up(object(), _lanes("split", "count"))  # type: ignore[arg-type]
    assert finished == ["count"]


def test_one_lane_warms_up_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    monkeypatch.setattr(warmup, "_warm_up_lane", lambda ctx, lane: threads.append(threading.current_thread().name))
    warmup.warm_up(object(), _lanes("only"))  # type: ignore[arg-type]
    assert threads == [threading.current_thread().name]


def test_a_dry_run_hands_its_stage_a_batch_placed_as_a_full_batch() -> None:
    # a local master at the default cap: full batches group in the driver, so the dry run does too
    cfg = config.load(environ={**WORD_COUNT_ENV, "FLOE_SPARK_MASTER": "local[2]"})
    seen: list[placement.Placement] = []

    def stage_fn(batch: api.Batch) -> None:
        seen.append(batch._placement())

    ctx = SimpleNamespace(cfg=cfg, spark=None, store_writers={})
    lane = SimpleNamespace(sink=object())
    warmup._dry_run(ctx, lane, api.Stage(name="split", fn=stage_fn, source=None), None, api.BatchClock())  # type: ignore[arg-type]
    assert seen == [placement.for_warm_up(cfg)]
    assert seen[0].driver_grouping and not seen[0].spark_sink
