"""Word count end to end: 1-3 replica processes, SIGTERM handover, SIGKILL at chosen points.

Real Kafka, Cassandra and Spark from the local stack; counts must equal the ground truth
exactly, in the store and as the last value per word in the output topic.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest
from floe_stack import localrun

from tests import counting, faultjob

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


def topics_of(app: localrun.App) -> list[str]:
    return [*app.topics, f"{app.app_id}-words-repartition"]


def check_counts(session: Any, app: localrun.App, want: dict[str, int], *, output: bool = True) -> None:
    got = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    diff = counting.counters_equal(got, want)
    assert diff is None, diff
    if output:
        emitted = localrun.last_values(localrun.read_topic(app.bootstrap, app.output_topics[0]))
        diff = counting.counters_equal({k: int(v) for k, v in emitted.items()}, want)
        assert diff is None, f"output topic: {diff}"


def wait_ready(procs: list[localrun.Replica], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.ready() for p in procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert all(p.ready() for p in procs), f"replicas not ready within {timeout:.0f}s"


# batches of at most 5,000 records: every one is read by the driver's consumer (below the default
# kafka.spark_read_min_records) and re-keyed and aggregated in the driver (within the default
# spark.driver_batch_max_records), except in the "spark" cases, where Spark's Kafka source reads
# every batch and the helpers run their Spark plans
SPARK_READS = {"FLOE_KAFKA_SPARK_READ_MIN_RECORDS": "0", "FLOE_SPARK_DRIVER_BATCH_MAX_RECORDS": "0"}


@pytest.mark.parametrize(("replicas", "reads"), [(1, "driver"), (2, "spark"), (3, "driver")])
def test_word_count_exact_with_replicas(
    replicas: int, reads: str, word_count_app: localrun.App, session: Any
) -> None:
    app = word_count_app
    if reads == "spark":
        app.extra_env.update(SPARK_READS)
    lines = localrun.word_lines(3000, seed=replicas)
    localrun.produce(app.bootstrap, app.topics[0], lines[:1500])
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(replicas)]
    try:
        time.sleep(5)
        localrun.produce(app.bootstrap, app.topics[0], lines[1500:])
        localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=procs)
        check_counts(session, app, dict(localrun.word_truth(lines)))
        # a replica still warming up when the others finished the input becomes ready once it
        # joins the group (idle, with nothing assigned, or with partitions it then processes)
        wait_ready(procs, timeout=120)
    finally:
        codes = [p.stop() for p in procs]
    assert codes == [0] * replicas


def test_sigterm_handover_moves_partitions(word_count_app: localrun.App, session: Any) -> None:
    app = word_count_app
    lines = localrun.word_lines(6000, seed=11)
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(3)]
    stop = threading.Event()

    def feed() -> None:
        for i in range(0, len(lines), 200):
            if stop.is_set():
                return
            localrun.produce(app.bootstrap, app.topics[0], lines[i : i + 200])
            time.sleep(0.2)

    feeder = threading.Thread(target=feed)
    try:
        wait_ready(procs, timeout=180)
        feeder.start()
        # SIGTERM while the input arrives and the replica works on it: once it has committed a batch
        deadline = time.monotonic() + 120
        while procs[0].commits_since_start() < 1:
            assert time.monotonic() < deadline, f"{procs[0].name} committed nothing within 120 s"
            time.sleep(0.2)
        t0 = time.monotonic()
        procs[0].signal(signal.SIGTERM)
        assert procs[0].wait(60) == 0
        drained = time.monotonic() - t0
        feeder.join()
        localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=procs[1:])
        check_counts(session, app, dict(localrun.word_truth(lines)))
        log = procs[0].log_path.read_text()
        assert "Left group" in log
        assert drained < 30
    finally:
        stop.set()
        for p in procs:
            p.stop()


# The crash points are the same on both read paths; `make test` runs them on the driver's (the
# Spark path's reads are proved by the replicas, read_committed and chaos tests), `make test-all`
# on both: about 100 s of a run's two cores.
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("reads", ["driver", pytest.param("spark", marks=pytest.mark.slow)])
def test_crash_points_replay_exactly(reads: str, word_count_app: localrun.App, session: Any, tmp_path: Any) -> None:
    """SIGKILL at chosen instants: after stage 1 wrote the repartition topic (its replay duplicates
    records there, which stage 2 must drop), after stage 2 applied state (the fence must skip it),
    after stage 2 emitted (its output is repeated, the state not). Both read paths: the driver's
    filter of applied records and Spark's."""
    app = word_count_app
    if reads == "spark":
        app.extra_env.update(SPARK_READS)
    app.extra_env.update(
        {
            "FLOE_TEST_CRASH_POINTS": "split:after-emit,count:after-state,count:after-emit",
            "FLOE_TEST_CRASH_DIR": str(tmp_path),
            "FLOE_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "1500",
        }
    )
    app.module = faultjob.MODULE
    lines = localrun.word_lines(2000, seed=23)
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    try:
        deadline = time.monotonic() + 1200
        while not localrun.caught_up(session, app, topics_of(app)):
            assert time.monotonic() < deadline, "did not catch up"
            if not replica.alive():
                assert replica.proc is not None and replica.proc.returncode == -signal.SIGKILL
                replica.start()
            time.sleep(1)
        crashed = sorted(p.name for p in tmp_path.glob("crashed-*"))
        assert crashed == ["crashed-count-after-emit", "crashed-count-after-state", "crashed-split-after-emit"]
        check_counts(session, app, dict(localrun.word_truth(lines)))
        log = replica.log_path.read_text()
        assert "Dropped already-applied repartition records" in log
        assert log.count("Replaying stage=") >= 3
    finally:
        replica.stop()
