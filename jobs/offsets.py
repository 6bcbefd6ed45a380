"""The offsets table: where a Floe app's input positions live, next to its state, in Cassandra.

One table per app, `<keyspace>.<offsets_table(app_id)>` (`floe_offsets_<app id, '-' → '_'>`,
shortened with a hash suffix past Cassandra's 48 characters), one row per input
topic-partition, the repartition topics included:

    CREATE TABLE <keyspace>.floe_offsets_<app> (
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
        PRIMARY KEY ((topic), partition)
    )

A batch is in flight for a partition while planned_seq > committed_seq; whoever owns the
partition next replays exactly [planned_from, planned_to) with planned_seq. Sequences grow
by one per batch of that partition and are the fence written into every state row.

Consumer lag as the lag exporter computes it: end offset (Kafka) - next_offset, per partition;
`SELECT partition, next_offset, committed_at FROM … WHERE topic = ?`.

All reads and writes go at LOCAL_QUORUM; DDL at ALL (concurrent creators are safe: IF NOT EXISTS).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement
from floe_jobs.planning import OffsetRow, PartitionPlan

_MAX_TABLE = 48


def offsets_table(app_id: str) -> str:
    """Table name of an app's offsets: deterministic, a valid CQL identifier, at most 48 characters."""
    base = "floe_offsets_" + re.sub(r"[^a-z0-9_]", "_", app_id.lower())
    if len(base) <= _MAX_TABLE:
        return base
    digest = hashlib.sha1(app_id.encode()).hexdigest()[:8]
    return f"{base[: _MAX_TABLE - 9]}_{digest}"


def _ddl(keyspace: str, table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {keyspace}.{table} ("
        " topic text, partition int, next_offset bigint, committed_seq bigint,"
        " planned_seq bigint, planned_from bigint, planned_to bigint,"
        " planned_at timestamp, committed_at timestamp, owner text, source_positions text,"
        " PRIMARY KEY ((topic), partition))"
    )


def ensure_offsets_table(session: Any, *, keyspace: str, app_id: str) -> None:
    """Create the app's offsets table if absent (idempotent; the keyspace must exist)."""
    stmt = SimpleStatement(_ddl(keyspace, offsets_table(app_id)), consistency_level=ConsistencyLevel.ALL)
    session.execute(stmt)


def recorded_topics(session: Any, *, keyspace: str, app_id: str) -> list[str]:
    """Every topic the app has offsets for, its internal repartition topics included; [] if the
    table does not exist."""
    from cassandra import InvalidRequest

    cql = f"SELECT DISTINCT topic FROM {keyspace}.{offsets_table(app_id)}"
    stmt = SimpleStatement(cql, consistency_level=ConsistencyLevel.LOCAL_QUORUM)
    try:
        return sorted(row[0] for row in session.execute(stmt))
    except InvalidRequest:  # unconfigured table: nothing was ever recorded
        return []


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
        self.table = f"{keyspace}.{offsets_table(app_id)}"
        self.owner = owner
        cl = ConsistencyLevel.LOCAL_QUORUM
        self._select = session.prepare(
            f"SELECT topic, partition, next_offset, committed_seq, planned_seq, planned_from, planned_to,"
            f" source_positions FROM {self.table} WHERE topic = ?"
        )
        self._select.consistency_level = cl
        self._init = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_seq = 0, planned_seq = 0, committed_at = ?,"
            f" owner = ? WHERE topic = ? AND partition = ?"
        )
        self._init.consistency_level = cl
        self._plan = session.prepare(
            f"UPDATE {self.table} SET planned_seq = ?, planned_from = ?, planned_to = ?, planned_at = ?,"
            f" owner = ? WHERE topic = ? AND partition = ?"
        )
        self._plan.consistency_level = cl
        self._commit = session.prepare(
            f"UPDATE {self.table} SET next_offset = ?, committed_seq = ?, committed_at = ?, source_positions = ?"
            f" WHERE topic = ? AND partition = ?"
        )
        self._commit.consistency_level = cl

    def read(self, topics: Iterable[str]) -> dict[tuple[str, int], OffsetRow]:
        rows: dict[tuple[str, int], OffsetRow] = {}
        for topic in sorted(set(topics)):
            # positional access: works with the driver's tuple and named-tuple row factories
            for r in self._session.execute(self._select, (topic,)):
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
        self._run_all(self._init, [(r.next_offset, now, self.owner, r.topic, r.partition) for r in rows])

    def record_plans(self, plans: Iterable[PartitionPlan]) -> None:
        """Store new plans before their batch runs: a crash from here on replays exactly these ranges."""
        now = datetime.now(UTC)
        self._run_all(
            self._plan,
            [(p.seq, p.start, p.end, now, self.owner, p.topic, p.partition) for p in plans if not p.replay],
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
            [(p.end, p.seq, now, _encode_positions(positions.get(p.tp, {})), p.topic, p.partition) for p in plans],
        )
