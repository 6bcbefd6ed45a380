"""`kubectl floe status` and `logs` against a word count running on the stack's node: the offsets rows
are read in the app's own pod (`kubectl exec … floe-job offsets`), so each input partition shows
the pod that owns it, no lag once the counts are exact, and its last commit; `logs` prefixes every
line with its pod. The pods run the job image built from the repository at stack start."""

from __future__ import annotations

import json
from typing import Any

import pytest
from floe_stack import demo, localrun

from ...nodekit import kubectl_floe, require_node, wait_exact_counts, word_count_app
from ..waiting import wait_for
from .kube import Kubectl

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]


def test_status_shows_each_partitions_owner_lag_and_last_commit(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    body = word_count_app(env, namespace=namespace, name="kfst", partitions=2, replicas=1)
    kube.apply(body)
    app, spec = body["metadata"]["name"], body["spec"]
    topic_in = spec["kafka"]["topics"][0]

    def pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")

    pod = wait_for(lambda: next((p for p in pods() if demo.is_ready(p)), None), timeout=480, every=2,
                   what="the app's pod Ready", pods=pods)
    lines = localrun.word_lines(200, seed=7)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, lines)
    wait_exact_counts(env, keyspace=spec["state"]["cassandra"]["keyspace"], topic_out=spec["kafka"]["outputTopics"][0],
                      truth=dict(localrun.word_truth(lines)), pods=pods)

    proc = kubectl_floe(env, "status", app, "-n", namespace, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    name = pod["metadata"]["name"]
    assert view["partitionsFrom"] == f"pod/{name}", view["partitionsError"]
    inputs = sorted((r["partition"], r["owner"], r["lag"]) for r in view["partitions"] if r["topic"] == topic_in)
    # an owner is the replica process that planned last: `<pod>/<process token>`
    assert [(p, o.split("/")[0]) for p, o, _ in inputs] == [(0, name), (1, name)], inputs
    assert all(len(o.split("/")) == 2 and o.split("/")[1] for _, o, _ in inputs), inputs
    assert all(lag == 0 for _, _, lag in inputs), view["partitions"]
    assert all(r["committed_at"] for r in view["partitions"] if r["topic"] == topic_in)

    table = kubectl_floe(env, "status", app, "-n", namespace)
    assert table.returncode == 0 and "LAST COMMIT" in table.stdout, table.stderr

    logs = kubectl_floe(env, "logs", app, "-n", namespace, "--tail", "20")
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout and all(ln.startswith(f"[pod/{name}/app]") for ln in logs.stdout.splitlines()), logs.stdout
