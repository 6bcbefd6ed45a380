"""The shared offsets table against real Cassandra: apps of one keyspace never see each other's rows."""

from __future__ import annotations

import dataclasses
import threading
import time
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

    plan = PartitionPlan("words", 0, seq=1, start=10, end=15, replay=False, stamp=time.time_ns() // 1000 + 1)
    assert a.claim([plan], a.read(["words"]))
    row = a.read(["words"])[("words", 0)]
    assert row.in_flight and (row.planned_from, row.planned_to, row.planned_seq) == (10, 15, 1)
    assert a.commit([plan], {("words", 0): {"src:0": (7, 2)}})
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


def _plan(seq: int, start: int, end: int, *, stamp: int, replay: bool = False) -> PartitionPlan:
    """A plan of partition 0 of `words` whose stamp is `stamp` µs after now (rows are created
    at the clock; a plan is always stamped after its row was)."""
    stamp += time.time_ns() // 1000 + 1_000_000
    return PartitionPlan("words", 0, seq=seq, start=start, end=end, replay=replay, stamp=stamp)


def test_a_sequence_is_claimed_once_and_a_replay_takes_the_row_over(session: Session, keyspace: str) -> None:
    """Two replicas that read the same committed row plan the same next sequence: only one claim
    succeeds. A replay claim takes the row over, and the former claimer then sees it lost."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    z = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r0/aaaa")
    n = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb")
    z.create([OffsetRow("words", 0, 0)])
    seen_by_z, seen_by_n = z.read(["words"]), n.read(["words"])
    mine = _plan(1, 0, 10, stamp=0)
    assert z.claim([mine], seen_by_z)
    assert not n.claim([_plan(1, 0, 7, stamp=1)], seen_by_n)  # same sequence, other range: refused
    row = n.read(["words"])[("words", 0)]
    assert (row.planned_seq, row.planned_to, row.planned_ts, row.owner) == (1, 10, mine.stamp, "r0/aaaa")
    assert z.lost([mine]) == []

    # the other replica takes the partition and replays the plan in flight
    assert n.claim([dataclasses.replace(mine, replay=True)], n.read(["words"]))
    assert z.lost([mine]) == [("words", 0)]
    assert n.lost([mine]) == []
    assert not z.commit([mine])  # the former claimer's commit is refused
    assert n.commit([mine])
    assert not n.commit([mine])  # once only
    assert n.lost([mine]) == [("words", 0)]  # committed: nothing of it may run again


def test_a_stale_commit_never_moves_offsets_back(session: Session, keyspace: str) -> None:
    """A commit of an older batch that arrives after a newer one (its owner was paused) is
    refused: a commit applies only to the plan in flight, once."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb")
    table.create([OffsetRow("words", 0, 0)])
    old, new = _plan(1, 0, 10, stamp=0), _plan(2, 10, 20, stamp=1)
    assert table.claim([old], table.read(["words"]))
    assert table.commit([old])
    assert table.claim([new], table.read(["words"]))
    assert table.commit([new])
    assert not table.commit([old])
    row = table.read(["words"])[("words", 0)]
    assert (row.next_offset, row.committed_seq) == (20, 2)


def test_an_offsets_table_of_an_earlier_release_gets_the_new_columns(session: Session) -> None:
    from floe_jobs.stores.schema import execute_ddl, keyspace_cql

    bare = f"it_offsets_{uuid.uuid4().hex[:8]}"
    execute_ddl(session, keyspace_cql(bare))
    try:
        execute_ddl(session, offsets.table_cql(bare).replace(", planned_ts bigint", ""))
        offsets.ensure_offsets_table(session, keyspace=bare)
        offsets.ensure_offsets_table(session, keyspace=bare)  # idempotent
        app = _app()
        # a row an earlier release wrote: no planned_ts
        session.execute(
            f"INSERT INTO {bare}.{offsets.TABLE} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
            " owner) VALUES (%s, 'words', 0, 0, 0, 0, 'old')",
            (app,),
        )
        table = offsets.OffsetsTable(session, keyspace=bare, app_id=app, owner="r0/aaaa")
        rows = table.read(["words"])
        assert rows[("words", 0)].planned_ts is None
        plan = _plan(1, 0, 5, stamp=0)
        assert table.claim([plan], rows)
        assert table.read(["words"])[("words", 0)].planned_ts == plan.stamp
        assert table.commit([plan])
    finally:
        execute_ddl(session, f"DROP KEYSPACE IF EXISTS {bare}")


def test_a_planner_whose_clock_is_behind_still_commits(session: Session, keyspace: str) -> None:
    """The row's creator and the previous owners may have clocks ahead of this replica's: every
    plan is stamped above the row's recorded stamp, so its commit is never shadowed (a commit
    that lost to the row's own cells would replay the same batch forever)."""
    from floe_jobs import planning

    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    ahead = time.time_ns() // 1000 + 30_000_000  # the creator's clock runs 30 s ahead
    creator = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r0/aaaa")
    creator.create([OffsetRow("words", 0, 0, planned_ts=ahead)])
    behind = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb")
    rows = behind.read(["words"])
    assert rows[("words", 0)].planned_ts == ahead
    stamp = planning.stamp_for(rows[("words", 0)], now_us=time.time_ns() // 1000)
    plan = PartitionPlan("words", 0, seq=1, start=0, end=10, replay=False, stamp=stamp)
    stale = {("words", 0): dataclasses.replace(rows[("words", 0)], planned_ts=ahead - 1)}
    assert not behind.claim([plan], stale)  # a row changed since it was read is not claimed
    assert behind.claim([plan], rows)
    assert behind.commit([plan])
    row = behind.read(["words"])[("words", 0)]
    assert (row.next_offset, row.committed_seq, row.planned_seq) == (10, 1, 1)
