"""Named points of a batch where a fault can be injected, for the tests that prove exactly-once.

Points: `<stage>:after-claim` (its partitions claimed, nothing applied), `<store>:mid-state` (a
chunk of state rows read and decided, not written: other partitions' may be),
`<stage>:after-state` (state applied, nothing emitted), `<stage>:after-emit` (output
acknowledged, not committed).

A replica runs no fault of its own: every point is a no-op until a hook is installed, which
only a test's wrapper of the runtime's entry point does (tests/faultjob.py: crashes and pauses
at chosen points) before it starts the runtime.

The clock that write timestamps come from (`clock_us`) is here too, for the same reason: a test's
wrapper may set it off by a skew (a replica whose clock runs ahead or was set back); it is the
system clock otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Hook = Callable[[str], None]

_hook: Hook | None = None


def install(hook: Hook | None) -> None:
    """Call `hook` with the point's name at every point from now on (None: no faults)."""
    global _hook
    _hook = hook


def point(name: str) -> None:
    """A named point of a batch: runs the installed hook, if any."""
    if _hook is not None:
        _hook(name)


_skew_us = 0


def skew(seconds: float) -> None:
    """Set the clock of write timestamps `seconds` off the system clock (0: none)."""
    global _skew_us
    _skew_us = int(seconds * 1_000_000)


def clock_us() -> int:
    """The clock that batches' write timestamps start from, in µs since the epoch
    (`floe_jobs.planning.stamp_for`): the system clock, plus a skew only a test installs."""
    return time.time_ns() // 1000 + _skew_us
