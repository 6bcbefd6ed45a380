"""The shared offsets table against real Cassandra: apps of one keyspace never see each other's rows."""

from __future__ import annotations

import threading
import uuid

from cassandra.cluster import Session
from floe_jobs import offsets
from floe_jobs.planning import OffsetRow, PartitionPlan
from floe_jobs.stores.config import CassandraConfig, connect


def _app() -> str:
    return f"app-{uuid.uuid4().hex[:8]}"


def test_two_apps_share_the_table_without_seeing_each_other(session: Session, keyspace: str) -> None:
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    offsets.ensure_offsets_table(session, keyspace=keyspace)  # idempotent
    first, second = _app(), _app()
    a = offsets.OffsetsTable(session, keyspace=keyspace, app_id=first, owner="a-0")
    b = offsets.OffsetsTable(session, keyspace=keyspace, app_id=second, owner="b-0")
    a.create([OffsetRow("words", 0, 10), OffsetRow("words", 1, 20)])
    b.create([OffsetRow("words", 0, 99)])

    assert {tp: r.next_offset for tp, r in a.read(["words"]).items()} == {("words", 0): 10, ("words", 1): 20}
    assert {tp: r.next_offset for tp, r in b.read(["words"]).items()} == {("words", 0): 99}

    plan = PartitionPlan("words", 0, seq=1, start=10, end=15, replay=False)
    a.record_plans([plan])
    row = a.read(["words"])[("words", 0)]
    assert row.in_flight and (row.planned_from, row.planned_to, row.planned_seq) == (10, 15, 1)
    a.commit([plan], {("words", 0): {"src:0": (7, 2)}})
    row = a.read(["words"])[("words", 0)]
    assert not row.in_flight and row.next_offset == 15 and row.committed_seq == 1
    assert row.source_positions == {"src:0": (7, 2)}
    assert b.read(["words"])[("words", 0)].next_offset == 99  # untouched

    assert offsets.progress(session, keyspace=keyspace, app_id=first) == {
        ("words", 0): (15, 1, 1, "a-0"),
        ("words", 1): (20, 0, 0, "a-0"),
    }


def test_recorded_topics_and_forget_are_per_app(session: Session, keyspace: str) -> None:
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    gone, kept = _app(), _app()
    offsets.OffsetsTable(session, keyspace=keyspace, app_id=gone).create(
        [OffsetRow("in", 0, 1), OffsetRow(f"{gone}-words-repartition", 0, 3), OffsetRow("in", 1, 2)]
    )
    offsets.OffsetsTable(session, keyspace=keyspace, app_id=kept).create([OffsetRow("other", 0, 5)])
    recorded = offsets.recorded_topics(session, keyspace=keyspace, app_id=gone)
    assert recorded == sorted(["in", f"{gone}-words-repartition"])

    offsets.forget(session, keyspace=keyspace, app_id=gone)
    assert offsets.recorded_topics(session, keyspace=keyspace, app_id=gone) == []
    assert offsets.progress(session, keyspace=keyspace, app_id=gone) == {}
    assert offsets.recorded_topics(session, keyspace=keyspace, app_id=kept) == ["other"]


def test_reads_before_the_table_exists_find_nothing(session: Session) -> None:
    from floe_jobs.stores.schema import execute_ddl, keyspace_cql

    bare = f"it_offsets_{uuid.uuid4().hex[:8]}"
    execute_ddl(session, keyspace_cql(bare))
    try:
        assert offsets.recorded_topics(session, keyspace=bare, app_id="x") == []
        assert offsets.progress(session, keyspace=bare, app_id="x") == {}
        offsets.forget(session, keyspace=bare, app_id="x")  # nothing to forget, no error
    finally:
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {bare}")


def test_progress_read_while_another_client_makes_the_table(
    session: Session, cassandra_config: CassandraConfig
) -> None:
    """Cassandra answers a read racing the table's creation with "Unknown CF"; a tool polling a
    new app's progress sees no rows yet, not an error."""
    from floe_jobs.stores.schema import execute_ddl, keyspace_cql

    creator = connect(cassandra_config)
    reads = 0
    try:
        for _ in range(5):
            bare = f"it_offsets_{uuid.uuid4().hex[:8]}"
            execute_ddl(session, keyspace_cql(bare))
            made = threading.Thread(target=offsets.ensure_offsets_table, args=(creator,), kwargs={"keyspace": bare})
            made.start()
            try:
                while made.is_alive():
                    assert offsets.progress(session, keyspace=bare, app_id="x") == {}
                    reads += 1
            finally:
                made.join()
                execute_ddl(session, f"DROP KEYSPACE IF EXISTS {bare}")
    finally:
        creator.cluster.shutdown()
    assert reads > 0
