"""Key-value stores: `PartitionedStore` (one Cassandra partition per input partition) and
`GlobalStore` (the record key is the whole primary key).

Tables (compatible with kafka-streams-cassandra-state-store):

    partitioned: partition int, key blob, time timestamp, value blob, floe_batch bigint,
                 PRIMARY KEY ((partition), key)
    global:      key blob, time timestamp, value blob, PRIMARY KEY (key)

`time` is the wall-clock write time. A row whose `value` is null is absent to every read:
that is how a fenced delete is stored (see `PartitionedStore.put_many_fenced`).

Batched forms (`get_many`, `put_all`, `delete_many`, the fenced ones) send their statements
concurrently with at most `StoreOptions.concurrency` in flight, over prepared statements
that the driver routes to a replica of the partition (token-aware).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from cassandra.query import BatchStatement, BatchType, BoundStatement
from floe_jobs.stores import keys as keyorder
from floe_jobs.stores.base import BaseStore
from floe_jobs.stores.cache import ABSENT, MISS
from floe_jobs.stores.errors import SerdeError, StoreConfigError
from floe_jobs.stores.execution import Call, Row
from floe_jobs.stores.schema import FENCE_COLUMN
from floe_jobs.stores.serdes import Serde

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")
# a row's write: statement, parameters, key, bytes, and the values as sent when already serialized
_Stmt = tuple[Any, tuple[Any, ...], Any, int, list[Any] | None]

_NOW = "toTimestamp(now())"
# the write timestamps of a row's cells that a fenced read returns with its value and fence: a
# batch writes above the highest (`floe_jobs.planning.row_stamp`); a cell that is null (a fenced
# delete's value, a row without a fence) has none
_WRITTEN = f"WRITETIME(value), WRITETIME({FENCE_COLUMN}), WRITETIME(time)"


def _cell(row: Row, at: int, fenced: bool) -> tuple[bytes | None, int | None, int | None]:
    """(value, fence, highest write timestamp) of a fetched row whose value is column `at`."""
    if not fenced:
        return (row[at], None, None)
    stamps = [s for s in row[at + 2 : at + 5] if s is not None]
    return (row[at], row[at + 1], max(stamps) if stamps else None)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _KeyValueStore(BaseStore[K, V]):
    """The operations both key-value layouts share, with `partition` None for global stores."""

    _partitioned = True

    # -- CQL ------------------------------------------------------------------------------

    def _where(self) -> str:
        return "partition = ? AND key = ?" if self._partitioned else "key = ?"

    def _pk(self, partition: int | None) -> tuple[Any, ...]:
        return (partition,) if self._partitioned else ()

    def _insert_cql(self, *, ttl: bool, fenced: bool = False, lwt: bool = False, stamped: bool = False) -> str:
        cols = ["partition", "key", "time", "value"] if self._partitioned else ["key", "time", "value"]
        vals = ["?", "?", _NOW, "?"] if self._partitioned else ["?", _NOW, "?"]
        if fenced:
            cols.append(FENCE_COLUMN)
            vals.append("?")
        cql = f"INSERT INTO {self.qualified_table} ({', '.join(cols)}) VALUES ({', '.join(vals)})"
        if lwt:
            cql += " IF NOT EXISTS"
        using = [u for u, wanted in (("TTL ?", ttl), ("TIMESTAMP ?", stamped)) if wanted]
        if using:
            cql += " USING " + " AND ".join(using)
        return cql

    def _fenced_insert(self, *, ttl: bool, stamped: bool) -> Any:
        """The prepared fenced insert, with a TTL parameter or without."""
        name = f"insert_fenced_ttl:{stamped}" if ttl else f"insert_fenced:{stamped}"
        return self.statement(name, self._insert_cql(ttl=ttl, fenced=True, stamped=stamped))

    def _insert(self, ttl: int | None) -> Any:
        if ttl is None:
            return self.statement("insert", self._insert_cql(ttl=False))
        return self.statement("insert_ttl", self._insert_cql(ttl=True))

    def _insert_params(self, partition: int | None, kb: bytes, vb: bytes | None, ttl: int | None) -> tuple[Any, ...]:
        params = (*self._pk(partition), kb, vb)
        return params if ttl is None else (*params, ttl)

    def _check_ttl(self, ttl: int | None, op: str) -> None:
        if ttl is not None and ttl < 0:
            raise StoreConfigError(f"ttl must be >= 0 seconds (0: never expires), got {ttl}", store=self.name,
                                   operation=op)

    def _cache_key(self, partition: int | None, kb: bytes) -> Any:
        return (partition, kb) if self._partitioned else kb

    # -- reads ----------------------------------------------------------------------------

    def _get(self, partition: int | None, key: K) -> V | None:
        kb = self.encode_key(key, "get", partition)
        cache = self.cache
        if cache is not None:
            # The cache counts its own hits and misses (exported at scrape time); the operation
            # and latency metrics describe the reads that reach Cassandra.
            cached = cache.get((partition, kb) if self._partitioned else kb)
            if cached is not MISS:
                return None if cached is ABSENT else self.decode_value(cached, "get", partition, key)  # type: ignore[arg-type]
        started = time.perf_counter()
        m = self._op("get")
        stmt = self.statement("get:False", f"SELECT value FROM {self.qualified_table} WHERE {self._where()}")
        rows = self.executor.execute("get", stmt, (*self._pk(partition), kb), partition=partition, key=key)
        vb = rows[0][0] if rows else None
        if cache is not None:
            cache.set(self._cache_key(partition, kb), ABSENT if vb is None else vb)
        self._done(m, started)
        return None if vb is None else self.decode_value(vb, "get", partition, key)

    def _fetch_many(self, partition: int | None, encoded: dict[bytes, K], op: str,
                    concurrency: int | None, *, fenced: bool = False,
                    ) -> dict[bytes, tuple[bytes | None, int | None, int | None]]:
        """Raw (value, fence, written) of every key found, keyed by encoded key. The fence and
        `written`, the highest write timestamp of the row's value, fence and time cells, are only
        read when `fenced` (partitioned stores), in the same statement."""
        found: dict[bytes, tuple[bytes | None, int | None, int | None]] = {}
        if not encoded:
            return found
        kbs = list(encoded)
        columns = f"value, {FENCE_COLUMN}, {_WRITTEN}" if fenced else "value"
        results: list[list[Row]]
        if self._partitioned and self.options.in_chunk_size > 1:
            stmt = self.statement(
                f"get_in:{fenced}",
                f"SELECT key, {columns} FROM {self.qualified_table} WHERE partition = ? AND key IN ?",
            )
            chunks = list(_chunks(kbs, self.options.in_chunk_size))
            results = self.executor.execute_concurrent(
                op, [(stmt, (partition, list(chunk))) for chunk in chunks],
                concurrency=concurrency or self.options.concurrency, partition=partition,
                keys=[encoded[c[0]] for c in chunks],
            )
            for rows in results:
                for row in rows:
                    found[row[0]] = _cell(row, 1, fenced)
            return found
        # One statement per key: the same statement as a single get.
        stmt = self.statement(
            f"get:{fenced}", f"SELECT {columns} FROM {self.qualified_table} WHERE {self._where()}"
        )
        pk = self._pk(partition)
        results = self.executor.execute_concurrent(
            op, [(stmt, (*pk, kb)) for kb in kbs], concurrency=concurrency or self.options.concurrency,
            partition=partition, keys=[encoded[kb] for kb in kbs],
        )
        for kb, rows in zip(kbs, results, strict=True):
            if rows:
                found[kb] = _cell(rows[0], 0, fenced)
        return found

    def _get_many(self, partition: int | None, keys: Iterable[K], concurrency: int | None) -> dict[K, V]:
        started = time.perf_counter()
        m = self._op("get_many")
        encoded = {self.encode_key(k, "get_many", partition): k for k in keys}
        out: dict[K, V] = {}
        cache = self.cache
        todo = encoded
        if cache is not None:
            todo = {}
            for kb, key in encoded.items():
                cached = cache.get(self._cache_key(partition, kb))
                if cached is MISS:
                    todo[kb] = key
                elif cached is not ABSENT:
                    out[key] = self.decode_value(cached, "get_many", partition, key)  # type: ignore[arg-type]
        found = self._fetch_many(partition, todo, "get_many", concurrency)
        for kb, key in todo.items():
            vb = found.get(kb, (None, None, None))[0]
            if cache is not None:
                cache.set(self._cache_key(partition, kb), ABSENT if vb is None else vb)
            if vb is not None:
                out[key] = self.decode_value(vb, "get_many", partition, key)
        self._done(m, started, len(encoded))
        return out

    def _scan(self, op: str, partition: int | None, rows: Iterable[Row],
              upper: bytes | None = None) -> Iterator[tuple[K, V]]:
        for row in rows:
            kb, vb = row[0], row[1]
            if vb is None:
                continue  # a fenced delete
            if upper is not None and kb >= upper:
                continue
            key = self.decode_key(kb, op, partition)
            yield key, self.decode_value(vb, op, partition, key)

    # -- writes ---------------------------------------------------------------------------

    def _put(self, partition: int | None, key: K, value: V | None, ttl: int | None) -> None:
        if value is None:
            self._delete(partition, key)
            return
        started = time.perf_counter()
        m = self._op("put")
        self._check_ttl(ttl, "put")
        kb = self.encode_key(key, "put", partition)
        vb = self.encode_value(value, "put", partition, key)
        self._write_through(
            "put", partition, key, kb, vb,
            lambda: self.executor.execute(
                "put", self._insert(ttl), self._insert_params(partition, kb, vb, ttl),
                partition=partition, key=key,
            ),
        )
        self._done(m, started)

    def _write_through(self, op: str, partition: int | None, key: Any, kb: bytes, vb: bytes | None,
                       write: Any) -> None:
        """Runs `write`, then updates the cache; on failure the key's cache entry is dropped."""
        cache = self.cache
        try:
            write()
        except Exception:
            if cache is not None:
                cache.invalidate(self._cache_key(partition, kb))
            raise
        if cache is not None:
            cache.set(self._cache_key(partition, kb), ABSENT if vb is None else vb)

    def _delete(self, partition: int | None, key: K) -> None:
        started = time.perf_counter()
        m = self._op("delete")
        kb = self.encode_key(key, "delete", partition)
        stmt = self.statement("delete", f"DELETE FROM {self.qualified_table} WHERE {self._where()}")
        self._write_through(
            "delete", partition, key, kb, None,
            lambda: self.executor.execute(
                "delete", stmt, (*self._pk(partition), kb), partition=partition, key=key
            ),
        )
        self._done(m, started)

    def _delete_many(self, partition: int | None, keys: Iterable[K], concurrency: int | None) -> None:
        started = time.perf_counter()
        m = self._op("delete_many")
        encoded = [(self.encode_key(k, "delete_many", partition), k) for k in keys]
        stmt = self.statement("delete", f"DELETE FROM {self.qualified_table} WHERE {self._where()}")
        calls: list[Call] = [(stmt, (*self._pk(partition), kb)) for kb, _ in encoded]
        self._run_writes("delete_many", partition, calls, [k for _, k in encoded],
                         [(kb, None) for kb, _ in encoded], concurrency)
        self._done(m, started, len(encoded))

    def _run_writes(self, op: str, partition: int | None, calls: list[Call], keys: list[Any],
                    effects: list[tuple[bytes, bytes | None]], concurrency: int | None) -> None:
        cache = self.cache
        try:
            self.executor.execute_concurrent(
                op, calls, concurrency=concurrency or self.options.concurrency, partition=partition, keys=keys
            )
        except Exception:
            if cache is not None:
                for kb, _ in effects:
                    cache.invalidate(self._cache_key(partition, kb))
            raise
        if cache is not None:
            for kb, vb in effects:
                cache.set(self._cache_key(partition, kb), ABSENT if vb is None else vb)

    def _encode_items(self, items: Iterable[tuple[K, V | None]], op: str, partition: int | None
                      ) -> dict[bytes, tuple[K, bytes | None]]:
        """Encoded key -> (key, encoded value or None) of `items`; the last write of a key wins,
        as it would applying them one by one. The serdes are called directly; an item they
        refuse is encoded again through `encode_key`/`encode_value`, whose error names it."""
        items = items if isinstance(items, list) else list(items)
        latest: dict[bytes, tuple[K, bytes | None]] = {}
        ek, ev = self.key_serde.encode, self.value_serde.encode
        try:
            for key, value in items:
                latest[ek(key)] = (key, None if value is None else ev(value))
        except SerdeError:
            latest = {}
            for key, value in items:
                kb = self.encode_key(key, op, partition)
                latest[kb] = (key, None if value is None else self.encode_value(value, op, partition, key))
        return latest

    def _put_all(self, partition: int | None, items: Iterable[tuple[K, V | None]], ttl: int | None,
                 concurrency: int | None, op: str = "put_all", fence: int | None = None,
                 stamp: int | None = None, stamps: Mapping[K, int] | None = None) -> None:
        started = time.perf_counter()
        m = self._op(op)
        self._check_ttl(ttl, op)
        latest = self._encode_items(items, op, partition)
        if fence is None:
            stmts = self._plain_statements(latest, partition, ttl)
        else:
            stmts = self._fenced_statements(latest, partition, ttl, fence, stamp, stamps)
        calls, call_keys = self._calls(stmts)
        effects = [(kb, vb) for kb, (_k, vb) in latest.items()] if self.cache is not None else []
        self._run_writes(op, partition, calls, call_keys, effects, concurrency)
        self._done(m, started, len(latest))

    def _plain_statements(self, latest: Mapping[bytes, tuple[K, bytes | None]], partition: int | None,
                          ttl: int | None) -> list[_Stmt]:
        """An insert per value and a delete per None, neither fenced."""
        pk = self._pk(partition)
        insert = self._insert(ttl)
        tail: tuple[Any, ...] = () if ttl is None else (ttl,)
        delete = None
        stmts: list[_Stmt] = []
        for kb, (k, vb) in latest.items():
            if vb is not None:
                stmts.append((insert, (*pk, kb, vb, *tail), k, len(kb) + len(vb), None))
            else:
                delete = delete or self.statement(
                    "delete", f"DELETE FROM {self.qualified_table} WHERE {self._where()}"
                )
                stmts.append((delete, (*pk, kb), k, len(kb), None))
        return stmts

    def _fenced_statements(self, latest: Mapping[bytes, tuple[K, bytes | None]], partition: int | None,
                           ttl: int | None, fence: int, stamp: int | None,
                           stamps: Mapping[K, int] | None) -> list[_Stmt]:
        """A fenced insert per row (a None value is a tombstone row that keeps the fence),
        stamped with `stamp`, or with its own stamp from `stamps`."""
        stamped = stamp is not None
        at: tuple[Any, ...] = (stamp,) if stamped else ()
        fenced = self._fenced_insert(ttl=False, stamped=stamped)
        fenced_ttl = None if ttl is None else self._fenced_insert(ttl=True, stamped=stamped)
        # the partition, fence, TTL and stamp are the same for most rows: serialized once here,
        # not once per row (`_Serialized`); such a row only adds its key and value
        ser = _Serialized(self.session.cluster.protocol_version)
        usual = fenced if fenced_ttl is None else fenced_ttl
        usual_tail = (fence,) if fenced_ttl is None else (fence, ttl)
        head = [ser.one(usual, 0, partition)]
        tail = [ser.one(usual, 3 + i, v) for i, v in enumerate((*usual_tail, *at))]
        stmts: list[_Stmt] = []
        for kb, (k, vb) in latest.items():
            own_stamp = bool(stamps) and k in stamps  # type: ignore[operator]
            row_ttl = ttl if vb is not None else self.options.fence_tombstone_ttl
            if row_ttl == ttl and not own_stamp:  # most rows: no serializing at all
                stmts.append((usual, (partition, kb, vb, *usual_tail, *at), k, len(kb) + len(vb or b""),
                              [*head, kb, vb, *tail]))
                continue
            row_at = (stamps[k],) if own_stamp else at  # type: ignore[index]
            if row_ttl is None:
                params: tuple[Any, ...] = (partition, kb, vb, fence, *row_at)
                stmt = fenced
            else:
                fenced_ttl = fenced_ttl or self._fenced_insert(ttl=True, stamped=stamped)
                params = (partition, kb, vb, fence, row_ttl, *row_at)
                stmt = fenced_ttl
            stmts.append((stmt, params, k, len(kb) + len(vb or b""), ser.values(stmt, params)))
        return stmts

    def _calls(self, stmts: list[_Stmt]) -> tuple[list[Call], list[Any]]:
        """The requests that carry `stmts`, and each one's first key (for errors): in a partitioned
        store, single-partition unlogged batches (one mutation, applied atomically, exempt from
        Cassandra's multi-partition batch size limits), split to bound their rows and bytes;
        otherwise a request per statement."""
        if not (self._partitioned and self.options.batch_max_rows > 1):
            return [(stmt, params) for stmt, params, _k, _n, _v in stmts], [k for _s, _p, k, _n, _v in stmts]
        protocol = self.session.cluster.protocol_version
        calls: list[Call] = []
        call_keys: list[Any] = []
        batch: BatchStatement | None = None
        rows = size = 0
        for stmt, params, k, nbytes, values in stmts:
            if batch is not None and (rows >= self.options.batch_max_rows
                                      or size + nbytes > self.options.batch_max_bytes):
                batch = None
            if batch is None:
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                rows = size = 0
                calls.append((batch, ()))
                call_keys.append(k)
            add_row(batch, stmt, params, protocol, values)
            rows += 1
            size += nbytes
        return calls, call_keys

    def _put_if_absent(self, partition: int | None, key: K, value: V, ttl: int | None) -> V | None:
        started = time.perf_counter()
        m = self._op("put_if_absent")
        self._check_ttl(ttl, "put_if_absent")
        kb = self.encode_key(key, "put_if_absent", partition)
        vb = self.encode_value(value, "put_if_absent", partition, key)
        if not self.options.lwt_put_if_absent:
            # Read then write, like the Java library: not atomic against concurrent writers.
            stmt = self.statement("get:False", f"SELECT value FROM {self.qualified_table} WHERE {self._where()}")
            rows = self.executor.execute("put_if_absent", stmt, (*self._pk(partition), kb),
                                         partition=partition, key=key)
            if rows and rows[0][0] is not None:
                self._done(m, started)
                return self.decode_value(rows[0][0], "put_if_absent", partition, key)
            self._write_through(
                "put_if_absent", partition, key, kb, vb,
                lambda: self.executor.execute("put_if_absent", self._insert(ttl),
                                              self._insert_params(partition, kb, vb, ttl),
                                              partition=partition, key=key),
            )
            self._done(m, started)
            return None
        existing = self._lwt_insert(partition, key, kb, vb, ttl)
        if self.cache is not None:
            self.cache.set(self._cache_key(partition, kb), vb if existing is None else existing)
        self._done(m, started)
        return None if existing is None else self.decode_value(existing, "put_if_absent", partition, key)

    def _lwt_insert(self, partition: int | None, key: K, kb: bytes, vb: bytes, ttl: int | None) -> bytes | None:
        """INSERT IF NOT EXISTS; a fenced-delete row (value null) counts as absent. Returns the
        value found when nothing was written."""
        insert = self.statement(
            "insert_lwt_ttl" if ttl is not None else "insert_lwt",
            self._insert_cql(ttl=ttl is not None, lwt=True),
        )
        update_cql = f"UPDATE {self.qualified_table}"
        if ttl is not None:
            update_cql += " USING TTL ?"
        update_cql += f" SET value = ?, time = {_NOW} WHERE {self._where()} IF value = null"
        update = self.statement("update_lwt_ttl" if ttl is not None else "update_lwt", update_cql)
        for _ in range(3):
            rs = self.executor.execute_result(
                "put_if_absent", insert, self._insert_params(partition, kb, vb, ttl), partition=partition, key=key
            )
            row = rs.current_rows[0]
            if row[0]:
                return None
            current = row[list(rs.column_names).index("value")]
            if current is not None:
                return bytes(current)
            params = ((ttl,) if ttl is not None else ()) + (vb, *self._pk(partition), kb)
            rs = self.executor.execute_result("put_if_absent", update, params, partition=partition, key=key)
            row = rs.current_rows[0]
            if row[0]:
                return None
            current = row[list(rs.column_names).index("value")] if "value" in rs.column_names else None
            if current is not None:
                return bytes(current)
            # The row vanished between the two statements: try the insert again.
        raise StoreConfigError("put_if_absent did not settle after 3 rounds", store=self.name,
                               operation="put_if_absent", partition=partition, key=key)

    def _count(self, partition: int | None) -> int:
        if not self.options.count_enabled:
            raise StoreConfigError(
                "approximate_num_entries is a full COUNT in Cassandra; turn it on with "
                "StoreOptions(count_enabled=True)", store=self.name, operation="approximate_num_entries",
            )
        started = time.perf_counter()
        m = self._op("approximate_num_entries")
        # COUNT(value) skips fenced-delete rows, whose value is null.
        if partition is None:
            stmt = self.statement("count_all", f"SELECT COUNT(value) FROM {self.qualified_table}")
            rows = self.executor.execute("approximate_num_entries", stmt, ())
        else:
            stmt = self.statement(
                "count", f"SELECT COUNT(value) FROM {self.qualified_table} WHERE partition = ?"
            )
            rows = self.executor.execute("approximate_num_entries", stmt, (partition,), partition=partition)
        self._done(m, started, 0)
        return int(rows[0][0]) if rows else 0


