"""Exactly-once state effects, applied from the driver with the stores' bounded concurrency.

Every row a batch writes into a partitioned store carries the batch's sequence number for
that input partition (the `floe_batch` fence column). A batch that is replayed after a crash
has the same sequence and the same input, so it computes the same per-key deltas; a key whose
fence is already ≥ the sequence was applied by the earlier attempt and is left alone. The
decisions are the pure `decide_*` functions below; the rest moves rows between Spark and
Cassandra, per distinct key, in bounded chunks of concurrent reads and writes, the partitions
of a batch side by side.

One partition has one writer at a time: assignment changes happen only at batch boundaries
(see `floe_jobs.membership`), and a killed replica writes nothing more. A replica that was
paused past its session timeout is the exception: it may still finish writing a batch after
another replica took the partition over. Its rows are written under the attempt's write
timestamp (`stamps`, from `floe_jobs.planning.stamp_for`), so they lose to every row a newer
batch or a replay wrote (see `floe_jobs.offsets`).

The fenced read also returns the highest write timestamp of each row's cells, and a row whose
cells another writer stamped at or above the batch's timestamp (the store library at its own
clock, the Java library, a replica whose clock ran ahead) is written just above them
(`floe_jobs.planning.row_stamp`): Cassandra would otherwise keep the other writer's cells,
value and fence alike, and the batch's delta would be lost once the row is read back. Those
timestamps come with the same SELECT: no extra round trip.

The helpers' rows are collected to the driver first (they are aggregated per key: few next to
the batch's records), and the functions below run there; they take an iterable of
(partition, key, value) rows, so they would run unchanged inside `mapPartitions`, or the Arrow
table Spark collected, which is grouped by partition in column operations (`group_table`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe_jobs import faults, planning, statecache
from floe_jobs.statecache import Fenced, Ownership

if TYPE_CHECKING:
    from floe_jobs.stores.config import CassandraConfig

Combine = Callable[[Any, Any], Any]

CHUNK = 2_000
# partitions of one batch whose state is read and written at the same time
PARTITION_WORKERS = 8

COMBINERS: dict[str, Combine] = {
    "sum": lambda a, b: a + b,
    "count": lambda a, b: a + b,
    "min": min,
    "max": max,
}


def already_applied(old: Fenced | None, batch: int) -> bool:
    return old is not None and old[1] is not None and old[1] >= batch


def decide_merge(old: Fenced | None, delta: Any, *, batch: int, combine: Combine) -> tuple[Any, bool]:
    """New value of an aggregate and whether to write it."""
    if old is None:
        return delta, True
    if already_applied(old, batch):
        return old[0], False
    if old[0] is None:
        return delta, True
    return combine(old[0], delta), True


def decide_latest(old: Fenced | None, new: Any, *, batch: int) -> tuple[Any, bool]:
    """Latest value per key: the batch's last value, unless this batch was already applied."""
    if already_applied(old, batch):
        assert old is not None
        return old[0], False
    return new, True


def decide_first_seen(old: Fenced | None, *, batch: int) -> tuple[bool, bool]:
    """De-duplication: (keep the record, write the marker). A marker written by an earlier
    attempt of this same batch means the record was first seen in this batch: keep it.
    A missing row reads as (None, None)."""
    if already_applied(old, batch):
        return True, False
    if old is None or old[0] is None:
        return True, True
    return False, False


@dataclass(frozen=True)
class StoreRef:
    """What an executor needs to open a store: picklable, no live connections."""

    cassandra: CassandraConfig
    keyspace: str
    name: str
    type: str
    ttl_seconds: int | None
    key_serde: str
    value_serde: str


_lock = threading.Lock()
_sessions: dict[CassandraConfig, Any] = {}
_stores: dict[StoreRef, Any] = {}


def _session(ref: StoreRef) -> Any:
    from floe_jobs.stores.config import connect

    with _lock:
        if ref.cassandra not in _sessions:
            _sessions[ref.cassandra] = connect(ref.cassandra)
        return _sessions[ref.cassandra]


