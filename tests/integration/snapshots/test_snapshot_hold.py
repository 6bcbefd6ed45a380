"""A snapshot's hold of a partition whose batches are all shorter than the copy of its rows
(docs/snapshots.md, "How to take it"), against the real Cassandra node.

A batch loop made of the runtime's own planner (`planning.plan_batch`) and offsets table
(`OffsetsTable.read`, `claim`, `commit`) commits a batch of one partition every few
milliseconds, while the snapshot's reader (`snapshots.cut.Reader`) copies the 20,000 store rows
of that partition, longer than the time between two commits. Without the hold such a snapshot
fails at its settle timeout (the copy alone never finds a window); with it, the partition waits
for one copy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from cassandra.query import BatchStatement, BatchType
from floe_jobs import faults, offsets, planning
from floe_jobs.snapshots import cut
from floe_jobs.stores import schema
from floe_stack import localrun

pytestmark = [pytest.mark.cassandra]

STAGE, TOPIC, PARTITION = "count", "words-repartition", 0
ROWS = 20_000
RECORDS_PER_BATCH = 10


@pytest.fixture
def keyspace(session: Any) -> Iterator[str]:
    name = f"hold_{uuid.uuid4().hex[:8]}"
    session.execute(schema.keyspace_cql(name), timeout=60)
    offsets.ensure_offsets_table(session, keyspace=name)
    spec = schema.StoreSpec(name="word-count", type="partitioned")
    session.execute(schema.table_cql(name, spec), timeout=60)
    insert = session.prepare(
        f"INSERT INTO {name}.{schema.table_name('word-count')} (partition, key, value, floe_batch, time)"
        " VALUES (?, ?, ?, ?, ?)"
    )
    now = datetime.now(UTC)
    for start in range(0, ROWS, 500):
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for i in range(start, start + 500):
            batch.add(insert, (PARTITION, f"word-{i}".encode(), b"1", 1, now))
        session.execute(batch)
    yield name
    localrun.drop_keyspace(session, name)


class BatchLoop(threading.Thread):
    """One replica's batches of one partition, back to back: read the row, plan, claim, commit,
    RECORDS_PER_BATCH records each. Counts the passes the planner left the partition alone."""

    def __init__(self, session: Any, keyspace: str) -> None:
        super().__init__(name="batch-loop", daemon=True)
        self.table = offsets.OffsetsTable(session, keyspace=keyspace, app_id="app", owner="replica-0")
        self.done = threading.Event()
        self.commits = 0
        self.passes_held = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        tp = (TOPIC, PARTITION)
        try:
            while not self.done.is_set():
                rows = self.table.read([TOPIC], stage=STAGE)
                plan = planning.plan_batch(
                    owned=[tp],
                    rows=rows,
                    watermarks={tp: planning.Watermarks(0, 10**12)},
                    starting_offsets="earliest",
                    budget=RECORDS_PER_BATCH,
                    now_us=faults.clock_us(),
                )
                if plan.new_rows:
                    self.table.create(plan.new_rows, stage=STAGE)
                    continue
                if not plan.partitions:
                    self.passes_held += 1
                    time.sleep(0.005)
                    continue
                if self.table.claim(plan.partitions, rows, stage=STAGE):
                    assert self.table.commit(plan.partitions, stage=STAGE)
                    self.commits += 1
        except BaseException as exc:  # raised again by stop()
            self.error = exc

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)
        if self.error is not None:
            raise self.error


@pytest.fixture
def batches(session: Any, keyspace: str) -> Iterator[BatchLoop]:
    loop = BatchLoop(session, keyspace)
    loop.start()
    deadline = time.monotonic() + 30
    while loop.commits < 20:
        assert time.monotonic() < deadline and loop.is_alive(), "the batch loop committed nothing"
        time.sleep(0.05)
    yield loop
    loop.stop()


def _cut(session: Any, keyspace: str, **reader: float) -> tuple[cut.Reader, Any, list[Any]]:
    r = cut.Reader(session, keyspace, "app", **reader)
    part, copied = r.cut(STAGE, TOPIC, PARTITION, [schema.table_name("word-count")], committed_only=True)
    return r, part, copied[schema.table_name("word-count")]


def test_a_partition_whose_batches_are_all_shorter_than_its_copy_is_held_for_one_copy_and_then_goes_on(
    session: Any, keyspace: str, batches: BatchLoop
) -> None:
    # Held at the first committed batch it reads (hold_after 0), so the test does not depend on
    # whether some window between two commits happens to outlast the copy on a loaded machine.
    held_before = batches.passes_held
    reader, part, rows = _cut(session, keyspace, settle_timeout=30.0, hold_after=0.0)
    assert reader.holds == 1
    assert len(rows) == ROWS
    # a committed batch boundary: every batch read RECORDS_PER_BATCH records from offset 0
    assert part.planned_seq == part.committed_seq
    assert part.next_offset == part.committed_seq * RECORDS_PER_BATCH
    # the planner left the partition alone while it was held, and the hold is gone
    assert batches.passes_held > held_before
    table = offsets.OffsetsTable(session, keyspace=keyspace, app_id="app")
    stored = table.position(STAGE, TOPIC, PARTITION)
    assert stored is not None and stored.held_until is None
    committed = batches.commits
    deadline = time.monotonic() + 10
    while batches.commits < committed + 5:
        assert time.monotonic() < deadline, "the partition did not go on after the hold"
        time.sleep(0.05)
    after = table.position(STAGE, TOPIC, PARTITION)
    assert after is not None and (after.committed_seq or 0) > part.committed_seq


def test_a_hold_that_runs_out_during_the_copy_is_followed_by_one_three_times_the_copy(
    session: Any, keyspace: str, batches: BatchLoop
) -> None:
    # A first hold of a millisecond runs out while the rows are copied; the loop plans again,
    # the row moves and that copy is dropped. The next hold lasts three times the copy just
    # timed, held or not, so the cut ends (a hold sized from optimistic copies alone, none here,
    # stayed at the shortest and ran out every time, until the settle timeout).
    reader, part, rows = _cut(session, keyspace, settle_timeout=20.0, hold_after=0.0, hold_min=0.001)
    assert reader.holds >= 2
    assert len(rows) == ROWS
    assert part.planned_seq == part.committed_seq
    assert part.next_offset == part.committed_seq * RECORDS_PER_BATCH


def test_a_claim_planned_before_a_hold_fails_and_one_after_its_release_succeeds(
    session: Any, keyspace: str
) -> None:
    replica = offsets.OffsetsTable(session, keyspace=keyspace, app_id="app", owner="replica-0")
    snapshot = offsets.OffsetsTable(session, keyspace=keyspace, app_id="app")
    tp = (TOPIC, PARTITION)
    replica.create([planning.OffsetRow(TOPIC, PARTITION, next_offset=0, planned_ts=1)], stage=STAGE)

    def plan() -> tuple[dict[tuple[str, int], planning.OffsetRow], list[planning.PartitionPlan]]:
        rows = replica.read([TOPIC], stage=STAGE)
        return rows, planning.plan_batch(
            owned=[tp], rows=rows, watermarks={tp: planning.Watermarks(0, 100)}, starting_offsets="earliest",
            budget=10, now_us=faults.clock_us(),
        ).partitions

    rows, parts = plan()
    assert parts, "nothing planned before the hold"
    stored = snapshot.position(STAGE, TOPIC, PARTITION)
    assert stored is not None
    until = faults.clock_us() + 60_000_000
    assert snapshot.hold(STAGE, stored, until_us=until)
    # planned from the row as it was before the hold: the claim names held_until null, and fails
    assert not replica.claim(parts, rows, stage=STAGE)
    # planned while held: nothing
    assert plan()[1] == []
    assert snapshot.release(STAGE, TOPIC, PARTITION, until_us=until)
    rows, parts = plan()
    assert parts and replica.claim(parts, rows, stage=STAGE)
    # a hold is set only at a committed batch
    stored = snapshot.position(STAGE, TOPIC, PARTITION)
    assert stored is not None and (stored.planned_seq or 0) > (stored.committed_seq or 0)
    assert not snapshot.hold(STAGE, stored, until_us=until)
