"""The HTTP query handler's routing, parsing and JSON shapes, over an in-memory view.

The view here is a plain dict-backed stand-in (pure unit test); the same handler over real
Cassandra-backed views is tested in tests/integration/stores.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from floe_jobs.stores import UnsupportedOperationError, serdes
from floe_jobs.stores.endpoints import make_app
from floe_jobs.stores.serdes import Serde


class DictView:
    def __init__(self, name: str, data: dict[int, dict[str, int]]) -> None:
        self.name = name
        self.data = data
        self.key_serde: Serde[Any] = serdes.STR
        self.value_serde: Serde[Any] = serdes.LONG

    def locate(self, key: str) -> tuple[int | None, Any] | None:
        for partition, entries in sorted(self.data.items()):
            if key in entries:
                return partition, entries[key]
        return None

    def _items(self) -> list[tuple[int | None, Any, Any]]:
        return sorted(((p, k, v) for p, e in self.data.items() for k, v in e.items()), key=lambda i: i[1])

    def all(self, *, reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]:
        return iter(self._items()[::-1] if reverse else self._items())

    def prefix_scan(self, prefix: Any, *, prefix_serde: Any = None,
                    reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]:
        return (i for i in self.all(reverse=reverse) if i[1].startswith(prefix))

    def range(self, lo: Any, hi: Any, *, reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]:
        return (i for i in self.all(reverse=reverse) if (lo is None or i[1] >= lo) and (hi is None or i[1] <= hi))


class NoScanView(DictView):
    def prefix_scan(self, prefix: Any, *, prefix_serde: Any = None,
                    reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]:
        raise UnsupportedOperationError("prefix_scan is not supported by global stores", store=self.name)


async def client() -> TestClient[Any, Any]:
    view = DictView("counts", {0: {"apple": 3, "avocado": 1}, 1: {"banana": 2}})
    words = NoScanView("words", {0: {"x": 1}})
    c = TestClient(TestServer(make_app({"counts": view, "words": words}, open_access=True)))
    await c.start_server()
    return c


async def test_get_key() -> None:
    c = await client()
    try:
        resp = await c.get("/stores/counts/keys/banana")
        assert resp.status == 200
        assert await resp.json() == {"store": "counts", "key": "banana", "value": 2, "partition": 1}
        missing = await c.get("/stores/counts/keys/cherry")
        assert missing.status == 404
        assert "cherry" in (await missing.json())["error"]
        unknown = await c.get("/stores/nope/keys/a")
        assert unknown.status == 404
        assert "counts" in (await unknown.json())["error"]
    finally:
        await c.close()


async def test_prefix_limit_and_truncation() -> None:
    c = await client()
    try:
        resp = await c.get("/stores/counts", params={"prefix": "a", "limit": "1"})
        body = await resp.json()
        assert body["items"] == [{"key": "apple", "value": 3, "partition": 0}]
        assert body["truncated"] is True
        full = await (await c.get("/stores/counts")).json()
        assert [i["key"] for i in full["items"]] == ["apple", "avocado", "banana"]
        assert full["truncated"] is False
        rev = await (await c.get("/stores/counts", params={"reverse": "true", "limit": "2"})).json()
        assert [i["key"] for i in rev["items"]] == ["banana", "avocado"]
        ranged = await (await c.get("/stores/counts", params={"from": "avocado", "to": "banana"})).json()
        assert [i["key"] for i in ranged["items"]] == ["avocado", "banana"]
    finally:
        await c.close()


async def test_bad_input_is_a_400() -> None:
    c = await client()
    try:
        for params in ({"limit": "x"}, {"limit": "0"}, {"limit": "100000"}):
            assert (await c.get("/stores/counts", params=params)).status == 400
        unsupported = await c.get("/stores/words", params={"prefix": "x"})
        assert unsupported.status == 400
        assert "global" in (await unsupported.json())["error"]
    finally:
        await c.close()


def test_islice_contract() -> None:
    # The handler reads limit + 1 items to tell whether it truncated.
    assert len(list(itertools.islice(iter(range(5)), 3 + 1))) == 4
