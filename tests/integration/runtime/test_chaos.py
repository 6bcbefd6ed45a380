"""SIGKILL chaos: replicas killed at random moments of their work while input arrives.

A short run of each kind is in `make test`: word count with every batch on the Spark paths,
and a job of the other state helpers (`dedup` on a TTL store, `latest`). The long word-count run
(20 kills over 100,000 lines, on the driver paths) is marked slow (`make test-all`).
State must be exact, and the output topic must hold what the state says. Every run must have
replayed at least one batch (`Replaying stage=` in a replica's log): one kill is timed on a plan
seen in flight in the offsets rows, so a run that replayed nothing tested nothing of the replay.
"""

from __future__ import annotations

import ast
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from floe_jobs import offsets
from floe_stack import localrun

from tests import counting

from .conftest import NewApp
from .test_examples import produce_keyed
from .test_word_count import SPARK_READS, check_counts, topics_of

# exclusive: SIGKILL chaos among three Spark replicas saturates the 2 cores
pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.exclusive]

# The short runs' input, one chunk a second. 5 kills among 3 replicas need about 30-60 s once the
# replicas have started (kills 4 and 5 wait for a restarted replica's Spark start and first
# commit); run_chaos feeds on while kills remain, so a 45 s feed loses no kill on a slow machine.
SHORT_FEED_S = 45
# Chunks a run may add while kills remain, at least (2 minutes at one a second).
EXTRA_CHUNKS = 120
REPLAYING = re.compile(r"Replaying stage=(\S+) plans=(\[.*\])")


def replayed(logs: Iterable[Path]) -> list[tuple[str, int, int, int, int]]:
    """Every plan replayed, from the replicas' logs (every start of each): (topic, partition,
    seq, start, end), the range `[start, end)` read and applied again."""
    plans: list[tuple[str, int, int, int, int]] = []
    for path in logs:
        for m in REPLAYING.finditer(path.read_text(errors="replace")):
            plans.extend(ast.literal_eval(m[2]))
    return plans


def _in_flight(session: Any, app: localrun.App, victim: localrun.Replica) -> bool:
    """Whether `victim` holds a plan it has not committed (an offsets row it claimed last, with
    planned_seq > committed_seq): killed now, the next owner must replay it."""
    try:
        rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
    except Exception:  # the keyspace is not made yet
        return False
    mine = f"{victim.name}/"
    return any(owner.startswith(mine) and planned > committed for _n, committed, planned, owner in rows.values())


def run_chaos(
    app: localrun.App,
    session: Any,
    *,
    feed: Callable[[int, int], None],
    kills: int,
    chunks: int,
    topics: list[str],
    replicas: int = 3,
    kill_within_s: tuple[float, float] = (0.0, 20.0),
    seed: int = 1,
) -> str:
    """SIGKILL `kills` times, over `replicas` replica processes, while `feed(i, chunks)` produces
    chunk i of the input, one a second; then wait until every partition of `topics` is committed.
    When the input runs out before the kills are done (Spark starts are slow on a loaded machine),
    the feed goes on with chunks past `chunks` (new input, which `feed` records for the truth), at
    most as many again or EXTRA_CHUNKS, whichever is more: a replica is only killed while it has
    work. So a short feed costs no kill: it only ends the run sooner when the kills are quick.

    The victim is a random replica that has committed a batch since it started, killed a random
    moment within `kill_within_s` later (a Spark start takes 15-90 s on 2 cores, so every kill
    hits a replica in the middle of its work, whatever the machine's speed). The first kill instead
    waits (within the same window) until the victim is seen holding a plan in flight, and kills
    it then, so that some batch must be replayed. At least one replay must have happened: a run
    without one did not test the replay. Returns a summary."""
    app.extra_env.update(
        {
            # a killed member's partitions wait for its session to expire: keep that short here
            "FLOE_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "1500",
        }
    )
    rng = random.Random(seed)
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(replicas)]
    stop = threading.Event()
    done = 0
    fed = 0

    def feeding() -> None:
        nonlocal fed
        while fed < chunks or (done < kills and fed < chunks + max(chunks, EXTRA_CHUNKS)):
            feed(fed, chunks)
            fed += 1
            if stop.wait(1.0):
                return

    feeder = threading.Thread(target=feeding)
    feeder.start()
    try:
        while done < kills:
            busy = [p for p in procs if p.commits_since_start() >= 1]
            if not busy:
                if not feeder.is_alive() and localrun.caught_up(session, app, topics):
                    break  # no work left to interrupt
                time.sleep(1)
                continue
            victim = rng.choice(busy)
            window = rng.uniform(*kill_within_s)
            if done == 0:
                # timed on an observed event: the victim's claim of a batch it has not committed
                deadline = time.monotonic() + max(window, kill_within_s[1])
                while time.monotonic() < deadline and not _in_flight(session, app, victim):
                    time.sleep(0.02)
            else:
                time.sleep(window)
            victim.kill()
            done += 1
            time.sleep(rng.uniform(0, 2))
            victim.start()
        feeder.join()
        assert done == kills, f"only {done} of {kills} kills hit a replica at work; the input ran out"
        seconds = localrun.wait_caught_up(session, app, topics, timeout=2400, replicas=procs)
        replays = len(replayed(p.log_path for p in procs))
        assert replays >= 1, f"{done} kills and no batch was replayed: the run did not test a replay"
        return f"kills={done} replicas={replicas} chunks={fed} replayed_plans={replays} tail_seconds={seconds:.1f}"
    finally:
        stop.set()
        feeder.join()
        for p in procs:
            p.stop()


