"""The drain on SIGTERM: what the first signal sets going before the lanes see it (the group
member's `wake` itself runs against the broker in tests/integration/runtime/test_membership.py)."""

from __future__ import annotations

import signal
import threading

from floe_jobs import api, config, stopping
from floe_jobs.replica import ReplicaContext

from .appenv import WORD_COUNT_ENV

ENV = WORD_COUNT_ENV


class _Member:
    """What the signal uses of the group member: `wake`, which ends the lanes' idle waits."""

    def __init__(self) -> None:
        self.woken = threading.Event()

    def wake(self) -> None:
        self.woken.set()


def test_the_first_signal_wakes_the_lanes_idle_between_batches() -> None:
    ctx = ReplicaContext.of(config.load(environ=ENV), api.Job(), member_name="replica-0")
    member = _Member()
    ctx.membership = member  # type: ignore[assignment]
    stops = stopping.Stops()
    try:
        stopping.on_signal(ctx, stops, signal.SIGTERM)
        assert stops.stop_requested.is_set() and stops.deadline is not None
        assert member.woken.is_set()
        assert ctx.health.stopping
    finally:
        stops.shutting_down = True  # its watchdog ends instead of aborting at the deadline
