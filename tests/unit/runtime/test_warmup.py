"""The warm-up's order: each lane in a thread of its own, side by side, and the first
configuration error raised to the caller once every lane has finished."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from floe_jobs import api, warmup
from floe_jobs.lanes import Lane


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
