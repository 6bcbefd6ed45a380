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
