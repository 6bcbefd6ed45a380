"""Read-only interactive queries over a partitioned store, across all its partitions.

Any replica (or the operator) can answer a query about any key: the view asks Cassandra for
every partition in parallel and merges the answers, so no RPC layer between replicas is
needed. Range-like queries merge the per-partition streams in key order (a heap merge of
paged iterators: memory stays at about one page per partition).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from floe_jobs.stores.errors import StoreConfigError
from floe_jobs.stores.execution import Call
from floe_jobs.stores.kv import GlobalStore, PartitionedStore
from floe_jobs.stores.serdes import Serde

K = TypeVar("K")
V = TypeVar("V")


class PartitionedView(Generic[K, V]):
    """Read-only access to a `PartitionedStore` without knowing which partition holds a key.

    `partitions` is the partition count (0..n-1), an explicit list, or None to discover the
    partitions that hold rows (`SELECT DISTINCT partition`, read once, on first use).
    """

    def __init__(self, store: PartitionedStore[K, V], partitions: int | Iterable[int] | None = None) -> None:
        self.store = store
        self.name = store.name
        self._fixed: list[int] | None
        if partitions is None:
            self._fixed = None
        elif isinstance(partitions, int):
            if partitions < 1:
                raise StoreConfigError(f"partition count must be >= 1, got {partitions}", store=store.name)
            self._fixed = list(range(partitions))
        else:
            self._fixed = sorted(set(partitions))
        self._discovered: list[int] | None = None

    @property
    def key_serde(self) -> Serde[K]:
        return self.store.key_serde

    @property
    def value_serde(self) -> Serde[V]:
        return self.store.value_serde

    def partitions(self) -> list[int]:
        if self._fixed is not None:
            return self._fixed
        if self._discovered is None:
            self._discovered = self.store.partitions()
        return self._discovered

    def get(self, key: K) -> V | None:
        """The value of `key` in whichever partition holds it (the lowest, if several do)."""
        found = self.locate(key)
        return None if found is None else found[1]

    def locate(self, key: K) -> tuple[int, V] | None:
        """(partition, value) of `key`, asking every partition at once."""
        store = self.store
        kb = store.encode_key(key, "view_get")
        stmt = store.statement(
            "get:False", f"SELECT value FROM {store.qualified_table} WHERE partition = ? AND key = ?"
        )
        parts = self.partitions()
        calls: list[Call] = [(stmt, (p, kb)) for p in parts]
        results = store.executor.execute_concurrent(
            "view_get", calls, concurrency=store.options.concurrency, keys=[key] * len(calls)
        )
        for partition, rows in zip(parts, results, strict=True):
            if rows and rows[0][0] is not None:
                return partition, store.decode_value(rows[0][0], "view_get", partition, key)
        return None

    def _merge(self, streams: list[Iterator[tuple[K, V]]], partitions: list[int], reverse: bool,
               ) -> Iterator[tuple[int, K, V]]:
        encode = self.store.key_serde.encode
        streams = _prefetched(streams)

        def tagged(partition: int, stream: Iterator[tuple[K, V]]) -> Iterator[tuple[bytes, int, K, V]]:
            for key, value in stream:
                yield encode(key), partition, key, value

        merged = heapq.merge(
            *(tagged(p, s) for p, s in zip(partitions, streams, strict=True)),
            key=lambda item: (item[0], item[1]),
            reverse=reverse,
        )
        for _kb, partition, key, value in merged:
            yield partition, key, value

    def range(self, from_key: K | None = None, to_key: K | None = None, *,
              reverse: bool = False) -> Iterator[tuple[int, K, V]]:
        """(partition, key, value) in [from_key, to_key] over all partitions, in key order."""
        parts = self.partitions()
        if reverse:
            streams = [self.store.reverse_range(p, from_key, to_key) for p in parts]
        else:
            streams = [self.store.range(p, from_key, to_key) for p in parts]
        return self._merge(streams, parts, reverse)

    def all(self, *, reverse: bool = False) -> Iterator[tuple[int, K, V]]:
        return self.range(None, None, reverse=reverse)

    def prefix_scan(self, prefix: Any, *, prefix_serde: Serde[Any] | None = None,
                    reverse: bool = False) -> Iterator[tuple[int, K, V]]:
        parts = self.partitions()
        streams = [self.store.prefix_scan(p, prefix, prefix_serde=prefix_serde, reverse=reverse) for p in parts]
        return self._merge(streams, parts, reverse)


class GlobalView(Generic[K, V]):
    """The read-only face of a `GlobalStore`, for the same query endpoint."""

    def __init__(self, store: GlobalStore[K, V]) -> None:
        self.store = store
        self.name = store.name

    @property
    def key_serde(self) -> Serde[K]:
        return self.store.key_serde

    @property
    def value_serde(self) -> Serde[V]:
        return self.store.value_serde

    def locate(self, key: K) -> tuple[int | None, V] | None:
        value = self.store.get(key)
        return None if value is None else (None, value)

    def get(self, key: K) -> V | None:
        return self.store.get(key)

    def all(self, *, reverse: bool = False) -> Iterator[tuple[int | None, K, V]]:
        if reverse:
            raise self.store.unsupported_error("reverse_all")
        for key, value in self.store.all():
            yield None, key, value

    def prefix_scan(self, prefix: Any, *, prefix_serde: Serde[Any] | None = None,
                    reverse: bool = False) -> Iterator[tuple[int | None, K, V]]:
        raise self.store.unsupported_error("prefix_scan")


_END = object()


def _prefetched(streams: list[Iterator[Any]]) -> list[Iterator[Any]]:
    """Pulls the first item (so the first page) of every stream in parallel threads."""
    if len(streams) <= 1:
        return streams
    with ThreadPoolExecutor(max_workers=min(len(streams), 16), thread_name_prefix="floe-view") as pool:
        firsts = list(pool.map(lambda s: next(s, _END), streams))
    return [
        iter(()) if first is _END else itertools.chain([first], s)
        for first, s in zip(firsts, streams, strict=True)
    ]
