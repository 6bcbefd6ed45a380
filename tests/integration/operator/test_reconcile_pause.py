"""`streaming.floe.dev/reconcile: paused`, as a user drives it: against the real API server and
controller-manager, Kafka and Cassandra, with the operator in-process. While the annotation is
on, a changed spec reaches none of the app's children and status says why; once it is removed,
the children converge on the changed spec."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from floe_operator import conditions, model, render

from ..waiting import wait_for
from .conftest import RESYNC_SECONDS, app_manifest
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

PAUSED = f"{model.RECONCILE_ANNOTATION}={model.RECONCILE_PAUSED}"


def _app(kube: Kubectl, ns: str, name: str) -> dict[str, Any]:
    obj = kube.get("streamingapp", name, ns)
    assert obj is not None
    return obj


def _config(kube: Kubectl, ns: str, name: str) -> str:
    cm = kube.get("configmap", f"{name}-config", ns)
    assert cm is not None
    return str(cm["data"][render.CONFIG_FILE])


def _deployment(kube: Kubectl, ns: str, name: str) -> dict[str, Any]:
    dep = kube.get("deployment", name, ns)
    assert dep is not None
    return dep


def test_a_paused_app_keeps_its_children_and_converges_once_resumed(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns, name = spec_args["namespace"], "paused"
    kube.apply(app_manifest(name, **spec_args))
    wait_for(lambda: kube.get("deployment", name, ns), what="the Deployment")
    wait_for(
        lambda: _app(kube, ns, name).get("status", {}).get("observedGeneration") == 1,
        what="the first pass's status",
    )

    kube.run("annotate", "streamingapp", name, "-n", ns, PAUSED)
    wait_for(
        lambda: condition(_app(kube, ns, name), conditions.RECONCILE_PAUSED).get("status") == "True",
        what="ReconcilePaused True",
    )
    before = _deployment(kube, ns, name)
    config_before = _config(kube, ns, name)
    patch = {"spec": {"replicas": 3, "job": {"entrypoint": "wordcount.app:transform", "args": ["--paused"]}}}
    kube.run("patch", "streamingapp", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))

    # several resyncs and the update handler: nothing of the app changes
    time.sleep(4 * RESYNC_SECONDS)
    after = _deployment(kube, ns, name)
    assert after["spec"]["replicas"] == 2
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert _config(kube, ns, name) == config_before
    obj = _app(kube, ns, name)
    assert obj["metadata"]["generation"] == 2
    assert obj["status"]["observedGeneration"] == 1
    paused = condition(obj, conditions.RECONCILE_PAUSED)
    assert (paused["status"], paused["reason"]) == ("True", "ReconcilePaused")

    kube.run("annotate", "streamingapp", name, "-n", ns, f"{model.RECONCILE_ANNOTATION}-")
    wait_for(lambda: _deployment(kube, ns, name)["spec"]["replicas"] == 3, what="the Deployment at 3 replicas")
    wait_for(lambda: "--paused" in _config(kube, ns, name), what="the job config with the new args")
    obj = wait_for(
        lambda: (o := _app(kube, ns, name))["status"].get("observedGeneration") == 2 and o,
        what="the resumed pass's status",
    )
    resumed = condition(obj, conditions.RECONCILE_PAUSED)
    assert (resumed["status"], resumed["reason"]) == ("False", "ReconcileResumed")
