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

Only stores whose rows read back as the values written are kept: partitioned, with a value serde
of immutable scalars (`CACHED_SERDES`). A store with a TTL (`dedup`'s markers) is kept too, with
what a TTL changes (`Lifetime`): a row this replica wrote is known only while it surely lives in
Cassandra, from the moment its write was sent plus the TTL less a margin for the two clocks; from
then on it is read again, and once it is surely expired (the write's acknowledgement plus the TTL
plus the margin) a complete partition answers it as absent again. A row read from Cassandra with a
value is not kept (its remaining TTL is unknown); a key read as absent is, since only this owner
writes the partition and a TTL only removes rows.
The number of keys kept is bounded by `state.cache_max_keys`; a partition that would pass the
bound is emptied and reads Cassandra until it is assigned again. A complete partition keeps one
thing past the bound: a summary of the keys it holds (`KeySummary`, a Bloom filter of 16 to 32
bytes a key), so a key the summary surely lacks is still answered as absent without a read, and
only the others are read (new ids of `dedup` at a million keys). A partition the replica no
longer owns is forgotten at the replica's next batch (`retain`), and so is one whose offsets
row shows that another replica claimed it last (`forget_partition`: this replica was paused
past its session timeout and has not heard of it from the group yet).
"""

from __future__ import annotations

import threading
import time
from collections import deque
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


def cacheable(*, store_type: str, value_serde: str) -> bool:
    """Whether rows of such a store read back as written while a replica owns them (until their
    TTL, if any: `Lifetime`)."""
    return store_type == "partitioned" and value_serde in CACHED_SERDES


@dataclass(frozen=True)
class Lifetime:
    """How long a row written with a TTL is surely live, and after how long it is surely gone.

    Cassandra expires a cell `ttl` seconds after the whole second (its own clock) in which the
    coordinator wrote it, which is after the write was sent and before it was acknowledged: the
    row lives at least `ttl - 1` seconds after it was sent, and at most `ttl` after it was
    acknowledged. `margin` covers the two clocks drifting apart over the TTL: one second plus 1%
    of it. A TTL of a few seconds keeps nothing of the rows written."""

    ttl: float

    @property
    def margin(self) -> float:
        return 1.0 + self.ttl / 100

    def live_until(self, sent: float) -> float:
        return sent + self.ttl - 1.0 - self.margin

    def gone_after(self, acked: float) -> float:
        return acked + self.ttl + self.margin


def lifetime(ttl_seconds: int | None, *ttls: int | None) -> Lifetime | None:
    """The `Lifetime` of rows written with `ttl_seconds` (None or 0: they never expire), the
    shortest of it and `ttls` (the other TTLs a fenced write may give a row: a fenced delete's)."""
    if not ttl_seconds:
        return None
    return Lifetime(float(min([ttl_seconds, *(t for t in ttls if t)])))


def as_read(value_serde: str, value: Any) -> Any:
    """`value` as a read of it after a write would return it (None: a fenced delete)."""
    return None if value is None else CACHED_SERDES[value_serde](value)


@dataclass(frozen=True)
class Ownership:
    """What a batch's state helpers need to use the cache: the replica's cache, and the
    assignment under which it owns each input partition of the batch."""

    cache: StateCache
    assignments: Mapping[int, int]

    def rows(
        self,
        store: str,
        partition: int,
        *,
        value_serde: str,
        is_empty: Callable[[], bool],
        expiry: Lifetime | None = None,
    ) -> KnownRows:
        """What is known of `store`'s `partition` for this batch (`is_empty`: asked once per
        assignment; `expiry`: the store's rows expire, see `Lifetime`)."""
        part = self.cache.partition(store, partition, self.assignments.get(partition), is_empty)
        return KnownRows(self.cache, store, partition, part, value_serde, expiry)


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
    expiry: Lifetime | None = None

    def read(self, keys: list[Any], fetch: Fetch, *, now: float | None = None) -> dict[Any, Fenced]:
        """(value, fence, written) of every key: the known ones from here, the others by `fetch`.
        `now`: the monotonic clock (`time.monotonic`), for the rows of a store with a TTL."""
        if self.cache is None or self.part is None:
            return dict(fetch(keys))
        if self.part.expiring or self.part.fading:
            self.cache.expire(self.store, self.partition, self.part, time.monotonic() if now is None else now)
        found, unknown = self.part.known(keys)
        if unknown:
            fetched = fetch(unknown)
            # a row with a TTL read from Cassandra: how long it lives is not known here
            kept = fetched if self.expiry is None else {k: row for k, row in fetched.items() if row == ABSENT}
            self.cache.remember(self.store, self.partition, self.part, kept)
            found.update(fetched)
        return found

    def wrote(
        self,
        items: Iterable[tuple[Any, Any]],
        batch: int,
        stamp: int,
        raised: Mapping[Any, int],
        *,
        sent: float = 0.0,
        acked: float = 0.0,
    ) -> None:
        """`items` were written under fence `batch` and write timestamp `stamp`, the keys in
        `raised` under the timestamp given there. `sent`, `acked`: the monotonic clock before the
        write was sent and after it was acknowledged (only a store with a TTL needs them)."""
        if self.cache is not None and self.part is not None:
            rows = {key: (as_read(self.value_serde, value), batch, raised.get(key, stamp)) for key, value in items}
            if self.expiry is None:
                self.cache.remember(self.store, self.partition, self.part, rows)
            else:
                life = self.expiry
                written = Written(life.live_until(sent), life.gone_after(acked), list(rows), list(rows.values()))
                self.cache.remember(self.store, self.partition, self.part, rows, written=written)

    def forget(self) -> None:
        """A write failed: Cassandra may hold rows this copy does not."""
        if self.cache is not None:
            self.cache.drop(self.store, self.partition)


UNKNOWN = KnownRows(None, "", 0, None, "bytes")
"""For stores nothing is kept of: every read goes to Cassandra."""


class KeySummary:
    """The keys a complete partition may hold, past the bound: a Bloom filter (3 probes, 16
    one-byte slots a key, about 0.5% false positives) that says "maybe" for every key added and "surely
    not" for most others; it grows by adding a filter twice as large when full. Keys are
    summarized by Python's `hash` (stable within the process, which is all it lives)."""

    SLOTS = 16
    # odd multipliers that spread one 64-bit hash over the three probes
    MIX = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._filters: list[tuple[Any, int]] = []  # (slots, bits of an index)
        self._count = 0
        self._capacity = 0
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        import numpy as np

        bits = max(10, (capacity * self.SLOTS - 1).bit_length())
        self._filters.append((np.zeros(1 << bits, dtype=np.bool_), bits))
        self._capacity += capacity

    def _probes(self, keys: list[Any], bits: int) -> list[Any]:
        import numpy as np

        hashes = np.fromiter((hash(k) for k in keys), dtype=np.int64, count=len(keys)).view(np.uint64)
        shift = np.uint64(64 - bits)
        with np.errstate(over="ignore"):
            return [(hashes * np.uint64(m)) >> shift for m in self.MIX]

    def add(self, keys: list[Any]) -> None:
        if not keys:
            return
        if self._count + len(keys) > self._capacity:
            self._grow(max(self._capacity, len(keys)))
        slots, bits = self._filters[-1]
        for probe in self._probes(keys, bits):
            slots[probe] = True
        self._count += len(keys)

    def might_hold(self, keys: list[Any]) -> Any:
        """A boolean array: for each key, whether it may have been added (False: surely not)."""
        import numpy as np

        maybe = np.zeros(len(keys), dtype=np.bool_)
        for slots, bits in self._filters:
            a, b, c = self._probes(keys, bits)
            maybe |= slots[a] & slots[b] & slots[c]
        return maybe


@dataclass(frozen=True)
class Written:
    """Rows one write gave a store with a TTL: known until `live_until`, surely expired in
    Cassandra after `gone_after` (monotonic clock, `Lifetime`)."""

    live_until: float
    gone_after: float
    # the keys and the rows written for them, side by side (two lists: less memory than a dict)
    keys: list[Any]
    rows: list[Fenced]


@dataclass
class PartitionState:
    """The known rows of one store partition under one assignment."""

    assignment: int
    complete: bool
    rows: dict[Any, Fenced] = field(default_factory=dict)
    # past the bound: nothing is kept for the rest of this assignment
    disabled: bool = False
    # a store with a TTL: the writes whose rows are still known, oldest first; then the writes
    # whose rows may or may not have expired yet, and those rows' keys (`stale`, each with the
    # write that made it so), which must be read even from a complete partition
    expiring: deque[Written] = field(default_factory=deque)
    fading: deque[Written] = field(default_factory=deque)
    stale: dict[Any, Written] = field(default_factory=dict)
    # a complete partition past the bound: the keys it may hold, and no rows
    summary: KeySummary | None = None

    def known(self, keys: Iterable[Any]) -> tuple[dict[Any, Fenced], list[Any]]:
        """(what is known of `keys`, the keys that must be read from Cassandra)."""
        found: dict[Any, Fenced] = {}
        unknown: list[Any] = []
        if self.summary is not None:
            keys = keys if isinstance(keys, list) else list(keys)
            for key, maybe in zip(keys, self.summary.might_hold(keys).tolist(), strict=True):
                if maybe:
                    unknown.append(key)
                else:
                    found[key] = ABSENT
            return found, unknown
        rows, complete, stale = self.rows, self.complete, self.stale
        for key in keys:
            row = rows.get(key)
            if row is not None:
                found[key] = row
            elif complete and key not in stale:
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

    def remember(
        self,
        store: str,
        partition: int,
        part: PartitionState,
        rows: Mapping[Any, Fenced],
        *,
        written: Written | None = None,
    ) -> None:
        """Rows read from or written to Cassandra (`written`: by a write to a store with a TTL,
        known until it says). A partition that would pass the bound is emptied instead: it reads
        Cassandra for the rest of its assignment."""
        with self._lock:
            if self._parts.get((store, partition)) is not part or part.disabled:
                return
            if part.summary is not None:
                part.summary.add([key for key, row in rows.items() if row != ABSENT])
                return
            added = sum(1 for key in rows if key not in part.rows)
            if self._keys + added > self.max_keys:
                self._keys -= len(part.rows)
                if part.complete:  # keep what it may hold: absent keys still need no read
                    part.summary = KeySummary(max(1 << 16, 2 * (len(part.rows) + len(part.stale) + len(rows))))
                    part.summary.add([*part.rows, *part.stale])
                    part.summary.add([key for key, row in rows.items() if row != ABSENT])
                else:
                    part.complete, part.disabled = False, True
                part.rows, part.expiring, part.fading, part.stale = {}, deque(), deque(), {}
                return
            part.rows.update(rows)
            self._keys += added
            if part.stale:
                for key in rows:
                    part.stale.pop(key, None)
            if written is not None:
                part.expiring.append(written)

    def expire(self, store: str, partition: int, part: PartitionState, now: float) -> None:
        """Rows written with a TTL whose `live_until` passed are no longer known (read from
        Cassandra again), unless written again since; once their `gone_after` passed too, a
        complete partition answers them as absent again. `now`: the monotonic clock."""
        with self._lock:
            if self._parts.get((store, partition)) is not part:
                return
            while part.expiring and part.expiring[0].live_until <= now:
                written = part.expiring.popleft()
                for key, row in zip(written.keys, written.rows, strict=True):
                    if part.rows.get(key) is row:  # not written again since
                        del part.rows[key]
                        self._keys -= 1
                        part.stale[key] = written
                part.fading.append(written)
            while part.fading and part.fading[0].gone_after <= now:
                written = part.fading.popleft()
                for key in written.keys:
                    if part.stale.get(key) is written:
                        del part.stale[key]

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
