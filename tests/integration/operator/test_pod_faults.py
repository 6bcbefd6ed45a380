"""What only the app's pods know, on the stack's node: an image that is not there, a pod that
cannot be scheduled, pods that admission refuses. Each makes the app Degraded with a reason
that names what to change, through the watch of the pods (the operator here resyncs every
600 s), while its children stay applied and the other apps are served; fixing the spec clears it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ...nodekit import TEST_POD_CPU, require_node
from ..waiting import wait_for
from .conftest import app_manifest, running_operator
from .kube import Kubectl, condition

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

MISSING = "localhost/floe/missing:0"
# A pod whose image is missing is still scheduled and holds its request (the default is a whole CPU).
SMALL = {"requests": {"cpu": TEST_POD_CPU}}


@pytest.fixture(scope="module")
def operator(kube: Kubectl, namespace: str) -> Iterator[object]:
    """The operator with a resync too slow to matter here: what the pods do reaches the apps'
    status through the watch of their pods."""
    with running_operator(kube, namespace, resync_seconds=600) as runner:
        yield runner


def _reason(kube: Kubectl, name: str, namespace: str, type_: str, reason: str, timeout: float = 90) -> dict[str, Any]:
    return wait_for(
        lambda: ((o := kube.get("streamingapp", name, namespace)) and condition(o, type_).get("reason") == reason
                 and o),
        what=f"{type_} {reason} on {name}", timeout=timeout, every=0.5,
    )


def test_pod_faults_degrade_only_their_app_and_clear_when_fixed(
    kube: Kubectl, spec_args: dict[str, Any], operator: object, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    ns = spec_args["namespace"]
    healthy = app_manifest("served", **spec_args, replicas=0)
    kube.apply(healthy)

    # An image that is not on the node: named, with the fields to fix; the Deployment stays.
    body = app_manifest("no-image", **spec_args, replicas=1, image=MISSING, imagePullPolicy="Never", resources=SMALL)
    kube.apply(body)
    obj = _reason(kube, "no-image", ns, "Degraded", "ImageUnavailable")
    message = condition(obj, "Degraded")["message"]
    assert MISSING in message and "ErrImageNeverPull" in message and "spec.image" in message, message
    assert condition(obj, "Ready")["status"] == "False"
    assert kube.get("deployment", "no-image", ns) is not None
    # The other app was served meanwhile.
    served = _reason(kube, "served", ns, "Ready", "ScaledToZero")
    assert condition(served, "Degraded")["status"] == "False"

    # The image fixed, the pod too large for the node: the scheduler's words.
    body["spec"].update(image=env["FLOE_JOB_IMAGE"], resources={"requests": {"cpu": "64"}})
    kube.apply(body)
    obj = _reason(kube, "no-image", ns, "Degraded", "Unschedulable")
    message = condition(obj, "Degraded")["message"]
    assert "Insufficient cpu" in message and "spec.resources.requests" in message, message

    # Scaled to zero, nothing is wrong any more.
    body["spec"]["replicas"] = 0
    kube.apply(body)
    obj = _reason(kube, "no-image", ns, "Degraded", "AsExpected")
    assert condition(obj, "Degraded")["status"] == "False"


def test_no_registry_is_reached_for_an_image_the_node_lacks(
    kube: Kubectl, spec_args: dict[str, Any], operator: object, stack_env: dict[str, str]
) -> None:
    """An image admission lets through (localhost/…) but the node does not have, pulled because
    the policy says Always: containerd sends the pull to the closed loopback port its registry
    configuration names for every registry, and the app says the image is unavailable."""
    require_node(stack_env)
    ns = spec_args["namespace"]
    kube.apply(app_manifest("pulls", **spec_args, replicas=1, image=MISSING, imagePullPolicy="Always",
                            resources=SMALL))
    obj = _reason(kube, "pulls", ns, "Degraded", "ImageUnavailable", timeout=120)
    assert MISSING in condition(obj, "Degraded")["message"]

    def pull_failures() -> list[str]:
        return [e["message"] for e in kube.list("event", ns) if e["reason"] == "Failed"
                and e["involvedObject"]["name"].startswith("pulls-") and "Failed to pull" in e["message"]]

    failures = wait_for(pull_failures, what="the kubelet's pull failure", timeout=60)
    assert all("127.0.0.1:9" in m for m in failures), failures


def test_pods_refused_by_admission_are_named(kube: Kubectl, spec_args: dict[str, Any], operator: object,
                                             stack_env: dict[str, str]) -> None:
    """The stack's node admits only images built here: a Deployment whose pods admission refuses
    leaves them uncreated, and the app says why (as it would for a Pod Security level or a quota)."""
    require_node(stack_env)
    ns = spec_args["namespace"]
    kube.apply(app_manifest("refused", **spec_args, replicas=1, image="registry.example.com/floe/job:1"))
    obj = _reason(kube, "refused", ns, "Degraded", "PodsRejected", timeout=120)
    message = condition(obj, "Degraded")["message"]
    assert "floe-local-images-only" in message, message
    assert not kube.list("pod", ns, "streaming.floe.dev/app=refused")
