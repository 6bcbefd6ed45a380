"""Automatic rollback on the stack's node (`spec.rollout.autoRollback`, `floe_operator.rollback`).

Word count runs Ready on one pod; a new generation names a job file its image does not have,
so its pod exits at start and crash-loops while the old pod keeps working (maxUnavailable 0).
The operator renders generation 1's spec again: the Deployment's pod template is generation 1's
to the byte, the crashing pod goes, the app says which generation failed and why (RolledBack,
Degraded and Stalled True, status.rolledBack), the spec stays as declared, and the counts of
the lines produced before and during the failed attempt are exact (none lost, none doubled).
The next change of the spec is tried as usual and recorded as the last Ready generation.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_stack import demo, localrun

from ...nodekit import require_node, wait_exact_counts, word_count_app
from ..waiting import wait_for
from .conftest import running_operator
from .kube import Kubectl, condition

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

MISSING_JOB = "/opt/floe/examples/word-count/no_such_job.py"


def test_a_generation_whose_pods_crash_is_rolled_back_to_the_last_ready_spec_and_counts_stay_exact(
    kube: Kubectl, namespace: str, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    body = word_count_app(env, namespace=namespace, name="rollback", partitions=2, replicas=1)
    body["spec"]["rollout"] = {"autoRollback": True, "minReadySeconds": 2}
    app, bootstrap = body["metadata"]["name"], env["FLOE_KAFKA_BOOTSTRAP"]
    keyspace = body["spec"]["state"]["cassandra"]["keyspace"]
    topic_in, topic_out = body["spec"]["kafka"]["topics"][0], body["spec"]["kafka"]["outputTopics"][0]
    lines = localrun.word_lines(600, seed=23)
    good_entrypoint = body["spec"]["job"]["entrypoint"]

    def stapp() -> dict[str, Any]:
        return kube.get("streamingapp", app, namespace) or {}

    def template() -> dict[str, Any]:
        return (kube.get("deployment", app, namespace) or {})["spec"]["template"]

    def one_ready_pod() -> bool:
        live = [
            p
            for p in kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        return len(live) == 1 and demo.is_ready(live[0])

    def ready_recorded(generation: int) -> bool:
        status = stapp().get("status") or {}
        return (status.get("lastReady") or {}).get("generation") == generation and one_ready_pod()

    with running_operator(kube, namespace, resync_seconds=5):
        kube.apply(body)
        localrun.produce(bootstrap, topic_in, lines[:300])
        wait_for(lambda: ready_recorded(1), timeout=300, what="generation 1 Ready and recorded", every=2)
        good_template = template()

        body["spec"]["job"]["entrypoint"] = MISSING_JOB
        kube.apply(body)
        localrun.produce(bootstrap, topic_in, lines[300:])

        def rolled_back() -> dict[str, Any] | None:
            cond = condition(stapp(), "RolledBack")
            return cond if cond.get("status") == "True" else None

        cond = wait_for(rolled_back, timeout=300, what="RolledBack True on the app", every=2)
        status = stapp()["status"]
        record = status["rolledBack"]
        assert (record["generation"], record["toGeneration"], record["reason"]) == (2, 1, "CrashLooping"), record
        assert cond["reason"] == "CrashLooping" and "Generation 2 failed" in cond["message"], cond
        assert MISSING_JOB in cond["message"], cond  # the runtime's own words on why it stopped
        for kind in ("Degraded", "Stalled"):
            assert (condition(stapp(), kind).get("status"), condition(stapp(), kind).get("reason")) == (
                "True",
                "RolledBack",
            ), kind
        assert stapp()["spec"]["job"]["entrypoint"] == MISSING_JOB  # the spec stays as declared
        wait_for(lambda: template() == good_template, timeout=60, what="generation 1's pod template again", every=2)
        wait_for(one_ready_pod, timeout=300, what="one Ready pod on generation 1's spec", every=2)
        truth = localrun.word_truth(lines)
        wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(truth), timeout=300)
        assert condition(stapp(), "Ready").get("status") == "True"

        # the next change is tried as declared, and recorded once Ready
        body["spec"]["job"]["entrypoint"] = good_entrypoint
        body["spec"]["shutdown"] = {**body["spec"].get("shutdown", {}), "drainTimeoutSeconds": 21}
        kube.apply(body)
        wait_for(lambda: ready_recorded(3), timeout=300, what="generation 3 Ready and recorded", every=2)
        status = stapp()["status"]
        assert "rolledBack" not in status, status
        assert (condition(stapp(), "RolledBack").get("status"), condition(stapp(), "RolledBack").get("reason")) == (
            "False",
            "NewGeneration",
        )
        assert condition(stapp(), "Stalled").get("status") == "False"
