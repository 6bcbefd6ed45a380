"""Word count against a 3-node Cassandra ring (127.0.0.2-4, replication factor 3, the default
LOCAL_QUORUM): one node SIGKILLed in the middle of the run and brought back 30 s later. Two
replicas of three answer every read and write, so batches go on (a batch caught with the
killed node as its coordinator is retried), and the counts are exact.

The ring is started by this module (`floe_stack.ring`), after the stack's own services, and
removed when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from floe_stack import localrun
from floe_stack import ring as ring_mod
from floe_stack.layout import Layout

from .test_restarts import Feeder
from .test_word_count import check_counts, topics_of, wait_ready

# exclusive: three more Cassandra JVMs (on 127.0.0.2-4) beside the stack, one SIGKILLed
pytestmark = [
    pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.slow,
    pytest.mark.exclusive,
]

DOWN_SECONDS = 30.0


@pytest.fixture(scope="module")
def ring(stack_env: dict[str, str]) -> Iterator[ring_mod.Ring]:
    r = ring_mod.Ring(Layout.discover(localrun.ROOT))
    try:
        seconds = r.start()
        print(f"ring: started 3 nodes in {seconds:.1f} s")
        yield r
    finally:
        r.stop()


@pytest.fixture
def ring_session(ring: ring_mod.Ring) -> Iterator[Any]:
    from floe_jobs.stores import CassandraConfig, connect

    s = connect(CassandraConfig(hosts=tuple(ring.hosts), port=ring.port, local_datacenter="datacenter1"))
    yield s
    s.cluster.shutdown()


@pytest.mark.timeout(1500)
def test_node_killed_under_quorum_batches_go_on(
    ring: ring_mod.Ring, ring_session: Any, word_count_app: localrun.App
) -> None:
    app = word_count_app
    app.cassandra_hosts = ring.hosts
    app.cassandra_port = ring.port
    app.extra_env.update({"FLOE_CASSANDRA_LOCAL_DC": "datacenter1"})
    # as the operator provisions it for `replication.replicationFactor: 3`
    ring_session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {app.keyspace} "
        "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}",
        timeout=60,
    )
    lines = localrun.word_lines(4000, seed=31)
    feeder = Feeder(app, lines, chunk=40, every=0.75)
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(2)]
    figures: dict[str, float] = {}
    try:
        wait_ready(procs, timeout=300)
        feeder.thread.start()
        deadline = time.monotonic() + 180
        while not all(p.commits_since_start() >= 2 for p in procs):
            assert time.monotonic() < deadline, "replicas did not commit before the kill"
            time.sleep(0.5)

        victim = 1  # 127.0.0.3: not the seed, and one of the apps' contact points
        before = [p.commits_since_start() for p in procs]
        t_kill = time.monotonic()
        ring.kill(victim)
        # while the node is down, every replica keeps committing
        progress_at: list[float] = []
        while time.monotonic() - t_kill < DOWN_SECONDS:
            assert all(p.alive() for p in procs)
            time.sleep(1)
            if not progress_at and all(p.commits_since_start() > b for p, b in zip(procs, before, strict=True)):
                progress_at.append(time.monotonic() - t_kill)
        during = [p.commits_since_start() - b for p, b in zip(procs, before, strict=True)]
        assert all(n > 0 for n in during), f"batches stalled while a node was down: {during}"
        figures["first_commits_after_kill_seconds"] = progress_at[0]
        figures["commits_while_down"] = float(sum(during))
        figures["node_restart_seconds"] = ring.start_node(victim)

        feeder.join(timeout=600)
        figures["tail_seconds"] = localrun.wait_caught_up(
            ring_session, app, topics_of(app), timeout=600, replicas=procs
        )
        check_counts(ring_session, app, dict(localrun.word_truth(lines)))
        assert all(p.alive() and p.starts == 1 for p in procs), "a replica exited"
        figures["outage_waits"] = float(sum(p.log_path.read_text().count("Waiting for dependency=") for p in procs))
        codes = [p.stop() for p in procs]
        assert codes == [0, 0], f"exit codes {codes}"
        print("ring node kill: " + " ".join(f"{k}={v:.1f}" for k, v in figures.items()))
    finally:
        for p in procs:
            p.stop()
        localrun.drop_keyspace(ring_session, app.keyspace)
