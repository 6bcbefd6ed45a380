"""A consistency level that cannot keep the fence for the keyspace's real replication stops the
replica at its start, before it reads anything.

The local Cassandra is one node; a keyspace may still be made with three copies of each row
under SimpleStrategy (its writes at ONE then land on the one node; QUORUM, two copies, is
unavailable). With `cassandra.consistency: ONE` a read may miss the last write on a real
three-node cluster, so exactly-once state would rest on luck: the replica refuses to start
(exit code 2), saying what to change, and creates no table. The same level over a keyspace of
one copy starts. Real Kafka, Cassandra and Spark from the local stack.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import offsets
from floe_jobs.exitcodes import EXIT_CONFIG
from floe_jobs.stores import schema
from floe_stack import localrun

from .conftest import NewApp

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


def wc_app(new_app: NewApp) -> localrun.App:
    app = new_app(
        "floor",
        entrypoint=str(localrun.ROOT / "examples/word-count/word_count.py"),
        stores=[{"name": "word-count", "type": "partitioned"}],
        input_name="lines",
        batch=500,
    )
    app.extra_env["FLOE_CASSANDRA_CONSISTENCY"] = "ONE"
    return app


def test_one_over_three_copies_is_refused_before_any_read(new_app: NewApp, session: Any) -> None:
    app = wc_app(new_app)
    session.execute(
        f"CREATE KEYSPACE {app.keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
    )
    localrun.produce(app.bootstrap, app.topics[0], ["a b c"] * 50)
    replica = localrun.Replica(app, "r0").start()
    try:
        code = replica.wait(180)
    finally:
        replica.stop()
    log = replica.log_path.read_text(errors="replace")
    assert code == EXIT_CONFIG, f"exit code {code}; log tail: {log[-2000:]}"
    assert (
        "floe-job: cassandra.consistency (FLOE_CASSANDRA_CONSISTENCY; a StreamingApp's "
        f"spec.state.cassandra.consistency): ONE cannot keep the fence of keyspace {app.keyspace} (SimpleStrategy, "
        "replication factor 3)" in log
    )
    assert "use LOCAL_QUORUM (the default) or QUORUM" in log
    # refused before provisioning: no table, so no state or offsets row was read or written
    assert schema.columns_of(session, app.keyspace, [offsets.TABLE, schema.table_name("word-count")]) == {}


def test_one_over_one_copy_starts(new_app: NewApp, session: Any) -> None:
    app = wc_app(new_app)
    session.execute(
        f"CREATE KEYSPACE {app.keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    lines = ["a b c"] * 50
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(
            session, app, [*app.topics, f"{app.app_id}-words-repartition"], timeout=240, replicas=[replica]
        )
    finally:
        assert replica.stop() == 0
