"""Named points of a batch where the tests that prove exactly-once make a replica fail.

Two faults, each used once per point: a crash (the process SIGKILLs itself, as a node loss
would) and a pause (it SIGSTOPs itself, as a long GC, a frozen node or a network partition
would, until the test sends SIGCONT). Points: `<stage>:after-claim` (its partitions claimed,
nothing applied), `<store>:mid-state` (a chunk of state rows read and decided, not written: other partitions'
may be), `<stage>:after-state`
(state applied, nothing emitted), `<stage>:after-emit` (output acknowledged, not committed).

- FLOE_TEST_CRASH_POINTS lists the points to crash at; FLOE_TEST_CRASH_DIR keeps a marker per
  point used, so a restarted process goes on.
- A pause is armed by the test while replicas run: a file `pause-<point>` in FLOE_TEST_CRASH_DIR.
  The first replica to reach the point renames it to `paused-<point>-<pid>` (one rename wins)
  and stops itself there.

Without FLOE_TEST_CRASH_DIR every point is a no-op that reads one environment variable.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

log = logging.getLogger("floe_jobs")


def _file_name(point: str) -> str:
    return point.replace(":", "-")


def point(name: str) -> None:
    """Crash or pause here if a test asked for it (see the module's docstring)."""
    folder = os.environ.get("FLOE_TEST_CRASH_DIR")
    if not folder:
        return
    crash_at = os.environ.get("FLOE_TEST_CRASH_POINTS", "")
    marker = Path(folder) / f"crashed-{_file_name(name)}"
    if name in crash_at.split(",") and not marker.exists():
        marker.write_text(str(os.getpid()))
        log.warning("Crashing at point=%s (fault injection)", name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
    armed = Path(folder) / f"pause-{_file_name(name)}"
    if armed.exists():
        try:
            armed.rename(Path(folder) / f"paused-{_file_name(name)}-{os.getpid()}")
        except FileNotFoundError:  # another replica took this pause
            return
        log.warning("Pausing at point=%s (fault injection)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        # sent to this very thread, so that it stops here: sent to the process, the kernel may
        # pick another thread, and this one would run on (into its next request) until its next
        # system call; SIGSTOP stops every thread of the process either way
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        log.warning("Resumed at point=%s (fault injection)", name)
