"""An app that re-keys: the backlog of its repartition topic is its lag too.

The app is played as its runtime leaves it after a burst: its first stage (`split`) has
committed all of the input, its second (`count`) reads `<app id>-counts-repartition`, a real
topic holding records it has not committed yet. Offsets rows are written the way the stages
write them, to the real Cassandra; records are produced to the real Kafka; the loop writes
status and scales through the real API server. Only time is injected (`FakeClock`).

Before repartition topics were counted, this app read lag 0 (series and status.lag) and the
native autoscaler scaled it down once the stabilization window had passed, while the counting
stage still had thousands of records to go.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from floe_operator import k8s, model
from floe_operator.lag import decide
from floe_operator.lag import loop as lag_loop
from floe_stack import localrun
from prometheus_client import CollectorRegistry

from .conftest import FakeClock, OffsetsRows, in_process_loop, produce
from .test_lag_autoscaling import namespace, run  # noqa: F401 (namespace is a fixture)

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]

INTERVAL = 10.0
PARTITIONS = 2
INPUT = 100  # records per input partition, all committed by `split`
BACKLOG = 3000  # records per repartition partition, none committed by `count` yet
STABILIZATION = 60
REPLICAS = 2  # = the input partitions: the cap


@dataclass
class ReKeyedApp:
    """The app, its topics and rows, and a loop over it; `tick` is one interval of it."""

    name: str
    topic: str
    repartition: str
    rows: OffsetsRows
    loop: lag_loop.LagLoop
    registry: CollectorRegistry
    tick: Callable[..., Any]


@pytest.fixture
def rekeyed(
    namespace: str,  # noqa: F811 (the fixture imported above)
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    producer: Any,
    cql: Any,
    keyspace: str,
    admin: Any,
    kafka_bootstrap: str,
    app_manifest: Callable[..., dict[str, Any]],
    clock: FakeClock,
) -> Iterator[Callable[[], Any]]:
    created: list[str] = []

    async def make() -> ReKeyedApp:
        name = f"rekey-{uuid.uuid4().hex[:6]}"
        topic = make_topic(PARTITIONS)
        body = app_manifest(
            name,
            namespace,
            topics=[topic],
            keyspace=keyspace,
            replicas=REPLICAS,
            autoscaling={
                "mode": "Native",
                "minReplicas": 1,
                "maxReplicas": 4,
                "catchUpSeconds": 300,
                "stabilizationWindowSeconds": STABILIZATION,
            },
        )
        run(kubectl, kubeconfig, "apply", "--server-side", "--field-manager=floe-tests", "-f", "-",
            stdin=yaml.safe_dump(body))
        cluster = k8s.Cluster(k8s.load_client())
        live = await cluster.get(model.API_VERSION, model.KIND, namespace, name)
        app = model.StreamingApp.from_body(live or {})
        # the topic the runtime creates for `Batch.rekey("counts", ...)`, as wide as the input
        repartition = f"{app.app_id}-counts-repartition"
        localrun.create_topic(kafka_bootstrap, repartition, PARTITIONS)
        created.append(repartition)
        produce(producer, topic, dict.fromkeys(range(PARTITIONS), INPUT))
        produce(producer, repartition, dict.fromkeys(range(PARTITIONS), BACKLOG))
        rows = OffsetsRows(cql, keyspace, app.app_id)
        rows.commit(topic, dict.fromkeys(range(PARTITIONS), INPUT), stage="split")
        rows.commit(repartition, dict.fromkeys(range(PARTITIONS), 0), stage="count")
        # The Deployment runs the replicas asked for, and an earlier operator measured the replicas'
        # capacity (restored from status.autoscaling): the autoscaler is free to scale down.
        await cluster.patch_status(
            namespace,
            name,
            {
                "replicas": REPLICAS,
                "readyReplicas": REPLICAS,
                "updatedReplicas": REPLICAS,
                "autoscaling": {"mode": "Native", "capacityPerReplica": 100.0},
            },
        )
        loop, registry, apps = in_process_loop(cluster, cql, clock, interval=INTERVAL)

        async def tick() -> dict[str, Any]:
            """One interval: the Deployment follows spec.replicas (as the reconcile reports it),
            then the loop scrapes, decides and writes; the app as it is after the tick."""
            live = await cluster.get(model.API_VERSION, model.KIND, namespace, name)
            assert live is not None
            replicas = int(live["spec"]["replicas"])
            status = {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas}
            if any((live.get("status") or {}).get(k) != v for k, v in status.items()):
                live = await cluster.patch_status(namespace, name, status)
            apps[(namespace, name)] = live
            clock.advance(INTERVAL)
            await loop.tick()
            after = await cluster.get(model.API_VERSION, model.KIND, namespace, name)
            assert after is not None
            return after

        return ReKeyedApp(name, topic, repartition, rows, loop, registry, tick)

    yield make
    if created:
        for fut in admin.delete_topics(created).values():
            fut.result(timeout=30)


async def test_a_repartition_backlog_is_the_apps_lag_in_the_series_and_status(
    rekeyed: Callable[[], Any], namespace: str  # noqa: F811
) -> None:
    app = await rekeyed()
    after = await app.tick()

    backlog = PARTITIONS * BACKLOG
    lag = after["status"]["lag"]
    assert (lag["records"], lag.get("repartitionRecords")) == (backlog, backlog), lag
    assert lag["topics"][app.repartition]["records"] == backlog and lag["topics"][app.topic]["records"] == 0, lag

    get = app.registry.get_sample_value
    labels = {"namespace": namespace, "app": app.name}
    assert get("floe_consumergroup_sum_lag", labels) == backlog
    assert get("floe_consumergroup_repartition_sum_lag", labels) == backlog
    per_partition = [
        get("floe_consumergroup_lag", {**labels, "topic": app.repartition, "partition": str(p)})
        for p in range(PARTITIONS)
    ]
    assert per_partition == [BACKLOG] * PARTITIONS
    assert [get("floe_consumergroup_lag", {**labels, "topic": app.topic, "partition": str(p)})
            for p in range(PARTITIONS)] == [0] * PARTITIONS


async def test_the_native_autoscaler_does_not_scale_down_while_a_repartition_backlog_remains(
    rekeyed: Callable[[], Any], namespace: str  # noqa: F811
) -> None:
    app = await rekeyed()
    worked_off = 0
    history: list[tuple[int, str]] = []
    # Past the stabilization window twice: input quiet and caught up, the counting stage working
    # off 50 records per partition per interval (5 records/s each).
    for _ in range(2 * STABILIZATION // int(INTERVAL) + 2):
        after = await app.tick()
        history.append((int(after["spec"]["replicas"]), after["status"]["autoscaling"]["reason"]))
        worked_off += 50
        app.rows.commit(app.repartition, dict.fromkeys(range(PARTITIONS), worked_off), stage="count")

    scaled_down = [(tick, replicas, reason) for tick, (replicas, reason) in enumerate(history) if replicas < REPLICAS]
    assert scaled_down == []
    assert history[-1][1] in (decide.AT_LIMIT, decide.WORKING_OFF_BACKLOG), history
    labels = {"namespace": namespace, "app": app.name}
    assert app.registry.get_sample_value(
        "floe_autoscaler_decisions_total", {**labels, "action": "ScaleDown", "reason": decide.LOW_LOAD}
    ) is None
    # the sample of the last tick: the backlog less what `count` had committed before it
    remaining = PARTITIONS * (BACKLOG - (worked_off - 50))
    assert app.registry.get_sample_value("floe_consumergroup_sum_lag", labels) == remaining
    lag = after["status"]["lag"]  # written at most every 30 s while it only moves: as of an earlier tick
    assert lag["records"] == lag["repartitionRecords"] > 0, lag
