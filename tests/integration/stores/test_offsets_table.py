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

# the stage whose rows these tests read and write, unless a test is about several
S = "main"


def _app() -> str:
    return f"app-{uuid.uuid4().hex[:8]}"


def test_two_apps_share_the_table_without_seeing_each_other(session: Session, keyspace: str) -> None:
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    offsets.ensure_offsets_table(session, keyspace=keyspace)  # idempotent
    first, second = _app(), _app()
    a = offsets.OffsetsTable(session, keyspace=keyspace, app_id=first, owner="a-0")
    b = offsets.OffsetsTable(session, keyspace=keyspace, app_id=second, owner="b-0")
    a.create([OffsetRow("words", 0, 10), OffsetRow("words", 1, 20)], stage=S)
    b.create([OffsetRow("words", 0, 99)], stage=S)

    assert {tp: r.next_offset for tp, r in a.read(["words"], stage=S).items()} == {("words", 0): 10, ("words", 1): 20}
    assert {tp: r.next_offset for tp, r in b.read(["words"], stage=S).items()} == {("words", 0): 99}

    plan = PartitionPlan("words", 0, seq=1, start=10, end=15, replay=False, stamp=time.time_ns() // 1000 + 1)
    assert a.claim([plan], a.read(["words"], stage=S), stage=S)
    row = a.read(["words"], stage=S)[("words", 0)]
    assert row.in_flight and (row.planned_from, row.planned_to, row.planned_seq) == (10, 15, 1)
    assert a.commit([plan], {("words", 0): {"src:0": (7, 2)}}, stage=S)
    row = a.read(["words"], stage=S)[("words", 0)]
    assert not row.in_flight and row.next_offset == 15 and row.committed_seq == 1
    assert row.source_positions == {"src:0": (7, 2)}
    assert b.read(["words"], stage=S)[("words", 0)].next_offset == 99  # untouched

    assert offsets.progress(session, keyspace=keyspace, app_id=first) == {
        ("words", 0): (15, 1, 1, "a-0"),
        ("words", 1): (20, 0, 0, "a-0"),
    }


def test_recorded_topics_and_forget_are_per_app(session: Session, keyspace: str) -> None:
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    gone, kept = _app(), _app()
    offsets.OffsetsTable(session, keyspace=keyspace, app_id=gone).create(
        [OffsetRow("in", 0, 1), OffsetRow("in", 1, 2)], stage="split"
    )
    offsets.OffsetsTable(session, keyspace=keyspace, app_id=gone).create(
        [OffsetRow(f"{gone}-words-repartition", 0, 3)], stage="count"
    )
    offsets.OffsetsTable(session, keyspace=keyspace, app_id=kept).create([OffsetRow("other", 0, 5)], stage=S)
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
    z.create([OffsetRow("words", 0, 0)], stage=S)
    seen_by_z, seen_by_n = z.read(["words"], stage=S), n.read(["words"], stage=S)
    mine = _plan(1, 0, 10, stamp=0)
    assert z.claim([mine], seen_by_z, stage=S)
    assert not n.claim([_plan(1, 0, 7, stamp=1)], seen_by_n, stage=S)  # same sequence, other range: refused
    row = n.read(["words"], stage=S)[("words", 0)]
    assert (row.planned_seq, row.planned_to, row.planned_ts, row.owner) == (1, 10, mine.stamp, "r0/aaaa")
    assert z.lost([mine], stage=S) == []

    # the other replica takes the partition and replays the plan in flight
    assert n.claim([dataclasses.replace(mine, replay=True)], n.read(["words"], stage=S), stage=S)
    assert z.lost([mine], stage=S) == [("words", 0)]
    assert n.lost([mine], stage=S) == []
    assert not z.commit([mine], stage=S)  # the former claimer's commit is refused
    assert n.commit([mine], stage=S)
    assert not n.commit([mine], stage=S)  # once only
    assert n.lost([mine], stage=S) == [("words", 0)]  # committed: nothing of it may run again


def test_a_stale_commit_never_moves_offsets_back(session: Session, keyspace: str) -> None:
    """A commit of an older batch that arrives after a newer one (its owner was paused) is
    refused: a commit applies only to the plan in flight, once."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb")
    table.create([OffsetRow("words", 0, 0)], stage=S)
    old, new = _plan(1, 0, 10, stamp=0), _plan(2, 10, 20, stamp=1)
    assert table.claim([old], table.read(["words"], stage=S), stage=S)
    assert table.commit([old], stage=S)
    assert table.claim([new], table.read(["words"], stage=S), stage=S)
    assert table.commit([new], stage=S)
    assert not table.commit([old], stage=S)
    row = table.read(["words"], stage=S)[("words", 0)]
    assert (row.next_offset, row.committed_seq) == (20, 2)


def test_an_offsets_table_of_an_earlier_release_gets_the_new_columns(session: Session) -> None:
    from floe_jobs.stores.schema import execute_ddl, keyspace_cql

    bare = f"it_offsets_{uuid.uuid4().hex[:8]}"
    execute_ddl(session, keyspace_cql(bare))
    try:
        earlier = offsets.table_cql(bare).replace(", planned_ts bigint", "").replace(", held_until bigint", "")
        assert "held_until" not in earlier and "planned_ts" not in earlier
        execute_ddl(session, earlier)
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
        rows = table.read(["words"], stage=S)
        assert rows[("words", 0)].planned_ts is None
        plan = _plan(1, 0, 5, stamp=0)
        assert table.claim([plan], rows, stage=S)
        assert table.read(["words"], stage=S)[("words", 0)].planned_ts == plan.stamp
        assert table.commit([plan], stage=S)
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
    creator.create([OffsetRow("words", 0, 0, planned_ts=ahead)], stage=S)
    behind = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb")
    rows = behind.read(["words"], stage=S)
    assert rows[("words", 0)].planned_ts == ahead
    stamp = planning.stamp_for(rows[("words", 0)], now_us=time.time_ns() // 1000)
    plan = PartitionPlan("words", 0, seq=1, start=0, end=10, replay=False, stamp=stamp)
    stale = {("words", 0): dataclasses.replace(rows[("words", 0)], planned_ts=ahead - 1)}
    assert not behind.claim([plan], stale, stage=S)  # a row changed since it was read is not claimed
    assert behind.claim([plan], rows, stage=S)
    assert behind.commit([plan], stage=S)
    row = behind.read(["words"], stage=S)[("words", 0)]
    assert (row.next_offset, row.committed_seq, row.planned_seq) == (10, 1, 1)


def _commit_once(table: offsets.OffsetsTable, stage: str, end: int) -> None:
    """One batch of `stage` over partition 0 of `words`, [next_offset, end), claimed and committed."""
    row = table.read(["words"], stage=stage)[("words", 0)]
    plan = PartitionPlan("words", 0, row.committed_seq + 1, row.next_offset, end, replay=False,
                         stamp=(row.planned_ts or 0) + 1)
    assert table.claim([plan], {plan.tp: row}, stage=stage)
    assert table.commit([plan], stage=stage)


def test_two_stages_reading_one_topic_each_keep_their_own_position(session: Session, keyspace: str) -> None:
    """Each stage's commits move its own row only: the second stage still has every record to read
    after the first committed the whole range."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table = offsets.OffsetsTable(
        session, keyspace=keyspace, app_id=app, owner="r0/aaaa", readers={"words": ["split", "lengths"]}
    )
    table.create([OffsetRow("words", 0, 0)], stage="split")
    table.create([OffsetRow("words", 0, 0)], stage="lengths")
    _commit_once(table, "split", 100)
    assert table.read(["words"], stage="split")[("words", 0)].next_offset == 100
    assert table.read(["words"], stage="lengths")[("words", 0)].next_offset == 0
    _commit_once(table, "lengths", 40)
    assert offsets.stage_progress(session, keyspace=keyspace, app_id=app) == {
        ("split", "words", 0): (100, 1, 1, "r0/aaaa"),
        ("lengths", "words", 0): (40, 1, 1, "r0/aaaa"),
    }
    # tools see the stage furthest behind, and the topic once
    assert offsets.progress(session, keyspace=keyspace, app_id=app) == {("words", 0): (40, 1, 1, "r0/aaaa")}
    assert offsets.recorded_topics(session, keyspace=keyspace, app_id=app) == ["words"]


