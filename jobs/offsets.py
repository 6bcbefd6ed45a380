"""The offsets table: where a Floe app's input positions live, next to its state, in Cassandra.

One table per keyspace, `<keyspace>.floe_offsets`, shared by every app whose state lives in that
keyspace: one Cassandra partition per app, one row per input topic-partition, the repartition
topics included. Sharing it makes a new app cost no schema change once its keyspace has one
(schema changes are serialized cluster-wide, about 0.15 s each), and an app's offsets go with
one partition delete.

    CREATE TABLE <keyspace>.floe_offsets (
        app_id           text,       -- the app (its consumer group)
        topic            text,       -- input topic
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

A batch is in flight for a partition while planned_seq > committed_seq; whoever owns the
partition next replays exactly [planned_from, planned_to) with planned_seq. Sequences grow
by one per batch of that partition and are the fence written into every state row.

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

Consumer lag as the lag exporter computes it: end offset (Kafka) - next_offset, per partition;
`SELECT topic, partition, next_offset, committed_at FROM … WHERE app_id = ?`.

All reads and writes go at LOCAL_QUORUM; DDL at ALL (concurrent creators are safe: IF NOT EXISTS).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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
    " stopped_at bigint, stopped_error text,"
    " PRIMARY KEY ((app_id), topic, partition)"
)
# columns added after the table's first release, with their types: tables made before get them
ADDED_COLUMNS = {"planned_ts": "bigint", "stopped_at": "bigint", "stopped_error": "text"}


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


def recorded_topics(session: Any, *, keyspace: str, app_id: str) -> list[str]:
    """Every topic the app has offsets for, its internal repartition topics included; [] if the
    table does not exist."""
    rows = _read_all(session, f"SELECT topic FROM {keyspace}.{TABLE} WHERE app_id = %s", app_id)
    return sorted({row[0] for row in rows})


def progress(session: Any, *, keyspace: str, app_id: str) -> dict[tuple[str, int], tuple[int, int, int, str]]:
    """(topic, partition) → (next_offset, committed_seq, planned_seq, owner) of every recorded
    partition; {} if the table does not exist. For tools and tests that watch an app's progress."""
    rows = _read_all(
        session,
        f"SELECT topic, partition, next_offset, committed_seq, planned_seq, owner FROM {keyspace}.{TABLE}"
        " WHERE app_id = %s",
        app_id,
    )
    return {(r[0], r[1]): (r[2], r[3] or 0, r[4] or 0, r[5] or "") for r in rows if r[2] is not None}


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


