"""`floe-job` with faults injected: a replica that fails at named points of its batches.

Run as `python -m tests.faultjob` in place of `python -m floe_jobs.cli` (a `localrun.App` whose
`module` names it). It installs a `floe_jobs.faults` hook, then runs the runtime's own entry
point. Two faults, each used once per point: a crash (the process SIGKILLs itself, as a node
loss would) and a pause (it SIGSTOPs itself, as a long GC, a frozen node or a network partition
would, until the test sends SIGCONT).

- FLOE_TEST_CRASH_POINTS lists the points to crash at; FLOE_TEST_CRASH_DIR keeps a marker per
  point used, so a restarted process goes on.
- A pause is armed by the test while replicas run: a file `pause-<point>` in FLOE_TEST_CRASH_DIR.
  The first replica to reach the point renames it to `paused-<point>-<pid>` (one rename wins)
  and stops itself there.
- FLOE_TEST_CLOCK_SKEW_S sets the clock of the replica's write timestamps that many seconds off
  (`floe_jobs.faults.skew`): a replica whose clock runs ahead, or was set back.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path

MODULE = "tests.faultjob"

log = logging.getLogger("floe_jobs")


def _file_name(point: str) -> str:
    return point.replace(":", "-")


class Faults:
    """Crashes and pauses at the points a test asked for (see the module's docstring)."""

    def __init__(self, folder: Path, crash_at: str) -> None:
        self.folder = folder
        self.crash_at = set(crash_at.split(",")) if crash_at else set()

    def __call__(self, name: str) -> None:
        marker = self.folder / f"crashed-{_file_name(name)}"
        if name in self.crash_at and not marker.exists():
            marker.write_text(str(os.getpid()))
            log.warning("Crashing at point=%s (fault injection)", name)
            logging.shutdown()
            os.kill(os.getpid(), signal.SIGKILL)
        armed = self.folder / f"pause-{_file_name(name)}"
        if armed.exists():
            try:
                armed.rename(self.folder / f"paused-{_file_name(name)}-{os.getpid()}")
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


def main() -> int:
    from floe_jobs import cli, faults

    folder = os.environ.get("FLOE_TEST_CRASH_DIR")
    if folder:
        faults.install(Faults(Path(folder), os.environ.get("FLOE_TEST_CRASH_POINTS", "")))
    skew = os.environ.get("FLOE_TEST_CLOCK_SKEW_S")
    if skew:
        faults.skew(float(skew))
        log.warning("Write timestamps skewed seconds=%s (fault injection)", skew)
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
