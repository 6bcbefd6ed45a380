"""Retention deleting records of a batch in flight: the replay goes on with what is left.

A replica that claimed a batch and died leaves its plan in flight; if retention deletes the head
of that range before the next owner replays it, no reader can have those records any more. The
replay applies the rest of the range under the plan's sequence, with a warning naming how many
records were lost; before, it failed on every owner, five attempts each, for good.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from floe_stack import localrun

from tests import faultjob
from tests.integration.runtime.test_word_count import check_counts, topics_of

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


def in_flight(session: Any, app: localrun.App, stage: str) -> dict[int, tuple[int, int, int]]:
    """Partition → (sequence, start, end) of `stage`'s plans on the input topic still in flight."""
    rows = session.execute(
        f"SELECT topic, partition, committed_seq, planned_seq, planned_from, planned_to "
        f"FROM {app.keyspace}.floe_offsets WHERE app_id = %s",
        (app.app_id,),
    )
    key = f"{stage}/{app.topics[0]}"
    return {
        partition: (planned, start, end)
        for topic, partition, committed, planned, start, end in rows
        if topic == key and planned is not None and planned > (committed or 0) and start is not None
    }


@pytest.mark.timeout(900)
def test_a_replay_whose_head_retention_deleted_applies_the_rest_and_says_how_many_were_lost(
    word_count_app: localrun.App, session: Any, tmp_path: Any
) -> None:
    app = word_count_app
    app.extra_env.update(
        {
            "FLOE_TEST_CRASH_POINTS": "split:after-claim",
            "FLOE_TEST_CRASH_DIR": str(tmp_path),
            # the SIGKILLed replica never leaves its group: its partitions wait for its session to
            # expire before the restarted replica gets them, the broker's 45 s unless set shorter
            "FLOE_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "1500",
        }
    )
    app.module = faultjob.MODULE
    lines = localrun.word_lines(3000, seed=41)
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    try:
        deadline = time.monotonic() + 300
        while replica.alive():
            assert time.monotonic() < deadline, "the replica did not reach split:after-claim"
            time.sleep(0.5)
        assert (tmp_path / "crashed-split-after-claim").exists()
        plans = in_flight(session, app, "split")
        partition, (seq, start, end) = max(plans.items(), key=lambda item: item[1][2] - item[1][1])
        assert end - start >= 2, plans
        cut = (start + end) // 2
        admin = AdminClient({"bootstrap.servers": app.bootstrap})
        for future in admin.delete_records([TopicPartition(app.topics[0], partition, cut)]).values():
            future.result(timeout=30)

        replica.start()
        localrun.wait_caught_up(session, app, topics_of(app), timeout=600, replicas=[replica])
        log = replica.log_path.read_text()
        assert (
            f"partition={partition} seq={seq} starts at offset={start} below the log start {cut}: records were "
            f"deleted by retention; replaying [{cut}, {end}) ({cut - start} records lost)"
        ) in log
        # what the input still holds is counted exactly once; the deleted records not at all
        surviving = [v.decode() for _, v in localrun.read_topic(app.bootstrap, app.topics[0]) if v is not None]
        assert len(surviving) == len(lines) - (cut - start)
        check_counts(session, app, dict(localrun.word_truth(surviving)))
    finally:
        replica.stop()
