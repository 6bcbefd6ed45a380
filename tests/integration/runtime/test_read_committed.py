"""Input written by a transactional producer: only committed records count, and nothing stalls.

A producer with a `transactional.id` commits 10 transactions of the word "kept" and aborts 10 of
"aborted", interleaved, over the input's six partitions; every partition then holds commit and
abort markers and aborted records, offsets that a read_committed consumer never returns, and
its log ends in an aborted transaction. Word count reads it through the driver's consumer and
through Spark's Kafka source (`floe_jobs.placement`, forced by the batch thresholds). Then a
transaction is left open: the replica must plan up to the last stable offset and commit there
(not wait for the open records), and count them once the transaction commits.
Real Kafka, Cassandra and Spark from the local stack.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from floe_stack import localrun

from .test_word_count import SPARK_READS, check_counts, topics_of

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

TRANSACTIONS = 10
RECORDS_PER_TRANSACTION = 100
PARTITIONS = 6
OPEN_RECORDS = 60


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": localrun.unique("floe-txn")})
    producer.init_transactions(30)
    return producer


def transaction(producer: Producer, topic: str, word: str, *, commit: bool | None) -> None:
    """One transaction of RECORDS_PER_TRANSACTION lines `word`, spread over the partitions;
    committed, aborted, or (None) left open once its records are on the brokers."""
    producer.begin_transaction()
    for i in range(RECORDS_PER_TRANSACTION if commit is not None else OPEN_RECORDS):
        producer.produce(topic, value=word.encode(), partition=i % PARTITIONS)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def ends(bootstrap: str, topic: str, level: str) -> dict[int, int]:
    """partition → the end a consumer of isolation `level` may read to: the high watermark
    (read_uncommitted) or the last stable offset (read_committed)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": localrun.unique("floe-probe"), "isolation.level": level}
    )
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def committed_at(session: Any, app: localrun.App, topic: str, ends: dict[int, int]) -> bool:
    """Whether every partition of `topic` is committed exactly up to `ends`, nothing in flight."""
    from floe_jobs import offsets

    rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
    return all(
        (row := rows.get((topic, p))) is not None and row[0] == end and row[1] == row[2] for p, end in ends.items()
    )


@pytest.mark.parametrize("reads", ["driver", "spark"])
def test_aborted_transactions_are_never_counted_and_markers_never_stall(
    reads: str, word_count_app: localrun.App, session: Any
) -> None:
    app = word_count_app
    if reads == "spark":
        app.extra_env.update(SPARK_READS)
    topic = app.topics[0]
    producer = transactional_producer(app.bootstrap)
    for _ in range(TRANSACTIONS):
        transaction(producer, topic, "kept", commit=True)
        transaction(producer, topic, "aborted", commit=False)
    # the log's last offsets are aborted records and abort markers: no record is ever returned there
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=[replica])
        check_counts(session, app, {"kept": TRANSACTIONS * RECORDS_PER_TRANSACTION})

        # an open transaction: the readable end is its first offset (the last stable offset)
        transaction(producer, topic, "pending", commit=None)
        stable, high = ends(app.bootstrap, topic, "read_committed"), ends(app.bootstrap, topic, "read_uncommitted")
        assert all(stable[p] < high[p] for p in range(PARTITIONS)), (stable, high)
        time.sleep(3)  # a few idle passes over the partitions with the open transaction
        deadline = time.monotonic() + 60
        while not committed_at(session, app, topic, stable):
            assert replica.alive(), f"replica exited; see {replica.log_path}"
            assert time.monotonic() < deadline, "committed offsets left the last stable offsets"
            time.sleep(0.5)
        check_counts(session, app, {"kept": TRANSACTIONS * RECORDS_PER_TRANSACTION})

        producer.commit_transaction(30)
        localrun.wait_caught_up(session, app, topics_of(app), timeout=120, replicas=[replica])
        check_counts(session, app, {"kept": TRANSACTIONS * RECORDS_PER_TRANSACTION, "pending": OPEN_RECORDS})
        log = replica.log_path.read_text(errors="replace")
        assert "planned records not read" not in log
    finally:
        assert replica.stop() == 0