def shutdown_sessions() -> None:
    """Close every store session of this process: no state write can leave it afterwards."""
    with _lock:
        sessions = list(_sessions.values())
        _sessions.clear()
        _stores.clear()
    for session in sessions:
        session.cluster.shutdown()


def open_store(ref: StoreRef) -> Any:
    """The store object of `ref`, cached per worker process (sessions are expensive).

    The driver provisions the tables at start; executors only open them.
    """
    from floe_jobs.stores import kv, serdes
    from floe_jobs.stores.base import StoreOptions
    from floe_jobs.stores.errors import StoreConfigError
    from floe_jobs.stores.schema import StoreSpec

    if ref.type not in ("partitioned", "global"):
        # a partitioned store over a versioned table would read and write the wrong columns
        raise StoreConfigError(
            f"the state helpers open partitioned and global stores, and this one is {ref.type}", store=ref.name
        )
    with _lock:
        cached = _stores.get(ref)
    if cached is not None:
        return cached
    session = _session(ref)
    spec = StoreSpec(name=ref.name, type=ref.type, ttl_seconds=ref.ttl_seconds)  # type: ignore[arg-type]
    cls = kv.GlobalStore if ref.type == "global" else kv.PartitionedStore
    store = cls(
        session,
        spec,
        keyspace=ref.keyspace,
        key_serde=serdes.by_name(ref.key_serde),
        value_serde=serdes.by_name(ref.value_serde),
        options=StoreOptions(create_table=False),
    )
    with _lock:
        _stores[ref] = store
    return store


def _chunks(items: list[Any], size: int = CHUNK) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _group(rows: Iterable[Any]) -> dict[int, list[tuple[Any, Any]]]:
    """(key, value) items by partition, in the order of `rows`: (partition, key, value) tuples,
    or an Arrow table of those three columns (`group_table`)."""
    if hasattr(rows, "column_names"):
        return group_table(rows)
    grouped: dict[int, list[tuple[Any, Any]]] = {}
    for partition, key, value in rows:
        if isinstance(key, bytearray):
            key = bytes(key)
        if isinstance(value, bytearray):
            value = bytes(value)
        grouped.setdefault(int(partition), []).append((key, value))
    return grouped


def by_partition(table: Any) -> Any:
    """An Arrow table (partition, key, value) sorted by partition, stably: within a partition
    the input order is kept. This is the order in which a fenced helper given the table
    answers its rows (`group_table`, then `_each_partition`), one answer per row: the
    helper's result is the sorted table's partition and key columns beside the answers
    (`floe_jobs.api.Batch._apply`). Columns renamed partition, key, value."""
    import pyarrow.compute as pc

    table = table.rename_columns(["partition", "key", "value"])
    if table.num_rows == 0:
        return table
    parts = table.column("partition").to_numpy()
    if bool((parts[1:] >= parts[:-1]).all()):
        return table  # already sorted: no copy (a table `_apply` sorted before the helper)
    return table.take(pc.sort_indices(table.column("partition")))  # stable: input order kept


def group_table(table: Any) -> dict[int, list[tuple[Any, Any]]]:
    """`_group` of an Arrow table (partition, key, value), as column operations: a stable sort
    by partition, then each partition's slice turned into (key, value) tuples at once. A
    helper's collected rows reach the state path this way without a Python loop per row
    (docs/runtime.md, "Where a replica's Python CPU goes"); binary keys and values come out as
    bytes."""
    if table.num_rows == 0:
        return {}
    table = by_partition(table)
    parts = table.column("partition").to_numpy()
    starts = [0, *(i + 1 for i in (parts[1:] != parts[:-1]).nonzero()[0].tolist())]
    grouped: dict[int, list[tuple[Any, Any]]] = {}
    for start, end in zip(starts, [*starts[1:], table.num_rows], strict=True):
        part = table.slice(start, end - start)
        grouped[int(parts[start])] = list(
            zip(part.column("key").to_pylist(), part.column("value").to_pylist(), strict=True)
        )
    return grouped


# What to emit for a key, what to store for it, and whether to write: from the stored
# (value, fence), the batch's input for the key, and the batch's sequence number.
Decide = Callable[[Fenced | None, Any, int], tuple[Any, Any, bool]]


