"""A snapshot of 100,000 keys, taken while the input still flows, restored into a new app:
its time, its size and the restore's time, printed for docs/snapshots.md, and the restored
app's counts checked exactly at the end of the input."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from floe_stack import localrun

from tests import counting
from tests.integration.runtime.conftest import NewApp
from tests.integration.snapshots.test_snapshots import WRITER, floe_job, restored_app, run_to_the_end, topics_of

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.slow]

KEYS = 100_000
PER_LINE = 20


def key_lines() -> list[str]:
    """Lines naming every key once, then 2,000 lines of keys again (the input that flows)."""
    keys = [f"k{i:06d}" for i in range(KEYS)]
    first = [" ".join(keys[i : i + PER_LINE]) for i in range(0, KEYS, PER_LINE)]
    again = [" ".join(keys[(i * 37 + j * 101) % KEYS] for j in range(5)) for i in range(2000)]
    return first + again


@pytest.mark.timeout(2400)
def test_snapshot_of_100k_keys_measured(
    word_count_app: localrun.App, new_app: NewApp, session: Any, tmp_path: Path
) -> None:
    app = word_count_app
    lines = key_lines()
    first = KEYS // PER_LINE
    localrun.produce(app.bootstrap, app.topics[0], lines[:first])
    replica = localrun.Replica(app, "r0").start()
    stop = threading.Event()

    def feed() -> None:
        for i in range(first, len(lines), 50):
            if stop.is_set():
                return
            localrun.produce(app.bootstrap, app.topics[0], lines[i : i + 50])
            time.sleep(1.0)

    feeder = threading.Thread(target=feed)
    gaps = localrun.CommitGaps(session, app)
    snap_dir = tmp_path / "snap"
    try:
        localrun.wait_caught_up(session, app, topics_of(app), timeout=900, replicas=[replica])
        feeder.start()
        gaps.start()
        # a window, not a wait: the commit gaps of the 8 s before the snapshot are its baseline
        time.sleep(10)
        before = time.monotonic()
        taken = floe_job(app, "snapshot", "snapshot", "--to", snap_dir.as_uri(), "--writer", WRITER)
        after = time.monotonic()
        assert taken.returncode == 0, taken.stderr[-3000:]
        feeder.join()
        localrun.wait_caught_up(session, app, topics_of(app), timeout=600, replicas=[replica])
        gaps.stop()
    finally:
        stop.set()
        replica.stop()
    size = sum(f.stat().st_size for f in snap_dir.rglob("*.parquet"))
    target = restored_app(new_app, app)
    t0 = time.monotonic()
    restored = floe_job(target, "restore", "restore", "--from", snap_dir.as_uri())
    restore_seconds = time.monotonic() - t0
    assert restored.returncode == 0, restored.stderr[-3000:]
    print(
        f"\n100k keys: snapshot process {after - before:.1f}s ({taken.stdout.strip()}), Parquet {size / 1e6:.2f} MB;"
        f" restore process {restore_seconds:.1f}s ({restored.stdout.strip()});"
        f" longest commit gap during the snapshot {gaps.longest(before, after):.2f}s,"
        f" over the 8 s before it {gaps.longest(before - 8, before):.2f}s"
    )
    got = run_to_the_end(session, target, "n0", timeout=900)
    want: Counter[str] = localrun.word_truth(lines)
    assert len(want) == KEYS
    diff = counting.counters_equal(got, want)
    assert diff is None, diff
