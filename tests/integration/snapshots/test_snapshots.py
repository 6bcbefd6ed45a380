"""Snapshots and restore against the real stack (docs/snapshots.md): word count with its input
flowing, cut while it runs, restored into a new app that then finishes the input; and the
refusals (missing, mismatched, interrupted snapshots).

Real Kafka, Cassandra and Spark: the snapshot and the restore run as `floe-job snapshot` /
`floe-job restore` processes with the apps' own configuration, as a Job pod would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from floe_jobs import offsets, records, runs
from floe_stack import localrun

from tests import counting
from tests.integration.runtime.conftest import NewApp

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

WRITER = "word-count=count"


def topics_of(app: localrun.App) -> list[str]:
    return [*app.topics, f"{app.app_id}-words-repartition"]


def wait_ready(procs: list[localrun.Replica], *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.ready() for p in procs):
        assert time.monotonic() < deadline, f"replicas not ready within {timeout:.0f}s"
        time.sleep(0.5)


def floe_job(app: localrun.App, name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `floe-job <args>` with the app's configuration; its stderr goes to `<name>.log`."""
    return subprocess.run(
        [sys.executable, "-m", "floe_jobs.cli", *args],
        env=app.env(name),
        cwd=str(localrun.ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def restored_app(new_app: NewApp, source: localrun.App, **store: Any) -> localrun.App:
    """A new word-count app (own id, keyspace, output topic) reading `source`'s input topic."""
    app = new_app(
        "wcr",
        entrypoint=str(localrun.ROOT / "examples/word-count/word_count.py"),
        stores=[{"name": "word-count", "type": "partitioned", **store}],
        input_name="lines",
        batch=5000,
    )
    app.topics = list(source.topics)
    return app


def lines_by_position(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    """Every record of the topic as (partition, offset) → value."""
    ends = localrun.end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": localrun.unique("snap-read"),
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    out: dict[tuple[int, int], str] = {}
    deadline = time.monotonic() + 60
    try:
        while len(out) < sum(ends.values()) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            out[(int(msg.partition() or 0), int(msg.offset() or 0))] = msg.value().decode()
    finally:
        consumer.close()
    assert len(out) == sum(ends.values()), "could not read the input back"
    return out


def run_to_the_end(session: Any, app: localrun.App, name: str, *, timeout: float = 600) -> dict[str, int]:
    """A replica of `app` started, run until every partition is committed, stopped cleanly; the
    store's counts then."""
    replica = localrun.Replica(app, name).start()
    try:
        localrun.wait_caught_up(session, app, topics_of(app), timeout=timeout, replicas=[replica])
    finally:
        assert replica.stop() == 0
    return dict(localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long"))


def counts_of(lines: list[str]) -> Counter[str]:
    return localrun.word_truth(lines)


def manifest_of(uri_dir: Path) -> dict[str, Any]:
    parts = sorted((uri_dir / "manifest").glob("part-*"))
    assert parts, f"no manifest under {uri_dir}"
    return dict(json.loads("".join(p.read_text() for p in parts)))


def pending_tail(uri_dir: Path, manifest: dict[str, Any]) -> Counter[str]:
    """What the count stage still had to apply from the snapshot's repartition tail: the runtime's
    own filter of applied records (`records.drop_applied`) with the cut's source positions."""
    import pyarrow.parquet as pq

    count = next(s for s in manifest["stages"] if s["name"] == "count")
    applied = {(count["topic"], p["partition"]): {k: tuple(v) for k, v in p["source_positions"].items()}
               for p in count["partitions"]}
    out: Counter[str] = Counter()
    tail_dir = uri_dir / "repartition" / "count"
    if not list(tail_dir.glob("*.parquet")):
        return out
    rows = pq.read_table(tail_dir).to_pylist()
    recs = [
        records.Record(r["key"], r["value"], count["topic"], r["partition"], r["offset"], None,
                       list(zip(r["header_keys"], r["header_values"], strict=True)))
        for r in sorted(rows, key=lambda r: (r["partition"], r["offset"]))
    ]
    kept, _ = records.drop_applied(recs, applied)
    for r in kept:
        assert r.value is not None
        if runs.info(r.headers) is not None:  # many rows in one record (floe_jobs.runs)
            table = runs.table(r.value)
            for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True):
                out[key.decode()] += int(value.decode())
        else:
            assert r.key is not None
            out[r.key.decode()] += int(r.value.decode())
    return out


@pytest.mark.timeout(1800)
def test_snapshot_under_load_restores_exactly(
    word_count_app: localrun.App, new_app: NewApp, session: Any, tmp_path: Path
) -> None:
    """Word count, two replicas, input flowing: a snapshot taken while it runs, restored into a
    new app, holds at its cut exactly the truth of the input below the cut (with the repartition
    records still to apply), and the new app run to the end of the input counts exactly."""
    app = word_count_app
    lines = localrun.word_lines(20000, seed=36)
    localrun.produce(app.bootstrap, app.topics[0], lines[:2000])
    procs = [localrun.Replica(app, f"r{i}").start() for i in range(2)]
    stop, snapped = threading.Event(), threading.Event()
    fed = [2000]

    def feed() -> None:
        # slowly until the snapshot is done (the input flows while it is taken), then the rest
        while fed[0] < len(lines) and not stop.is_set():
            step = 50 if not snapped.is_set() else len(lines)
            localrun.produce(app.bootstrap, app.topics[0], lines[fed[0] : fed[0] + step])
            fed[0] = min(len(lines), fed[0] + step)
            time.sleep(0.5)

    feeder = threading.Thread(target=feed)
    gaps = localrun.CommitGaps(session, app)
    snap_dir = tmp_path / "snap"
    try:
        wait_ready(procs, timeout=300)
        feeder.start()
        gaps.start()
        # a window, not a wait: the commit gaps of the 8 s before the snapshot are its baseline
        time.sleep(10)
        before = time.monotonic()
        done = floe_job(app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER)
        after = time.monotonic()
        snapped.set()
        assert done.returncode == 0, done.stderr[-3000:]
        assert fed[0] < len(lines), "the input stopped flowing before the snapshot was done"
        feeder.join()
        localrun.wait_caught_up(session, app, topics_of(app), timeout=600, replicas=procs)
        gaps.stop()
        print(f"snapshot: {after - before:.1f}s; longest commit gap during it {gaps.longest(before, after):.2f}s,"
              f" in the 8 s before it {gaps.longest(before - 8, before):.2f}s; {done.stdout}")
    finally:
        stop.set()
        for p in procs:
            p.stop()

    manifest = manifest_of(snap_dir)
    split = next(s for s in manifest["stages"] if s["name"] == "split")
    by_position = lines_by_position(app.bootstrap, app.topics[0])
    cut_lines = [line for (p, off), line in by_position.items()
                 if off < next(c["next_offset"] for c in split["partitions"] if c["partition"] == p)]
    assert 0 < len(cut_lines) < len(lines), "the cut should fall while the input flowed"

    target = restored_app(new_app, app)
    restored = floe_job(target, "restore", "restore", "--from", snap_dir.as_uri())
    assert restored.returncode == 0, restored.stderr[-3000:]
    got = localrun.read_store(session, target.keyspace, "word-count", key_serde="str", value_serde="long")
    at_cut = Counter(got) + pending_tail(snap_dir, manifest)
    diff = counting.counters_equal(at_cut, counts_of(cut_lines))
    assert diff is None, f"restored state at the cut: {diff}"

    got = run_to_the_end(session, target, "n0")
    diff = counting.counters_equal(got, counts_of(lines))
    assert diff is None, f"restored app at the end of the input: {diff}"


@pytest.fixture
def stopped_app(word_count_app: localrun.App, session: Any) -> localrun.App:
    """A word-count app that counted 300 lines and stopped."""
    app = word_count_app
    localrun.produce(app.bootstrap, app.topics[0], localrun.word_lines(300, seed=5))
    replica = localrun.Replica(app, "r0").start()
    try:
        localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=[replica])
    finally:
        replica.stop()
    return app


def test_restore_of_missing_snapshot_is_refused(word_count_app: localrun.App, tmp_path: Path) -> None:
    missing = (tmp_path / "nothing-here").as_uri()
    done = floe_job(word_count_app, "restore", "restore", "--from", missing)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"no snapshot at {missing}: it has no manifest" in done.stderr


def test_restore_into_mismatched_job_is_refused(
    stopped_app: localrun.App, new_app: NewApp, session: Any, tmp_path: Path
) -> None:
    snap = (tmp_path / "snap").as_uri()
    taken = floe_job(stopped_app, "snapshot", "snapshot", "--to", snap, "--writer", WRITER)
    assert taken.returncode == 0, taken.stderr[-3000:]
    target = restored_app(new_app, stopped_app)
    target.stores = [{"name": "word-count", "type": "global"}]
    done = floe_job(target, "restore", "restore", "--from", snap)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "store word-count: type partitioned in the snapshot, global in the app" in done.stderr
    assert not offsets.stage_progress(session, keyspace=target.keyspace, app_id=target.app_id)


def test_interrupted_snapshot_leaves_no_manifest(stopped_app: localrun.App, tmp_path: Path) -> None:
    """SIGKILL of the snapshot process once it has cut its first stage, before it wrote
    anything: no manifest, and a restore from there is refused."""
    snap_dir = tmp_path / "snap"
    log = tmp_path / "snapshot.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "floe_jobs.cli", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER],
            env=stopped_app.env("snapshot"), cwd=str(localrun.ROOT), stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 300
    while "Cut stage=" not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the snapshot cut nothing within 300 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (snap_dir / "manifest").exists()
    done = floe_job(stopped_app, "restore", "restore", "--from", snap_dir.as_uri())
    assert done.returncode == 2
    assert "it has no manifest" in done.stderr


def test_the_summary_file_says_what_the_manifest_holds(stopped_app: localrun.App, tmp_path: Path) -> None:
    """`--summary-file` (what the operator's snapshot Job passes as its termination log): the
    totals and the cut of the manifest, read by the operator into a StreamingAppSnapshot's status."""
    from floe_operator import snapshotjob

    snap_dir, summary_file = tmp_path / "snap", tmp_path / "termination-log"
    taken = floe_job(stopped_app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER,
                     "--summary-file", str(summary_file))
    assert taken.returncode == 0, taken.stderr[-3000:]
    text = summary_file.read_text()
    assert len(text.encode()) <= 4096
    assert json.loads(text) == json.loads(taken.stdout.strip().splitlines()[-1])
    manifest = manifest_of(snap_dir)
    parts = [*manifest["stores"], *manifest["tails"]]
    status = snapshotjob.summary_fields(snapshotjob.reported(text) or {})
    assert status["sizeBytes"] == sum(p["bytes"] for p in parts) > 0
    assert status["rows"] == sum(p["rows"] for p in parts) > 0
    assert status["durationSeconds"] == manifest["seconds"]
    assert {s["name"]: (s["partitions"], s["nextOffsets"]) for s in status["stages"]} == {
        s["name"]: (len(s["partitions"]), sum(p["next_offset"] for p in s["partitions"])) for s in manifest["stages"]}


def test_a_restore_in_place_undoes_what_the_app_did_after_the_cut_and_it_then_counts_exactly(
    stopped_app: localrun.App, session: Any, tmp_path: Path
) -> None:
    """A snapshot of an app that counted 300 lines; then 400 more lines, whose marker word the
    snapshot never saw, counted. Restored into the same app (refused without --replace, then in
    place): the store holds exactly the counts at the cut (the marker gone) and every stage sits
    at the cut; run to the end of the input, the app counts every line once (the 400 lines were
    counted before the restore and are counted again from the cut, not on top)."""
    app = stopped_app
    snap_dir = tmp_path / "snap"
    taken = floe_job(app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER)
    assert taken.returncode == 0, taken.stderr[-3000:]
    at_cut = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    cut_positions = offsets.stage_progress(session, keyspace=app.keyspace, app_id=app.app_id)
    later = [f"{line} afterthecut" for line in localrun.word_lines(400, seed=6)]
    localrun.produce(app.bootstrap, app.topics[0], later)
    moved = run_to_the_end(session, app, "r1", timeout=300)
    assert moved.get("afterthecut") == 400, "the lines after the cut were not counted before the restore"

    refused = floe_job(app, "restore", "restore", "--from", snap_dir.as_uri())
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "already has positions" in refused.stderr and "--replace" in refused.stderr

    done = floe_job(app, "restore", "restore", "--from", snap_dir.as_uri(), "--replace")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["replaced"] is True
    restored = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    diff = counting.counters_equal(Counter(restored), Counter(at_cut))
    assert diff is None, f"restored state is not the state at the cut: {diff}"
    assert "afterthecut" not in restored
    now = offsets.stage_progress(session, keyspace=app.keyspace, app_id=app.app_id)
    assert {k: v[:3] for k, v in now.items() if k[1] in app.topics} == {
        k: v[:3] for k, v in cut_positions.items() if k[1] in app.topics}, "the input stage is not back at the cut"

    got = run_to_the_end(session, app, "r2", timeout=300)
    everything = list(lines_by_position(app.bootstrap, app.topics[0]).values())
    assert len(everything) == 700
    diff = counting.counters_equal(got, counts_of(everything))
    assert diff is None, f"counts after the restore in place and the rest of the input: {diff}"


def test_a_restore_in_place_gives_back_every_row_with_its_fence_time_write_time_and_ttl(
    stopped_app: localrun.App, session: Any, tmp_path: Path
) -> None:
    """Rows as another writer may leave them beside the app's: one with a TTL and a time of its
    own, one fenced delete (no value). Snapshot and restore in place of the stopped app: every
    row comes back with the same value, fence, time and write times, and the TTL it had left (less
    the seconds in between, never more)."""
    from floe_jobs.stores import schema

    app = stopped_app
    table = f"{app.keyspace}.{schema.table_name('word-count')}"
    found = list(session.execute(f"SELECT key, floe_batch FROM {table} WHERE partition = 0 LIMIT 2"))
    assert len(found) == 2, "the app counted nothing into partition 0"
    keys = [r[0] for r in found]
    # each row keeps its fence (one above the writer's cut would make the snapshot refuse the store)
    fences = [r[1] for r in found]
    session.execute(f"UPDATE {table} USING TTL 3600 SET value = 0x2a, floe_batch = %s,"
                    " time = '2020-01-02 03:04:05.678+0000' WHERE partition = 0 AND key = %s", (fences[0], keys[0]))
    session.execute(f"UPDATE {table} SET value = null, floe_batch = %s WHERE partition = 0 AND key = %s",
                    (fences[1], keys[1]))

    def rows() -> dict[tuple[int, bytes], tuple[Any, ...]]:
        got = session.execute(f"SELECT partition, key, value, floe_batch, time, WRITETIME(value),"
                              f" WRITETIME(floe_batch), TTL(floe_batch) FROM {table}")
        return {(r[0], r[1]): tuple(r[2:]) for r in got}

    # read before the snapshot: the TTL it copies is at most this one
    before, read_at = rows(), time.monotonic()
    snap_dir = tmp_path / "snap"
    taken = floe_job(app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER)
    assert taken.returncode == 0, taken.stderr[-3000:]
    done = floe_job(app, "restore", "restore", "--from", snap_dir.as_uri(), "--replace")
    assert done.returncode == 0, done.stderr[-3000:]
    after, elapsed = rows(), time.monotonic() - read_at

    assert sorted(after) == sorted(before)
    assert before[(0, keys[0])][:3] == (b"*", fences[0], datetime(2020, 1, 2, 3, 4, 5, 678000))
    assert before[(0, keys[1])][:2] == (None, fences[1])
    # a row is restored under one write time: the later of its value's and its fence's
    def kept(got: dict[tuple[int, bytes], tuple[Any, ...]]) -> dict[tuple[int, bytes], tuple[Any, ...]]:
        return {k: (*v[:3], max(w for w in v[3:5] if w is not None)) for k, v in got.items()}

    assert kept(after) == kept(before)
    with_ttl = {k: (v[5], after[k][5]) for k, v in before.items() if v[5] is not None}
    assert list(with_ttl) == [(0, keys[0])], with_ttl
    then, now = with_ttl[(0, keys[0])]
    assert then - elapsed - 1 <= now <= then, (then, now, elapsed)
