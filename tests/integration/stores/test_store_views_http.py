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
    app = make_app({"counts": PartitionedView(counts, 6), "config": GlobalView(glob)})
    client = TestClient(TestServer(app))
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
