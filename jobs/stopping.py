"""How a replica stops: a drain on SIGTERM, an abort when the drain cannot finish in time.

SIGTERM: no new plan; the running batch finishes and commits within
`shutdown.drain_timeout_seconds`; the consumer closes (leaving the group) and Spark stops; exit
0. A second signal or the deadline aborts: Spark's JVM is killed and the Cassandra sessions
closed first, so nothing of the running batch is written after the replica leaves the group;
then the consumer leaves and the process exits 4. The batch's plan stays in flight and the next
owner replays it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from floe_jobs import state
from floe_jobs.exitcodes import EXIT_ABORTED, EXIT_OK

if TYPE_CHECKING:
    from floe_jobs.runner import Runner

log = logging.getLogger("floe_jobs")


def on_signal(r: Runner, signum: int) -> None:
    """The first signal starts a drain with a deadline; a second one aborts."""
    if r.stop_requested.is_set():
        log.warning("Received second signal=%d; aborting the running batch", signum)
        abort(r, "second signal")
        return
    drain = r.cfg.shutdown.drain_timeout_seconds
    log.info("Received signal=%d; draining deadline_seconds=%.1f", signum, drain)
    r.deadline = time.monotonic() + drain
    r.stop_requested.set()
    r.health.stopping = True
    threading.Thread(target=_watchdog, args=(r,), name="floe-drain-watchdog", daemon=True).start()


def _watchdog(r: Runner) -> None:
    assert r.deadline is not None
    while time.monotonic() < r.deadline:
        if r.shutting_down:
            return  # the batch committed; closing the consumer and Spark needs no deadline
        time.sleep(0.1)
    abort(r, "drain deadline passed")


def abort(r: Runner, reason: str) -> None:
    """Stop without committing: kill Spark's JVM and close the Cassandra sessions first, so
    nothing of the running batch is written after we leave the group."""
    if r.aborting:
        return
    r.aborting = True
    busy = r.membership is not None and r.membership.busy
    log.error("Aborting reason=%s in_batch=%s; the in-flight plans will be replayed", reason, busy)
    with contextlib.suppress(Exception):
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.kill()
            proc.wait(timeout=5)
    with contextlib.suppress(Exception):
        state.shutdown_sessions()
    if r.session is not None:
        with contextlib.suppress(Exception):
            r.session.cluster.shutdown()
    if r.membership is not None:
        with contextlib.suppress(Exception):
            r.membership.close(leave=r.cfg.kafka.leave_group_on_close)
    logging.shutdown()
    os._exit(EXIT_ABORTED)


def shutdown(r: Runner) -> int:
    """The drain's end, once the lanes stopped: leave the group, close the lanes' clients, stop
    Spark and close Cassandra's session."""
    r.shutting_down = True
    log.info("Shutting down app=%s member=%s", r.app, r.member)
    r.health.stopping = True
    leave = r.cfg.kafka.leave_group_on_close
    if r.membership is not None:
        r.membership.close(leave=leave)
    for client in [c for lane in r.lanes for c in (lane.reader, lane.sink)]:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
    if r.spark is not None:
        with contextlib.suppress(Exception):
            r.spark.stop()
    if r.session is not None:
        with contextlib.suppress(Exception):
            r.session.cluster.shutdown()
    log.info("Stopped app=%s member=%s left_group=%s", r.app, r.member, leave)
    if not leave:
        # A closed consumer always leaves; exit before its finaliser can.
        logging.shutdown()
        os._exit(EXIT_OK)
    return EXIT_OK
