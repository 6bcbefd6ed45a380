"""Versioned key-value stores (Kafka's KIP-889 semantics): every put carries a timestamp, reads
ask for the latest value or the value as of a timestamp, and versions older than the history
retention are removed.

Tables (compatible with kafka-streams-cassandra-state-store's versioned stores):

    versioned-partitioned: partition int, key blob, validFrom timestamp, validTo timestamp,
                           time timestamp, value blob, PRIMARY KEY ((partition), key, validTo)
    versioned-global:      key blob, validFrom timestamp, validTo timestamp, time timestamp,
                           value blob, PRIMARY KEY ((key), validTo)

The latest version of a key has `validTo` = -1 ms (Kafka's "undefined"); each older version
is the interval [validFrom, validTo). A delete is a version whose value is null. All rows of
one key live in one Cassandra partition, so each put is one atomic single-partition batch
(new version, the shortened previous one, and the removal of expired history).

Timestamps are epoch milliseconds (event time). Observed stream time is the largest put
timestamp this process has seen for the partition (or the key's latest version, after a
restart); history older than stream time minus the retention is deleted on the next write
of the key, and puts older than that are refused (`PUT_NOT_DONE`), as in Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cassandra.query import BatchStatement, BatchType
from floe_jobs.stores.base import BaseStore
from floe_jobs.stores.execution import Call

K = TypeVar("K")
V = TypeVar("V")

VALID_TO_UNDEFINED = -1
"""validTo of the latest version (Kafka's PUT_RETURN_CODE_VALID_TO_UNDEFINED)."""
PUT_NOT_DONE = -(2**63)
"""Returned by put for a timestamp older than stream time minus the history retention."""

_NOW = "toTimestamp(now())"


@dataclass(frozen=True)
class VersionedRecord(Generic[V]):
    """A value and the interval it was valid in; `valid_to` None for the latest version."""

    value: V
    timestamp: int
    valid_to: int | None = None


@dataclass(frozen=True)
class _Row:
    value: bytes | None
    valid_from: int
    valid_to: int


class _VersionedStore(BaseStore[K, V]):
    _partitioned = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history_retention_ms = self.spec.history_retention_ms
        self._stream_time: dict[int | None, int] = {}

    def _where(self) -> str:
        return "partition = ? AND key = ?" if self._partitioned else "key = ?"

    def _pk(self, partition: int | None, kb: bytes) -> tuple[Any, ...]:
        return (partition, kb) if self._partitioned else (kb,)

    def _select(self) -> str:
        return (f"SELECT value, toUnixTimestamp(validFrom), toUnixTimestamp(validTo) "
                f"FROM {self.qualified_table} WHERE {self._where()}")

    def _latest_row(self, op: str, partition: int | None, key: K, kb: bytes) -> _Row | None:
        stmt = self.statement("latest", self._select() + " AND validTo = ?")
        rows = self.executor.execute(op, stmt, (*self._pk(partition, kb), VALID_TO_UNDEFINED),
                                     partition=partition, key=key)
        return _Row(rows[0][0], int(rows[0][1]), int(rows[0][2])) if rows else None

    def _row_after(self, op: str, partition: int | None, key: K, kb: bytes, ts: int) -> _Row | None:
        """The history version with the smallest validTo > ts (the one valid at ts, or the next)."""
        stmt = self.statement("after", self._select() + " AND validTo > ? LIMIT 1")
        rows = self.executor.execute(op, stmt, (*self._pk(partition, kb), ts), partition=partition, key=key)
        return _Row(rows[0][0], int(rows[0][1]), int(rows[0][2])) if rows else None

    def _record(self, row: _Row | None, op: str, partition: int | None, key: K) -> VersionedRecord[V] | None:
        if row is None or row.value is None:
            return None
        value = self.decode_value(row.value, op, partition, key)
        valid_to = None if row.valid_to == VALID_TO_UNDEFINED else row.valid_to
        return VersionedRecord(value=value, timestamp=row.valid_from, valid_to=valid_to)

    def _observe(self, partition: int | None, ts: int) -> int:
        current = max(self._stream_time.get(partition, ts), ts)
        self._stream_time[partition] = current
        return current

    # -- reads ----------------------------------------------------------------------------

    def _get(self, partition: int | None, key: K, as_of: int | None) -> VersionedRecord[V] | None:
        started = time.perf_counter()
        op = "get" if as_of is None else "get_as_of"
        m = self._op(op)
        kb = self.encode_key(key, op, partition)
        latest = self._latest_row(op, partition, key, kb)
        try:
            if as_of is None:
                return self._record(latest, op, partition, key)
            if latest is not None and latest.valid_from <= as_of:
                return self._record(latest, op, partition, key)
            horizon = self._stream_time.get(partition)
            if horizon is not None and as_of < horizon - self.history_retention_ms:
                return None  # beyond the history retention: predictable even if rows linger
            row = self._row_after(op, partition, key, kb, as_of)
            if row is None or row.valid_from > as_of:
                return None
            return self._record(row, op, partition, key)
        finally:
            self._done(m, started)

    def _get_many(
        self, partition: int | None, keys: Iterable[K], concurrency: int | None
    ) -> dict[K, VersionedRecord[V]]:
        started = time.perf_counter()
        m = self._op("get_many")
        encoded = [(self.encode_key(k, "get_many", partition), k) for k in keys]
        stmt = self.statement("latest", self._select() + " AND validTo = ?")
        calls: list[Call] = [(stmt, (*self._pk(partition, kb), VALID_TO_UNDEFINED)) for kb, _ in encoded]
        results = self.executor.execute_concurrent(
            "get_many", calls, concurrency=concurrency or self.options.concurrency, partition=partition,
            keys=[k for _, k in encoded],
        )
        out: dict[K, VersionedRecord[V]] = {}
        for (_kb, key), rows in zip(encoded, results, strict=True):
            if rows:
                record = self._record(_Row(rows[0][0], int(rows[0][1]), int(rows[0][2])), "get_many", partition, key)
                if record is not None:
                    out[key] = record
        self._done(m, started, len(encoded))
        return out

    # -- writes ---------------------------------------------------------------------------

    def _put(self, partition: int | None, key: K, value: V | None, ts: int, op: str = "put") -> int:
        started = time.perf_counter()
        m = self._op(op)
        kb = self.encode_key(key, op, partition)
        vb = None if value is None else self.encode_value(value, op, partition, key)
        latest = self._latest_row(op, partition, key, kb)
        stream_time = self._observe(partition, max(ts, latest.valid_from if latest else ts))
        cutoff = stream_time - self.history_retention_ms
        if ts < cutoff:
            self._done(m, started)
            return PUT_NOT_DONE
        rows: list[_Row] = []  # versions to write (upserts by validTo)
        if latest is None:
            rows.append(_Row(vb, ts, VALID_TO_UNDEFINED))
        elif ts >= latest.valid_from:
            rows.append(_Row(vb, ts, VALID_TO_UNDEFINED))
            if ts > latest.valid_from:
                rows.append(_Row(latest.value, latest.valid_from, ts))
        else:
            found = self._row_after(op, partition, key, kb, ts)
            if found is None:
                rows.append(_Row(vb, ts, latest.valid_from))
            elif found.valid_from == ts:
                rows.append(_Row(vb, ts, found.valid_to))
            elif found.valid_from > ts:
                rows.append(_Row(vb, ts, found.valid_from))
            else:
                rows.append(_Row(vb, ts, found.valid_to))
                rows.append(_Row(found.value, found.valid_from, ts))
        self._write(op, partition, key, kb, rows, cutoff)
        self._done(m, started)
        return rows[0].valid_to

    def _write(self, op: str, partition: int | None, key: K, kb: bytes, rows: list[_Row], cutoff: int) -> None:
        cols = "partition, key" if self._partitioned else "key"
        marks = "?, ?" if self._partitioned else "?"
        insert = self.statement(
            "insert",
            f"INSERT INTO {self.qualified_table} ({cols}, validFrom, validTo, time, value) "
            f"VALUES ({marks}, ?, ?, {_NOW}, ?)",
        )
        cleanup = self.statement(
            "cleanup", f"DELETE FROM {self.qualified_table} WHERE {self._where()} AND validTo < ? AND validTo >= 0"
        )
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        if cutoff > 0:
            # The range tombstone covers [0, cutoff); every row written below has
            # validTo >= cutoff or -1, so it never shadows them.
            batch.add(cleanup, (*self._pk(partition, kb), cutoff))
        for row in rows:
            batch.add(insert, (*self._pk(partition, kb), row.valid_from, row.valid_to, row.value))
        self.executor.execute(op, batch, None, partition=partition, key=key)

    def _delete(self, partition: int | None, key: K, ts: int) -> VersionedRecord[V] | None:
        previous = self._get(partition, key, ts)
        self._put(partition, key, None, ts, op="delete")
        return previous


class VersionedPartitionedStore(_VersionedStore[K, V]):
    """A versioned store scoped to input partitions."""

    store_type = "versioned-partitioned"
    _partitioned = True

    def get(self, partition: int, key: K, *, as_of: int | None = None) -> VersionedRecord[V] | None:
        """The latest version, or the one valid at `as_of` (epoch ms); None when absent/deleted."""
        return self._get(partition, key, as_of)

    def get_many(self, partition: int, keys: Iterable[K], *,
                 concurrency: int | None = None) -> dict[K, VersionedRecord[V]]:
        """Latest versions of the keys that have one."""
        return self._get_many(partition, keys, concurrency)

    def put(self, partition: int, key: K, value: V | None, timestamp: int) -> int:
        """Adds a version valid from `timestamp`; returns its validTo (-1: it is the latest)
        or PUT_NOT_DONE when `timestamp` is beyond the history retention."""
        return self._put(partition, key, value, timestamp)

    def delete(self, partition: int, key: K, timestamp: int) -> VersionedRecord[V] | None:
        """Marks the key deleted from `timestamp`; returns the version valid at `timestamp`."""
        return self._delete(partition, key, timestamp)


class VersionedGlobalStore(_VersionedStore[K, V]):
    """A versioned store keyed by the record key alone, usable from any partition."""

    store_type = "versioned-global"
    _partitioned = False

    def get(self, key: K, *, as_of: int | None = None) -> VersionedRecord[V] | None:
        return self._get(None, key, as_of)

    def get_many(self, keys: Iterable[K], *, concurrency: int | None = None) -> dict[K, VersionedRecord[V]]:
        return self._get_many(None, keys, concurrency)

    def put(self, key: K, value: V | None, timestamp: int) -> int:
        return self._put(None, key, value, timestamp)

    def delete(self, key: K, timestamp: int) -> VersionedRecord[V] | None:
        return self._delete(None, key, timestamp)