# the previous release's statements, verbatim but for the table: how its replicas wrote their rows
OLD_INIT = (
    "INSERT INTO {table} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
    " committed_at, owner, planned_ts) VALUES (%s, %s, %s, %s, 0, 0, toTimestamp(now()), %s, %s) IF NOT EXISTS"
)
OLD_COMMIT = (
    "UPDATE {table} SET next_offset = %s, committed_seq = %s, committed_at = toTimestamp(now()), source_positions = %s"
    " WHERE app_id = %s AND topic = %s AND partition = %s IF planned_seq = %s AND owner = %s AND committed_seq < %s"
)
OLD_PLAN = (
    "UPDATE {table} SET planned_seq = %s, planned_from = %s, planned_to = %s, planned_at = toTimestamp(now()),"
    " planned_ts = %s, owner = %s WHERE app_id = %s AND topic = %s AND partition = %s"
    " IF planned_seq = %s AND committed_seq = %s AND next_offset = %s AND planned_ts = %s"
)


def test_rows_of_the_previous_release_are_taken_over_with_the_in_flight_plan_replayed_exactly(
    session: Session, keyspace: str
) -> None:
    """Rows keyed by the bare topic, as the previous release wrote them: partition 0 committed at
    15, partition 1 killed mid-batch [20, 27) under sequence 3. Every stage of the job that reads
    the topic gets an exact copy (positions kept, the plan replayed with its range and sequence,
    stamped above its earlier attempt); the old row is retired, so a replica of the previous
    release still running can neither commit its batch nor start the partition over."""
    from floe_jobs import planning

    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table_name = f"{keyspace}.{offsets.TABLE}"
    stamp = time.time_ns() // 1000
    session.execute(
        f"INSERT INTO {table_name} (app_id, topic, partition, next_offset, committed_seq, planned_seq, planned_from,"
        " planned_to, planned_ts, owner, source_positions) VALUES (%s, 'words', 0, 15, 1, 1, 0, 15, %s, 'old/1', %s)",
        (app, stamp, '{"in:0":[7,2]}'),
    )
    session.execute(
        f"INSERT INTO {table_name} (app_id, topic, partition, next_offset, committed_seq, planned_seq, planned_from,"
        " planned_to, planned_ts, owner) VALUES (%s, 'words', 1, 20, 2, 3, 20, 27, %s, 'old/1')",
        (app, stamp + 5),
    )
    table = offsets.OffsetsTable(
        session, keyspace=keyspace, app_id=app, owner="r0/aaaa", readers={"words": ["split", "lengths"]}
    )
    rows = table.read(["words"], stage="split")
    want = {
        ("words", 0): OffsetRow("words", 0, 15, 1, 1, 0, 15, {"in:0": (7, 2)}, stamp, "old/1"),
        ("words", 1): OffsetRow("words", 1, 20, 2, 3, 20, 27, {}, stamp + 5, "old/1"),
    }
    assert rows == want
    # the other stage got the same copies in the same batch, and the old rows are retired
    assert table.stored([offsets.position_key("lengths", "words")]) and table.read(["words"], stage="lengths") == want
    assert {(r.partition, r.next_offset, r.owner) for r in table.stored(["words"])} == {
        (0, None, offsets.RETIRED),
        (1, None, offsets.RETIRED),
    }
    assert offsets.progress(session, keyspace=keyspace, app_id=app) == {
        ("words", 0): (15, 1, 1, "old/1"),
        ("words", 1): (20, 2, 3, "old/1"),
    }

    # each stage replays the plan in flight exactly, and plans on from the committed position
    plan = planning.plan_batch(
        owned=[("words", 0), ("words", 1)],
        rows=rows,
        watermarks={("words", 0): planning.Watermarks(0, 50), ("words", 1): planning.Watermarks(0, 50)},
        starting_offsets="earliest",
        budget=1000,
        now_us=time.time_ns() // 1000,
    )
    assert [(p.partition, p.seq, p.start, p.end, p.replay) for p in plan.partitions] == [
        (0, 2, 15, 50, False),
        (1, 3, 20, 27, True),
    ]
    assert plan.partitions[1].stamp > stamp + 5  # above the earlier attempt's, as every replay
    assert plan.new_rows == []
    assert table.claim(plan.partitions, rows, stage="split")
    assert table.commit(plan.partitions, stage="split")
    assert table.read(["words"], stage="lengths") == want  # untouched by the other stage

    # the previous release's replica: its commit of the batch in flight and its fresh start fail
    old_commit = session.execute(
        OLD_COMMIT.format(table=table_name), (27, 3, None, app, "words", 1, 3, "old/1", 3)
    )
    assert not old_commit.was_applied
    assert not session.execute(OLD_INIT.format(table=table_name), (app, "words", 1, 0, "old/2", stamp)).was_applied
    old_plan = session.execute(
        OLD_PLAN.format(table=table_name), (1, 0, 10, stamp + 9, "old/2", app, "words", 1, 0, 0, 0, stamp)
    )
    assert not old_plan.was_applied
    staged = offsets.stage_progress(session, keyspace=keyspace, app_id=app)
    assert {(s, p): v[0] for (s, _t, p), v in staged.items()} == {
        ("split", 0): 50,
        ("split", 1): 27,
        ("lengths", 0): 15,
        ("lengths", 1): 20,
    }