class PartitionedStore(_KeyValueStore[K, V]):
    """A key-value store scoped to input partitions: every operation names its partition.

    Keys within a partition are ordered as unsigned bytes, which gives ranges, reverse
    ranges and prefix scans. One input partition is one Cassandra partition: keep it under
    ~100 MB (see `estimated_partition_sizes`).
    """

    store_type = "partitioned"
    _partitioned = True

    def get(self, partition: int, key: K) -> V | None:
        return self._get(partition, key)

    def get_many(self, partition: int, keys: Iterable[K], *, concurrency: int | None = None) -> dict[K, V]:
        """The values of the keys that exist (absent keys are left out)."""
        return self._get_many(partition, keys, concurrency)

    def put(self, partition: int, key: K, value: V | None, *, ttl: int | None = None) -> None:
        """Writes a value (None deletes). `ttl` in seconds overrides the table default (0: never)."""
        self._put(partition, key, value, ttl)

    def put_if_absent(self, partition: int, key: K, value: V, *, ttl: int | None = None) -> V | None:
        """Writes when the key has no value; returns the existing value, or None when written."""
        return self._put_if_absent(partition, key, value, ttl)

    def put_all(self, partition: int, items: Iterable[tuple[K, V | None]], *, ttl: int | None = None,
                concurrency: int | None = None) -> None:
        """Writes many keys of one partition in single-partition batches sent concurrently.

        Each batch is atomic; the whole call is not (a failure leaves earlier batches applied).
        """
        self._put_all(partition, items, ttl, concurrency)

    def delete(self, partition: int, key: K) -> None:
        self._delete(partition, key)

    def delete_many(self, partition: int, keys: Iterable[K], *, concurrency: int | None = None) -> None:
        self._delete_many(partition, keys, concurrency)

    # -- exactly-once fencing -------------------------------------------------------------

    def get_many_fenced(self, partition: int, keys: Iterable[K], *,
                        concurrency: int | None = None) -> dict[K, tuple[V | None, int | None]]:
        """Every requested key -> (value or None, batch id of the last fenced write or None).

        Bypasses the read cache: fences must come from Cassandra.
        """
        cells = self._fenced_cells("get_many_fenced", partition, keys, concurrency)
        return {key: (value, fence) for key, (value, fence, _written) in cells.items()}

    def get_many_stamped(self, partition: int, keys: Iterable[K], *, concurrency: int | None = None
                         ) -> dict[K, tuple[V | None, int | None, int | None]]:
        """Every requested key -> (value or None, fence or None, write timestamp or None): the
        fenced read plus the highest write timestamp (µs) of the row's value, fence and time
        cells, from the same statement. A batch writes a key above it (`floe_jobs.state`), so a
        cell that another writer stamped later than the batch's own stamp cannot swallow the
        batch's write. Bypasses the read cache; counted and named as `get_many_fenced`."""
        return self._fenced_cells("get_many_fenced", partition, keys, concurrency)

    def _fenced_cells(self, op: str, partition: int, keys: Iterable[K], concurrency: int | None
                      ) -> dict[K, tuple[V | None, int | None, int | None]]:
        started = time.perf_counter()
        m = self._op(op)
        encoded = {self.encode_key(k, op, partition): k for k in keys}
        found = self._fetch_many(partition, encoded, op, concurrency, fenced=True)
        out: dict[K, tuple[V | None, int | None, int | None]] = {}
        for kb, key in encoded.items():
            vb, fence, written = found.get(kb, (None, None, None))
            value = None if vb is None else self.decode_value(vb, op, partition, key)
            out[key] = (value, fence, written)
        self._done(m, started, len(encoded))
        return out

    def put_many_fenced(self, partition: int, items: Iterable[tuple[K, V | None]], *, batch: int,
                        ttl: int | None = None, concurrency: int | None = None, stamp: int | None = None,
                        stamps: Mapping[K, int] | None = None) -> None:
        """Writes values together with the batch id that produced them, in the same row.

        A value of None is a fenced delete: the row stays with a null value (absent to every
        read) and the batch id, and expires after `StoreOptions.fence_tombstone_ttl`. Value
        and fence of a key are one row, so they are written atomically. `stamp`: the write
        timestamp (µs since the epoch) of every cell, the batch's (see `floe_jobs.offsets`), so
        a late write of an older batch loses to a newer one's; None: the client's clock.
        `stamps`: the keys written under a timestamp of their own instead (a row that another
        writer stamped above `stamp`, see `floe_jobs.planning.row_stamp`); needs `stamp`.
        """
        if stamps and stamp is None:
            raise ValueError("put_many_fenced: per-key stamps need the batch's stamp for the other keys")
        self._put_all(partition, items, ttl, concurrency, op="put_many_fenced", fence=batch, stamp=stamp,
                      stamps=stamps)

    # -- iteration ------------------------------------------------------------------------

    def range(self, partition: int, from_key: K | None = None, to_key: K | None = None) -> Iterator[tuple[K, V]]:
        """Keys in [from_key, to_key] (both inclusive, either open when None), ascending."""
        return self._range("range", partition, from_key, to_key, reverse=False)

    def reverse_range(self, partition: int, from_key: K | None = None,
                      to_key: K | None = None) -> Iterator[tuple[K, V]]:
        """Keys in [from_key, to_key], descending."""
        return self._range("reverse_range", partition, from_key, to_key, reverse=True)

    def all(self, partition: int) -> Iterator[tuple[K, V]]:
        return self._range("all", partition, None, None, reverse=False)

    def reverse_all(self, partition: int) -> Iterator[tuple[K, V]]:
        return self._range("reverse_all", partition, None, None, reverse=True)

    def prefix_scan(self, partition: int, prefix: Any, *, prefix_serde: Serde[Any] | None = None,
                    reverse: bool = False) -> Iterator[tuple[K, V]]:
        """Keys whose encoded bytes start with the encoded `prefix` (encoded with
        `prefix_serde`, default the key serde), ascending (or descending)."""
        serde = prefix_serde or self.key_serde
        try:
            lower = serde.encode(prefix)
        except Exception as exc:
            raise StoreConfigError(f"prefix does not encode with serde {serde.name}: {exc}", store=self.name,
                                   operation="prefix_scan", partition=partition, key=prefix) from exc
        upper = keyorder.prefix_upper_bound(lower)
        return self._range_bytes("prefix_scan", partition, lower or None, upper, upper_inclusive=False,
                                 reverse=reverse)

    def _range(self, op: str, partition: int, from_key: K | None, to_key: K | None,
               *, reverse: bool) -> Iterator[tuple[K, V]]:
        lower = None if from_key is None else self.encode_key(from_key, op, partition)
        upper = None if to_key is None else self.encode_key(to_key, op, partition)
        return self._range_bytes(op, partition, lower, upper, upper_inclusive=True, reverse=reverse)

    def _range_bytes(self, op: str, partition: int, lower: bytes | None, upper: bytes | None,
                     *, upper_inclusive: bool, reverse: bool) -> Iterator[tuple[K, V]]:
        if lower is not None and upper is not None and (lower > upper or (lower == upper and not upper_inclusive)):
            log.warning(
                "Returned no rows for an inverted key range store=%s operation=%s partition=%d "
                "(arguments swapped, or a serde whose bytes do not sort like its values)",
                self.name, op, partition,
            )
            return iter(())
        conditions = ["partition = ?"]
        params: list[Any] = [partition]
        if lower is not None:
            conditions.append("key >= ?")
            params.append(lower)
        if upper is not None:
            conditions.append("key <= ?" if upper_inclusive else "key < ?")
            params.append(upper)
        order = " ORDER BY key DESC" if reverse else ""
        name = f"range:{lower is not None}:{upper is not None}:{upper_inclusive}:{reverse}"
        stmt = self.statement(
            name, f"SELECT key, value FROM {self.qualified_table} WHERE {' AND '.join(conditions)}{order}"
        )
        return self._iterate(op, partition, stmt, params)

    def _iterate(self, op: str, partition: int, stmt: Any, params: list[Any]) -> Iterator[tuple[K, V]]:
        started = time.perf_counter()
        m = self._op(op)
        count = 0
        try:
            for item in self._scan(op, partition, self.executor.pages(
                    op, stmt, params, page_size=self.options.page_size, partition=partition)):
                count += 1
                yield item
        finally:
            self._done(m, started, count)

    def approximate_num_entries(self, partition: int | None = None) -> int:
        """The number of keys in `partition` (or in all partitions): an exact, costly COUNT,
        only when `StoreOptions.count_enabled`."""
        return self._count(partition)

    def has_rows(self, partition: int) -> bool:
        """Whether `partition` holds any row, fenced deletes included (one row read at most)."""
        started = time.perf_counter()
        m = self._op("has_rows")
        stmt = self.statement("has_rows", f"SELECT key FROM {self.qualified_table} WHERE partition = ? LIMIT 1")
        rows = self.executor.execute("has_rows", stmt, (partition,), partition=partition)
        self._done(m, started, 0)
        return bool(rows)

    def partitions(self) -> list[int]:
        """The input partitions that have rows (SELECT DISTINCT partition: a scan of partition keys)."""
        stmt = self.statement("partitions", f"SELECT DISTINCT partition FROM {self.qualified_table}")
        return sorted(int(r[0]) for r in self.executor.pages("partitions", stmt, [], page_size=1000))


