"""kstatus (Flux, kpt) reads an app's health from Ready, Reconciling and Stalled and from
status.observedGeneration: an app that converged says Ready and neither Reconciling nor Stalled
for its current generation; an app the operator cannot converge without a change (here a
missing Secret) says Stalled with the fault's reason, and `kubectl wait` works on both."""

from __future__ import annotations

from typing import Any

import pytest

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]


def _kstatus(obj: dict[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    return tuple(condition(obj, t).get("status") for t in ("Ready", "Reconciling", "Stalled"))  # type: ignore[return-value]


def _current(kube: Kubectl, name: str, namespace: str) -> dict[str, Any]:
    """The app once its status is Ready, not Reconciling, not Stalled, for its current generation."""
    return wait_for(
        lambda: (
            (o := kube.get("streamingapp", name, namespace))
            and _kstatus(o) == ("True", "False", "False")
            and o["status"].get("observedGeneration") == o["metadata"]["generation"]
            and o
        ),
        what=f"{name} Ready, not Reconciling, not Stalled at its generation",
        timeout=90,
    )


def test_a_converged_app_is_ready_and_neither_reconciling_nor_stalled(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns = spec_args["namespace"]
    # No pods (their image is not built here): zero replicas converge as soon as the Deployment exists.
    body = app_manifest("kstatus-current", **spec_args, replicas=0)
    kube.apply(body)
    kube.run("wait", "--for=condition=Ready", "--timeout=90s", "streamingapp/kstatus-current", "-n", ns, timeout=100)
    obj = _current(kube, "kstatus-current", ns)
    assert condition(obj, "Reconciling")["reason"] == "ScaledToZero"
    assert condition(obj, "Stalled")["reason"] == "AsExpected"

    body["spec"]["image"] = "registry.example.com/floe/word-count:1.0.1"
    kube.apply(body)
    obj = _current(kube, "kstatus-current", ns)
    assert obj["metadata"]["generation"] == 2
    assert [condition(obj, t)["observedGeneration"] for t in ("Ready", "Reconciling", "Stalled")] == [2, 2, 2]


def test_a_missing_secret_stalls_the_app_until_it_exists(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns = spec_args["namespace"]
    body = app_manifest("kstatus-stalled", **spec_args, replicas=0)
    body["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": "kstatus-cass"}
    kube.apply(body)
    kube.run("wait", "--for=condition=Stalled", "--timeout=60s", "streamingapp/kstatus-stalled", "-n", ns, timeout=70)
    obj = kube.get("streamingapp", "kstatus-stalled", ns)
    assert _kstatus(obj) == ("False", "False", "True")
    stalled = condition(obj, "Stalled")
    assert stalled["reason"] == "SecretNotFound"
    assert "Secret kstatus-cass not found" in stalled["message"]
    assert condition(obj, "Reconciling")["reason"] == "Stalled"
    assert condition(obj, "Degraded")["reason"] == "SecretNotFound"  # kept for the tools that read it
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]

    kube.run(
        "create", "secret", "generic", "kstatus-cass", "-n", ns,
        "--from-literal=username=floe", "--from-literal=password=x",
    )
    obj = _current(kube, "kstatus-stalled", ns)
    assert condition(obj, "Stalled")["reason"] == "AsExpected"
