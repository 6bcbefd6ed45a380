"""The offsets table: where a Floe app's input positions live, next to its state, in Cassandra.

One table per keyspace, `<keyspace>.floe_offsets`, shared by every app whose state lives in that
keyspace: one Cassandra partition per app, one row per stage and input topic-partition, the
repartition topics included. Sharing it makes a new app cost no schema change once its keyspace
has one (schema changes are serialized cluster-wide, about 0.15 s each), and an app's offsets go
with one partition delete.

    CREATE TABLE <keyspace>.floe_offsets (
        app_id           text,       -- the app (its consumer group)
        topic            text,       -- position key: "<stage>/<topic>" (see below)
        partition        int,        -- input partition
        next_offset      bigint,     -- first offset NOT yet applied: the committed position
        committed_seq    bigint,     -- sequence of the batch that committed next_offset (0: none yet)
        planned_seq      bigint,     -- sequence of the latest planned batch
        planned_from     bigint,     -- its range [planned_from, planned_to)
        planned_to       bigint,
        planned_at       timestamp,
        committed_at     timestamp,  -- when next_offset was last committed
        owner            text,       -- member that planned last (host/pod name), for people
        source_positions text,       -- repartition topics only: JSON {"<topic>:<partition>": [offset, index]},
                                     -- the highest stage-1 record position applied, per source partition
        PRIMARY KEY ((app_id), topic, partition)
    )

**Every stage has its own position.** Any number of stages may read one topic, and each must see
every record once, so a row belongs to one stage: its `topic` column holds the position key
`<stage>/<topic>` (`position_key`, read back by `parse_key`, the one place that knows the form).
Kafka topic names cannot contain '/', and stage names are refused if they do (`check_stage_name`,
at job start), so the key is never ambiguous. The key lives in the existing clustering column
rather than a new `stage` column because a primary key cannot change in place: the table, its
primary key and every query by app_id stay as they were, and an app's rows still form one
Cassandra partition (one conditional batch can span all its stages' rows). A stage renamed in the
code is a new stage: it starts by `kafka.starting_offsets`.

**Rows of earlier releases** are keyed by the bare topic ("legacy" rows, no stage). When a stage
finds no row of its own for a partition but a live legacy row, it takes it over, in one
conditional batch (`OffsetsTable.read`): a row for every stage of the job that reads the topic
(`readers`) and has none yet, each an exact copy (next_offset, committed_seq, planned_seq,
planned_from/to, planned_ts, source_positions), inserted IF NOT EXISTS, and the legacy row retired
(next_offset set to null) if it is still as read. An in-flight plan is thus replayed exactly,
same range and sequence, by each stage (stamped above the earlier attempt's `planned_ts`, which
the copy keeps, like every replay). Retiring matters for version skew: a replica of
the earlier release still running during a rollout skips a row whose next_offset is null, and its
claims and commits on that row fail (their conditions name values it no longer has), so it can
never move a position the new stages own. For the same reason a stage that creates its first
rows also writes a retired legacy row where there is none (`IF next_offset = null`, in the same
batch), so an earlier release's replica cannot start the partition over beside it. A legacy row
that is live is one position for every stage: the operator's offset reset (`reset`) writes one
when the app has no row yet for a partition.

Readers of the table: `progress` (the position of the stage furthest behind, per topic-partition),
`stage_progress` (every stage's), `recorded_topics` (topics, stages stripped) and the operator's
lag scraper (`floe_operator.lag.scrape`, through `furthest_behind`), which reports per input
partition the lag of the stage furthest behind and ignores a legacy row once a staged row exists
for that partition.

A batch is in flight for a partition while planned_seq > committed_seq; whoever owns the
partition next replays exactly [planned_from, planned_to) with planned_seq. Sequences grow
by one per batch of that stage's partition and are the fence written into every state row (a
store is written by one stage, `api.Batch`, so stages' sequences never meet in a store).

Stale owners are fenced. A replica paused past its session timeout (a long GC, a frozen node,
a network partition) has lost its partitions to another replica, yet resumes in the middle of a
batch it planned before the pause:

- **The offsets row changes only through conditional writes** (Paxos, `LOCAL_SERIAL`): a row is
  created if absent; a batch starts by claiming its partitions in one conditional batch — a new
  plan only if the row is still exactly as read, a replay by taking the row over (`owner`) — and
  commits in another, only while it still owns every plan and nothing committed it yet. Two
  replicas can never claim one sequence for different ranges, and a stale commit is refused:
  committed offsets never move back.
- **State rows carry write timestamps.** Each attempt of a plan carries `planned_ts`, a write
  timestamp above the previous attempt's, whatever the planner's clock says: max(clock, last
  + 1) (`planning.stamp_for`); a replay stores its new stamp with its claim. Its state rows are
  written `USING TIMESTAMP` that value, but a row whose cells something else stamped at or above
  it is written just above them (`planning.row_stamp`): the fenced read returns the row's
  highest write timestamp (`WRITETIME` of value, fence and time, in the same SELECT). So:
  - a late write of a stale batch loses, cell by cell, to anything a newer batch wrote, since
    that batch read the row after the stale batch did and wrote above what it read; and to the
    replay of its own batch, stamped above it, rather than tying with it (Cassandra breaks a tie
    by the cells' content, not by writer: a helper that is not deterministic, or a TTL'd marker
    written later, would win it);
  - a cell written outside the batch loop under a higher timestamp — the store library at its
    own clock, the Java library, a replica whose clock ran ahead before its plans were stamped —
    no longer swallows the batch writes below it, fence included (read back cold, they would be
    lost for good).
  The raise is per row, from what the attempt read, not per partition: two attempts that read
  the same cell write under the same timestamp (the same content, for the same input), no plan
  has to be stored again in the middle of a batch (a Paxos round each time), and one row an hour
  ahead does not drag the partition's other rows an hour ahead, above the writes that tools make
  to them at the right time. The replica's known rows (`floe_jobs.statecache`) keep the timestamp
  each row was written under.
  What a read cannot see, a write cannot go above: a row or cell *deleted* under a later
  timestamp (a tombstone reads as nothing) still shadows batch writes until the batches' stamps
  pass it; a stale attempt that read a row stamped ahead which expired (TTL) before the next
  batch read it can still win against that batch's write; and the replica's known rows do not
  see a row written by another writer while it owns the partition (one writer per partition,
  `floe_jobs.statecache`).
- **Ownership check before output.** Just before it produces, a batch reads its rows again and
  gives up (no output, no commit) if another replica claimed any of its partitions since.

    planned_ts       bigint      -- write timestamp (µs) of the latest plan's effects (its latest attempt)
    stopped_at       bigint      -- a poison record stopped the partition here (spec.errors: stop),
    stopped_error    text        -- with its error; cleared by the next commit or an offset reset
    held_until       bigint      -- a snapshot holds new plans back until then (µs since the epoch), see below

**A snapshot may hold a partition** (`floe_jobs.snapshots.cut`). It copies a partition's store
rows between two reads of its row and keeps the copy only if the row did not move; a partition
whose batches are all shorter than that copy would never offer such a window. So after a few
seconds of trying, the snapshot sets `held_until` on the row, conditionally, only while the row is
still as read at a committed batch; the planner makes no new plan of a held partition
(`planning.OffsetRow.held`), and every new plan's claim names the `held_until` it read, so a
hold set between a replica's read and its claim fails that claim. The snapshot releases the hold
(null) right after its copy; a snapshot that dies leaves a hold that runs out on its own. A
replica of an earlier release ignores holds; the snapshot then sees the row move and copies again.

Consumer lag as the lag exporter computes it: end offset (Kafka) - next_offset of the stage
furthest behind, per partition; `SELECT topic, partition, next_offset, committed_at FROM … WHERE
app_id = ?`, keys parsed with `parse_key`.

All reads and writes go at LOCAL_QUORUM; DDL at ALL (concurrent creators are safe: IF NOT EXISTS).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from cassandra import ConsistencyLevel
from cassandra.policies import RetryPolicy
from cassandra.query import SimpleStatement
from floe_jobs import faults
from floe_jobs.planning import OffsetRow, PartitionPlan

TABLE = "floe_offsets"

_COLUMNS = (
    "app_id text, topic text, partition int, next_offset bigint, committed_seq bigint,"
    " planned_seq bigint, planned_from bigint, planned_to bigint,"
    " planned_at timestamp, committed_at timestamp, owner text, source_positions text, planned_ts bigint,"
    " stopped_at bigint, stopped_error text, held_until bigint,"
    " PRIMARY KEY ((app_id), topic, partition)"
)
# columns added after the table's first release, with their types: tables made before get them
ADDED_COLUMNS = {"planned_ts": "bigint", "stopped_at": "bigint", "stopped_error": "text", "held_until": "bigint"}


def table_cql(keyspace: str) -> str:
    """The offsets table's `CREATE TABLE IF NOT EXISTS` (for `schema.provision`'s extra tables)."""
    return f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} ({_COLUMNS})"


def ensure_offsets_table(session: Any, *, keyspace: str) -> None:
    """Create the keyspace's offsets table if absent (idempotent; the keyspace must exist)."""
    session.execute(SimpleStatement(table_cql(keyspace), consistency_level=ConsistencyLevel.ALL))
    upgrade(session, keyspace=keyspace)


