"""The tests' pod waits on the real API server and node: a wait on a pod the cluster says cannot
run gives up within a minute with the cluster's reason, instead of polling to its timeout
(tests/integration/waiting.py). The timeouts here are long on purpose: only the pod watch ends
these waits early."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from ...nodekit import kubectl
from ..waiting import wait_for

TIMEOUT = 300
WITHIN = 60


def _millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _pod(namespace: str, image: str, *, cpu: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": image, "imagePullPolicy": "Never",
                                 "command": ["sleep", "3600"]}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waited", "namespace": namespace},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]}}


def _give_up(env: dict[str, str], namespace: str, pod: dict[str, Any]) -> tuple[str, float]:
    """Apply `pod` and wait for it to be Ready; (the failure's message, seconds until it came)."""
    kubectl(env, "apply", "-f", "-", input=json.dumps(pod))

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(kubectl(env, "get", "pods", "-n", namespace, "-o", "json"))["items"]
        return items

    def ready() -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for p in pods() for c in p.get("status", {}).get("conditions") or [])

    t0 = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_for(ready, timeout=TIMEOUT, what="the pod Ready", every=2, pods=pods)
    return str(failed.value), time.monotonic() - t0


@pytest.mark.node
@pytest.mark.node_no_cpu  # Pending, or never started: it runs beside the node's group
@pytest.mark.k8s
def test_a_wait_on_a_pod_too_large_for_the_node_fails_within_a_minute_naming_insufficient_cpu(
    node_env: dict[str, str], namespace: str
) -> None:
    env = node_env
    (node,) = json.loads(kubectl(env, "get", "nodes", "-o", "json"))["items"]
    more = _millicores(node["status"]["allocatable"]["cpu"]) + 1000
    message, took = _give_up(env, namespace, _pod(namespace, env["FLOE_JOB_IMAGE"], cpu=f"{more}m"))
    print(f"a pod requesting {more}m gave up after {took:.1f} s: {message}")
    assert took < WITHIN, f"the wait took {took:.0f} s: {message}"
    assert "the pod Ready" in message and "Unschedulable" in message and "Insufficient cpu" in message, message


@pytest.mark.node
@pytest.mark.node_no_cpu  # Pending, or never started: it runs beside the node's group
@pytest.mark.k8s
def test_a_wait_on_a_pod_whose_image_is_not_on_the_node_fails_within_a_minute_naming_it(
    node_env: dict[str, str], namespace: str
) -> None:
    missing = f"localhost/floe/missing-{uuid.uuid4().hex[:6]}:0"
    message, took = _give_up(node_env, namespace, _pod(namespace, missing))
    print(f"a pod of a missing image gave up after {took:.1f} s: {message}")
    assert took < WITHIN, f"the wait took {took:.0f} s: {message}"
    assert "ErrImageNeverPull" in message and missing in message, message
