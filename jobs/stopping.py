"""How a replica stops: a drain on SIGTERM, an abort when the drain cannot finish in time.

SIGTERM: no new plan; the running batch finishes and commits within
`shutdown.drain_timeout_seconds`; the consumer closes (leaving the group) and Spark stops; exit
0. A second signal or the deadline aborts: Spark's JVM is killed and the Cassandra sessions
closed first, so nothing of the running batch is written after the replica leaves the group;
then the consumer leaves and the process exits 4. The batch's plan stays in flight and the next
owner replays it.

The stop flags live here (`Stops`): the lanes read them between batches and the drain's
watchdog, the abort and the shutdown set them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from floe_jobs import kafkaio, state
from floe_jobs.exitcodes import EXIT_ABORTED, EXIT_OK
from floe_jobs.replica import ReplicaContext

log = logging.getLogger("floe_jobs")


@dataclass
class Stops:
    """Whether and how the replica stops: a signal asked for a drain (with its deadline), a lane
    gave up, an abort or the shutdown began."""

    stop_requested: threading.Event = field(default_factory=threading.Event)
    deadline: float | None = None
    aborting: bool = False
    shutting_down: bool = False
    # set when a lane gave up (batches kept failing): the other lanes stop too
    halt: threading.Event = field(default_factory=threading.Event)

    def should_stop(self) -> bool:
        """Whether the lanes should stop: a signal, or a lane that gave up."""
        return self.stop_requested.is_set() or self.halt.is_set()


def on_signal(ctx: ReplicaContext, stops: Stops, signum: int) -> None:
    """The first signal starts a drain with a deadline; a second one aborts."""
    if stops.stop_requested.is_set():
        log.warning("Received second signal=%d; aborting the running batch", signum)
        abort(ctx, stops, "second signal")
        return
    drain = ctx.cfg.shutdown.drain_timeout_seconds
    log.info("Received signal=%d; draining deadline_seconds=%.1f", signum, drain)
    stops.deadline = time.monotonic() + drain
    stops.stop_requested.set()
    if ctx.membership is not None:
        ctx.membership.wake()  # idle lanes stop now, not after their poll interval
    ctx.health.stopping = True
    threading.Thread(target=_watchdog, args=(ctx, stops), name="floe-drain-watchdog", daemon=True).start()


def _watchdog(ctx: ReplicaContext, stops: Stops) -> None:
    assert stops.deadline is not None
    while time.monotonic() < stops.deadline:
        if stops.shutting_down:
            return  # the batch committed; closing the consumer and Spark needs no deadline
        time.sleep(0.1)
    abort(ctx, stops, "drain deadline passed")


def abort(ctx: ReplicaContext, stops: Stops, reason: str) -> None:
    """Stop without committing: kill Spark's JVM and close the Cassandra sessions first, so
    nothing of the running batch is written after we leave the group."""
    if stops.aborting:
        return
    stops.aborting = True
    busy = ctx.membership is not None and ctx.membership.busy
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
    if ctx.session is not None:
        with contextlib.suppress(Exception):
            ctx.session.cluster.shutdown()
    if ctx.membership is not None:
        with contextlib.suppress(Exception):
            ctx.membership.close(leave=ctx.cfg.kafka.leave_group_on_close)
    logging.shutdown()
    os._exit(EXIT_ABORTED)


def shutdown(
    ctx: ReplicaContext, stops: Stops, clients: Iterable[kafkaio.RangeReader | kafkaio.KafkaSink | None]
) -> int:
    """The drain's end, once the lanes stopped: leave the group, close the lanes' clients (each
    lane's reader and sink), stop Spark and close Cassandra's session."""
    stops.shutting_down = True
    log.info("Shutting down app=%s member=%s", ctx.app, ctx.member)
    ctx.health.stopping = True
    leave = ctx.cfg.kafka.leave_group_on_close
    if ctx.membership is not None:
        ctx.membership.close(leave=leave)
    for client in clients:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
    if ctx.spark is not None:
        with contextlib.suppress(Exception):
            ctx.spark.stop()
    if ctx.session is not None:
        with contextlib.suppress(Exception):
            ctx.session.cluster.shutdown()
    log.info("Stopped app=%s member=%s left_group=%s", ctx.app, ctx.member, leave)
    if not leave:
        # A closed consumer always leaves; exit before its finaliser can.
        logging.shutdown()
        os._exit(EXIT_OK)
    return EXIT_OK
