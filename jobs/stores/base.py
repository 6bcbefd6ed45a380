"""What every store shares: options, opening the table, prepared statements, serdes, metrics.

A store is opened on a session and a keyspace. With `create_table` on (the default) it
provisions its own table idempotently; with it off, the table must exist (a clear
`TableMissingError` otherwise). Partitioned tables get the fence column added when missing,
which is what makes a table created by the Java library usable for exactly-once writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cassandra import InvalidRequest
from cassandra.cluster import Session
from cassandra.query import PreparedStatement
from floe_jobs.stores import schema
from floe_jobs.stores.cache import CacheOptions, ReadCache
from floe_jobs.stores.config import DML_PROFILE
from floe_jobs.stores.errors import (
    SerdeError,
    StoreConfigError,
    StoreDecodeError,
    TableMissingError,
    UnsupportedOperationError,
)
from floe_jobs.stores.execution import TRANSIENT_ERRORS, Executor, RetryPolicy
from floe_jobs.stores.metrics import OperationMetrics, StoreMetrics
from floe_jobs.stores.serdes import BYTES, Serde
from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class StoreOptions:
    """How a store behaves. Defaults suit a micro-batch job on a healthy cluster."""

    create_table: bool = True
    """Create the table when absent; off: it must exist."""
    create_keyspace: bool = False
    """Create the keyspace when absent (with `replication`); off: it must exist."""
    replication: Mapping[str, object] | None = None
    table_name_fn: schema.TableNameFn = schema.table_name
    dml_profile: str = DML_PROFILE
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 64
    """Statements in flight at once for batched operations."""
    page_size: int = 1000
    """Rows fetched per page when iterating."""
    in_chunk_size: int = 100
    """Keys per `IN` query of a partitioned get_many (1: one statement per key). ScyllaDB refuses
    more than `max_clustering_key_restrictions_per_query` (100 by default) keys in one query;
    on Cassandra, larger chunks save requests (docs/stores.md, "Figures")."""
    batch_max_rows: int = 1000
    """Rows per single-partition batch of put_all (1: no batches), within `batch_max_bytes`;
    fewer rows per batch mean more requests for the same keys."""
    batch_max_bytes: int = 256 * 1024
    """Payload bytes per single-partition batch of put_all."""
    lwt_put_if_absent: bool = False
    """put_if_absent as a lightweight transaction (atomic; do not mix with plain writes)."""
    count_enabled: bool = False
    """Allow approximate_num_entries (an exact COUNT: a scan of the partition or table)."""
    cache: CacheOptions | None = None
    """An in-process read cache; None turns it off."""
    fence_tombstone_ttl: int | None = 7 * 24 * 3600
    """TTL in seconds of the rows that fence deletes (None: the table's default TTL)."""

    def __post_init__(self) -> None:
        for name in ("concurrency", "page_size", "in_chunk_size", "batch_max_rows", "batch_max_bytes"):
            if getattr(self, name) < 1:
                raise StoreConfigError(f"StoreOptions.{name} must be >= 1, got {getattr(self, name)}")


class BaseStore(Generic[K, V]):
    """Common machinery; use the concrete store classes."""

    store_type: schema.StoreType = "partitioned"
    unsupported: frozenset[str] = frozenset()

    def __init__(
        self,
        session: Session,
        spec: schema.StoreSpec | str,
        *,
        keyspace: str,
        key_serde: Serde[K] = BYTES,  # type: ignore[assignment]
        value_serde: Serde[V] = BYTES,  # type: ignore[assignment]
        options: StoreOptions | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if isinstance(spec, str):
            spec = schema.StoreSpec(name=spec, type=self.store_type)
        if spec.type != self.store_type:
            raise StoreConfigError(
                f"{type(self).__name__} needs a spec of type {self.store_type}, got {spec.type}", store=spec.name
            )
        self.session = session
        self.spec = spec
        self.name = spec.name
        self.keyspace = schema.check_identifier(keyspace, "keyspace")
        self.options = options or StoreOptions()
        self.table = schema.check_identifier(spec.table_for(self.options.table_name_fn), "table")
        self.qualified_table = f"{self.keyspace}.{self.table}"
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.metrics = StoreMetrics.for_registry(registry)
        self.cache: ReadCache | None = ReadCache(self.options.cache) if self.options.cache else None
        if self.cache is not None:
            self.metrics.watch_cache(self.name, self.cache)
        self.executor = Executor(
            session, store=self.name, profile=self.options.dml_profile, retry=self.options.retry,
            metrics=self.metrics,
        )
        self._prepared: dict[str, PreparedStatement] = {}
        self._prepare_lock = threading.Lock()
        self._open_table()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, table={self.qualified_table!r})"

    # -- opening --------------------------------------------------------------------------

    def _open_table(self) -> None:
        if self.options.create_table:
            schema.provision(
                self.session,
                keyspace=self.keyspace,
                replication=dict(self.options.replication) if self.options.replication else None,
                stores=[self.spec],
                create_keyspace=self.options.create_keyspace,
                table_name_fn=self.options.table_name_fn,
            )
            return
        if schema.table_columns(self.session, self.keyspace, self.table) is None:
            raise TableMissingError(
                f"table {self.qualified_table} does not exist and create_table is off", store=self.name
            )
        if self.spec.type == "partitioned":
            schema.ensure_fence_column(self.session, self.keyspace, self.table)

    # -- statements -----------------------------------------------------------------------

    def statement(self, name: str, cql: str) -> PreparedStatement:
        """The prepared statement `name`, preparing `cql` on first use."""
        prepared = self._prepared.get(name)
        if prepared is not None:
            return prepared
        with self._prepare_lock:
            prepared = self._prepared.get(name)
            if prepared is None:
                prepared = self._prepare(name, cql)
                self._prepared[name] = prepared
        return prepared

    def _prepare(self, name: str, cql: str) -> PreparedStatement:
        attempt = 1
        while True:
            try:
                return self.session.prepare(cql)
            except Exception as exc:
                # A schema change made by another process (the table, or the fence column)
                # can be visible in system_schema a moment before the coordinator serves it,
                # and on other nodes a moment later: "unconfigured table" and "undefined
                # column" are retried like transient errors.
                lagging = isinstance(exc, InvalidRequest) and any(
                    text in str(exc).lower() for text in ("unconfigured table", "undefined column")
                )
                if not (isinstance(exc, TRANSIENT_ERRORS) or lagging) or attempt >= self.options.retry.attempts:
                    raise self.executor.fail(f"prepare {name}", exc, attempts=attempt) from exc
                log.warning(
                    "Retried preparing a statement store=%s statement=%s attempt=%d error=%s",
                    self.name, name, attempt, exc,
                )
                time.sleep(max(0.25, self.options.retry.delay(attempt)))
                attempt += 1

    # -- serdes ---------------------------------------------------------------------------
    # Every store type and the views encode and decode through these, so a serde failure is
    # counted and raised as a typed error naming the store, operation, partition and key.

    def encode_key(self, key: K, op: str, partition: int | None = None) -> bytes:
        try:
            return self.key_serde.encode(key)
        except SerdeError as exc:
            self.metrics.error(self.name, op, exc)
            raise StoreConfigError(
                f"key does not encode with serde {self.key_serde.name}: {exc}",
                store=self.name, operation=op, partition=partition, key=key,
            ) from exc

    def encode_value(self, value: V, op: str, partition: int | None, key: K) -> bytes:
        try:
            return self.value_serde.encode(value)
        except SerdeError as exc:
            self.metrics.error(self.name, op, exc)
            raise StoreConfigError(
                f"value does not encode with serde {self.value_serde.name}: {exc}",
                store=self.name, operation=op, partition=partition, key=key,
            ) from exc

    def decode_key(self, data: bytes, op: str, partition: int | None) -> K:
        try:
            return self.key_serde.decode(data)
        except SerdeError as exc:
            err = StoreDecodeError(
                f"stored key does not decode with serde {self.key_serde.name}: {exc}",
                store=self.name, operation=op, partition=partition, key=data,
            )
            self.metrics.error(self.name, op, err)
            raise err from exc

    def decode_value(self, data: bytes, op: str, partition: int | None, key: Any) -> V:
        try:
            return self.value_serde.decode(data)
        except SerdeError as exc:
            err = StoreDecodeError(
                f"stored value does not decode with serde {self.value_serde.name}: {exc}",
                schema_version=exc.schema_version,
                store=self.name, operation=op, partition=partition, key=key,
            )
            self.metrics.error(self.name, op, err)
            raise err from exc

    # -- metrics --------------------------------------------------------------------------

    def _op(self, op: str) -> OperationMetrics:
        return self.metrics.bind(self.name, op)

    @staticmethod
    def _done(m: OperationMetrics, started: float, keys: int = 1) -> None:
        m.operations.inc()
        m.duration.observe(time.perf_counter() - started)
        if keys:
            m.keys.inc(keys)

    def unsupported_error(self, op: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"{op} is not supported by {self.store_type} stores: their primary key is the record "
            "key alone, so Cassandra cannot order or range over it; use a partitioned store",
            store=self.name, operation=op,
        )

    def estimated_partition_sizes(self) -> dict[str, int]:
        """Cheap size figures from `system.size_estimates` (refreshed by Cassandra every few
        minutes, local node only): `partitions` (estimated count) and `mean_partition_bytes`.

        Keep Cassandra partitions under ~100 MB: for a partitioned store one Kafka partition
        is one Cassandra partition.
        """
        rows = self.executor.execute(
            "size_estimates",
            "SELECT partitions_count, mean_partition_size FROM system.size_estimates "
            "WHERE keyspace_name = %s AND table_name = %s",
            (self.keyspace, self.table),
        )
        partitions = sum(int(r[0] or 0) for r in rows)
        weighted = sum(int(r[0] or 0) * int(r[1] or 0) for r in rows)
        return {
            "partitions": partitions,
            "mean_partition_bytes": weighted // partitions if partitions else 0,
        }