def _each_partition(
    grouped: Mapping[int, list[tuple[Any, Any]]], fn: Callable[[int, list[tuple[Any, Any]]], list[Any]]
) -> Iterator[Any]:
    """`fn` over every partition's rows, the partitions concurrently: they are independent (own
    rows, own fence, own Cassandra partition), so a batch waits for its largest partition's round
    trips instead of the sum of them all. Results come out in partition order."""
    if len(grouped) <= 1:
        for partition, items in grouped.items():
            yield from fn(partition, items)
        return
    with ThreadPoolExecutor(max_workers=min(PARTITION_WORKERS, len(grouped)), thread_name_prefix="floe-state") as pool:
        futures = [pool.submit(fn, partition, items) for partition, items in sorted(grouped.items())]
        for future in futures:
            yield from future.result()


def _apply_fenced(
    rows: Iterable[Any],
    *,
    ref: StoreRef,
    fences: Mapping[int, int],
    decide: Decide,
    owned: Ownership | None = None,
    stamps: Mapping[int, int] | None = None,
    readonly: bool = False,
) -> Iterator[tuple[int, Any, Any]]:
    """The one read-decide-write loop behind every stateful helper: per partition and chunk,
    read the keys with their fences and write timestamps, let ``decide`` answer, write what
    changed under the partition's batch sequence and write timestamp (`stamps`; None: the clock,
    for tools that write outside a batch), a row stamped at or above it just above its cells.
    With `owned`, rows this replica already knows under the same assignment are not read again
    (`floe_jobs.statecache`). `readonly`: read and decide but write nothing, and leave the known
    rows alone (a trial of records, `floe_jobs.quarantine`)."""
    if ref.type != "partitioned":
        from floe_jobs.stores.errors import StoreConfigError

        raise StoreConfigError(
            f"fenced state is kept in partitioned stores, and this one is {ref.type}", store=ref.name
        )
    store = open_store(ref)
    if readonly or not statecache.cacheable(store_type=ref.type, value_serde=ref.value_serde):
        owned = None
    # rows written with a TTL are known only while they surely live (`floe_jobs.statecache`)
    expiry = statecache.lifetime(ref.ttl_seconds, store.options.fence_tombstone_ttl)

    def apply(partition: int, items: list[tuple[Any, Any]]) -> list[tuple[int, Any, Any]]:
        batch = fences[partition]
        stamp = faults.clock_us() if stamps is None else stamps[partition]
        known = statecache.UNKNOWN
        if owned is not None:
            known = owned.rows(
                f"{ref.keyspace}.{ref.name}",
                partition,
                value_serde=ref.value_serde,
                is_empty=lambda: not store.has_rows(partition),
                expiry=expiry,
            )
        out: list[tuple[int, Any, Any]] = []
        for chunk in _chunks(items):
            old = known.read([k for k, _ in chunk], lambda keys: store.get_many_stamped(partition, keys))
            writes, raised = _decide_chunk(chunk, old, decide, partition=partition, batch=batch, stamp=stamp, out=out)
            if writes and not readonly:
                faults.point(f"{ref.name}:mid-state")
                sent = time.monotonic()
                try:
                    store.put_many_fenced(
                        partition, writes, batch=batch, ttl=ref.ttl_seconds, stamp=stamp, stamps=raised or None
                    )
                except Exception:
                    known.forget()
                    raise
                known.wrote(writes, batch, stamp, raised, sent=sent, acked=time.monotonic())
        return out

    return _each_partition(_group(rows), apply)


