"""k8s.Urgency: urgent writes go first, the others wait for them but never longer than the patience."""

from __future__ import annotations

import asyncio

from floe_operator import k8s


def test_other_writes_wait_while_urgent_ones_are_pending() -> None:
    async def scenario() -> list[str]:
        urgency = k8s.Urgency(patience=5.0)
        order: list[str] = []
        release = asyncio.Event()

        async def urgent(name: str) -> None:
            async with urgency.first():
                await release.wait()
                order.append(name)

        async def other(name: str) -> None:
            await urgency.after()
            order.append(name)

        tasks = [asyncio.create_task(urgent("deployment-a")), asyncio.create_task(urgent("deployment-b"))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(other("status-a")))
        await asyncio.sleep(0.05)
        assert order == []  # the status write is held while Deployments are in flight
        release.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["deployment-a", "deployment-b", "status-a"]


def test_nothing_pending_means_no_wait_and_patience_bounds_the_wait() -> None:
    async def scenario() -> tuple[float, float]:
        urgency = k8s.Urgency(patience=0.2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await urgency.after()
        idle = loop.time() - started
        stuck = asyncio.Event()

        async def never_done() -> None:
            async with urgency.first():
                await stuck.wait()

        task = asyncio.create_task(never_done())
        await asyncio.sleep(0)
        started = loop.time()
        await urgency.after()
        waited = loop.time() - started
        stuck.set()
        await task
        return idle, waited

    idle, waited = asyncio.run(scenario())
    assert idle < 0.05
    assert 0.15 <= waited < 1.0


class RecordingCluster(k8s.Cluster):
    """A Cluster whose calls are recorded instead of sent."""

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.calls: list[str] = []

    def get_sync(self, api_version: str, kind: str, namespace: str, name: str, *, timeout: float = 30) -> None:
        self.calls.append(f"get {kind}")

    def post_event_sync(self, involved: object, type_: str, reason: str, message: str) -> None:
        self.calls.append(f"event {reason}")


def test_events_and_deferred_reads_wait_for_urgent_writes_and_other_reads_do_not() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        cluster = RecordingCluster()
        release = asyncio.Event()

        async def deployment() -> None:
            async with cluster._urgent.first():
                await release.wait()

        holding = asyncio.create_task(deployment())
        await asyncio.sleep(0)
        app = {"metadata": {"name": "a", "namespace": "ns", "uid": "u"}}
        tasks = [
            asyncio.create_task(cluster.get("networking.k8s.io/v1", "NetworkPolicy", "ns", "a", deferred=True)),
            asyncio.create_task(cluster.post_event(app, "Normal", "Ready", "ready")),
            asyncio.create_task(cluster.get("rbac.authorization.k8s.io/v1", "Role", "ns", "a")),
        ]
        await asyncio.sleep(0.1)
        during = list(cluster.calls)
        release.set()
        await asyncio.gather(holding, *tasks)
        return during, cluster.calls

    during, after = asyncio.run(scenario())
    assert during == ["get Role"]  # what a new app's pods need is read at once
    assert sorted(after) == ["event Ready", "get NetworkPolicy", "get Role"]