class GlobalStore(_KeyValueStore[K, V]):
    """A key-value store whose table is keyed by the record key alone, usable from any partition.

    Supports what a single-column primary key allows: get/put/delete (single and batched),
    put_if_absent, a full scan (`all`, in token order, not key order) and counting. Ranges,
    reverse iteration and prefix scans raise UnsupportedOperationError.
    """

    store_type = "global"
    _partitioned = False

    def get(self, key: K) -> V | None:
        return self._get(None, key)

    def get_many(self, keys: Iterable[K], *, concurrency: int | None = None) -> dict[K, V]:
        return self._get_many(None, keys, concurrency)

    def put(self, key: K, value: V | None, *, ttl: int | None = None) -> None:
        self._put(None, key, value, ttl)

    def put_if_absent(self, key: K, value: V, *, ttl: int | None = None) -> V | None:
        return self._put_if_absent(None, key, value, ttl)

    def put_all(self, items: Iterable[tuple[K, V | None]], *, ttl: int | None = None,
                concurrency: int | None = None) -> None:
        """Writes many keys concurrently, one statement per key (they live in different
        Cassandra partitions, so a batch would only add coordinator work). Not atomic."""
        self._put_all(None, items, ttl, concurrency)

    def delete(self, key: K) -> None:
        self._delete(None, key)

    def delete_many(self, keys: Iterable[K], *, concurrency: int | None = None) -> None:
        self._delete_many(None, keys, concurrency)

    def all(self) -> Iterator[tuple[K, V]]:
        """Every entry, paged, in Cassandra's token order (not key order)."""
        stmt = self.statement("all", f"SELECT key, value FROM {self.qualified_table}")
        started = time.perf_counter()
        m = self._op("all")
        count = 0
        try:
            for item in self._scan("all", None, self.executor.pages(
                    "all", stmt, [], page_size=self.options.page_size)):
                count += 1
                yield item
        finally:
            self._done(m, started, count)

    def approximate_num_entries(self) -> int:
        return self._count(None)

    def range(self, *_args: Any, **_kwargs: Any) -> Iterator[tuple[K, V]]:
        raise self.unsupported_error("range")

    def reverse_range(self, *_args: Any, **_kwargs: Any) -> Iterator[tuple[K, V]]:
        raise self.unsupported_error("reverse_range")

    def reverse_all(self, *_args: Any, **_kwargs: Any) -> Iterator[tuple[K, V]]:
        raise self.unsupported_error("reverse_all")

    def prefix_scan(self, *_args: Any, **_kwargs: Any) -> Iterator[tuple[K, V]]:
        raise self.unsupported_error("prefix_scan")