def test_a_takeover_from_a_row_changed_since_it_was_read_writes_nothing(session: Session, keyspace: str) -> None:
    """A replica of the previous release commits between the read and the takeover: the takeover
    batch is refused as a whole, and the next read copies the newer position."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table_name = f"{keyspace}.{offsets.TABLE}"
    session.execute(
        f"INSERT INTO {table_name} (app_id, topic, partition, next_offset, committed_seq, planned_seq, planned_from,"
        " planned_to, planned_ts, owner) VALUES (%s, 'words', 0, 10, 1, 2, 10, 18, 5, 'old/1')",
        (app,),
    )
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r0/aaaa")
    (legacy,) = table.stored(["words"])
    old_commit = session.execute(OLD_COMMIT.format(table=table_name), (18, 2, None, app, "words", 0, 2, "old/1", 2))
    assert old_commit.was_applied
    assert not table._take_over([(legacy, ["split"])])
    assert table.stored([offsets.position_key("split", "words")]) == []
    assert table.read(["words"], stage="split")[("words", 0)].next_offset == 18


def test_a_stage_that_starts_a_partition_fences_the_previous_release_out_of_it(
    session: Session, keyspace: str
) -> None:
    """A new app under a rollout with replicas of both releases: the first rows of a stage leave a
    retired row under the bare topic, so a replica of the previous release cannot create its own
    and read the partition a second time."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table_name = f"{keyspace}.{offsets.TABLE}"
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r0/aaaa")
    table.create([OffsetRow("words", 0, 0)], stage="split")
    assert not session.execute(OLD_INIT.format(table=table_name), (app, "words", 0, 0, "old/1", 1)).was_applied
    assert [(r.stage, r.next_offset) for r in table.stored(["words"])] == [(None, None)]
    # and a second stage of the topic starts beside it (the retired row does not stop it)
    table.create([OffsetRow("words", 0, 3)], stage="lengths")
    assert table.read(["words"], stage="lengths")[("words", 0)].next_offset == 3
    assert table.read(["words"], stage="split")[("words", 0)].next_offset == 0


