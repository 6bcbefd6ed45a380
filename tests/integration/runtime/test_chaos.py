"""SIGKILL chaos: replicas killed at random moments of their work while input arrives.

A short run of each kind is in `make test`: word count with every batch on the Spark paths,
and a job of the other state helpers (`dedup` on a TTL store, `latest`). The long word-count run
(20 kills over 100,000 lines, on the driver paths) is marked slow (`make test-all`).
State must be exact, and the output topic must hold what the state says.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from floe_stack import localrun

from tests import counting

from .conftest import NewApp
from .test_examples import produce_keyed
from .test_word_count import SPARK_READS, check_counts, topics_of

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


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
    most as many again: a replica is only killed while it has work.

    The victim is a random replica that has committed a batch since it started, killed a random
    moment within `kill_within_s` later (a Spark start takes 15-90 s on 2 cores, so every kill
    hits a replica in the middle of its work, whatever the machine's speed). Returns a summary."""
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
        while fed < chunks or (done < kills and fed < 2 * chunks):
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
            time.sleep(rng.uniform(*kill_within_s))
            victim = rng.choice(busy)
            victim.kill()
            done += 1
            time.sleep(rng.uniform(0, 2))
            victim.start()
        feeder.join()
        assert done == kills, f"only {done} of {kills} kills hit a replica at work; the input ran out"
        seconds = localrun.wait_caught_up(session, app, topics, timeout=2400, replicas=procs)
        replays = sum(p.log_path.read_text().count("Replaying stage=") for p in procs)
        return f"kills={done} replicas={replicas} chunks={fed} replayed_batches={replays} tail_seconds={seconds:.1f}"
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
        app, session, feed=_word_feed(app, lines), topics=topics_of(app), kills=5, chunks=90, kill_within_s=(0.0, 8.0)
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


@pytest.mark.timeout(1800)
def test_sigkill_chaos_dedup_on_a_ttl_store_and_latest(new_app: NewApp, session: Any) -> None:
    """5 SIGKILLs while a job de-duplicates deliveries on a store with a TTL and keeps the latest
    value per item: every event is kept once in the TTL store, each item's latest value is exact,
    and the output holds every first delivery (at least once) and no repeat."""
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

    summary = run_chaos(app, session, feed=feed, topics=app.topics, kills=5, chunks=90, kill_within_s=(0.0, 8.0))
    events, latest = _truth(records)
    seen = localrun.read_store(session, app.keyspace, "seen", key_serde="str", value_serde="long")
    assert set(seen) == events
    diff = counting.counters_equal(
        localrun.read_store(session, app.keyspace, "latest", key_serde="str", value_serde="str"), latest
    )
    assert diff is None, diff
    out = [v.decode().split(":")[0] for _k, v in localrun.read_topic(app.bootstrap, app.output_topics[0]) if v]
    assert set(out) == events
    print(f"chaos over dedup and latest: records={len(records)} events={len(events)} out={len(out)} {summary}")
