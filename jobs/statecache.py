"""What a replica knows of the state rows of the partitions it owns, so that it reads them once.

A partition of a partitioned store has one writer at a time: the replica that owns the input
partition (`floe_jobs.membership`, assignments change only at batch boundaries). While that
ownership lasts, every (value, fence, write timestamp) this replica read from Cassandra or wrote
there is still what Cassandra holds, so the fenced read of a later batch can be answered here. A partition
whose Cassandra rows were empty when this replica took it is *complete*: a key unknown here is
absent there too, and a batch of new keys needs no read at all.

What is kept is tied to one assignment (`Membership.assignments`): a partition revoked and
assigned again, even between two batches, starts over, since another replica may have written
it meanwhile. A failed write drops the partition (some rows may have landed, with a fence the
kept copy lacks). A crash loses nothing that matters: the next owner reads Cassandra.

Only stores whose rows read back as the values written are kept: partitioned, no TTL (Cassandra
expires rows that a copy here would keep), and a value serde of immutable scalars (`CACHED_SERDES`).
The number of keys kept is bounded by `state.cache_max_keys`; a partition that would pass the
bound is emptied and reads Cassandra until it is assigned again. A partition the replica no
longer owns is forgotten at the replica's next batch (`retain`), and so is one whose offsets
row shows that another replica claimed it last (`forget_partition`: this replica was paused
past its session timeout and has not heard of it from the group yet).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# a state row as a fenced read returns it: (value, fence, written), `written` the highest write
# timestamp of its cells (None: no row), which the batch that writes the row next must go above
# (`floe_jobs.planning.row_stamp`)
Fenced = tuple[Any, int | None, int | None]
ABSENT: Fenced = (None, None, None)

# serdes whose decoded values are immutable scalars, and how a value written with each reads
# back (their encoders accept only these types, so a write that succeeded had one)
CACHED_SERDES: dict[str, Callable[[Any], Any]] = {
    "str": str,
    "bytes": bytes,
    "int": int,
    "long": int,
    "float": float,
}


def cacheable(*, store_type: str, ttl_seconds: int | None, value_serde: str) -> bool:
    """Whether rows of such a store read back as written for as long as a replica owns them."""
    return store_type == "partitioned" and ttl_seconds is None and value_serde in CACHED_SERDES


def as_read(value_serde: str, value: Any) -> Any:
    """`value` as a read of it after a write would return it (None: a fenced delete)."""
    return None if value is None else CACHED_SERDES[value_serde](value)


@dataclass(frozen=True)
class Ownership:
    """What a batch's state helpers need to use the cache: the replica's cache, and the
    assignment under which it owns each input partition of the batch."""

    cache: StateCache
    assignments: Mapping[int, int]

    def rows(self, store: str, partition: int, *, value_serde: str, is_empty: Callable[[], bool]) -> KnownRows:
        """What is known of `store`'s `partition` for this batch (`is_empty`: asked once per
        assignment)."""
        part = self.cache.partition(store, partition, self.assignments.get(partition), is_empty)
        return KnownRows(self.cache, store, partition, part, value_serde)


Fetch = Callable[[list[Any]], Mapping[Any, Fenced]]


@dataclass(frozen=True)
class KnownRows:
    """One partition's known rows during a batch: the fenced reads and writes go through it.
    Without a kept partition (`part` None: nothing may be kept) every read is fetched."""

    cache: StateCache | None
    store: str
    partition: int
    part: PartitionState | None
    value_serde: str

    def read(self, keys: list[Any], fetch: Fetch) -> dict[Any, Fenced]:
        """(value, fence, written) of every key: the known ones from here, the others by `fetch`."""
        if self.cache is None or self.part is None:
            return dict(fetch(keys))
        found, unknown = self.part.known(keys)
        if unknown:
            fetched = fetch(unknown)
            self.cache.remember(self.store, self.partition, self.part, fetched)
            found.update(fetched)
        return found

    def wrote(self, items: Iterable[tuple[Any, Any]], batch: int, stamp: int, raised: Mapping[Any, int]) -> None:
        """`items` were written under fence `batch` and write timestamp `stamp`, the keys in
        `raised` under the timestamp given there."""
        if self.cache is not None and self.part is not None:
            rows = {key: (as_read(self.value_serde, value), batch, raised.get(key, stamp)) for key, value in items}
            self.cache.remember(self.store, self.partition, self.part, rows)

    def forget(self) -> None:
        """A write failed: Cassandra may hold rows this copy does not."""
        if self.cache is not None:
            self.cache.drop(self.store, self.partition)


UNKNOWN = KnownRows(None, "", 0, None, "bytes")
"""For stores nothing is kept of: every read goes to Cassandra."""


@dataclass
class PartitionState:
    """The known rows of one store partition under one assignment."""

    assignment: int
    complete: bool
    rows: dict[Any, Fenced] = field(default_factory=dict)
    # past the bound: nothing is kept for the rest of this assignment
    disabled: bool = False

    def known(self, keys: Iterable[Any]) -> tuple[dict[Any, Fenced], list[Any]]:
        """(what is known of `keys`, the keys that must be read from Cassandra)."""
        found: dict[Any, Fenced] = {}
        unknown: list[Any] = []
        rows, complete = self.rows, self.complete
        for key in keys:
            row = rows.get(key)
            if row is not None:
                found[key] = row
            elif complete:
                found[key] = ABSENT
            else:
                unknown.append(key)
        return found, unknown


class StateCache:
    """Known rows per (store, partition) of one replica; the partitions are used from several
    threads at once (`floe_jobs.state` applies a batch's partitions side by side), each
    partition from one thread at a time."""

    def __init__(self, max_keys: int) -> None:
        self.max_keys = max_keys
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], PartitionState] = {}
        self._keys = 0

    def partition(
        self, store: str, partition: int, assignment: int | None, is_empty: Callable[[], bool]
    ) -> PartitionState | None:
        """The known rows of `store`'s `partition` under `assignment`; None when nothing may be
        kept (off, or no assignment known). `is_empty` is asked once per assignment."""
        if self.max_keys <= 0 or assignment is None:
            return None
        with self._lock:
            part = self._parts.get((store, partition))
            if part is not None and part.assignment == assignment:
                return None if part.disabled else part
            if part is not None:  # an earlier assignment's rows
                del self._parts[(store, partition)]
                self._keys -= len(part.rows)
        # one query per partition and assignment, outside the lock
        fresh = PartitionState(assignment=assignment, complete=is_empty())
        with self._lock:
            self._parts[(store, partition)] = fresh
        return fresh

    def remember(self, store: str, partition: int, part: PartitionState, rows: Mapping[Any, Fenced]) -> None:
        """Rows read from or written to Cassandra. A partition that would pass the bound is
        emptied instead: it reads Cassandra for the rest of its assignment."""
        with self._lock:
            if self._parts.get((store, partition)) is not part or part.disabled:
                return
            added = sum(1 for key in rows if key not in part.rows)
            if self._keys + added > self.max_keys:
                self._keys -= len(part.rows)
                part.rows, part.complete, part.disabled = {}, False, True
                return
            part.rows.update(rows)
            self._keys += added

    def retain(self, assignments: Collection[int]) -> None:
        """Forget the partitions whose assignment is not among `assignments` (the replica's
        current ones): a partition revoked from this replica holds no memory after that."""
        with self._lock:
            for where, part in list(self._parts.items()):
                if part.assignment not in assignments:
                    del self._parts[where]
                    self._keys -= len(part.rows)

    def drop(self, store: str, partition: int) -> None:
        """Forget a partition (a write failed: Cassandra may hold rows this copy does not)."""
        with self._lock:
            part = self._parts.pop((store, partition), None)
            if part is not None:
                self._keys -= len(part.rows)

    def forget_partition(self, partition: int) -> None:
        """Forget `partition` of every store: another replica wrote it since this one last did
        (a replica paused past its session timeout learns so from the offsets table)."""
        with self._lock:
            for where in [w for w in self._parts if w[1] == partition]:
                self._keys -= len(self._parts.pop(where).rows)

    @property
    def keys(self) -> int:
        with self._lock:
            return self._keys
