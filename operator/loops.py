"""Backoff and the operator's long-running background loops (lag, resync), kept alive.

One backoff policy for everything the operator retries: Kopf handler retries, failed lag
ticks and restarted loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 60.0


def backoff_seconds(failures: int, *, base: float, cap: float = MAX_BACKOFF_SECONDS) -> float:
    """Delay after `failures` failures in a row: base, 2·base, 4·base … at most `cap` (never less
    than `base`). A source that is down is asked again soon, then less often, and never given up on."""
    if failures <= 1:
        return base
    return max(base, min(cap, base * 2.0 ** min(failures - 1, 16)))


async def keep_running(
    start: Callable[[], Awaitable[None]],
    *,
    what: str,
    base: float,
    cap: float = MAX_BACKOFF_SECONDS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run `start` forever: whatever it raises (but cancellation), it is started again after a backoff.

    The lag and resync loops are tasks of their own, started once by a startup handler; an
    exception that escaped one would end it silently, and no app would be measured (or
    resynced) again until a restart.
    """
    failures = 0
    while True:
        try:
            await start()
            log.warning("%s returned; starting it again", what)
            failures = 0
        except asyncio.CancelledError:
            raise
        except Exception:
            failures += 1
            log.exception("%s failed failures=%d", what, failures)
        await sleep(backoff_seconds(failures, base=base, cap=cap))


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a background loop started with the operator and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