class OffsetsTable:
    """Reads and writes of one app's offsets rows. Not thread-safe; one per process.

    `owner` names this process (member name and a token of its own), so that a replica that
    comes back under the same name after a crash is still told apart from its former self."""

    def __init__(self, session: Any, *, keyspace: str, app_id: str, owner: str = "") -> None:
        self._session = session
        self.table = f"{keyspace}.{TABLE}"
        self.app_id = app_id
        self.owner = owner
        cl = ConsistencyLevel.LOCAL_QUORUM
        self._select = session.prepare(
            f"SELECT topic, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to,"
            f" source_positions, planned_ts, owner, stopped_at, stopped_error FROM {self.table}"
            " WHERE app_id = ? AND topic = ?"
        )
        self._select.consistency_level = cl
        self._init = session.prepare(
            f"INSERT INTO {self.table} (app_id, topic, partition, next_offset, committed_seq, planned_seq,"
            " committed_at, owner, planned_ts) VALUES (?, ?, ?, ?, 0, 0, ?, ?, ?) IF NOT EXISTS"
        )
        self._init.consistency_level = cl
        self._init.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
        self._plan = session.prepare(
            f"UPDATE {self.table} SET planned_seq = ?, planned_from = ?, planned_to = ?, planned_at = ?,"
            f" planned_ts = ?, owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
            " IF planned_seq = ? AND committed_seq = ? AND next_offset = ? AND planned_ts = ?"
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

    def read(self, topics: Iterable[str]) -> dict[tuple[str, int], OffsetRow]:
        rows: dict[tuple[str, int], OffsetRow] = {}
        for topic in sorted(set(topics)):
            # positional access: works with the driver's tuple and named-tuple row factories
            for r in self._session.execute(self._select, (self.app_id, topic)):
                t, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to, positions = r[:8]
                if next_offset is None:
                    continue
                rows[(t, partition)] = OffsetRow(
                    topic=t,
                    partition=partition,
                    next_offset=next_offset,
                    committed_seq=committed_seq or 0,
                    planned_seq=planned_seq or 0,
                    planned_from=planned_from,
                    planned_to=planned_to,
                    source_positions=_decode_positions(positions),
                    planned_ts=r[8],
                    owner=r[9] or "",
                    stopped_at=r[10],
                    stopped_error=r[11],
                )
        return rows

    def _run_all(self, statement: Any, params: list[tuple[Any, ...]]) -> None:
        futures = [self._session.execute_async(statement, p) for p in params]
        for f in futures:
            f.result()

    def create(self, rows: Iterable[OffsetRow]) -> None:
        """Create rows at their starting offsets, recording `planned_ts` (the planner's stamp below
        every plan's; the clock when absent). A row another replica created meanwhile is kept:
        a claim that expected this one then fails, and the next pass reads it."""
        now = datetime.now(UTC)
        clock = faults.clock_us()
        params = []
        for r in rows:
            stamp = r.planned_ts if r.planned_ts is not None else clock
            params.append((self.app_id, r.topic, r.partition, r.next_offset, now, self.owner, stamp))
        self._run_all(self._init, params)

    def claim(
        self,
        plans: Iterable[PartitionPlan],
        rows: Mapping[tuple[str, int], OffsetRow],
        *,
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
            key = (self.app_id, p.topic, p.partition)
            if p.replay and own and p.tp in own:
                expected_row = (row.planned_seq, row.committed_seq, row.planned_ts, self.owner)
                batch.add(self._keep, (p.stamp, self.owner, *key, *expected_row))
            elif p.replay:
                batch.add(self._take, (p.stamp, self.owner, *key, row.planned_seq, row.committed_seq, row.planned_ts))
            else:
                expected = (row.planned_seq, row.committed_seq, row.next_offset, row.planned_ts)
                batch.add(self._plan, (p.seq, p.start, p.end, now, p.stamp, self.owner, *key, *expected))
        return self._apply(batch)

    def lost(self, plans: Iterable[PartitionPlan]) -> list[tuple[str, int]]:
        """The plans' partitions that another process claimed since this one did (it took over
        the plan, or committed it and planned further)."""
        plans = list(plans)
        rows = self.read({p.topic for p in plans})
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
            batch.add(
                self._commit,
                (p.end, p.seq, now, encoded, *stopped, self.app_id, p.topic, p.partition, p.seq, self.owner, p.seq),
            )
        return self._apply(batch)

    def stop(self, plan: PartitionPlan, *, at: int, error: str) -> bool:
        """Record that a poison record stopped `plan`'s partition at offset `at`, leaving the plan
        in flight (a conditional write: only while this process still holds the plan)."""
        batch = self._conditional()
        batch.add(self._stop, (at, error, self.app_id, plan.topic, plan.partition, plan.seq, self.owner, plan.seq))
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
    """One row moved by `reset`: where it was (None: no row yet) and where it is now; `abandoned`:
    the sequence of a batch that was planned but not committed there (a replica killed mid-batch),
    now never replayed."""

    topic: str
    partition: int
    before: int | None
    after: int
    abandoned: int | None = None


def reset(
    session: Any, *, keyspace: str, app_id: str, positions: Mapping[tuple[str, int], int], owner: str
) -> list[Reset] | None:
    """Move the app's committed positions to `positions` ((topic, partition) → next offset), all or
    none, in one conditional batch, for a tool acting while no replica runs (the operator's offset
    reset). Each row changes only if it is still as read, its plan is closed (committed_seq =
    planned_seq, so nothing is replayed), its sequences never go back (fences in state rows stay
    below the next batch's) and it is stamped above its last plan, so any claim made from an
    earlier read fails and the claimer reads the new next_offset. None: a row changed meanwhile."""
    table = OffsetsTable(session, keyspace=keyspace, app_id=app_id, owner=owner)
    rows = table.read({topic for topic, _ in positions})
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
        row = rows.get((topic, partition))
        if row is None:
            batch.add(table._init, (app_id, topic, partition, offset, now, owner, clock))
            done.append(Reset(topic, partition, None, offset))
            continue
        seq = max(row.planned_seq, row.committed_seq)
        stamp = max(clock, (row.planned_ts or 0) + 1)
        expected = (row.planned_seq, row.committed_seq, row.next_offset, row.planned_ts)
        batch.add(update, (offset, seq, stamp, now, owner, app_id, topic, partition, *expected))
        abandoned = row.planned_seq if row.in_flight else None
        done.append(Reset(topic, partition, row.next_offset, offset, abandoned))
    return done if table._apply(batch) else None
