"""Children this operator has just written and whose watch event has not arrived yet.

A reconcile compares the desired children with watch-fed indexes. Right after an apply, the
index still shows the previous version (or nothing) until the watch delivers the write, and
any pass in that moment (the Deployment's own ADDED event, a resync tick, a status change)
would send the same apply again. With many apps created at once those duplicate writes
queue behind each other at the API server and delay every app's first rollout.

Each write is remembered until the watch delivers that exact resourceVersion; watch events
arrive in order, so from then on the index is at least as new as the write and is trusted
alone, and a later change by someone else is seen as drift as usual. `ttl` bounds how long
an entry can outlive a watch that restarted and skipped the version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

Key = tuple[str, str, str]  # (namespace, kind, name)


class RecentWrites:
    """Objects returned by our applies, kept until their version shows up in an index."""

    def __init__(self, *, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[Key, tuple[float, Mapping[str, Any]]] = {}

    @staticmethod
    def _version(obj: Mapping[str, Any]) -> str | None:
        return (obj.get("metadata") or {}).get("resourceVersion")

    def remember(self, stored: Mapping[str, Any]) -> None:
        """Record what the API server returned for a write (without its managedFields, which no
        comparison reads and which are most of an object's size)."""
        meta = {k: v for k, v in (stored.get("metadata") or {}).items() if k != "managedFields"}
        key = (meta.get("namespace", ""), str(stored.get("kind", "")), meta.get("name", ""))
        now = self._clock()
        # Entries whose event was coalesced with a later one would otherwise stay until read.
        for old in [k for k, (at, _) in self._entries.items() if now - at > self._ttl]:
            del self._entries[old]
        self._entries[key] = (now, {**stored, "metadata": meta})

    def observed(self, namespace: str, kind: str, name: str, body: Mapping[str, Any]) -> None:
        """A watch event for the object: the entry goes once the index holds our version, or a
        version with a newer spec (Kopf may coalesce our version with a later one)."""
        entry = self._entries.get((namespace, kind, name))
        if entry is None:
            return
        if self._version(entry[1]) == self._version(body) or _generation(body) > _generation(entry[1]):
            del self._entries[(namespace, kind, name)]

    def fresher(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Our last write of `body`'s object if the watch has not delivered it yet and its spec is
        not older than `body`'s; else `body`."""
        meta = body.get("metadata") or {}
        mine = self.get(meta.get("namespace", ""), str(body.get("kind", "")), meta.get("name", ""))
        return mine if mine is not None and _generation(mine) >= _generation(body) else body

    def forget(self, namespace: str, kind: str, name: str) -> None:
        self._entries.pop((namespace, kind, name), None)

    def get(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        """Our last write of the object if its watch event is still on the way."""
        key = (namespace, kind, name)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry[0] > self._ttl:
            del self._entries[key]
            return None
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)


def _generation(obj: Mapping[str, Any]) -> int:
    return int((obj.get("metadata") or {}).get("generation") or 0)
