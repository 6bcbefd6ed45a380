"""asyncio faces of the stores, for code that runs on an event loop (HTTP handlers, Kopf).

Each call runs the blocking store call in a worker thread, so the loop never waits on
Cassandra; batched calls keep their own bounded concurrency inside that one thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from floe_jobs.stores.kv import GlobalStore, PartitionedStore

K = TypeVar("K")
V = TypeVar("V")


class AsyncPartitionedStore(Generic[K, V]):
    """`await store.get(p, k)` and friends over a `PartitionedStore`."""

    def __init__(self, store: PartitionedStore[K, V]) -> None:
        self.store = store

    async def get(self, partition: int, key: K) -> V | None:
        return await asyncio.to_thread(self.store.get, partition, key)

    async def get_many(self, partition: int, keys: Iterable[K]) -> dict[K, V]:
        return await asyncio.to_thread(self.store.get_many, partition, list(keys))

    async def get_many_fenced(self, partition: int, keys: Iterable[K]) -> dict[K, tuple[V | None, int | None]]:
        return await asyncio.to_thread(self.store.get_many_fenced, partition, list(keys))

    async def put(self, partition: int, key: K, value: V | None, *, ttl: int | None = None) -> None:
        await asyncio.to_thread(self.store.put, partition, key, value, ttl=ttl)

    async def put_all(self, partition: int, items: Iterable[tuple[K, V | None]], *, ttl: int | None = None) -> None:
        await asyncio.to_thread(self.store.put_all, partition, list(items), ttl=ttl)

    async def put_many_fenced(self, partition: int, items: Iterable[tuple[K, V | None]], *, batch: int,
                              ttl: int | None = None) -> None:
        await asyncio.to_thread(self.store.put_many_fenced, partition, list(items), batch=batch, ttl=ttl)

    async def delete(self, partition: int, key: K) -> None:
        await asyncio.to_thread(self.store.delete, partition, key)

    async def range(self, partition: int, from_key: K | None = None, to_key: K | None = None, *,
                    limit: int | None = None) -> Sequence[tuple[K, V]]:
        """A bounded list (not an iterator): at most `limit` entries."""
        return await asyncio.to_thread(_take, self.store.range(partition, from_key, to_key), limit)

    async def prefix_scan(self, partition: int, prefix: Any, *, limit: int | None = None) -> Sequence[tuple[K, V]]:
        return await asyncio.to_thread(_take, self.store.prefix_scan(partition, prefix), limit)


class AsyncGlobalStore(Generic[K, V]):
    """`await store.get(k)` and friends over a `GlobalStore`."""

    def __init__(self, store: GlobalStore[K, V]) -> None:
        self.store = store

    async def get(self, key: K) -> V | None:
        return await asyncio.to_thread(self.store.get, key)

    async def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        return await asyncio.to_thread(self.store.get_many, list(keys))

    async def put(self, key: K, value: V | None, *, ttl: int | None = None) -> None:
        await asyncio.to_thread(self.store.put, key, value, ttl=ttl)

    async def put_all(self, items: Iterable[tuple[K, V | None]], *, ttl: int | None = None) -> None:
        await asyncio.to_thread(self.store.put_all, list(items), ttl=ttl)

    async def delete(self, key: K) -> None:
        await asyncio.to_thread(self.store.delete, key)


def _take(items: Iterable[Any], limit: int | None) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if limit is not None and len(out) >= limit:
            break
        out.append(item)
    return out