def missing_columns(columns: set[str]) -> list[str]:
    """The columns a table with `columns` lacks (it was made by an earlier release)."""
    return sorted(c for c in ADDED_COLUMNS if c not in columns)


def upgrade(session: Any, *, keyspace: str, columns: set[str] | None = None) -> None:
    """Add the columns an offsets table made by an earlier release lacks; `columns`: the table's
    columns when already read. Concurrent upgraders are safe ("already exists" is success)."""
    from floe_jobs.stores import schema

    if columns is None:
        columns = schema.table_columns(session, keyspace, TABLE)
    if columns is None:
        return
    for column in missing_columns(columns):
        schema.execute_ddl(
            session,
            f"ALTER TABLE {keyspace}.{TABLE} ADD {column} {ADDED_COLUMNS[column]}",
            what=f"add {column} to {keyspace}.{TABLE}",
        )


def being_created(exc: Exception) -> bool:
    """Whether a read failed only because its table is being created by another client: Cassandra
    then answers with a server error naming an unknown table id ("Unknown CF <id>"). Polling a new
    app's progress while its replica provisions hits this a few times per creation."""
    from cassandra.protocol import ServerError

    return isinstance(exc, ServerError) and "Unknown CF" in str(exc)


class _RaiseWhileCreated(RetryPolicy):  # type: ignore[misc]
    """Raises the "Unknown CF" server error itself instead of trying the next host. With the
    default policy the driver ends in NoHostAvailable, and it records a host's error in that
    exception's `errors` only after scheduling the retry that raises it: a caller can find the
    map still empty and so cannot tell a table being created from a cluster that is down."""

    def on_request_error(self, query: Any, consistency: Any, error: Exception, retry_num: int) -> Any:
        if being_created(error):
            return self.RETHROW, None
        return super().on_request_error(query, consistency, error, retry_num)


