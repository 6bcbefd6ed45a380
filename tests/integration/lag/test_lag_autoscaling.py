"""A burst of input scales a StreamingApp up in the API server, and back down after the stabilization window.

The loop runs against the real API server, Kafka and Cassandra; only time is injected. The
app's work is played by the test: between two ticks it produces the input of the interval
and commits what `replicas * CAPACITY * interval` records allow, in the offsets table, as
the runtime would. The Deployment is stood in for by copying spec.replicas into the
status, as the reconcile does once the pods are up (there is no kubelet in the stack).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_operator import k8s, model
from floe_operator.lag import decide

from .conftest import FakeClock, OffsetsRows, in_process_loop, produce

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]

ROOT = Path(__file__).resolve().parents[3]
INTERVAL = 10.0
CAPACITY = 100  # records/s one replica works off
PARTITIONS = 6
STABILIZATION = 120


def run(binary: str, kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [binary, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def namespace(kubectl: str, kubeconfig: str) -> Any:
    kubectl_ = kubectl
    run(kubectl_, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds/streamingapp.yaml"))
    run(
        kubectl_,
        kubeconfig,
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/streamingapps.streaming.floe.dev",
    )
    name = f"floe-lag-it-{uuid.uuid4().hex[:6]}"
    run(kubectl_, kubeconfig, "create", "namespace", name)
    yield name
    run(kubectl_, kubeconfig, "delete", "namespace", name, "--wait=false")


async def test_burst_scales_up_then_down_after_the_window(
    namespace: str,
    kubectl: str,
    kubeconfig: str,
    make_topic: Any,
    producer: Any,
    cql: Any,
    keyspace: str,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    clock: FakeClock,
) -> None:
    topic = make_topic(PARTITIONS)
    body = {
        "apiVersion": model.API_VERSION,
        "kind": model.KIND,
        "metadata": {"name": "burst", "namespace": namespace},
        "spec": {
            "image": "example/app:1",
            "job": {"entrypoint": "m:f"},
            "replicas": 1,
            "kafka": {"bootstrapServers": kafka_bootstrap, "topics": [topic]},
            "state": {"cassandra": {"hosts": cassandra_hosts, "port": cassandra_port, "keyspace": keyspace}},
            "autoscaling": {
                "mode": "Native",
                "minReplicas": 1,
                "maxReplicas": 10,
                "catchUpSeconds": 120,
                "stabilizationWindowSeconds": STABILIZATION,
            },
        },
    }
    run(
        kubectl,
        kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=floe-tests",
        "-f",
        "-",
        stdin=yaml.safe_dump(body),
    )
    cluster = k8s.Cluster(k8s.load_client())
    app = model.StreamingApp.from_body(await cluster.get(model.API_VERSION, model.KIND, namespace, "burst") or {})
    rows = OffsetsRows(cql, keyspace, app.app_id)
    rows.commit(topic, dict.fromkeys(range(PARTITIONS), 0))

    loop, registry, apps = in_process_loop(cluster, cql, clock, interval=INTERVAL)
    ends = dict.fromkeys(range(PARTITIONS), 0)
    committed = dict.fromkeys(range(PARTITIONS), 0)
    history: list[tuple[float, int, int]] = []  # (time, spec.replicas after the tick, lag)

    async def tick(input_per_partition: int) -> dict[str, Any]:
        live = await cluster.get(model.API_VERSION, model.KIND, namespace, "burst")
        assert live is not None
        replicas = int(live["spec"]["replicas"])
        # The Deployment has caught up with spec.replicas (what the reconcile would report).
        status = {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas}
        if any((live.get("status") or {}).get(k) != v for k, v in status.items()):
            live = await cluster.patch_status(namespace, "burst", status)
        apps[(namespace, "burst")] = live
        # What happened during the interval: input arrives, the replicas work some of it off.
        if input_per_partition:
            produce(producer, topic, dict.fromkeys(range(PARTITIONS), input_per_partition))
            for p in ends:
                ends[p] += input_per_partition
        budget = int(min(replicas, PARTITIONS) * CAPACITY * INTERVAL / PARTITIONS)
        for p in committed:
            committed[p] = min(ends[p], committed[p] + budget)
        rows.commit(topic, committed)
        clock.advance(INTERVAL)
        await loop.tick()
        after = await cluster.get(model.API_VERSION, model.KIND, namespace, "burst")
        assert after is not None
        history.append((clock.now, int(after["spec"]["replicas"]), sum(ends.values()) - sum(committed.values())))
        return after

    # Quiet start: 50 records/s, one replica keeps up.
    for _ in range(4):
        await tick(50 // PARTITIONS * 10)
    assert history[-1][1] == 1
    start = clock.now

    # Burst: 1 200 records/s for 2 minutes.
    for _ in range(12):
        await tick(200 * 10)
    up = [(t, r) for t, r, _ in history if t > start and r > 1]
    assert up, history
    first_up = up[0][0]
    assert first_up - start <= 40, history  # within the up window and a few samples
    peak = max(r for _, r, _ in history)
    assert peak == PARTITIONS, history  # capped at the partitions, below maxReplicas 10

    # The burst ends: back to a trickle. The backlog drains, then the window passes.
    burst_end = clock.now
    for _ in range(40):
        app_now = await tick(5 * 10)
    downs = [(b[0], a[1], b[1]) for a, b in itertools.pairwise(history) if b[1] < a[1] and b[0] > burst_end]
    assert downs, history
    last_scale_up = max(b[0] for a, b in itertools.pairwise(history) if b[1] > a[1])
    assert downs[0][0] - last_scale_up >= STABILIZATION, (downs, history)
    for _, before, after in downs:
        assert after >= before - max(1, before // 2)
    # The lag was worked off before any scale-down.
    lag_at = {t: lag_ for t, _, lag_ in history}
    assert lag_at[downs[0][0]] < CAPACITY * downs[0][1] * 30

    # Status and events say what happened and why.
    status = app_now["status"]
    assert status["lag"]["stale"] is False and "records" in status["lag"] and topic in status["lag"]["topics"]
    auto = status["autoscaling"]
    assert auto["mode"] == "Native" and auto["capacityPerReplica"] == pytest.approx(CAPACITY, rel=0.1)
    assert "lastScaleTime" in auto
    # the Events the loop posted, as `kubectl describe streamingapp burst` lists them
    selector = "involvedObject.name=burst,involvedObject.kind=StreamingApp"
    listed = json.loads(
        run(kubectl, kubeconfig, "get", "events", "-n", namespace, "-o", "json", "--field-selector", selector)
    )["items"]
    assert all(e["source"]["component"] == "floe-operator" for e in listed)
    events = [(e["type"], e["reason"], e["message"]) for e in listed]
    kinds = {reason for _, reason, _ in events}
    assert kinds & {decide.LAG_ABOVE_CAPACITY, decide.LAG_GROWING}
    assert decide.LOW_LOAD in kinds
    up_event = next(m for _, r, m in events if r in (decide.LAG_ABOVE_CAPACITY, decide.LAG_GROWING))
    assert "inputRate=" in up_event and "lag=" in up_event and "replicas=1" in up_event
    samples = registry.get_sample_value(
        "floe_autoscaler_decisions_total",
        {"namespace": namespace, "app": "burst", "action": "ScaleDown", "reason": decide.LOW_LOAD},
    )
    assert samples and samples >= 1
    print(json.dumps(history))
