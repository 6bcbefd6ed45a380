"""Scaling on the stack's node: the scale subresource and the native autoscaler, with pods.

- `kubectl scale stapp --replicas 3` on 2 input partitions: three pods come up Ready and the work
  spreads over all of them. Word count reads 2 input and 2 repartition partitions in one group, so
  every pod plans at least one of the 4, and every input partition is planned by a current pod. The
  app's ReplicasWithinPartitions condition says at least one replica owns no input partition
  (pigeonhole: 3 replicas, 2 input partitions). Scaling back to one drains the others; counts exact.
  Three pods prove what five did (more replicas than input partitions, each still given work) at
  two Spark starts less on the node's 2 CPUs.
- The native autoscaler under a lag burst (slow: `make test-all`): input several times faster than
  one replica works off scales the app up, never past the partition count, and back down once the
  backlog is worked off; counts exact.

The operator runs as its own process (`floe-operator`, with its lag loop), as in a cluster.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from floe_stack import demo, localrun

from tests import leftovers

from ...nodekit import TEST_POD_CPU, require_node, wait_exact_counts
from ..waiting import wait_for
from .kube import Kubectl

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 4  # the autoscaler's burst: it may scale up to this many replicas
# the scale test: more replicas than input partitions (one owns none), yet no fewer partitions of
# both stages (2 x SCALE_PARTITIONS) than replicas (each plans one)
SCALE_PARTITIONS, SCALE_PODS = 2, 3


@pytest.fixture(scope="module")
def lag_operator(kube: Kubectl, namespace: str, kubeconfig: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[subprocess.Popen[bytes]]:
    """`floe-operator` watching the test namespace, its lag loop ticking every 2 s."""
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "floe-operator"), "--namespace", namespace, "--metrics-port", "0",
             "--liveness-port", "0", "--resync-seconds", "5", "--lag-interval-seconds", "2"],
            env={**os.environ, "KUBECONFIG": kubeconfig}, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
            kube.run("delete", "streamingapp", "--all", "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)
        finally:
            proc.terminate()
            proc.wait(30)
    assert proc.returncode in (0, -15), f"the operator exited {proc.returncode}; its log: {log}"


class Feed:
    """Word lines produced to one topic from a thread, `per_tick` lines every 0.1 s; knows the truth."""

    def __init__(self, bootstrap: str, topic: str, *, per_tick: int) -> None:
        self.bootstrap, self.topic, self.per_tick = bootstrap, topic, per_tick
        self.truth: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.lines = localrun.word_lines(20_000, seed=11)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            chunk = self.lines[i : i + self.per_tick]
            localrun.produce(self.bootstrap, self.topic, chunk)
            self.truth.update(localrun.word_truth(chunk))
            i = (i + self.per_tick) % (len(self.lines) - self.per_tick)
            self.stop.wait(0.1)

    @contextlib.contextmanager
    def running(self) -> Iterator[Feed]:
        self.thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            self.thread.join(30)


def _app(kube: Kubectl, namespace: str, env: dict[str, str], name: str, *, max_batch: int | None = None,
         partitions: int = PARTITIONS, **spec: Any) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    topic_in, topic_out, keyspace = f"{name}-in-{run}", f"{name}-out-{run}", leftovers.keyspace(f"{name}_{run}")
    localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, partitions)
    localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic_out, partitions)
    body = demo.app_body(ROOT, env, namespace=namespace, topic_in=topic_in, topic_out=topic_out, keyspace=keyspace,
                         replicas=1)
    body["metadata"]["name"] = f"{name}-{run}"
    body["spec"]["resources"] = {"requests": {"cpu": TEST_POD_CPU, "memory": "1Gi"}, "limits": {"memory": "1536Mi"}}
    body["spec"]["spark"]["master"] = "local[1]"
    body["spec"].update(spec)
    if max_batch is not None:
        body["spec"]["kafka"]["maxRecordsPerBatch"] = max_batch
    kube.apply(body)
    return body


def _pods(kube: Kubectl, namespace: str, app: str) -> list[dict[str, Any]]:
    return [p for p in kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")
            if not p["metadata"].get("deletionTimestamp")]


def _ready_pods(kube: Kubectl, namespace: str, app: str, count: int) -> list[dict[str, Any]] | None:
    pods = _pods(kube, namespace, app)
    return pods if len(pods) == count and all(demo.is_ready(p) for p in pods) else None


def _owners(env: dict[str, str], keyspace: str, app_id: str) -> dict[tuple[str, int], str]:
    """(topic, partition) → the pod that planned it last (from Floe's offsets table)."""
    from cassandra.cluster import Cluster
    from floe_jobs import offsets

    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    try:
        rows = offsets.progress(cluster.connect(), keyspace=keyspace, app_id=app_id)
    finally:
        cluster.shutdown()
    return {tp: row[3].split("/")[0] for tp, row in rows.items()}


def _condition(kube: Kubectl, namespace: str, app: str, kind: str) -> dict[str, Any]:
    status = (kube.get("streamingapp", app, namespace) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def test_kubectl_scale_spreads_partitions_over_pods_and_scale_down_drains(
    kube: Kubectl, namespace: str, lag_operator: object, stack_env: dict[str, str]
) -> None:
    from floe_operator import model

    env = require_node(stack_env)
    body = _app(kube, namespace, env, "scale", partitions=SCALE_PARTITIONS)
    app, spec = body["metadata"]["name"], body["spec"]
    app_id = model.StreamingApp.from_body(body).app_id
    topic_in, topic_out = spec["kafka"]["topics"][0], spec["kafka"]["outputTopics"][0]
    keyspace = spec["state"]["cassandra"]["keyspace"]
    wait_for(lambda: _ready_pods(kube, namespace, app, 1), timeout=480, what="one Ready pod", every=2,
             pods=lambda: _pods(kube, namespace, app))
    with Feed(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, per_tick=5).running() as feed:
        start = time.monotonic()
        kube.run("scale", "streamingapp", app, "-n", namespace, f"--replicas={SCALE_PODS}")
        pods = wait_for(lambda: _ready_pods(kube, namespace, app, SCALE_PODS), timeout=600,
                        what=f"{SCALE_PODS} Ready pods", every=2, pods=lambda: _pods(kube, namespace, app))
        up_s = time.monotonic() - start
        names = {p["metadata"]["name"] for p in pods}

        seen: list[dict[tuple[str, int], str]] = []

        def spread() -> dict[tuple[str, int], str] | None:
            """Every partition of both stages planned by a current pod, and every pod planning one."""
            seen.append(owners := _owners(env, keyspace, app_id))
            inputs = {p for (t, p) in owners if t == topic_in}
            return owners if inputs == set(range(SCALE_PARTITIONS)) and len(owners) == 2 * SCALE_PARTITIONS and \
                set(owners.values()) == names else None

        try:
            owners = wait_for(spread, timeout=240, every=2,
                              what=f"all {2 * SCALE_PARTITIONS} partitions planned by the {SCALE_PODS} pods, "
                                   "each planning one")
        except AssertionError as e:
            raise AssertionError(f"{e}; pods {sorted(names)}; owners last seen {seen[-1] if seen else None}") from None
        idle = wait_for(lambda: (c := _condition(kube, namespace, app, "ReplicasWithinPartitions"))
                        .get("status") == "False" and c, timeout=60, what="ReplicasWithinPartitions False")
        assert "at least 1 replica(s) own no input partition" in idle["message"], idle
        kube.run("scale", "streamingapp", app, "-n", namespace, "--replicas=1")
        last = wait_for(lambda: _ready_pods(kube, namespace, app, 1), timeout=300, what="back to one Ready pod",
                        every=2, pods=lambda: _pods(kube, namespace, app))[0]["metadata"]["name"]
        # batches on the one pod after the others drained: it has planned every partition since
        wait_for(lambda: set(_owners(env, keyspace, app_id).values()) == {last}, timeout=120, every=1,
                 what=f"every partition planned by {last} after the scale-down")
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(feed.truth))
    print(f"scale 1 -> {SCALE_PODS}: {up_s:.0f} s to {SCALE_PODS} Ready pods; owners {owners}")


@pytest.mark.slow
def test_the_native_autoscaler_scales_pods_up_to_the_partitions_under_a_burst_and_back_down(
    kube: Kubectl, namespace: str, lag_operator: object, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    # small batches, so one replica's capacity is well below the burst's rate
    body = _app(kube, namespace, env, "burst", max_batch=200, autoscaling={
        "mode": "Native", "minReplicas": 1, "maxReplicas": 8, "catchUpSeconds": 10,
        "stabilizationWindowSeconds": 30})
    app, spec = body["metadata"]["name"], body["spec"]
    topic_in, topic_out = spec["kafka"]["topics"][0], spec["kafka"]["outputTopics"][0]
    keyspace = spec["state"]["cassandra"]["keyspace"]
    wait_for(lambda: _ready_pods(kube, namespace, app, 1), timeout=480, what="one Ready pod", every=2,
             pods=lambda: _pods(kube, namespace, app))

    def replicas() -> int:
        return int((kube.get("streamingapp", app, namespace) or {})["spec"]["replicas"])

    seen: list[int] = []
    # The burst: input several times faster than one replica works it off, so the lag grows at
    # every scrape. It lasts until the autoscaler scales up (at most 4 min), then the added pods
    # work off the backlog.
    with Feed(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, per_tick=400).running() as feed:
        wait_for(lambda: seen.append(replicas()) or seen[-1] > 1, timeout=240, what="a scale-up on lag", every=2)
    up_to = seen[-1]
    wait_for(lambda: _ready_pods(kube, namespace, app, up_to), timeout=420, what=f"{up_to} Ready pods", every=2,
             pods=lambda: _pods(kube, namespace, app))
    wait_for(lambda: seen.append(replicas()) or seen[-1] == 1, timeout=600, what="back to one replica", every=5)
    assert max(seen) <= PARTITIONS, f"scaled past the {PARTITIONS} partitions: {seen}"
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(feed.truth))
    status = (kube.get("streamingapp", app, namespace) or {}).get("status") or {}
    print(f"replicas seen: {sorted(set(seen))}; {sum(feed.truth.values())} words; "
          f"autoscaling {status.get('autoscaling')}")
