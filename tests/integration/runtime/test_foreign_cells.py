"""Word count over state rows whose cells were stamped above the batches' own write timestamps:
by another writer an hour ahead, or by a replica whose clock ran an hour ahead before its
offsets rows lost their stamps. The runtime writes every batch above them (`floe_jobs.state`,
`planning.row_stamp`), so the counts in Cassandra stay exact, read cold by a new replica and
by the check.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from floe_jobs import offsets
from floe_jobs.stores import schema, serdes
from floe_stack import localrun

from tests import faultjob

from .test_word_count import check_counts, topics_of

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

HOUR_US = 3_600_000_000


def run_until_caught_up(app: localrun.App, session: Any, name: str, chunks: list[list[str]], **env: str) -> None:
    """One replica over `chunks` of lines produced one after the other (several batches), then
    stopped by SIGTERM (a drain: nothing in flight)."""
    replica = localrun.Replica(app, name, **env).start()
    try:
        for chunk in chunks:
            localrun.produce(app.bootstrap, app.topics[0], chunk)
            localrun.wait_caught_up(session, app, topics_of(app), timeout=300, replicas=[replica])
    finally:
        code = replica.stop()
    assert code == 0, f"{name} exited with {code}; see {replica.log_path}"


def chunks(lines: list[str], size: int) -> list[list[str]]:
    return [lines[i : i + size] for i in range(0, len(lines), size)]


@pytest.mark.timeout(900)
def test_counts_stay_exact_over_rows_another_writer_stamped_an_hour_ahead(
    word_count_app: localrun.App, session: Any
) -> None:
    app = word_count_app
    first = localrun.word_lines(400, seed=31)
    run_until_caught_up(app, session, "r0", [first])
    # another writer adds 1,000 to every count, with a clock an hour ahead
    table = f"{app.keyspace}.{schema.table_name('word-count')}"
    ahead = time.time_ns() // 1000 + HOUR_US
    bumped = 0
    for partition, key, value in list(session.execute(f"SELECT partition, key, value FROM {table}")):
        if value is None:
            continue
        session.execute(
            f"INSERT INTO {table} (partition, key, time, value) VALUES (%s, %s, toTimestamp(now()), %s)"
            f" USING TIMESTAMP {ahead}",
            (partition, key, serdes.LONG.encode(serdes.LONG.decode(value) + 1000)),
        )
        bumped += 1
    assert bumped > 100
    want = {word: count + 1000 for word, count in localrun.word_truth(first).items()}
    check_counts(session, app, want, output=False)
    # a new replica reads those rows cold, then keeps them over several batches
    second = localrun.word_lines(900, seed=32)
    run_until_caught_up(app, session, "r1", chunks(second, 300))
    for word, count in localrun.word_truth(second).items():
        want[word] = want.get(word, 0) + count
    check_counts(session, app, want)


@pytest.mark.timeout(900)
def test_counts_stay_exact_when_the_clock_is_set_back_below_the_rows(
    word_count_app: localrun.App, session: Any
) -> None:
    """A replica whose clock ran an hour ahead wrote the state; its offsets rows then carry no
    stamp (a table of the release before stamps, upgraded: planned_ts null), and the replica
    after it plans with the right clock, an hour behind every row."""
    app = word_count_app
    app.module = faultjob.MODULE
    first = localrun.word_lines(400, seed=41)
    run_until_caught_up(app, session, "fast", [first], FLOE_TEST_CLOCK_SKEW_S="3600")
    table = offsets.OffsetsTable(session, keyspace=app.keyspace, app_id=app.app_id)
    rows = [r for r in table.stored() if r.next_offset is not None]  # every stage's live rows
    assert rows and min(r.planned_ts or 0 for r in rows) > time.time_ns() // 1000 + HOUR_US // 2
    for r in rows:
        session.execute(
            f"UPDATE {app.keyspace}.{offsets.TABLE} SET planned_ts = null WHERE app_id = %s AND topic = %s"
            " AND partition = %s",
            (app.app_id, r.key, r.partition),
        )
    second = localrun.word_lines(900, seed=42)
    run_until_caught_up(app, session, "right", chunks(second, 300))
    check_counts(session, app, dict(localrun.word_truth(first + second)))
