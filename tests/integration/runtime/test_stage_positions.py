"""Two stateful stages reading one input topic: each stage keeps its own position per partition.

Before positions were per stage, the first of two stages to commit a range took it for both, and
the second never saw those records. Both stores must now hold every count, exactly: with one
replica, and under SIGKILL chaos among three.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import localrun

from tests import counting

from .conftest import NewApp
from .test_chaos import SHORT_FEED_S, run_chaos
from .test_examples import produce_keyed

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

STAGES = ("tally", "recount")


@pytest.fixture
def two_tallies_app(new_app: NewApp) -> localrun.App:
    return new_app(
        "tt",
        entrypoint=str(Path(__file__).parent / "jobs" / "two_tallies.py"),
        stores=[{"name": "tally", "type": "partitioned"}, {"name": "recount", "type": "partitioned"}],
        input_name="words",
        batch=1000,
    )


def _words(n: int, *, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(localrun.WORDS) for _ in range(n)]


def _produce(app: localrun.App, words: list[str]) -> None:
    produce_keyed(app.bootstrap, app.topics[0], [(w, b"1") for w in words])


def _stores(session: Any, app: localrun.App) -> dict[str, dict[str, int]]:
    return {
        s: localrun.read_store(session, app.keyspace, s, key_serde="str", value_serde="long") for s in STAGES
    }


def check_both_stores(session: Any, app: localrun.App, truth: dict[str, int], *, settle: float = 120.0) -> None:
    """Both stores equal the truth, and each stage's own rows are at the end of every partition,
    nothing in flight. The stores are polled for `settle` seconds first: the app's progress counts
    a stage only once it has rows, so a stage can still be at work when it reads caught up."""
    deadline = time.monotonic() + settle
    def short() -> bool:
        return any(counting.counters_equal(got, truth) for got in _stores(session, app).values())

    while time.monotonic() < deadline and short():
        time.sleep(1.0)
    for store, got in _stores(session, app).items():
        diff = counting.counters_equal(got, truth)
        assert diff is None, f"store {store}: {diff}"
    ends = {p: e for p, e in localrun.end_offsets(app.bootstrap, app.topics[0]).items() if e > 0}
    rows = offsets.stage_progress(session, keyspace=app.keyspace, app_id=app.app_id)
    for stage in STAGES:
        mine = {p: v for (s, t, p), v in rows.items() if s == stage and t == app.topics[0]}
        at = {p: (v[0], v[1] == v[2]) for p, v in mine.items() if p in ends}
        assert at == {p: (e, True) for p, e in ends.items()}, f"stage {stage}"


def test_two_stages_reading_one_topic_both_count_every_record(session: Any, two_tallies_app: localrun.App) -> None:
    app = two_tallies_app
    words = _words(3000, seed=31)
    _produce(app, words[:1500])
    replica = localrun.Replica(app, "r0").start()
    try:
        time.sleep(5)
        _produce(app, words[1500:])
        localrun.wait_caught_up(session, app, app.topics, timeout=600, replicas=[replica])
        check_both_stores(session, app, dict(Counter(words)))
        log = replica.log_path.read_text()
        assert "Committed stage=tally" in log and "Committed stage=recount" in log
    finally:
        assert replica.stop() == 0


@pytest.mark.exclusive  # SIGKILL chaos among three Spark replicas saturates the 2 cores
@pytest.mark.timeout(1800)
def test_two_stages_reading_one_topic_stay_exact_under_sigkill_chaos(
    session: Any, two_tallies_app: localrun.App
) -> None:
    """5 SIGKILLs among 3 replicas while keyed words arrive (the short chaos run of
    `test_chaos`): both stores exact."""
    app = two_tallies_app
    words = _words(12_000, seed=37)
    initial = len(words)

    def feed(i: int, chunks: int) -> None:
        size = -(-initial // chunks)
        if i < chunks:
            chunk = words[i * size : (i + 1) * size]
        else:  # more input while kills remain
            chunk = _words(size, seed=1000 + i)
            words.extend(chunk)
        _produce(app, chunk)

    summary = run_chaos(
        app, session, feed=feed, topics=app.topics, kills=5, chunks=SHORT_FEED_S, kill_within_s=(0.0, 8.0)
    )
    check_both_stores(session, app, dict(Counter(words)))
    print(f"chaos over two stages of one topic: records={len(words)} {summary}")


def _produce_to(app: localrun.App, by_partition: dict[int, list[str]]) -> None:
    """Each partition's words, in order (so record i of partition p is at offset i)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": app.bootstrap, "enable.idempotence": True})
    for partition, words in by_partition.items():
        for w in words:
            producer.produce(app.topics[0], key=w.encode(), value=b"1", partition=partition)
    assert producer.flush(30) == 0


def test_rows_of_the_previous_release_are_taken_over_by_both_stages(
    session: Any, two_tallies_app: localrun.App
) -> None:
    """The app ran under the previous release, whose rows had no stage: each partition committed a
    third of its records and was killed mid-batch over the second third. Both stages start from the
    committed position (what came before is not counted again), replay the batch in flight with
    its range and sequence, and count the rest: both stores hold the counts of the last two thirds."""
    from floe_jobs.stores import schema

    app = two_tallies_app
    rng = random.Random(41)
    words = {p: [w for w in localrun.WORDS if localrun.WORDS.index(w) % 6 == p] for p in range(6)}
    by_partition = {p: [rng.choice(words[p]) for _ in range(300)] for p in range(6)}
    _produce_to(app, by_partition)
    schema.execute_ddl(session, schema.keyspace_cql(app.keyspace))
    offsets.ensure_offsets_table(session, keyspace=app.keyspace)
    stamp = time.time_ns() // 1000
    for p in range(6):  # as the previous release left them (its statements' columns, the bare topic)
        session.execute(
            f"INSERT INTO {app.keyspace}.{offsets.TABLE} (app_id, topic, partition, next_offset, committed_seq,"
            " planned_seq, planned_from, planned_to, planned_at, planned_ts, committed_at, owner)"
            " VALUES (%s, %s, %s, 100, 1, 2, 100, 200, toTimestamp(now()), %s, toTimestamp(now()), 'old-0/1')",
            (app.app_id, app.topics[0], p, stamp),
        )
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, app.topics, timeout=600, replicas=[replica])
        truth = Counter(w for p in range(6) for w in by_partition[p][100:])
        check_both_stores(session, app, dict(truth))
        log = replica.log_path.read_text()
        for stage in STAGES:
            replayed = {(t, p, seq, start, end) for t, p, seq, start, end in _replays(log, stage)}
            assert replayed == {(app.topics[0], p, 2, 100, 200) for p in range(6)}, stage
    finally:
        assert replica.stop() == 0
    table = offsets.OffsetsTable(session, keyspace=app.keyspace, app_id=app.app_id)
    assert {(r.partition, r.next_offset) for r in table.stored([app.topics[0]])} == {(p, None) for p in range(6)}


def _replays(log: str, stage: str) -> list[tuple[str, int, int, int, int]]:
    """The plans a replica's log says `stage` replayed: (topic, partition, seq, start, end)."""
    import ast

    out: list[tuple[str, int, int, int, int]] = []
    for line in log.splitlines():
        marker = f"Replaying stage={stage} plans="
        if marker in line:
            out.extend(ast.literal_eval(line.split(marker, 1)[1].strip()))
    return out
