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

from .conftest import NewApp
from .test_poison import read_with_headers

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
