"""Zombie owners: a replica paused past its session timeout in the middle of a batch, while the
others take its partitions over and commit newer batches, then resumed.

Whatever it was doing, nothing it does after resuming may count: state stays exact, committed
offsets never move back, and the output topic's latest count per word is the true one. The
replica pauses itself at a named point of a batch (`floe_jobs.faults`), armed by the test while
the replicas run, one point after the other. Before it resumes, the input stops and the others
apply all of it, and the state is checked right after: a late write that won would stay visible.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import localrun

from tests import faultjob

from ..waiting import wait_for
from .test_word_count import check_counts, topics_of, wait_ready

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

SESSION_MS = 6000
# where a batch of `count` (the stateful stage) can be caught, in the order the test pauses them
POINTS = ("count:after-claim", "word-count:mid-state", "count:after-state", "count:after-emit")


class OffsetsWatch:
    """Samples the app's offsets rows all along and records every one that moved back."""

    def __init__(self, session: Any, app: localrun.App) -> None:
        self.session, self.app = session, app
        self.highest: dict[tuple[str, int], tuple[int, int]] = {}
        self.moved_back: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OffsetsWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                rows = offsets.progress(self.session, keyspace=self.app.keyspace, app_id=self.app.app_id)
            except Exception:  # the keyspace is not made yet
                continue
            self.samples += 1
            for tp, (next_offset, committed_seq, _planned, _owner) in rows.items():
                before = self.highest.get(tp)
                if before is not None and (next_offset < before[0] or committed_seq < before[1]):
                    self.moved_back.append(f"{tp}: {before} -> {(next_offset, committed_seq)}")
                if before is None or (next_offset, committed_seq) > before:
                    self.highest[tp] = (next_offset, committed_seq)


def _paused_pid(folder: Path, point: str) -> int:
    found = list(folder.glob(f"paused-{point.replace(':', '-')}-*"))
    return int(found[0].name.rsplit("-", 1)[1]) if found else 0


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _gave_up(zombie: localrun.Replica, point: str, *, timeout: float = 60.0) -> bool:
    """Whether the resumed replica logs that it gave its batch up within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = zombie.log_path.read_text(errors="replace")
        _, resumed, after = text.partition(f"Resumed at point={point}")
        if resumed and "Abandoned batch stage=count" in after:
            return True
        time.sleep(0.3)
    return False


@pytest.mark.timeout(1500)
def test_a_replica_paused_past_its_session_never_overwrites_newer_owners(
    word_count_app: localrun.App, session: Any, tmp_path: Path
) -> None:
    app = word_count_app
    app.extra_env.update(
        {
            "FLOE_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_MS),
            "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "1500",
            "FLOE_KAFKA_MAX_RECORDS_PER_BATCH": "2000",
            "FLOE_TEST_CRASH_DIR": str(tmp_path),
        }
    )
    app.module = faultjob.MODULE
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(3)]
    produced: list[str] = []
    stop = threading.Event()
    # held by the feeder while it produces a chunk, and by the test while it checks the state
    feeding = threading.Lock()

    def feed() -> None:
        seed = 0
        while not stop.is_set():
            seed += 1
            chunk = localrun.word_lines(150, seed=seed)
            with feeding:
                localrun.produce(app.bootstrap, app.topics[0], chunk)
                produced.extend(chunk)
            stop.wait(0.5)

    feeder = threading.Thread(target=feed)
    report = []
    try:
        with OffsetsWatch(session, app) as watch:
            wait_ready(procs, timeout=300)
            feeder.start()
            for point in POINTS:
                (tmp_path / f"pause-{point.replace(':', '-')}").touch()
                pid = wait_for(
                    lambda p=point: _paused_pid(tmp_path, p), what=f"a replica paused at {point}", timeout=180
                )
                zombie = next(r for r in procs if r.pid == pid)
                wait_for(lambda z=pid: _stopped(z), what=f"{zombie.name} stopped", timeout=10)
                os.killpg(pid, signal.SIGSTOP)  # its Spark JVM too: the whole pod is frozen
                t0 = time.monotonic()
                rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
                held = {tp: r[2] for tp, r in rows.items() if r[3].startswith(f"{zombie.name}/") and r[2] > r[1]}
                assert held, f"{zombie.name} paused at {point} with no batch in flight: {rows}"

                def overtaken(held: dict[tuple[str, int], int] = held) -> bool:
                    now = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
                    done = [now[tp][1] >= seq for tp, seq in held.items()]
                    newer = [now[tp][1] > seq for tp, seq in held.items()]
                    return all(done) and any(newer)

                wait_for(overtaken, what=f"the others committing past {zombie.name}'s batch", timeout=240)
                paused_s = time.monotonic() - t0
                # The input stops and the others apply all of it; then the zombie resumes. Nothing
                # newer rewrites what it writes now, so a late write that won would stay visible.
                with feeding:
                    localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=procs)
                    os.killpg(pid, signal.SIGCONT)
                    # its claim, its output or its commit is refused: the batch is given up either way
                    gave_up = _gave_up(zombie, point)
                    check_counts(session, app, dict(localrun.word_truth(produced)))
                assert gave_up, f"{zombie.name} resumed at {point} and did not give its batch up"
                report.append(f"{point}: {zombie.name} paused {paused_s:.1f} s over partitions {sorted(held)}")
            stop.set()
            feeder.join()
            localrun.wait_caught_up(session, app, topics_of(app), timeout=600, replicas=procs)
        assert watch.samples > 20
        assert not watch.moved_back, f"committed offsets moved back: {watch.moved_back[:5]}"
        check_counts(session, app, dict(localrun.word_truth(produced)))
        print(f"zombies: lines={len(produced)} " + "; ".join(report))
    finally:
        stop.set()
        for p in procs:
            with_suppressed = p.proc is not None and p.alive()
            if with_suppressed:
                os.killpg(p.pid, signal.SIGCONT)
            p.stop()