def _word_feed(app: localrun.App, lines: list[str]) -> Callable[[int, int], None]:
    """Chunk i of `lines`; past the last, new lines, appended to `lines` (the truth)."""
    initial = len(lines)

    def feed(i: int, chunks: int) -> None:
        size = -(-initial // chunks)
        if i < chunks:
            chunk = lines[i * size : (i + 1) * size]
        else:
            chunk = localrun.word_lines(size, seed=100_000 + i)
            lines.extend(chunk)
        localrun.produce(app.bootstrap, app.topics[0], chunk)

    return feed


@pytest.mark.slow
@pytest.mark.timeout(4800)
def test_sigkill_chaos_exact(word_count_app: localrun.App, session: Any) -> None:
    """FLOE_CHAOS_KILLS SIGKILLs (default 20) over FLOE_CHAOS_LINES lines (default 100,000), fed over
    FLOE_CHAOS_FEED_S seconds (default 600), among FLOE_CHAOS_REPLICAS replicas (default 3), each
    kill FLOE_CHAOS_MIN_S..FLOE_CHAOS_MAX_S seconds (default 0..20) after a busy victim is chosen."""
    app = word_count_app
    app.extra_env["FLOE_KAFKA_MAX_RECORDS_PER_BATCH"] = os.environ.get("FLOE_CHAOS_BATCH", "5000")
    lines = localrun.word_lines(int(os.environ.get("FLOE_CHAOS_LINES", "100000")), seed=42)
    summary = run_chaos(
        app,
        session,
        feed=_word_feed(app, lines),
        topics=topics_of(app),
        kills=int(os.environ.get("FLOE_CHAOS_KILLS", "20")),
        chunks=int(os.environ.get("FLOE_CHAOS_FEED_S", "600")),
        replicas=int(os.environ.get("FLOE_CHAOS_REPLICAS", "3")),
        kill_within_s=(float(os.environ.get("FLOE_CHAOS_MIN_S", "0")), float(os.environ.get("FLOE_CHAOS_MAX_S", "20"))),
    )
    check_counts(session, app, dict(localrun.word_truth(lines)))
    print(f"chaos: lines={len(lines)} {summary}")


@pytest.mark.timeout(1800)
def test_sigkill_chaos_on_spark_paths(word_count_app: localrun.App, session: Any) -> None:
    """5 SIGKILLs while every batch takes the Spark paths: Spark's Kafka source reads the input, the
    helpers run Spark's plans, and Spark's Kafka sink writes the repartition and output topics."""
    app = word_count_app
    app.extra_env.update({**SPARK_READS, "FLOE_KAFKA_SPARK_SINK_MIN_RECORDS": "0"})
    lines = localrun.word_lines(6000, seed=43)
    summary = run_chaos(
        app,
        session,
        feed=_word_feed(app, lines),
        topics=topics_of(app),
        kills=5,
        chunks=SHORT_FEED_S,
        kill_within_s=(0.0, 8.0),
    )
    check_counts(session, app, dict(localrun.word_truth(lines)))
    log = "".join(p.read_text() for p in app.workdir.glob("r*.log"))
    assert "Committed stage=count" in log
    print(f"chaos on Spark paths: lines={len(lines)} {summary}")


def _events(n: int, *, seed: int, first: int = 0) -> list[tuple[str, str]]:
    """(item, "<event id>:<n>") records, about one in five a second delivery of an earlier event;
    event ids count from `first`."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for i in range(first, first + n):
        if out and rng.random() < 0.2:
            out.append(rng.choice(out))
        else:
            out.append((f"item{rng.randrange(300):03d}", f"e{i:06d}:{i}"))
    return out


def _truth(records: list[tuple[str, str]]) -> tuple[set[str], dict[str, str]]:
    """The distinct event ids, and each item's last value among first deliveries."""
    seen: set[str] = set()
    latest: dict[str, str] = {}
    for item, value in records:
        event = value.split(":")[0]
        if event not in seen:
            seen.add(event)
            latest[item] = value
    return seen, latest


def _positions(bootstrap: str, topic: str) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record of `topic`, as the broker placed them."""
    ends = localrun.end_offsets(bootstrap, topic)
    conf = {"bootstrap.servers": bootstrap, "group.id": localrun.unique("pos"), "enable.auto.commit": False}
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < sum(ends.values()) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                out.append((m.partition(), m.offset(), m.value().decode()))
    finally:
        consumer.close()
    assert len(out) == sum(ends.values()), f"read {len(out)} of {sum(ends.values())} records of {topic}"
    return out


def _first_deliveries(bootstrap: str, topic: str) -> dict[str, tuple[int, int]]:
    """Each event id's first delivery: (partition, offset) of its lowest-offset record (an event's
    deliveries share a key, hence a partition)."""
    first: dict[str, tuple[int, int]] = {}
    for partition, offset, value in sorted(_positions(bootstrap, topic)):
        first.setdefault(value.split(":")[0], (partition, offset))
    return first


def check_deduplicated_output(
    out: list[str], first: dict[str, tuple[int, int]], replays: list[tuple[str, int, int, int, int]]
) -> tuple[int, int]:
    """The output (`<event id>:<n>@<partition>:<offset>` values) holds each event exactly once
    but for replays: one input record per event, its first delivery, and that record repeated
    only as often as batches covering it were replayed (output is at-least-once: a replay
    produces its batch again). (events, repeats)."""
    copies: Counter[tuple[str, tuple[int, int]]] = Counter()
    for value in out:
        body, _, source = value.rpartition("@")
        partition, offset = source.split(":")
        copies[(body.split(":")[0], (int(partition), int(offset)))] += 1
    records_per_event = Counter(event for event, _ in copies)
    twice = {e: n for e, n in records_per_event.items() if n != 1}
    assert not twice, f"{len(twice)} events kept from more than one input record, e.g. {sorted(twice.items())[:5]}"
    assert records_per_event == Counter(iter(first)), (
        f"events missing from the output: {sorted(set(first) - set(records_per_event))[:5]}; "
        f"not in the input: {sorted(set(records_per_event) - set(first))[:5]}"
    )
    wrong = {e: src for (e, src) in copies if src != first[e]}
    assert not wrong, f"{len(wrong)} events kept from a later delivery than their first: {sorted(wrong.items())[:5]}"
    extra = []
    for (event, (partition, offset)), n in copies.items():
        allowed = 1 + sum(1 for _t, p, _s, lo, hi in replays if p == partition and lo <= offset < hi)
        if n > allowed:
            extra.append((event, partition, offset, n, allowed))
    assert not extra, (
        f"{len(extra)} output records repeated beyond the replays of their batch "
        f"(event, partition, offset, copies, 1 + replays), e.g. {extra[:5]}"
    )
    return len(records_per_event), sum(copies.values()) - len(copies)


@pytest.mark.timeout(1800)
def test_sigkill_chaos_dedup_on_a_ttl_store_and_latest(new_app: NewApp, session: Any) -> None:
    """5 SIGKILLs while a job de-duplicates deliveries on a store with a TTL and keeps the latest
    value per item: every event is kept once in the TTL store, at its first delivery; each
    item's latest value is exact; and the output holds each event exactly once, from its first
    delivery, repeated only by replays of its batch (output is at-least-once)."""
    app = new_app(
        "fl",
        entrypoint=str(Path(__file__).parent / "jobs" / "first_and_latest.py"),
        stores=[
            {"name": "seen", "type": "partitioned", "ttl_seconds": 3600},
            {"name": "latest", "type": "partitioned"},
        ],
        input_name="in",
        batch=2000,
    )
    records = _events(20_000, seed=5)

    initial = len(records)

    def feed(i: int, chunks: int) -> None:
        size = -(-initial // chunks)
        if i < chunks:
            chunk = records[i * size : (i + 1) * size]
        else:  # more input while kills remain: new event ids
            chunk = _events(size, seed=i, first=len(records))
            records.extend(chunk)
        produce_keyed(app.bootstrap, app.topics[0], [(k, v.encode()) for k, v in chunk])

    summary = run_chaos(
        app, session, feed=feed, topics=app.topics, kills=5, chunks=SHORT_FEED_S, kill_within_s=(0.0, 8.0)
    )
    events, latest = _truth(records)
    first = _first_deliveries(app.bootstrap, app.topics[0])
    assert set(first) == events
    # the TTL store: one row per event (a key is one row), whose value is its first delivery's offset
    seen = localrun.read_store(session, app.keyspace, "seen", key_serde="str", value_serde="long")
    diff = counting.counters_equal(seen, {event: offset for event, (_p, offset) in first.items()})
    assert diff is None, diff
    diff = counting.counters_equal(
        localrun.read_store(session, app.keyspace, "latest", key_serde="str", value_serde="str"), latest
    )
    assert diff is None, diff
    out = [v.decode() for _k, v in localrun.read_topic(app.bootstrap, app.output_topics[0]) if v]
    kept, repeats = check_deduplicated_output(out, first, replayed(app.workdir.glob("r*.log")))
    print(
        f"chaos over dedup and latest: records={len(records)} events={len(events)} out={len(out)} "
        f"kept={kept} repeated_by_replays={repeats} {summary}"
    )