def _decide_chunk(
    chunk: list[tuple[Any, Any]],
    old: Mapping[Any, Fenced],
    decide: Decide,
    *,
    partition: int,
    batch: int,
    stamp: int,
    out: list[tuple[int, Any, Any]],
) -> tuple[list[tuple[Any, Any]], dict[Any, int]]:
    """Decide every key of `chunk` against its stored row in `old`: what it emits is appended to
    `out`; returned are the rows to write and the keys whose row another writer stamped at or
    above `stamp` (their write goes just above that stamp, `planning.row_stamp`). One flat loop:
    it runs once per key of every stateful batch."""
    writes: list[tuple[Any, Any]] = []
    raised: dict[Any, int] = {}
    row_stamp = planning.row_stamp
    get, append, emit = old.get, writes.append, out.append
    for key, incoming in chunk:
        cell = get(key)
        emitted, stored, write = decide(cell, incoming, batch)
        if write:
            append((key, stored))
            # most rows: none, or stamped by earlier batches, below this one's stamp
            if cell is not None and cell[2] is not None and cell[2] >= stamp:
                raised[key] = row_stamp(stamp, cell[2])
        emit((partition, key, emitted))
    return writes, raised


def merge_partition_rows(
    rows: Iterable[Any],
    *,
    ref: StoreRef,
    fences: Mapping[int, int],
    combine: str,
    owned: Ownership | None = None,
    stamps: Mapping[int, int] | None = None,
    readonly: bool = False,
) -> Iterator[tuple[int, Any, Any]]:
    """(partition, key, delta) → merged into the store → (partition, key, new value)."""
    decide = merge_decider(COMBINERS[combine])
    return _apply_fenced(rows, ref=ref, fences=fences, decide=decide, owned=owned, stamps=stamps, readonly=readonly)


def merge_decider(fn: Combine) -> Decide:
    """`decide_merge` as a `Decide` (what to emit, what to store, whether to write), inlined: it
    runs once per key of every batch, and the calls of the composed form were a measurable part
    of the state path (docs/runtime.md, "Where a replica's Python CPU goes")."""

    def decide(old: Fenced | None, delta: Any, batch: int) -> tuple[Any, Any, bool]:
        if old is None:
            return delta, delta, True
        value, fence = old[0], old[1]
        if fence is not None and fence >= batch:
            return value, value, False
        merged = delta if value is None else fn(value, delta)
        return merged, merged, True

    return decide


def latest_partition_rows(
    rows: Iterable[Any],
    *,
    ref: StoreRef,
    fences: Mapping[int, int],
    owned: Ownership | None = None,
    stamps: Mapping[int, int] | None = None,
    readonly: bool = False,
) -> Iterator[tuple[int, Any, Any]]:
    """(partition, key, value) → the latest value kept per key → (partition, key, value)."""

    def decide(old: Fenced | None, new: Any, batch: int) -> tuple[Any, Any, bool]:
        value, write = decide_latest(old, new, batch=batch)
        return value, value, write

    return _apply_fenced(rows, ref=ref, fences=fences, decide=decide, owned=owned, stamps=stamps, readonly=readonly)


def first_seen_partition_rows(
    rows: Iterable[Any],
    *,
    ref: StoreRef,
    fences: Mapping[int, int],
    owned: Ownership | None = None,
    stamps: Mapping[int, int] | None = None,
    readonly: bool = False,
) -> Iterator[tuple[int, Any, bool]]:
    """(partition, key, marker) → (partition, key, keep?) with markers written under the TTL."""

    def decide(old: Fenced | None, marker: Any, batch: int) -> tuple[Any, Any, bool]:
        keep, write = decide_first_seen(old, batch=batch)
        return keep, marker, write

    return _apply_fenced(rows, ref=ref, fences=fences, decide=decide, owned=owned, stamps=stamps, readonly=readonly)


def lookup_rows(rows: Iterable[Any], *, ref: StoreRef) -> Iterator[tuple[int, Any, Any]]:
    """(partition, key, _) → (partition, key, stored value or None); global or partitioned store."""
    store = open_store(ref)

    def look(partition: int, items: list[tuple[Any, Any]]) -> list[tuple[int, Any, Any]]:
        out: list[tuple[int, Any, Any]] = []
        keys = sorted({k for k, _ in items}, key=repr)
        for chunk in _chunks(keys):
            found = store.get_many(chunk) if ref.type == "global" else store.get_many(partition, chunk)
            out.extend((partition, key, found.get(key)) for key in chunk)
        return out

    return _each_partition(_group(rows), look)
