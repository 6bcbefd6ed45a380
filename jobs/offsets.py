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

Consumer lag as the lag exporter computes it: end offset (Kafka) - next_offset, per partition;
`SELECT topic, partition, next_offset, committed_at FROM … WHERE app_id = ?`.

All reads and writes go at LOCAL_QUORUM; DDL at ALL (concurrent creators are safe: IF NOT EXISTS).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.policies import RetryPolicy
from cassandra.query import SimpleStatement
from floe_jobs.planning import OffsetRow, PartitionPlan

TABLE = "floe_offsets"

_COLUMNS = (
    "app_id text, topic text, partition int, next_offset bigint, committed_seq bigint,"
    " planned_seq bigint, planned_from bigint, planned_to bigint,"
    " planned_at timestamp, committed_at timestamp, owner text, source_positions text,"
    " PRIMARY KEY ((app_id), topic, partition)"
)


def table_cql(keyspace: str) -> str:
    """The offsets table's `CREATE TABLE IF NOT EXISTS` (for `schema.provision`'s extra tables)."""
    return f"CREATE TABLE IF NOT EXISTS {keyspace}.{TABLE} ({_COLUMNS})"


def ensure_offsets_table(session: Any, *, keyspace: str) -> None:
    """Create the keyspace's offsets table if absent (idempotent; the keyspace must exist)."""
    session.execute(SimpleStatement(table_cql(keyspace), consistency_level=ConsistencyLevel.ALL))


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


class OffsetsTable:
    """Reads and writes of one app's offsets rows. Not thread-safe; one per process."""

    def __init__(self, session: Any, *, keyspace: str, app_id: str, owner: str = "") -> None:
        self._session = session
        self.table = f"{keyspace}.{TABLE}"
        self.app_id = app_id
        self.owner = owner
        cl = ConsistencyLevel.LOCAL_QUORUM
        self._select = session.prepare(
            f"SELECT topic, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to,"
            f" source_positions FROM {self.table} WHERE app_id = ? AND topic = ?"
        )
        self._select.consistency_level = cl
        self._init = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_seq = 0, planned_seq = 0, committed_at = ?,"
            f" owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
        )
        self._init.consistency_level = cl
        self._plan = session.prepare(
            f"UPDATE {self.table} SET planned_seq = ?, planned_from = ?, planned_to = ?, planned_at = ?,"
            f" owner = ? WHERE app_id = ? AND topic = ? AND partition = ?"
        )
        self._plan.consistency_level = cl
        self._commit = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_seq = ?, committed_at = ?, source_positions = ?"
            f" WHERE app_id = ? AND topic = ? AND partition = ?"
        )
        self._commit.consistency_level = cl

    def read(self, topics: Iterable[str]) -> dict[tuple[str, int], OffsetRow]:
        rows: dict[tuple[str, int], OffsetRow] = {}
        for topic in sorted(set(topics)):
            # positional access: works with the driver's tuple and named-tuple row factories
            for r in self._session.execute(self._select, (self.app_id, topic)):
                t, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to, positions = r
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
                )
        return rows

    def _run_all(self, statement: Any, params: list[tuple[Any, ...]]) -> None:
        futures = [self._session.execute_async(statement, p) for p in params]
        for f in futures:
            f.result()

    def create(self, rows: Iterable[OffsetRow]) -> None:
        now = datetime.now(UTC)
        self._run_all(self._init, [(r.next_offset, now, self.owner, self.app_id, r.topic, r.partition) for r in rows])

    def record_plans(self, plans: Iterable[PartitionPlan]) -> None:
        """Store new plans before their batch runs: a crash from here on replays exactly these ranges."""
        now = datetime.now(UTC)
        self._run_all(
            self._plan,
            [
                (p.seq, p.start, p.end, now, self.owner, self.app_id, p.topic, p.partition)
                for p in plans
                if not p.replay
            ],
        )

    def commit(
        self,
        plans: Iterable[PartitionPlan],
        positions: Mapping[tuple[str, int], Mapping[str, tuple[int, int]]] | None = None,
    ) -> None:
        """Mark the plans applied: next_offset = end, committed_seq = seq (one row write each)."""
        now = datetime.now(UTC)
        positions = positions or {}
        self._run_all(
            self._commit,
            [
                (p.end, p.seq, now, _encode_positions(positions.get(p.tp, {})), self.app_id, p.topic, p.partition)
                for p in plans
            ],
        )