_WHILE_CREATED = _RaiseWhileCreated()


def _read_all(session: Any, cql: str, app_id: str) -> list[Any]:
    from cassandra import InvalidRequest
    from cassandra.protocol import ServerError

    stmt = SimpleStatement(cql, consistency_level=ConsistencyLevel.LOCAL_QUORUM, retry_policy=_WHILE_CREATED)
    try:
        return list(session.execute(stmt, (app_id,)))
    except InvalidRequest:  # unconfigured table: nothing was ever recorded
        return []
    except ServerError as exc:
        if being_created(exc):  # nothing recorded yet either
            return []
        raise


# --- position keys ------------------------------------------------------------------------

SEPARATOR = "/"
# owner written into a legacy row retired by a takeover or fenced by a stage's first rows
RETIRED = "retired: positions are kept per stage (<stage>/<topic> rows)"

V = TypeVar("V")


def check_stage_name(name: str) -> None:
    """Refuse a stage name that cannot key offsets rows: empty, or holding the separator."""
    if not name or SEPARATOR in name:
        raise ValueError(
            f"stage name {name!r}: a stage name must be non-empty and may not contain {SEPARATOR!r}"
            " (it keys the stage's offsets rows); rename the stage (Job.stage(name=...))"
        )


def position_key(stage: str, topic: str) -> str:
    """The `topic` column of `stage`'s rows of `topic`: `<stage>/<topic>`."""
    check_stage_name(stage)
    return f"{stage}{SEPARATOR}{topic}"


def parse_key(key: str) -> tuple[str | None, str]:
    """(stage, topic) of a `topic` column value; stage None for a legacy row (a bare topic, as
    releases before per-stage positions wrote it). Kafka topic names cannot hold the separator,
    so the topic is what follows the last one."""
    stage, sep, topic = key.rpartition(SEPARATOR)
    return (stage, topic) if sep else (None, key)


def furthest_behind(
    rows: Iterable[tuple[str | None, str, int, V]], position: Callable[[V], tuple[int, ...]]
) -> dict[tuple[str, int], V]:
    """Per (topic, partition), from (stage, topic, partition, value) rows of live positions
    (`parse_key` gives stage and topic): the value of the stage furthest behind (lowest
    `position`); a legacy row (stage None) only where no stage has a row of its own (it was not
    taken over yet: no stage of this release has run, or a replica of an earlier one still runs)."""
    staged: dict[tuple[str, int], list[V]] = {}
    out: dict[tuple[str, int], V] = {}
    for stage, topic, partition, value in rows:
        if stage is None:
            out[(topic, partition)] = value
        else:
            staged.setdefault((topic, partition), []).append(value)
    for tp, values in staged.items():
        out[tp] = min(values, key=position)
    return out


# --- reads for tools ----------------------------------------------------------------------


def recorded_topics(session: Any, *, keyspace: str, app_id: str) -> list[str]:
    """Every topic the app has offsets for, its internal repartition topics included; [] if the
    table does not exist."""
    rows = _read_all(session, f"SELECT topic FROM {keyspace}.{TABLE} WHERE app_id = %s", app_id)
    return sorted({parse_key(row[0])[1] for row in rows})


Progress = tuple[int, int, int, str]


