"""Zombie owners: a replica paused past its session timeout in the middle of a batch, while the
others take its partitions over and commit newer batches, then resumed.

Whatever it was doing, nothing it does after resuming may count: state stays exact, committed
offsets never move back, and the output topic's latest count per word is the true one. The
replica pauses itself at a named point of a batch (`floe_jobs.faults`), armed by the test while
the replicas run, one point after the other. Before it resumes, the input stops and the others
apply all of it, and the state is checked right after: a late write that won would stay visible.

Giving the batch up is not enough: a replica that gave up before it tried to write would pass
that too. At each point the write the point is there for must have been attempted after the
resume and refused, as the replica's `Late ...` lines tell (`tests.faultjob`): paused mid-state,
its chunk of state rows was sent, under a write timestamp below the partition's newest plan's
(and the counts show it lost); paused after its claim or its state, its output was refused by
the ownership check; paused after its output, its offsets commit was sent and not applied.
"""

from __future__ import annotations

import ast
import os
import re
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


def _planned_stamps(session: Any, app: localrun.App, topic: str) -> dict[int, int]:
    """The write timestamp of each partition's newest plan (`planned_ts`) in the offsets rows of
    the stage that reads `topic`, `count` (rows are kept per stage: `offsets.position_key`)."""
    rows = session.execute(
        f"SELECT partition, planned_ts FROM {app.keyspace}.{offsets.TABLE} WHERE app_id = %s AND topic = %s",
        (app.app_id, offsets.position_key("count", topic)),
    )
    return {r[0]: r[1] for r in rows}


LATE_WRITE = re.compile(r"Late state write partition=(\d+) seq=(\d+) stamp=(\d+) rows=(\d+)")
LATE_CHECK = re.compile(r"Late ownership check refused stage=count plans=(\[.*?\]) ask_cassandra=(\w+)")
LATE_COMMIT = re.compile(r"Late commit applied=(\w+) plans=(\[.*?\])$", re.MULTILINE)


def late_write_refused(log: str, point: str, held: dict[int, int], stamps: dict[int, int]) -> str:
    """What the resumed replica attempted of its batch (`held`: partition of the stateful stage's
    topic → the paused plan's sequence) and how it was refused, from its `Late ...` lines after
    `Resumed at point=`; fails unless the write `point` is there for was attempted and refused
    (at `after-emit`, the commit, or the check that keeps it from being sent).
    `stamps`: each partition's newest plan's write timestamp, once the others moved past."""
    _, resumed, late = log.partition(f"Resumed at point={point}")
    assert resumed, f"no resume at {point} in the replica's log"

    def ours(plans: str) -> bool:
        return any(p in held and seq == held[p] for _t, p, seq in ast.literal_eval(plans))

    writes = [(int(p), int(seq), int(stamp), int(n)) for p, seq, stamp, n in LATE_WRITE.findall(late)]
    writes = [w for w in writes if held.get(w[0]) == w[1]]
    refused = [cass for plans, cass in LATE_CHECK.findall(late) if ours(plans)]
    commits = [applied for applied, plans in LATE_COMMIT.findall(late) if ours(plans)]
    seen = f"late state writes {writes}, refused checks {refused}, commits {commits}"
    assert "True" not in commits, f"a late commit of the paused batch was applied: {seen}"
    if point.endswith(":mid-state"):
        assert writes, f"resumed mid-state, the replica sent none of its batch's state rows: {seen}"
        stale = [w for w in writes if w[2] < stamps[w[0]]]
        assert stale == writes, f"late state rows not under a stamp below the newest plan's {stamps}: {seen}"
    elif point.endswith((":after-claim", ":after-state")):
        assert refused, f"resumed at {point}, the replica's output was not refused by its ownership check: {seen}"
    elif point.endswith(":after-emit"):
        # its commit is refused by the offsets table, or never sent: the check before the commit
        # refuses it when the consumer saw the rebalance first (a race with its heartbeat thread)
        local = [cass for cass in refused if cass == "False"]
        assert commits or local, f"resumed after its output, the replica neither sent nor withheld its commit: {seen}"
    return seen


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
    repartition = topics_of(app)[1]
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
                counting_held = {p: seq for (t, p), seq in held.items() if t == repartition}
                assert counting_held, f"{zombie.name} paused at {point} with no batch of count in flight: {held}"

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
                stamps = _planned_stamps(session, app, repartition)
                seen = late_write_refused(zombie.log_path.read_text(errors="replace"), point, counting_held, stamps)
                report.append(f"{point}: {zombie.name} paused {paused_s:.1f} s over partitions {sorted(held)}; {seen}")
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