def add_row(batch: BatchStatement, stmt: Any, params: tuple[Any, ...], protocol: int,
         values: Sequence[Any] | None = None) -> None:
    """Add a row of a prepared statement to a single-partition batch: its Python values
    `params`, or `values` as sent when the caller has them (then `params` is not read).

    The first row goes through `BatchStatement.add`, which also gives the batch its routing key
    and keyspace (from a statement bound to `values` when given, else by binding `params`); the
    others skip the `BoundStatement` that `add` builds per row (with a named tuple per value for
    its column-encryption lookup) and go in as their values serialized by the statement's column
    types, which is what `add` sends, for less Python work per row (docs/runtime.md, "Figures
    behind single settings"). The driver has no public call for this, so this is the one place
    that uses its private `_add_statement_and_params`. The stores configure no column
    encryption, and their tables' only blob columns (key, value) take bytes as they are."""
    if not len(batch):
        if values is None:
            batch.add(stmt, params)
        else:
            bound = BoundStatement(stmt)
            bound.values = list(values)
            batch.add(bound)
        return
    if values is None:
        columns = stmt.column_metadata
        # bytes are a blob column's value as sent (the stores' keys and values); the rest serialize
        values = [
            v if v is None or type(v) is bytes else c.type.serialize(v, protocol)
            for c, v in zip(columns, params, strict=True)
        ]
    batch._add_statement_and_params(True, stmt.query_id, values)


class _Serialized:
    """A row's values as `add_row` sends them, with each non-blob value serialized once per write
    call: a fenced write's partition, fence, stamp and TTL repeat on every row, and serializing
    them per row (a driver type's `serialize` call each) was most of the Python time of
    building a batch (docs/runtime.md, "Where a replica's Python CPU goes")."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self._done: dict[tuple[bytes, int, Any, type], bytes] = {}

    def one(self, stmt: Any, index: int, value: Any) -> Any:
        """Parameter `index` of `stmt` as sent: bytes and None as they are, the rest serialized
        by the column's type (once per statement, parameter and value)."""
        if value is None or type(value) is bytes:
            return value
        # the value's type is part of the key: 1 and True are equal but serialize apart
        at = (stmt.query_id, index, value, type(value))
        found = self._done.get(at)
        if found is None:
            found = self._done[at] = stmt.column_metadata[index].type.serialize(value, self.protocol)
        return found

    def values(self, stmt: Any, params: tuple[Any, ...]) -> list[Any]:
        return [self.one(stmt, i, v) for i, v in enumerate(params)]
