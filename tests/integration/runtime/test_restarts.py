"""The local stack's Cassandra node or Kafka broker stopped in the middle of a word count run,
then started again: the replicas wait (not ready, alive, one clear log line), resume on their
own, and the counts are exact in Cassandra and in the output topic.

Both services are the stack's own, shared with every other test: `services` starts them again,
and waits for them, whatever the test's outcome.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from floe_stack import localrun

from .conftest import Services
from .test_word_count import check_counts, topics_of, wait_ready

# exclusive: stops the stack's own Kafka broker and Cassandra node for 30 s
pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.exclusive]

# Long enough to mean "waited out": a replica retries a batch whose dependency is down after 1,
# 2, 4, then every 5 s (jobs/outages.py), so by 20 s it has retried five times, the last two after
# the capped delay, and 20 s is more than three of the 6 s sessions set below. That no retry is
# counted as a failed batch (which would end the replica after five, jobs/lanes.py) the log says
# directly: no "Batch failed" line.
OUTAGE_SECONDS = 20.0


def probe(replica: localrun.Replica) -> tuple[int, dict[str, Any]]:
    """The replica's /readyz: status and body (0 and {} when it does not answer)."""
    url = f"http://127.0.0.1:{replica.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())
    except OSError:
        return 0, {}


class Feeder:
    """Produces `lines` a chunk at a time in a thread. `hold()` keeps it between two chunks (for a
    broker outage: its producer's metadata request would fail with no broker to answer)."""

    def __init__(self, app: localrun.App, lines: list[str], *, chunk: int, every: float) -> None:
        self.app, self.lines, self.chunk, self.every = app, lines, chunk, every
        self.gate = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def _run(self) -> None:
        try:
            for i in range(0, len(self.lines), self.chunk):
                with self.gate:
                    localrun.produce(self.app.bootstrap, self.app.topics[0], self.lines[i : i + self.chunk])
                time.sleep(self.every)
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        assert self.done.is_set(), "the feeder did not finish"
        assert self.error is None, f"the feeder failed: {self.error!r}"


def run_outage(
    *,
    dependency: str,
    app: localrun.App,
    session: Any,
    services: Services,
    replicas: int = 2,
    hold_feeder: bool = False,
) -> dict[str, float]:
    """Word count with `replicas` replicas fed over about 35 s; `dependency` stopped for
    OUTAGE_SECONDS once every replica committed; the figures of the run."""
    # a lost member's partitions wait for its session: short, in case the outage drops one
    app.extra_env.update({"FLOE_KAFKA_SESSION_TIMEOUT_MS": "6000", "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "1500"})
    lines = localrun.word_lines(2400, seed=29)
    feeder = Feeder(app, lines, chunk=50, every=0.75)
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(replicas)]
    figures: dict[str, float] = {}
    try:
        wait_ready(procs, timeout=240)
        feeder.thread.start()
        deadline = time.monotonic() + 120
        while not all(p.commits_since_start() >= 2 for p in procs):
            assert time.monotonic() < deadline, "replicas did not commit before the outage"
            time.sleep(0.5)

        if hold_feeder:
            feeder.gate.acquire()
        t_stop = time.monotonic()
        figures["stop_seconds"] = services.stop(dependency)
        # every replica notices (its next batch plans against the stopped service) and says so
        deadline = time.monotonic() + 60
        while True:
            probes = [probe(p) for p in procs]
            if all(code == 503 and dependency in body.get("waiting_for", []) for code, body in probes):
                break
            assert time.monotonic() < deadline, f"replicas did not report waiting for {dependency}: {probes}"
            assert all(p.alive() for p in procs)
            time.sleep(0.5)
        figures["not_ready_after_seconds"] = time.monotonic() - t_stop
        while time.monotonic() - t_stop < OUTAGE_SECONDS:
            assert all(p.alive() for p in procs), "a replica exited while waiting"
            assert all(probe(p)[0] == 503 for p in procs), "a replica reported ready during the outage"
            time.sleep(1)
        figures["outage_seconds"] = time.monotonic() - t_stop
        t_start = time.monotonic()
        figures["start_seconds"] = services.start()
        if hold_feeder:
            feeder.gate.release()
        wait_ready(procs, timeout=180)
        figures["ready_again_seconds"] = time.monotonic() - t_start

        feeder.join(timeout=300)
        figures["tail_seconds"] = localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=procs)
        check_counts(session, app, dict(localrun.word_truth(lines)))
        assert all(p.alive() and p.starts == 1 for p in procs), "a replica exited or was restarted"
        for p in procs:
            log = p.log_path.read_text()
            assert f"Waiting for dependency={dependency}" in log, p.name
            assert f"Dependency available again dependency={dependency}" in log, p.name
            assert "Batch failed" not in log, f"{p.name} counted an outage as a failure"
        codes = [p.stop() for p in procs]
        assert codes == [0] * len(procs), f"exit codes {codes}"
        print(f"{dependency} outage: " + " ".join(f"{k}={v:.1f}" for k, v in figures.items()))
        return figures
    finally:
        if hold_feeder and feeder.gate.locked():
            feeder.gate.release()
        for p in procs:
            p.stop()


@pytest.mark.timeout(900)
def test_cassandra_restart_is_waited_out(
    word_count_app: localrun.App, session: Any, services: Services
) -> None:
    run_outage(dependency="cassandra", app=word_count_app, session=session, services=services)


@pytest.mark.timeout(900)
def test_kafka_restart_is_waited_out(word_count_app: localrun.App, session: Any, services: Services) -> None:
    run_outage(dependency="kafka", app=word_count_app, session=session, services=services, hold_feeder=True)