def stage_progress(
    session: Any, *, keyspace: str, app_id: str
) -> dict[tuple[str | None, str, int], Progress]:
    """(stage, topic, partition) → (next_offset, committed_seq, planned_seq, owner) of every live
    row, stage None for a legacy row; {} if the table does not exist."""
    rows = _read_all(
        session,
        f"SELECT topic, partition, next_offset, committed_seq, planned_seq, owner FROM {keyspace}.{TABLE}"
        " WHERE app_id = %s",
        app_id,
    )
    return {(*parse_key(r[0]), r[1]): (r[2], r[3] or 0, r[4] or 0, r[5] or "") for r in rows if r[2] is not None}


def progress(session: Any, *, keyspace: str, app_id: str) -> dict[tuple[str, int], Progress]:
    """(topic, partition) → (next_offset, committed_seq, planned_seq, owner) of the stage furthest
    behind (`furthest_behind`; a batch in flight counts as behind) of every recorded partition; {}
    if the table does not exist. For tools and tests that watch an app's progress. A stage with
    no row yet is not counted: `stage_progress` tells the stages apart."""
    rows = stage_progress(session, keyspace=keyspace, app_id=app_id)
    return furthest_behind(((*key, value) for key, value in rows.items()), lambda v: (v[0], int(v[1] == v[2])))


def rows_for_people(session: Any, *, keyspace: str, app_id: str) -> list[dict[str, Any]]:
    """Every live row of the app as plain values, for people (`floe-job offsets`, `kubectl floe
    status`): stage (None for a legacy row), topic, partition, next_offset, owner, committed_at
    (ISO 8601 UTC or None), in_flight (a planned batch not committed yet), the stopped partition's
    offset and error, and held_until (ISO 8601 UTC) while a snapshot holds the partition. Nothing
    else of the row, and never a setting; [] if the table does not exist."""
    rows = _read_all(
        session,
        f"SELECT topic, partition, next_offset, committed_seq, planned_seq, owner, committed_at, stopped_at,"
        f" stopped_error, held_until FROM {keyspace}.{TABLE} WHERE app_id = %s",
        app_id,
    )
    out = []
    now = faults.clock_us()
    for r in rows:
        if r[2] is None:  # a retired legacy row: no position
            continue
        stage, topic = parse_key(r[0])
        committed_at = _iso(r[6]) if r[6] is not None else None
        out.append(
            {
                "stage": stage,
                "topic": topic,
                "partition": int(r[1]),
                "next_offset": int(r[2]),
                "owner": r[5] or "",
                "committed_at": committed_at,
                "in_flight": (r[4] or 0) > (r[3] or 0),
                "stopped_at": r[7],
                "stopped_error": r[8],
                "held_until": _held_until(r[9], now),
            }
        )
    return sorted(out, key=lambda row: (row["topic"], row["partition"], row["stage"] or ""))


def _held_until(held_until: int | None, now_us: int) -> str | None:
    """A snapshot's hold (µs since the epoch) as RFC 3339 while it lasts; one that ran out is
    none (`planning.OffsetRow.held`)."""
    if held_until is None or held_until <= now_us:
        return None
    return _iso(datetime.fromtimestamp(held_until / 1e6, UTC))


