"""Poison records on the real stack: a word count whose `split` fails on one line
(`jobs/poison_count.py`), run by one replica process, under both `job.errors` policies.

deadLetter: every other line is counted exactly, the poison line is in `<app-id>-dlq` with
headers naming its source, and the replica goes on. stop: every other partition is counted
exactly, the poisoned one is committed up to just before the line and marked stopped in its
offsets row (where the operator reads it), and the replica stays alive and ready, with no
restart loop.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import localrun

from tests import counting

from .conftest import NewApp

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

JOB = Path(__file__).parent / "jobs" / "poison_count.py"
PARTITIONS = 6
LINES = 600
# line i goes to partition i % 6 at offset i // 6 (a new topic, produced round-robin at once)
POISON_PARTITION, POISON_OFFSET = 2, 40
POISON_INDEX = POISON_OFFSET * PARTITIONS + POISON_PARTITION


@pytest.fixture
def poison_app(new_app: NewApp) -> localrun.App:
    return new_app(
        "poison",
        entrypoint=str(JOB),
        stores=[{"name": "word-count", "type": "partitioned"}],
        input_name="lines",
        batch=500,
    )


def lines_with_poison() -> list[str]:
    lines = localrun.word_lines(LINES, seed=31)
    lines[POISON_INDEX] = "POISON kafka spark"
    return lines


def topics_of(app: localrun.App) -> list[str]:
    return [*app.topics, f"{app.app_id}-words-repartition"]


def offsets_rows(session: Any, app: localrun.App) -> dict[tuple[str, int], Any]:
    from cassandra import InvalidRequest

    try:
        rows = session.execute(
            f"SELECT topic, partition, next_offset, committed_seq, planned_seq, stopped_at, stopped_error"
            f" FROM {app.keyspace}.floe_offsets WHERE app_id = %s",
            (app.app_id,),
        )
    except InvalidRequest:  # the replica has not made its keyspace or table yet
        return {}
    # keyed as the runtime keys them, `<stage>/<topic>` (each topic here is read by one stage);
    # retired stage-less rows (next_offset null) are left out
    return {(offsets.parse_key(r[0])[1], r[1]): r for r in rows if r[2] is not None}


def operator_rows(session: Any, app: localrun.App) -> dict[tuple[str, int], Any]:
    """The app's offsets rows as the operator's lag scrape reads them (`CassandraOffsets`)."""
    from floe_operator.lag import scrape

    ref = scrape.AppRef(
        namespace="test",
        name=app.app_id,
        app_id=app.app_id,
        group=app.app_id,
        topics=tuple(app.topics),
        kafka=None,  # type: ignore[arg-type]  # only Cassandra is read here
        cassandra="stack",  # type: ignore[arg-type]  # the session below is the one for any target
        keyspace=app.keyspace,
    )
    got = scrape.CassandraOffsets(lambda _target: session).read([ref])[ref.key]
    assert not isinstance(got, Exception), got
    return got


def check_counts(session: Any, app: localrun.App, counted: list[str]) -> None:
    want = dict(localrun.word_truth(counted))
    got = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    diff = counting.counters_equal(got, want)
    assert diff is None, diff
    emitted = localrun.last_values(localrun.read_topic(app.bootstrap, app.output_topics[0]))
    diff = counting.counters_equal({k: int(v) for k, v in emitted.items()}, want)
    assert diff is None, f"output topic: {diff}"


def read_with_headers(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict[str, bytes]]]:
    """Every record of `topic` (values and headers), up to its current end."""
    from confluent_kafka import Consumer, TopicPartition

    ends = localrun.end_offsets(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": localrun.unique("floe-dlq"), "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    remaining = {p for p, e in ends.items() if e > 0}
    out: list[tuple[bytes | None, dict[str, bytes]]] = []
    deadline = time.monotonic() + 30
    try:
        while remaining and time.monotonic() < deadline:
            msg: Any = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.value(), {k: bytes(v or b"") for k, v in msg.headers() or []}))
            if msg.offset() + 1 >= ends[msg.partition()]:
                remaining.discard(msg.partition())
    finally:
        consumer.close()
    assert not remaining, f"could not read {topic} to its end"
    return out


def test_dead_letter_counts_every_other_record_and_dead_letters_the_poison_one(
    poison_app: localrun.App, session: Any
) -> None:
    app = poison_app
    app.extra_env["FLOE_JOB_ERRORS"] = "deadLetter"
    lines = lines_with_poison()
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, topics_of(app), timeout=400, replicas=[replica])
        check_counts(session, app, [line for i, line in enumerate(lines) if i != POISON_INDEX])
        dead = read_with_headers(app.bootstrap, f"{app.app_id}-dlq")
        assert len(dead) == 1, dead
        value, headers = dead[0]
        assert value == b"POISON kafka spark"
        assert headers["floe.topic"] == app.topics[0].encode()
        assert headers["floe.partition"] == str(POISON_PARTITION).encode()
        assert headers["floe.offset"] == str(POISON_OFFSET).encode()
        assert headers["floe.stage"] == b"split"
        assert b"cannot split line POISON kafka spark" in headers["floe.error"]
        assert replica.alive()
        log = replica.log_path.read_text()
        assert f"Dead-lettered stage=split topic={app.topics[0]} partition={POISON_PARTITION}" in log
    finally:
        code = replica.stop()
    assert code == 0


def test_stop_commits_up_to_the_poison_record_and_keeps_the_replica_running(
    poison_app: localrun.App, session: Any
) -> None:
    app = poison_app  # job.errors left out: stop is the default
    lines = lines_with_poison()
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0").start()
    source, repartition = topics_of(app)
    poisoned = (source, POISON_PARTITION)

    def settled() -> bool:
        rows = offsets_rows(session, app)
        stop = rows.get(poisoned)
        if stop is None or stop[5] is None:
            return False
        others = {tp: row for tp, row in rows.items() if tp != poisoned}
        ends = {(source, p): e for p, e in localrun.end_offsets(app.bootstrap, source).items()}
        ends.update({(repartition, p): e for p, e in localrun.end_offsets(app.bootstrap, repartition).items()})
        return all(
            (row := others.get(tp)) is not None and row[2] == end and row[3] == row[4]
            for tp, end in ends.items()
            if tp != poisoned and end > 0
        )

    try:
        deadline = time.monotonic() + 400
        while not settled():
            assert replica.alive(), f"the replica exited; see {replica.log_path}"
            assert time.monotonic() < deadline, "the app did not settle around the poison record"
            time.sleep(1)
        row = offsets_rows(session, app)[poisoned]
        # committed up to just before the poison record, its batch closed, the stop recorded
        assert (row[2], row[5]) == (POISON_OFFSET, POISON_OFFSET)
        assert row[3] == row[4]
        assert "cannot split line POISON kafka spark" in row[6]
        counted = [
            line
            for i, line in enumerate(lines)
            if not (i % PARTITIONS == POISON_PARTITION and i // PARTITIONS >= POISON_OFFSET)
        ]
        check_counts(session, app, counted)
        # where the operator's lag scrape reads it, and makes the PartitionsStopped condition of
        seen = operator_rows(session, app)[poisoned]
        assert seen.stopped and (seen.next_offset, seen.stopped_at) == (POISON_OFFSET, POISON_OFFSET)
        assert "cannot split line POISON kafka spark" in (seen.stopped_error or "")
        # no restart loop, timed on observed work rather than a sleep: a second wave of input is
        # committed on every other partition by the same process, which stays ready, while the
        # stopped partition stays where it stopped (its new records wait behind the poison one)
        more = localrun.word_lines(PARTITIONS * 20, seed=32)
        localrun.produce(app.bootstrap, app.topics[0], more)
        while not settled():
            assert replica.alive(), f"the replica exited; see {replica.log_path}"
            assert time.monotonic() < deadline + 200, "the other partitions did not take the second wave"
            time.sleep(1)
        assert replica.alive()
        assert replica.ready()
        assert offsets_rows(session, app)[poisoned][2] == POISON_OFFSET
        counted += [line for i, line in enumerate(more) if i % PARTITIONS != POISON_PARTITION]
        check_counts(session, app, counted)
        log = replica.log_path.read_text()
        assert f"topic {source} partition {POISON_PARTITION} stopped at offset {POISON_OFFSET}" in log
    finally:
        code = replica.stop()
    assert code == 0
