"""An input record whose output Kafka refuses (a value above the producer's message.max.bytes)
is narrowed to like any poison record, on the real stack (`jobs/oversized_output.py`).

Before, a trial produced nothing and so never failed: narrowing found no record to blame and the
replica exited after five attempts, on every owner, for good.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from floe_stack import localrun

from ..waiting import wait_for
from .conftest import NewApp
from .test_poison import offsets_rows, read_with_headers

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

JOB = Path(__file__).parent / "jobs" / "oversized_output.py"
PARTITIONS = 6
LINES = 300
# line i goes to partition i % 6 at offset i // 6 (a new topic, produced round-robin at once)
HUGE_PARTITION, HUGE_OFFSET = 4, 20
HUGE_INDEX = HUGE_OFFSET * PARTITIONS + HUGE_PARTITION


def test_dead_letter_takes_the_record_whose_output_is_too_large_and_every_other_goes_out(
    new_app: NewApp, session: Any
) -> None:
    app = new_app("huge", entrypoint=str(JOB), stores=[], input_name="lines", batch=500)
    app.extra_env["FLOE_JOB_ERRORS"] = "deadLetter"
    lines = [f"line {i}" for i in range(LINES)]
    lines[HUGE_INDEX] = "HUGE line"
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, app.topics, timeout=400, replicas=[replica])
        # output is at-least-once: attempts before the narrowing may have produced part of it
        out = {k.decode(): v.decode() for k, v in localrun.read_topic(app.bootstrap, app.output_topics[0])
               if k is not None and v is not None}
        assert out == {line: line for i, line in enumerate(lines) if i != HUGE_INDEX}
        dead = read_with_headers(app.bootstrap, f"{app.app_id}-dlq")
        assert len(dead) == 1, [(v, h.get("floe.error")) for v, h in dead]
        value, headers = dead[0]
        assert value == b"HUGE line"
        assert (headers["floe.partition"], headers["floe.offset"]) == (
            str(HUGE_PARTITION).encode(), str(HUGE_OFFSET).encode()
        )
        assert b"above the producer's message.max.bytes 1,000,000" in headers["floe.error"]
        assert replica.alive()
    finally:
        code = replica.stop()
    assert code == 0


def test_stop_halts_only_the_partition_whose_output_is_too_large_and_names_the_record(
    new_app: NewApp, session: Any
) -> None:
    """Under `errors: stop` (the default) the record whose output Kafka refuses stops only its
    own partition, named in its offsets row with its offset and size. A failed write may have
    produced part of the batch, so the partition stops at that batch's start, the batch kept in
    flight whole (held, not skipped); every other partition is committed to its end, and every
    record before the stop or on another partition goes out."""
    app = new_app("hugestop", entrypoint=str(JOB), stores=[], input_name="lines", batch=500)
    lines = [f"line {i}" for i in range(LINES)]
    lines[HUGE_INDEX] = "HUGE line"
    localrun.produce(app.bootstrap, app.topics[0], lines)
    source = app.topics[0]
    ends = localrun.end_offsets(app.bootstrap, source)
    replica = localrun.Replica(app, "r0").start()

    def settled() -> bool:
        rows = offsets_rows(session, app)
        stop = rows.get((source, HUGE_PARTITION))
        return (
            stop is not None
            and stop[5] is not None
            and all(
                (row := rows.get((source, p))) is not None and row[2] == end and row[3] == row[4]
                for p, end in ends.items()
                if p != HUGE_PARTITION
            )
        )

    def alive_and_settled() -> bool:
        assert replica.alive(), f"the replica exited; see {replica.log_path}"
        return settled()

    try:
        wait_for(alive_and_settled, timeout=400, every=1, what="the app to settle around the oversized record")
        row = offsets_rows(session, app)[(source, HUGE_PARTITION)]
        # stopped where it is committed, at or before the record, which the stop names
        assert row[2] == row[5] <= HUGE_OFFSET
        assert f"record at offset {HUGE_OFFSET} fails" in (row[6] or ""), row[6]
        assert "above the producer's message.max.bytes 1,000,000" in (row[6] or ""), row[6]
        # output is at-least-once: attempts before the narrowing may have produced part of it, but
        # nothing past the stop on its partition, and every record of the others
        out = {k.decode(): v.decode() for k, v in localrun.read_topic(app.bootstrap, app.output_topics[0])
               if k is not None and v is not None}
        assert "HUGE line" not in out
        held = {i for i in range(LINES) if i % PARTITIONS == HUGE_PARTITION and i // PARTITIONS >= row[5]}
        assert {line for i, line in enumerate(lines) if i not in held} <= set(out)
        assert all(out[line] == line for line in out)
        assert replica.alive() and replica.ready()
    finally:
        code = replica.stop()
    assert code == 0
