"""Interactive queries: a read-only view over all partitions, and the HTTP endpoint over it."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cassandra.cluster import Session
from floe_jobs.stores import GlobalStore, GlobalView, PartitionedStore, PartitionedView, StoreOptions, serdes
from floe_jobs.stores.endpoints import make_app
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra

TOKEN = "a-query-token-of-the-test"


@pytest.fixture
def counts(session: Session, keyspace: str, store_name: str, registry: CollectorRegistry,
           ) -> PartitionedStore[str, int]:
    store: PartitionedStore[str, int] = PartitionedStore(
        session, store_name, keyspace=keyspace, key_serde=serdes.STR, value_serde=serdes.LONG,
        options=StoreOptions(page_size=2), registry=registry,
    )
    data = {0: ["apple", "cherry"], 1: ["avocado", "banana", "date"], 2: ["apricot"], 5: ["elder"]}
    for partition, words in data.items():
        store.put_all(partition, [(w, len(w)) for w in words])
    return store


def test_view_over_all_partitions(counts: PartitionedStore[str, int]) -> None:
    view = PartitionedView(counts)  # partitions discovered
    assert view.partitions() == [0, 1, 2, 5]
    assert view.get("banana") == 6
    assert view.locate("elder") == (5, 5)
    assert view.get("fig") is None
    assert [k for _, k, _ in view.all()] == ["apple", "apricot", "avocado", "banana", "cherry", "date", "elder"]
    assert [k for _, k, _ in view.all(reverse=True)][:2] == ["elder", "date"]
    assert [(p, k) for p, k, _ in view.prefix_scan("ap")] == [(0, "apple"), (2, "apricot")]
    assert [k for _, k, _ in view.range("b", "d")] == ["banana", "cherry"]
    fixed = PartitionedView(counts, 3)  # partitions 0..2 only
    assert fixed.get("elder") is None
    assert [k for _, k, _ in fixed.prefix_scan("a", reverse=True)] == ["avocado", "apricot", "apple"]


async def test_http_endpoint(counts: PartitionedStore[str, int], session: Session, keyspace: str,
                             registry: CollectorRegistry) -> None:
    glob: GlobalStore[str, Any] = GlobalStore(session, counts.name + "-g", keyspace=keyspace,
                                              key_serde=serdes.STR, value_serde=serdes.JSON, registry=registry)
    glob.put("cfg", {"on": True})
    app = make_app({"counts": PartitionedView(counts, 6), "config": GlobalView(glob)}, token=TOKEN)
    client = TestClient(TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"})
    await client.start_server()
    try:
        resp = await client.get("/stores/counts/keys/banana")
        assert await resp.json() == {"store": "counts", "key": "banana", "value": 6, "partition": 1}
        resp = await client.get("/stores/counts", params={"prefix": "a", "limit": "2"})
        body = await resp.json()
        assert [(i["key"], i["partition"]) for i in body["items"]] == [("apple", 0), ("apricot", 2)]
        assert body["truncated"] is True
        assert (await client.get("/stores/counts/keys/zzz")).status == 404
        resp = await client.get("/stores/config/keys/cfg")
        assert (await resp.json())["value"] == {"on": True}
        assert (await (await client.get("/stores/config")).json())["items"] == [
            {"key": "cfg", "value": {"on": True}, "partition": None}]
        bad = await client.get("/stores/config", params={"prefix": "c"})
        assert bad.status == 400 and "global" in (await bad.json())["error"]
    finally:
        await client.close()


async def test_the_endpoint_answers_only_the_apps_token(counts: PartitionedStore[str, int]) -> None:
    client = TestClient(TestServer(make_app({"counts": PartitionedView(counts, 6)}, token=TOKEN)))
    await client.start_server()
    try:
        url = "/stores/counts/keys/banana"
        bare = await client.get(url)
        assert bare.status == 401 and bare.headers["WWW-Authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in (await bare.json())["error"]
        for wrong in ("Bearer not-the-token", f"Basic {TOKEN}", "Bearer ", f"Bearer {TOKEN}x"):
            resp = await client.get(url, headers={"Authorization": wrong})
            assert resp.status == 401, wrong
        assert (await client.get("/stores/counts", headers={"Authorization": "Bearer nope"})).status == 401
        right = await client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status == 200 and (await right.json())["value"] == 6
    finally:
        await client.close()


async def test_an_endpoint_without_a_token_refuses_everyone_unless_opened(counts: PartitionedStore[str, int]) -> None:
    for app, status in ((make_app({"counts": PartitionedView(counts, 6)}), 401),
                        (make_app({"counts": PartitionedView(counts, 6)}, open_access=True), 200)):
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            resp = await client.get("/stores/counts/keys/banana", headers={"Authorization": "Bearer anything"})
            assert resp.status == status
        finally:
            await client.close()


async def test_asyncio_faces(counts: PartitionedStore[str, int], session: Session, keyspace: str,
                             registry: CollectorRegistry) -> None:
    from floe_jobs.stores.aio import AsyncGlobalStore, AsyncPartitionedStore

    store = AsyncPartitionedStore(counts)
    assert await store.get(1, "banana") == 6
    await store.put_all(1, [("fig", 3), ("grape", 5)])
    assert await store.get_many(1, ["fig", "grape", "kiwi"]) == {"fig": 3, "grape": 5}
    await store.put_many_fenced(1, [("fig", 4)], batch=9)
    assert await store.get_many_fenced(1, ["fig"]) == {"fig": (4, 9)}
    assert [k for k, _ in await store.range(1, "b", None, limit=2)] == ["banana", "date"]
    assert await store.prefix_scan(1, "gr") == [("grape", 5)]
    await store.delete(1, "fig")
    assert await store.get(1, "fig") is None
    glob = AsyncGlobalStore(GlobalStore(session, counts.name + "-ag", keyspace=keyspace, key_serde=serdes.STR,
                                        value_serde=serdes.STR, registry=registry))
    await glob.put("a/b", "slash")
    assert await glob.get_many(["a/b"]) == {"a/b": "slash"}
    app = make_app({"g": GlobalView(glob.store)}, token=TOKEN)
    client = TestClient(TestServer(app), headers={"Authorization": f"Bearer {TOKEN}"})
    await client.start_server()
    try:
        resp = await client.get("/stores/g/keys/a%2Fb")
        assert (await resp.json())["value"] == "slash"
    finally:
        await client.close()
