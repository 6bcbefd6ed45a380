"""Polling for integration tests: the real components answer when they answer.

A wait that needs pods to run (Ready replicas, executors, counts that only running pods make)
also watches those pods (`pods=`): when the cluster says why one cannot run (the scheduler
found no node for it, its image cannot be pulled, its container keeps exiting or cannot be
created) and keeps saying it for `blocked_seconds`, the wait fails with the cluster's reason
and message instead of polling on to its timeout. A pod left Pending with `Insufficient cpu`
says at once what ten more minutes of waiting would; the grace only lets a passing state pass
(a pod scheduled once a terminating one frees its CPU, a crashed container's first back-off).
Tests that crash containers on purpose name the reasons they expect in `tolerate`.

The reading of a pod's reason is `floe_stack.podblock`'s, which the demo's waits share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, TypeVar

from floe_stack.podblock import BLOCKED_SECONDS, PodWatch, why_blocked

__all__ = ["BLOCKED_SECONDS", "PodWatch", "wait_for", "why_blocked"]

T = TypeVar("T")


def wait_for(
    fn: Callable[[], T | None],
    *,
    timeout: float = 60.0,
    what: str = "condition",
    every: float = 0.3,
    pods: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
    tolerate: Collection[str] = (),
    blocked_seconds: float = BLOCKED_SECONDS,
) -> T:
    """Poll `fn` until it returns something truthy; fail with `what` after `timeout` seconds, or
    as soon as a pod of `pods()` (the pods `fn` needs running) has been blocked for
    `blocked_seconds` for a reason not in `tolerate` (see `why_blocked`)."""
    start = time.monotonic()
    deadline = start + timeout
    watch = PodWatch(blocked_seconds=blocked_seconds, tolerate=tolerate)
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        if pods is not None:
            blocked = watch.check(pods(), time.monotonic())
            if blocked is not None:
                raise AssertionError(f"gave up waiting for {what} after {time.monotonic() - start:.0f} s: {blocked}")
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
