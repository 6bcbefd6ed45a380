"""Crash restarts on the stack's node: the runtime process of a replica's pod is SIGKILLed (from the
host, as the OOM killer or a node problem would: a container's own PID 1 ignores it from inside)
several times while text is produced. The kubelet restarts the container each time, the pod is
Ready again, the app's status counts the restarts, and the word counts stay exact in Cassandra
and in the output topic.

Each kill is timed on an observed event, not a sleep: after a wave of lines is produced, the
victim is the pod seen committing the wave's first batch of an input partition (its offsets row
in Cassandra moved, under its name), killed at once, so it dies in the middle of the wave's
work (the stateful stage's batches of that wave come after) whatever the machine's speed."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from floe_stack import demo, localrun

from ...nodekit import main_pid, require_node, wait_exact_counts, word_count_app
from ..waiting import wait_for
from .kube import Kubectl

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
REPLICAS = 2
LINES_PER_WAVE = 1000


def _pods(kube: Kubectl, ns: str, app: str) -> list[dict[str, Any]]:
    return [p for p in kube.list("pod", ns, f"app.kubernetes.io/instance={app}")
            if not p["metadata"].get("deletionTimestamp")]


def _names(body: dict[str, Any]) -> tuple[str, str, str]:
    """The app's input and output topics and keyspace."""
    spec = body["spec"]
    return spec["kafka"]["topics"][0], spec["kafka"]["outputTopics"][0], spec["state"]["cassandra"]["keyspace"]


def _committed(session: Any, keyspace: str, app_id: str, topic: str) -> dict[int, tuple[int, str]]:
    """(committed_seq, owning pod) of each partition of `topic`, from Floe's offsets rows."""
    from floe_jobs import offsets

    rows = offsets.progress(session, keyspace=keyspace, app_id=app_id)
    return {p: (row[1], row[3].split("/")[0]) for (t, p), row in rows.items() if t == topic}


def _restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or [])


# three kills in `make test`, ten in `make test-all` (slow)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kills", [3, pytest.param(10, marks=pytest.mark.slow)])
def test_sigkilled_replicas_restart_in_their_pods_and_counts_stay_exact(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str], kills: int
) -> None:
    env = require_node(stack_env)
    body = word_count_app(env, namespace=namespace, name="crash", partitions=6, replicas=REPLICAS)
    app, (topic_in, topic_out, keyspace) = body["metadata"]["name"], _names(body)
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    run = app.rsplit("-", 1)[1]
    kube.apply(body)

    def ready() -> list[dict[str, Any]] | None:
        pods = _pods(kube, namespace, app)
        return pods if len(pods) == REPLICAS and all(demo.is_ready(p) for p in pods) else None

    wait_for(ready, timeout=480, what=f"{REPLICAS} Ready pods", every=2, pods=lambda: _pods(kube, namespace, app))
    from cassandra.cluster import Cluster
    from floe_operator import model

    app_id = model.StreamingApp.from_body(body).app_id
    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    session = cluster.connect()
    rng = random.Random(run)
    lines: list[str] = []
    timing = []
    try:
        for wave in range(kills):
            before = _committed(session, keyspace, app_id, topic_in)
            batch = localrun.word_lines(LINES_PER_WAVE, seed=wave + 1)
            lines += batch
            t0 = time.monotonic()
            localrun.produce(bootstrap, topic_in, batch)

            def committing(before: dict[int, tuple[int, str]] = before) -> list[dict[str, Any]] | None:
                """The pods seen committing a batch of this wave (an input row moved under their name)."""
                now = _committed(session, keyspace, app_id, topic_in)
                names = {pod for p, (seq, pod) in now.items() if seq > before.get(p, (0, ""))[0]}
                if not names:
                    return None
                pods = [p for p in _pods(kube, namespace, app) if p["metadata"]["name"] in names]
                return pods or None

            victim = rng.choice(wait_for(committing, timeout=180, what=f"a batch of wave {wave + 1} committed",
                                         every=0.1))
            before_restarts = _restarts(victim)
            os.kill(main_pid(env, victim), signal.SIGKILL)
            timing.append(f"{time.monotonic() - t0:.1f}")
            name = victim["metadata"]["name"]

            def back(name: str = name, before: int = before_restarts) -> bool:
                pod = kube.get("pod", name, namespace)
                return pod is not None and _restarts(pod) > before and demo.is_ready(pod)

            wait_for(back, timeout=300, what=f"{name} restarted by the kubelet and Ready again (kill {wave + 1})",
                     every=2, pods=lambda: _pods(kube, namespace, app), tolerate={"CrashLoopBackOff"})
    finally:
        cluster.shutdown()

    truth = dict(localrun.word_truth(lines))
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=truth, timeout=300,
                      pods=lambda: _pods(kube, namespace, app), tolerate={"CrashLoopBackOff"})
    status = wait_for(lambda: (o := kube.get("streamingapp", app, namespace)) and
                      (o.get("status") or {}).get("restarts", 0) >= kills and o["status"],
                      timeout=60, what=f"status.restarts >= {kills}")
    print(f"{kills} SIGKILLs of {REPLICAS} pods, each on its first committed batch of a wave ({', '.join(timing)} s "
          f"after producing it): counts exact, status.restarts {status['restarts']}")
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)


def test_a_replica_whose_batches_fail_is_not_ready_until_one_succeeds(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str]
) -> None:
    """Its store table dropped under it, a replica's batches fail (not an outage it waits out):
    its pod leaves readiness; the table back, a batch commits and the pod is Ready again."""
    from cassandra.cluster import Cluster
    from floe_jobs.stores import schema

    env = require_node(stack_env)
    body = word_count_app(env, namespace=namespace, name="fail", partitions=2, replicas=1)
    app, (topic_in, _, keyspace) = body["metadata"]["name"], _names(body)
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    kube.apply(body)

    def the_pod(ready: bool) -> dict[str, Any] | None:
        pods = _pods(kube, namespace, app)
        return pods[0] if len(pods) == 1 and demo.is_ready(pods[0]) == ready and _restarts(pods[0]) == 0 else None

    wait_for(lambda: the_pod(True), timeout=480, what="the app's pod Ready", every=2,
             pods=lambda: _pods(kube, namespace, app))
    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    try:
        session = cluster.connect()
        table = schema.table_name("word-count")
        localrun.produce(bootstrap, topic_in, localrun.word_lines(200, seed=1))
        wait_for(lambda: localrun.read_store(session, keyspace, "word-count", key_serde="str", value_serde="long"),
                 timeout=120, what="a first committed batch", every=1)
        cluster.refresh_schema_metadata()
        cql = cluster.metadata.keyspaces[keyspace].tables[table].export_as_string()
        session.execute(f"DROP TABLE {keyspace}.{table}", timeout=60)
        localrun.produce(bootstrap, topic_in, localrun.word_lines(200, seed=2))
        wait_for(lambda: the_pod(False), timeout=60, what="the pod out of readiness while its batches fail",
                 every=1)
        session.execute(cql, timeout=60)
        wait_for(lambda: the_pod(True), timeout=120, what="the pod Ready again once a batch commits", every=1)
    finally:
        cluster.shutdown()
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)