def _iso(at: datetime) -> str:
    """A Cassandra timestamp (naive, UTC) or an aware UTC time as RFC 3339 with milliseconds."""
    return at.replace(tzinfo=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def forget(session: Any, *, keyspace: str, app_id: str) -> None:
    """Delete every offsets row of the app (one partition tombstone); absent table or rows are fine."""
    from cassandra import InvalidRequest

    stmt = SimpleStatement(
        f"DELETE FROM {keyspace}.{TABLE} WHERE app_id = %s", consistency_level=ConsistencyLevel.LOCAL_QUORUM
    )
    with contextlib.suppress(InvalidRequest):  # unconfigured table: nothing to forget
        session.execute(stmt, (app_id,))


def _encode_positions(positions: Mapping[str, tuple[int, int]]) -> str | None:
    if not positions:
        return None
    return json.dumps({k: [v[0], v[1]] for k, v in sorted(positions.items())}, separators=(",", ":"))


def _decode_positions(text: str | None) -> dict[str, tuple[int, int]]:
    if not text:
        return {}
    return {k: (int(v[0]), int(v[1])) for k, v in json.loads(text).items()}


class OwnershipLost(RuntimeError):
    """Another replica claimed partitions of a running batch: it must have no further effect."""

    def __init__(self, tps: Iterable[tuple[str, int]], *, stage: str = "") -> None:
        self.tps = sorted(tps)
        self.stage = stage
        super().__init__(f"partitions {self.tps} were claimed by another owner")


@dataclass(frozen=True)
class Stored:
    """One row as stored, live or retired (next_offset None), every column as read: what the
    conditions of a takeover or a reset expect to find."""

    stage: str | None
    topic: str
    partition: int
    next_offset: int | None
    committed_seq: int | None
    planned_seq: int | None
    planned_from: int | None
    planned_to: int | None
    planned_at: datetime | None
    planned_ts: int | None
    source_positions: str | None
    owner: str | None
    stopped_at: int | None = None
    stopped_error: str | None = None
    held_until: int | None = None

    @property
    def key(self) -> str:
        return self.topic if self.stage is None else position_key(self.stage, self.topic)

    @property
    def expected(self) -> tuple[Any, ...]:
        """The values a conditional write names: planned_seq, committed_seq, next_offset, planned_ts."""
        return (self.planned_seq, self.committed_seq, self.next_offset, self.planned_ts)

    def row(self) -> OffsetRow:
        assert self.next_offset is not None
        return OffsetRow(
            topic=self.topic,
            partition=self.partition,
            next_offset=self.next_offset,
            committed_seq=self.committed_seq or 0,
            planned_seq=self.planned_seq or 0,
            planned_from=self.planned_from,
            planned_to=self.planned_to,
            source_positions=_decode_positions(self.source_positions),
            planned_ts=self.planned_ts,
            owner=self.owner or "",
            stopped_at=self.stopped_at,
            stopped_error=self.stopped_error,
            held_until=self.held_until,
        )


_STORED = (
    "topic, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to, planned_at,"
    " planned_ts, source_positions, owner, stopped_at, stopped_error, held_until"
)


def _stored(r: Any) -> Stored:
    # positional access: works with the driver's tuple and named-tuple row factories
    stage, topic = parse_key(r[0])
    return Stored(stage, topic, *r[1:14])


class OffsetsTable:
    """Reads and writes of one app's offsets rows, each call for one stage's rows. Not
    thread-safe; one per process.

    `owner` names this process (member name and a token of its own), so that a replica that
    comes back under the same name after a crash is still told apart from its former self.
    `readers`: topic → the names of the job's stages that read it, so that taking a legacy row
    over gives every one of them its copy at once (see the module docstring)."""

    def __init__(
        self,
        session: Any,
        *,
        keyspace: str,
        app_id: str,
        owner: str = "",
        readers: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self._session = session
        self.table = f"{keyspace}.{TABLE}"
        self.app_id = app_id
        self.owner = owner
        self.readers = {topic: sorted(set(stages)) for topic, stages in (readers or {}).items()}
        self._prepare(session)

    def _prepare(self, session: Any) -> None:
        """Every statement this table runs, prepared once per table object."""
        cl = ConsistencyLevel.LOCAL_QUORUM
        self._select = session.prepare(f"SELECT {_STORED} FROM {self.table} WHERE app_id = ? AND topic IN ?")
        self._select.consistency_level = cl
        self._select_all = session.prepare(f"SELECT {_STORED} FROM {self.table} WHERE app_id = ?")
        self._select_all.consistency_level = cl
        self._keys = session.prepare(f"SELECT topic, partition FROM {self.table} WHERE app_id = ?")
        self._keys.consistency_level = cl
        self._delete = session.prepare(
            f"DELETE FROM {self.table} WHERE app_id = ? AND topic = ? AND partition = ? IF EXISTS"
        )
        self._init = session.prepare(
            f"INSERT INTO {self.table} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
            " committed_at, owner, planned_ts) VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?) IF NOT EXISTS"
        )
        self._init.consistency_level = cl
        self._init.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
        self._copy = session.prepare(
            f"INSERT INTO {self.table} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
            " planned_from, planned_to, planned_at, planned_ts, committed_at, owner, source_positions)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
        )
        self._retire = session.prepare(
            f"UPDATE {self.table} SET next_offset = null, owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
            " IF planned_seq = ? AND committed_seq = ? AND next_offset = ? AND planned_ts = ?"
        )
        self._fence = session.prepare(
            f"UPDATE {self.table} SET owner = ? WHERE app_id = ? AND topic = ? AND partition = ? IF next_offset = null"
        )
        self._plan = session.prepare(
            f"UPDATE {self.table} SET planned_seq = ?, planned_from = ?, planned_to = ?, planned_at = ?,"
            f" planned_ts = ?, owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
            " IF planned_seq = ? AND committed_seq = ? AND next_offset = ? AND planned_ts = ? AND held_until = ?"
        )
        self._take = session.prepare(
            f"UPDATE {self.table} SET planned_ts = ?, owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
            " IF planned_seq = ? AND committed_seq = ? AND planned_ts = ?"
        )
        # a replay cut short (`floe_jobs.quarantine`): only while this process still holds the plan
        self._keep = session.prepare(
            f"UPDATE {self.table} SET planned_ts = ?, owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
            " IF planned_seq = ? AND committed_seq = ? AND planned_ts = ? AND owner = ?"
        )
        self._commit = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_seq = ?, committed_at = ?, source_positions = ?,"
            " stopped_at = ?, stopped_error = ?"
            " WHERE app_id = ? AND topic = ? AND partition = ? IF planned_seq = ? AND owner = ? AND committed_seq < ?"
        )
        # a partition stopped where its plan in flight starts: the plan stays in flight
        self._stop = session.prepare(
            f"UPDATE {self.table} SET stopped_at = ?, stopped_error = ?"
            " WHERE app_id = ? AND topic = ? AND partition = ? IF planned_seq = ? AND owner = ? AND committed_seq < ?"
        )

    @functools.cached_property
    def _holds(self) -> tuple[Any, Any]:
        """A snapshot's hold (only at a committed batch, the row as the snapshot read it) and its
        release, prepared on first use: only a snapshot holds."""
        return (
            self._session.prepare(
                f"UPDATE {self.table} SET held_until = ? WHERE app_id = ? AND topic = ? AND partition = ?"
                " IF planned_seq = ? AND committed_seq = ? AND next_offset = ? AND planned_ts = ?"
            ),
            self._session.prepare(
                f"UPDATE {self.table} SET held_until = null WHERE app_id = ? AND topic = ? AND partition = ?"
                " IF held_until = ?"
            ),
        )

    def position(self, stage: str, topic: str, partition: int) -> Stored | None:
        """`stage`'s row of one partition as stored, or None: what a snapshot reads before and
        after copying the partition's state (`floe_jobs.snapshots.cut`)."""
        key = position_key(stage, topic)
        found = [r for r in self._session.execute(self._select, (self.app_id, [key])) if r[1] == partition]
        return _stored(found[0]) if found else None

    def hold(self, stage: str, row: Stored, *, until_us: int) -> bool:
        """Hold `stage`'s partition `row` back from new plans until `until_us` (a snapshot's
        copy, `floe_jobs.snapshots.cut`): only if the row is still exactly `row` and at a
        committed batch. False: it moved, or a plan is in flight."""
        if (row.planned_seq or 0) > (row.committed_seq or 0):
            return False
        batch = self._conditional()
        key = (self.app_id, position_key(stage, row.topic), row.partition)
        batch.add(self._holds[0], (until_us, *key, *row.expected))
        return self._apply(batch)

    def release(self, stage: str, topic: str, partition: int, *, until_us: int) -> bool:
        """Lift the hold `hold` set with `until_us` (False: the row holds another or none)."""
        batch = self._conditional()
        batch.add(self._holds[1], (self.app_id, position_key(stage, topic), partition, until_us))
        return self._apply(batch)

    def restore(self, rows: Iterable[tuple[str, OffsetRow]]) -> bool:
        """Write (stage, row) pairs where the app has no rows yet, in one conditional batch (the
        app's rows are one Cassandra partition): all of them or, if any exists, none. What a
        restore from a snapshot (`floe_jobs.snapshots.restore`) positions a new app with."""
        batch = self._conditional()
        now = datetime.now(UTC)
        for stage, r in rows:
            batch.add(
                self._copy,
                (
                    self.app_id, position_key(stage, r.topic), r.partition, r.next_offset, r.committed_seq,
                    r.planned_seq, r.planned_from, r.planned_to, now if r.planned_from is not None else None,
                    r.planned_ts, now, r.owner, _encode_positions(r.source_positions),
                ),
            )
        return self._apply(batch)

    def clear(self) -> int | None:
        """Delete every row of the app, live and retired, in one conditional batch, and return how
        many there were (None: one went meanwhile, and none was deleted): what a restore in place
        does before it writes the snapshot's rows (`floe_jobs.snapshots.restore`). Conditional,
        like every other write of these rows, so the restored rows' own conditional writes are
        ordered after it whatever the clocks."""
        keys = [(r[0], r[1]) for r in self._session.execute(self._keys, (self.app_id,))]
        batch = self._conditional()
        for key, partition in keys:
            batch.add(self._delete, (self.app_id, key, partition))
        if keys and not self._apply(batch):
            return None
        return len(keys)

    def stored(self, keys: Iterable[str] | None = None) -> list[Stored]:
        """The app's rows whose keys are `keys` (None: every row), live and retired."""
        if keys is None:
            return [_stored(r) for r in self._session.execute(self._select_all, (self.app_id,))]
        return [_stored(r) for r in self._session.execute(self._select, (self.app_id, sorted(set(keys))))]

    def read(self, topics: Iterable[str], *, stage: str) -> dict[tuple[str, int], OffsetRow]:
        """`stage`'s rows of `topics`, by (topic, partition). A partition with no row of the stage
        but a live legacy row is taken over first (`_take_over`); if another process changed
        that row meanwhile, `OwnershipLost` names it and the next pass reads again."""
        rows: dict[tuple[str, int], OffsetRow] = {}
        takeovers: list[tuple[Stored, list[str]]] = []
        for topic in sorted(set(topics)):
            readers = sorted({*self.readers.get(topic, ()), stage})
            found = self.stored([topic, *(position_key(s, topic) for s in readers)])
            have = {(r.stage, r.partition) for r in found if r.stage is not None}
            for r in found:
                if r.stage == stage and r.next_offset is not None:
                    rows[(topic, r.partition)] = r.row()
                elif r.stage is None and r.next_offset is not None and (stage, r.partition) not in have:
                    takeovers.append((r, [s for s in readers if (s, r.partition) not in have]))
        if takeovers:
            self._take_over(takeovers)
            again = self.stored([position_key(stage, legacy.topic) for legacy, _ in takeovers])
            mine = {(r.topic, r.partition): r for r in again if r.stage == stage and r.next_offset is not None}
            missing = [(r.topic, r.partition) for r, _ in takeovers if (r.topic, r.partition) not in mine]
            if missing:
                raise OwnershipLost(missing, stage=stage)
            rows.update({tp: r.row() for tp, r in mine.items()})
        return rows

    def _take_over(self, takeovers: list[tuple[Stored, list[str]]]) -> bool:
        """Copy each live legacy row to each of its stages that has none, exactly, and retire it,
        all or none (one conditional batch). False: a row changed since it was read."""
        batch = self._conditional()
        for legacy, stages in takeovers:
            for s in stages:
                batch.add(
                    self._copy,
                    (
                        self.app_id,
                        position_key(s, legacy.topic),
                        legacy.partition,
                        legacy.next_offset,
                        legacy.committed_seq,
                        legacy.planned_seq,
                        legacy.planned_from,
                        legacy.planned_to,
                        legacy.planned_at,
                        legacy.planned_ts,
                        datetime.now(UTC),
                        legacy.owner,
                        legacy.source_positions,
                    ),
                )
            batch.add(self._retire, (RETIRED, self.app_id, legacy.topic, legacy.partition, *legacy.expected))
        return self._apply(batch)

    def create(self, rows: Iterable[OffsetRow], *, stage: str) -> None:
        """Create `stage`'s rows at their starting offsets, recording `planned_ts` (the planner's
        stamp below every plan's; the clock when absent), and fence each partition's legacy key
        (a retired row where none is) so that a replica of an earlier release cannot start it
        over. All or none, in one conditional batch: if another replica created one of the rows
        meanwhile, or a live legacy row appeared, nothing is written; a claim that expected these
        rows then fails, and the next pass reads what is there."""
        now = datetime.now(UTC)
        clock = faults.clock_us()
        batch = self._conditional()
        for r in rows:
            stamp = r.planned_ts if r.planned_ts is not None else clock
            key = position_key(stage, r.topic)
            batch.add(self._init, (self.app_id, key, r.partition, r.next_offset, now, self.owner, stamp))
            batch.add(self._fence, (RETIRED, self.app_id, r.topic, r.partition))
        self._apply(batch)

    def claim(
        self,
        plans: Iterable[PartitionPlan],
        rows: Mapping[tuple[str, int], OffsetRow],
        *,
        stage: str,
        own: set[tuple[str, int]] | None = None,
    ) -> bool:
        """Claim the plans' partitions for this process, all or none, before the batch has any
        effect: a new plan is stored (a crash from here on replays exactly its range) if its row
        is still as read in `rows`; a replay takes the row over, or for a partition of `own`
        keeps it only if this process still holds it. False: another replica moved a row since
        it was read, and the batch must not run."""
        batch = self._conditional()
        now = datetime.now(UTC)
        for p in plans:
            row = rows[p.tp]
            key = (self.app_id, position_key(stage, p.topic), p.partition)
            if p.replay and own and p.tp in own:
                expected_row = (row.planned_seq, row.committed_seq, row.planned_ts, self.owner)
                batch.add(self._keep, (p.stamp, self.owner, *key, *expected_row))
            elif p.replay:
                batch.add(self._take, (p.stamp, self.owner, *key, row.planned_seq, row.committed_seq, row.planned_ts))
            else:
                expected = (row.planned_seq, row.committed_seq, row.next_offset, row.planned_ts, row.held_until)
                batch.add(self._plan, (p.seq, p.start, p.end, now, p.stamp, self.owner, *key, *expected))
        return self._apply(batch)

    def lost(self, plans: Iterable[PartitionPlan], *, stage: str) -> list[tuple[str, int]]:
        """The plans' partitions that another process claimed since this one did (it took over
        the plan, or committed it and planned further)."""
        plans = list(plans)
        rows = self.read({p.topic for p in plans}, stage=stage)
        return [
            p.tp
            for p in plans
            if (row := rows.get(p.tp)) is None
            or row.owner != self.owner
            or row.planned_seq != p.seq
            or row.committed_seq >= p.seq
        ]

    def commit(
        self,
        plans: Iterable[PartitionPlan],
        positions: Mapping[tuple[str, int], Mapping[str, tuple[int, int]]] | None = None,
        stops: Mapping[tuple[str, int], str] | None = None,
        *,
        stage: str,
    ) -> bool:
        """Mark the plans applied, all or none: next_offset = end, committed_seq = seq, if this
        process still holds each plan and nothing committed it yet (one conditional batch). False:
        another replica took a plan over or committed it, and this commit would move its offsets
        back or commit twice. A commit clears a partition's stop, except for the partitions of
        `stops` (→ the error), which stop at their plan's end (`floe_jobs.quarantine`)."""
        batch = self._conditional()
        now = datetime.now(UTC)
        positions = positions or {}
        stops = stops or {}
        for p in plans:
            encoded = _encode_positions(positions.get(p.tp, {}))
            error = stops.get(p.tp)
            stopped = (p.end, error) if error is not None else (None, None)
            key = position_key(stage, p.topic)
            params = (p.end, p.seq, now, encoded, *stopped, self.app_id, key, p.partition, p.seq, self.owner, p.seq)
            batch.add(self._commit, params)
        return self._apply(batch)

    def stop(self, plan: PartitionPlan, *, at: int, error: str, stage: str) -> bool:
        """Record that a poison record stopped `plan`'s partition at offset `at`, leaving the plan
        in flight (a conditional write: only while this process still holds the plan)."""
        batch = self._conditional()
        key = position_key(stage, plan.topic)
        batch.add(self._stop, (at, error, self.app_id, key, plan.partition, plan.seq, self.owner, plan.seq))
        return self._apply(batch)

    @staticmethod
    def _conditional() -> Any:
        """A batch of conditional writes on the app's rows: one Paxos round for all of them."""
        from cassandra.query import BatchStatement

        batch = BatchStatement(consistency_level=ConsistencyLevel.LOCAL_QUORUM)
        batch.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
        return batch

    def _apply(self, batch: Any) -> bool:
        if not batch:
            return True
        return bool(self._session.execute(batch).was_applied)


@dataclass(frozen=True)
class Reset:
    """One row moved by `reset`: its stage (None: the legacy row, the position of every stage),
    where it was (None: no row yet, or a retired legacy row) and where it is now; `abandoned`: the
    sequence of a batch that was planned but not committed there (a replica killed mid-batch), now
    never replayed."""

    topic: str
    partition: int
    before: int | None
    after: int
    abandoned: int | None = None
    stage: str | None = None


def reset(
    session: Any, *, keyspace: str, app_id: str, positions: Mapping[tuple[str, int], int], owner: str
) -> list[Reset] | None:
    """Move the app's committed positions to `positions` ((topic, partition) → next offset), all or
    none, in one conditional batch, for a tool acting while no replica runs (the operator's offset
    reset). Every stage's row of a partition moves; a partition with no stage's row has its legacy
    row moved, or written if absent: a live legacy row is the position of every stage that reads
    the topic, which each takes over when it next runs. Each row changes only if it is still as
    read, its plan is closed (committed_seq = planned_seq, so nothing is replayed), its sequences
    never go back (fences in state rows stay below the next batch's) and it is stamped above its
    last plan, so any claim made from an earlier read fails and the claimer reads the new
    next_offset. None: a row changed meanwhile."""
    table = OffsetsTable(session, keyspace=keyspace, app_id=app_id, owner=owner)
    topics = {topic for topic, _ in positions}
    found = [r for r in table.stored() if r.topic in topics]
    update = session.prepare(
        f"UPDATE {table.table} SET next_offset = ?, committed_seq = ?, planned_from = null, planned_to = null,"
        " planned_ts = ?, committed_at = ?, owner = ?, stopped_at = null, stopped_error = null"
        " WHERE app_id = ? AND topic = ? AND partition = ?"
        " IF planned_seq = ? AND committed_seq = ? AND next_offset = ? AND planned_ts = ?"
    )
    batch = table._conditional()
    now = datetime.now(UTC)
    clock = faults.clock_us()
    done: list[Reset] = []
    for (topic, partition), offset in sorted(positions.items()):
        here = [r for r in found if (r.topic, r.partition) == (topic, partition)]
        targets = [r for r in here if r.stage is not None] or [r for r in here if r.stage is None]
        if not targets:
            batch.add(table._init, (app_id, topic, partition, offset, now, owner, clock))
            done.append(Reset(topic, partition, None, offset))
            continue
        for row in sorted(targets, key=lambda r: r.stage or ""):
            planned, committed = row.planned_seq or 0, row.committed_seq or 0
            stamp = max(clock, (row.planned_ts or 0) + 1)
            moved = (offset, max(planned, committed), stamp, now, owner, app_id, row.key, partition)
            batch.add(update, (*moved, *row.expected))
            in_flight = row.next_offset is not None and planned > committed and row.planned_from is not None
            done.append(Reset(topic, partition, row.next_offset, offset, planned if in_flight else None, row.stage))
    return done if table._apply(batch) else None
