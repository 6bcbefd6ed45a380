"""A poison record on the stack's node: a word count whose `split` fails on one line, run as a
StreamingApp with `spec.errors: stop` (the default).

The line's partition stops just before it, the app gets the PartitionsStopped condition naming
topic, partition, offset and error (from the offsets row, through the operator's lag loop), the
other partition is counted exactly, and the pod stays up with no restart, Ready again once the
pass that stops the partition completes (the failed passes before it take it out of its Service). A fixed job
rolled out (the same app, the failing check gone) takes the partition past the line, and the
condition turns False.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from floe_stack import demo, localrun

from ...nodekit import require_node, wait_exact_counts, word_count_app
from ..waiting import wait_for
from .conftest import running_operator
from .kube import Kubectl, condition

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
POISON_JOB = ROOT / "tests" / "integration" / "runtime" / "jobs" / "poison_count.py"
PARTITIONS = 2
POISON_INDEX = 2 * 20 + 1  # line i goes to partition i % 2 at offset i // 2: partition 1, offset 20


def _pod(kube: Kubectl, namespace: str, app: str) -> dict[str, Any] | None:
    pods = [
        p
        for p in kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")
        if not p["metadata"].get("deletionTimestamp")
    ]
    return pods[0] if len(pods) == 1 else None


def _restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or [])


def test_a_poison_record_stops_its_partition_and_names_it_on_the_app(
    kube: Kubectl, namespace: str, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    job = f"poison-job-{uuid.uuid4().hex[:6]}"
    kube.run("create", "configmap", job, "-n", namespace, f"--from-file=job.py={POISON_JOB}")
    body = word_count_app(env, namespace=namespace, name="poison", partitions=PARTITIONS, replicas=1)
    body["spec"]["job"] = {"entrypoint": "/opt/floe-test/job.py"}
    body["spec"]["podTemplate"] = {
        "spec": {
            "containers": [
                {"name": "app", "volumeMounts": [{"name": "job", "mountPath": "/opt/floe-test", "readOnly": True}]}
            ],
            "volumes": [{"name": "job", "configMap": {"name": job}}],
        }
    }
    app = body["metadata"]["name"]
    topic_in, topic_out = body["spec"]["kafka"]["topics"][0], body["spec"]["kafka"]["outputTopics"][0]
    keyspace = body["spec"]["state"]["cassandra"]["keyspace"]
    lines = localrun.word_lines(200, seed=5)
    lines[POISON_INDEX] = "POISON kafka spark"

    def pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")

    # the lag loop (every 2 s) sets PartitionsStopped
    with running_operator(kube, namespace, resync_seconds=5, lag_interval_seconds=2):
        kube.apply(body)
        wait_for(lambda: (p := _pod(kube, namespace, app)) is not None and demo.is_ready(p), timeout=480,
                 what="the app's pod Ready", every=2, pods=pods)
        localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, lines)

        def stopped() -> dict[str, Any] | None:
            obj = kube.get("streamingapp", app, namespace) or {}
            cond = condition(obj, "PartitionsStopped")
            return cond if cond.get("status") == "True" else None

        cond = wait_for(stopped, timeout=420, what="PartitionsStopped True on the app", every=2, pods=pods)
        assert cond["reason"] == "PoisonRecord"
        assert f"topic {topic_in} partition 1 stopped at offset 20" in cond["message"], cond["message"]
        assert "cannot split line POISON kafka spark" in cond["message"], cond["message"]
        # partition 0 whole, partition 1 up to the line
        counted = [line for i, line in enumerate(lines) if not (i % 2 == 1 and i // 2 >= 20)]
        wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(localrun.word_truth(counted)))
        # the failed passes before the stop took the pod out of its endpoints; the pass that
        # stops the partition completes, and the next readiness probe (every 5 s) brings it back
        def ready_pod() -> dict[str, Any] | None:
            p = _pod(kube, namespace, app)
            return p if p is not None and demo.is_ready(p) else None

        pod = wait_for(
            ready_pod,
            timeout=60,
            what="the app's pod Ready again after the partition stopped",
            every=1,
            pods=pods,
        )
        assert _restarts(pod) == 0, pod["status"]
        # a stopped partition does not make the app un-Ready (the status follows the pod within
        # a resync and the Deployment's minReadySeconds)
        wait_for(
            lambda: condition(kube.get("streamingapp", app, namespace) or {}, "Ready").get("status") == "True",
            timeout=60,
            what="Ready True on the app while its partition is stopped",
            every=1,
        )

        # The fix rolled out: the same job without its failing check. The new pod plans the
        # stopped partition again, commits past the line, and the condition clears.
        fixed = POISON_JOB.read_text().replace('POISON = "POISON"', 'POISON = "NEVER-MATCHES-ANY-LINE"')
        kube.run("create", "configmap", f"{job}-fixed", "-n", namespace, "--from-literal=job.py=" + fixed)
        body["spec"]["podTemplate"]["spec"]["volumes"][0]["configMap"]["name"] = f"{job}-fixed"
        kube.apply(body)

        def cleared() -> dict[str, Any] | None:
            obj = kube.get("streamingapp", app, namespace) or {}
            cond = condition(obj, "PartitionsStopped")
            return cond if cond.get("status") == "False" else None

        cond = wait_for(cleared, timeout=480, what="PartitionsStopped False after the fix", every=2, pods=pods)
        assert cond["reason"] == "NoneStopped"
        wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(localrun.word_truth(lines)))
