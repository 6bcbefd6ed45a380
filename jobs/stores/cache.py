"""An in-process read cache for a store: bounded by entries, each entry living `ttl` seconds.

It holds encoded values (bytes), so a caller mutating a decoded value cannot corrupt it, and
it remembers absent keys too. The store keeps it coherent with this process's own writes
(write-through on put, absent on delete, dropped on a failed write); writes by other
processes show after at most `ttl` seconds.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

ABSENT = object()
"""Cached marker of a key known to have no value."""

MISS = object()
"""Returned by `ReadCache.get` when the cache knows nothing about the key."""


@dataclass(frozen=True)
class CacheOptions:
    """Size and freshness of a store's read cache."""

    max_entries: int = 10_000
    ttl_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.max_entries <= 0:
            raise ValueError(f"max_entries must be positive, got {self.max_entries}")
        if self.ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive, got {self.ttl_seconds}")


class ReadCache:
    """LRU over (key -> encoded value | ABSENT) with a per-entry deadline. Thread-safe."""

    def __init__(self, options: CacheOptions, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> object:
        """The cached bytes, `ABSENT`, or `MISS` (unknown or expired)."""
        entries = self._entries
        with self._lock:
            entry = entries.get(key)
            if entry is None:
                self.misses += 1
                return MISS
            if entry[0] <= self._clock():
                del entries[key]
                self.misses += 1
                return MISS
            entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def set(self, key: Hashable, value: bytes | object) -> None:
        """Remember `value` (bytes or `ABSENT`) for `key`, evicting the least recently used."""
        deadline = self._clock() + self.options.ttl_seconds
        with self._lock:
            self._entries[key] = (deadline, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.options.max_entries:
                self._entries.popitem(last=False)

    def invalidate(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
