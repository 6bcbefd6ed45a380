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

For LATE_WINDOW_S seconds after it resumes, the replica logs each write to the outside world
that it attempts and how it was answered (`Late ...` lines): state writes (sequence, write
timestamp, rows), ownership checks before output (refused or passed) and offsets commits
(applied or refused). The runtime's own lines say only that a batch was given up; these say
whether its late write was attempted and refused, or never tried. They observe the runtime's
calls and change none of them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

MODULE = "tests.faultjob"
LATE_WINDOW_S = 30.0

log = logging.getLogger("floe_jobs")

# monotonic time until which calls are logged as late (set when a paused replica resumes)
_late_until = 0.0


def _late() -> bool:
    return time.monotonic() < _late_until


def _observe_late_writes() -> None:
    """Wrap the runtime's state writes, pre-output ownership check and offsets commit so that,
    after a pause, each call is logged with its answer (see the module's docstring)."""
    from floe_jobs import offsets, stagepass
    from floe_jobs.stores import kv

    put = kv.PartitionedStore.put_many_fenced

    def put_many_fenced(self: Any, partition: int, items: Any, *, batch: int, **kw: Any) -> None:
        items = list(items)
        if _late():
            log.warning("Late state write partition=%d seq=%d stamp=%s rows=%d", partition, batch,
                        kw.get("stamp"), len(items))
        put(self, partition, items, batch=batch, **kw)

    check = stagepass.check_owned

    def check_owned(r: Any, stage: Any, parts: Any, held: Any, *, ask_cassandra: bool) -> None:
        try:
            check(r, stage, parts, held, ask_cassandra=ask_cassandra)
        except offsets.OwnershipLost as lost:
            if _late():
                log.warning("Late ownership check refused stage=%s plans=%s ask_cassandra=%s lost=%s",
                            stage.name, [(p.topic, p.partition, p.seq) for p in parts], ask_cassandra, lost.tps)
            raise
        if _late():
            log.warning("Late ownership check passed stage=%s plans=%s ask_cassandra=%s", stage.name,
                        [(p.topic, p.partition, p.seq) for p in parts], ask_cassandra)

    commit = offsets.OffsetsTable.commit

    def commit_spy(self: Any, plans: Any, *args: Any, **kw: Any) -> bool:
        plans = list(plans)
        applied = commit(self, plans, *args, **kw)
        if _late():
            log.warning("Late commit applied=%s plans=%s", applied, [(p.topic, p.partition, p.seq) for p in plans])
        return applied

    kv.PartitionedStore.put_many_fenced = put_many_fenced  # type: ignore[method-assign]
    stagepass.check_owned = check_owned
    offsets.OffsetsTable.commit = commit_spy  # type: ignore[method-assign]


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
            global _late_until
            _late_until = time.monotonic() + LATE_WINDOW_S
            log.warning("Resumed at point=%s (fault injection)", name)


def main() -> int:
    from floe_jobs import cli, faults

    folder = os.environ.get("FLOE_TEST_CRASH_DIR")
    if folder:
        faults.install(Faults(Path(folder), os.environ.get("FLOE_TEST_CRASH_POINTS", "")))
        _observe_late_writes()
    skew = os.environ.get("FLOE_TEST_CLOCK_SKEW_S")
    if skew:
        faults.skew(float(skew))
        log.warning("Write timestamps skewed seconds=%s (fault injection)", skew)
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