def test_reset_moves_every_stage_and_a_partition_without_stages_gets_a_row_for_all(
    session: Session, keyspace: str
) -> None:
    """The operator's offset reset: partition 0 has rows of two stages (one mid-batch), partition 1
    only a row of the previous release, partition 2 nothing; all move, and a stage taking over the
    rows of 1 and 2 starts where the reset put them."""
    offsets.ensure_offsets_table(session, keyspace=keyspace)
    app = _app()
    table_name = f"{keyspace}.{offsets.TABLE}"
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r0/aaaa")
    table.create([OffsetRow("words", 0, 0)], stage="split")
    table.create([OffsetRow("words", 0, 0)], stage="lengths")
    _commit_once(table, "split", 30)
    row = table.read(["words"], stage="lengths")[("words", 0)]
    stuck = PartitionPlan("words", 0, 1, 0, 12, replay=False, stamp=(row.planned_ts or 0) + 1)
    assert table.claim([stuck], {stuck.tp: row}, stage="lengths")  # killed mid-batch
    session.execute(
        f"INSERT INTO {table_name} (app_id, topic, partition, next_offset, committed_seq, planned_seq, owner,"
        " planned_ts) VALUES (%s, 'words', 1, 44, 4, 4, 'old/1', 9)",
        (app,),
    )
    moved = offsets.reset(
        session, keyspace=keyspace, app_id=app, positions={("words", p): 5 for p in range(3)}, owner="op/r1"
    )
    assert moved is not None
    assert sorted((m.partition, m.stage or "", m.before, m.after, m.abandoned) for m in moved) == [
        (0, "lengths", 0, 5, 1),
        (0, "split", 30, 5, None),
        (1, "", 44, 5, None),
        (2, "", None, 5, None),
    ]
    staged = offsets.stage_progress(session, keyspace=keyspace, app_id=app)
    assert {k: v[:3] for k, v in staged.items()} == {
        ("split", "words", 0): (5, 1, 1),
        ("lengths", "words", 0): (5, 1, 1),  # the batch in flight is closed, never replayed
        (None, "words", 1): (5, 4, 4),
        (None, "words", 2): (5, 0, 0),
    }
    reader = offsets.OffsetsTable(session, keyspace=keyspace, app_id=app, owner="r1/bbbb", readers={"words": ["split"]})
    rows = reader.read(["words"], stage="split")
    assert {tp: (r.next_offset, r.committed_seq, r.in_flight) for tp, r in rows.items()} == {
        ("words", 0): (5, 1, False),
        ("words", 1): (5, 4, False),
        ("words", 2): (5, 0, False),
    }
