"""Automatic rollback on the stack's node (`spec.rollout.autoRollback`, `floe_operator.rollback`).

Word count runs Ready on one pod; a new generation names a job file its image does not have,
so its pod exits at start and crash-loops while the old pod keeps working (maxUnavailable 0).
The operator renders generation 1's spec again: the Deployment's pod template is generation 1's
to the byte, the crashing pod goes, the app says which generation failed and why (RolledBack,
Degraded and Stalled True, status.rolledBack), the spec stays as declared, and the counts of
the lines produced before and during the failed attempt are exact (none lost, none doubled).
The pod that ran generation 1 is the one still running afterwards (maxUnavailable 0: it never
stopped). A scale step while rolled back (a new generation, the same failed spec) keeps the
rollback and runs generation 1's pods; the next change of the spec is tried as usual and
recorded as the last Ready generation.
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

    def live_pods() -> list[dict[str, Any]]:
        return [
            p
            for p in kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")
            if not p["metadata"].get("deletionTimestamp")
        ]

    def ready_pods(count: int) -> list[dict[str, Any]] | None:
        live = live_pods()
        return live if len(live) == count and all(demo.is_ready(p) for p in live) else None

    def one_ready_pod() -> bool:
        return ready_pods(1) is not None

    def ready_recorded(generation: int, pods: int = 1) -> bool:
        status = stapp().get("status") or {}
        return (status.get("lastReady") or {}).get("generation") == generation and ready_pods(pods) is not None

    with running_operator(kube, namespace, resync_seconds=5):
        kube.apply(body)
        localrun.produce(bootstrap, topic_in, lines[:300])
        wait_for(lambda: ready_recorded(1), timeout=300, what="generation 1 Ready and recorded", every=2)
        good_template = template()
        (first_pod,) = live_pods()

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
        (pod,) = live_pods()
        assert pod["metadata"]["uid"] == first_pod["metadata"]["uid"], "generation 1's pod was replaced"
        assert all(c.get("restartCount", 0) == 0 for c in pod["status"]["containerStatuses"]), pod["status"]
        truth = localrun.word_truth(lines)
        wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(truth), timeout=300)
        assert condition(stapp(), "Ready").get("status") == "True"

        # a scale step (generation 3, the same failed spec) stays rolled back on generation 1's pods
        kube.run("scale", "streamingapp", app, "-n", namespace, "--replicas=2")
        wait_for(lambda: ready_pods(2), timeout=300, what="two Ready pods after the scale step", every=2)
        assert template() == good_template
        status = stapp()["status"]
        assert stapp()["metadata"]["generation"] == 3 and status["rolledBack"]["generation"] == 2, status
        assert condition(stapp(), "RolledBack").get("status") == "True"
        body["spec"]["replicas"] = 2

        # the next change is tried as declared, and recorded once Ready
        body["spec"]["job"]["entrypoint"] = good_entrypoint
        body["spec"]["shutdown"] = {**body["spec"].get("shutdown", {}), "drainTimeoutSeconds": 21}
        kube.apply(body)
        wait_for(lambda: ready_recorded(4, pods=2), timeout=300, what="generation 4 Ready on two pods and recorded",
                 every=2)
        status = stapp()["status"]
        assert "rolledBack" not in status, status
        assert (condition(stapp(), "RolledBack").get("status"), condition(stapp(), "RolledBack").get("reason")) == (
            "False",
            "NewGeneration",
        )
        assert condition(stapp(), "Stalled").get("status") == "False"
