"""Rendered HPA, ScaledObject and TriggerAuthentication accepted by the real API server.

The HPA goes through the built-in autoscaling/v2 validation. For KEDA, the structural CRDs of
tests/unit/lag/keda-crds.yaml are installed for the test; the API server then validates
types and required fields, and prunes unknown fields — so the test checks that what comes
back still holds every field Floe rendered. All applies are server-side dry runs.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_operator import model
from floe_operator.lag import scalers

pytestmark = [pytest.mark.k8s]

ROOT = Path(__file__).resolve().parents[3]
KEDA_CRDS = ROOT / "tests/unit/lag/keda-crds.yaml"


def apply_crds(kubectl: str, kubeconfig: str, path: Path, *names: str) -> None:
    """Apply the CRDs of `path` (server-side, taking over fields another manager holds) and wait
    until the API server serves each of `names`."""
    run(kubectl, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(path))
    run(kubectl, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))


def apply_keda_crds(kubectl: str, kubeconfig: str) -> None:
    """KEDA's CRDs, applied and established each time (a test beside this one may have just created
    them), and left installed afterwards: a test beside this one may be using them."""
    apply_crds(kubectl, kubeconfig, KEDA_CRDS, scalers.KEDA_CRD, "triggerauthentications.keda.sh")


def run(binary: str, kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [binary, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def namespace(kubectl: str, kubeconfig: str) -> Iterator[str]:
    apply_keda_crds(kubectl, kubeconfig)
    name = f"floe-lag-scalers-{uuid.uuid4().hex[:6]}"
    run(kubectl, kubeconfig, "create", "namespace", name)
    yield name
    run(kubectl, kubeconfig, "delete", "namespace", name, "--wait=false")


def app(namespace: str, mode: str, **kafka: Any) -> model.StreamingApp:
    return model.StreamingApp.from_body(
        {
            "metadata": {"name": "orders", "namespace": namespace, "uid": str(uuid.uuid4())},
            "spec": {
                "image": "example/app:1",
                "job": {"entrypoint": "m:f"},
                "kafka": {"bootstrapServers": "kafka:9092", "topics": ["orders"], **kafka},
                "state": {"cassandra": {"hosts": ["cassandra"], "keyspace": "shop"}},
                "autoscaling": {"mode": mode, "minReplicas": 0, "maxReplicas": 8},
            },
        }
    )


def contains(rendered: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of rendered fields missing or different in what the API server returned."""
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [m for k, v in rendered.items() for m in contains(v, stored.get(k), f"{path}.{k}")]
    if isinstance(rendered, list):
        if not isinstance(stored, list) or len(stored) != len(rendered):
            return [path]
        return [
            m for i, (a, b) in enumerate(zip(rendered, stored, strict=True)) for m in contains(a, b, f"{path}[{i}]")
        ]
    return [] if rendered == stored else [path]


def dry_apply(kubectl: str, kubeconfig: str, obj: dict[str, Any]) -> dict[str, Any]:
    # Owner references name an app that does not exist in this test; the API server accepts that.
    out = run(
        kubectl,
        kubeconfig,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=floe-operator",
        "-o",
        "json",
        "-f",
        "-",
        stdin=yaml.safe_dump(obj),
    )
    return dict(json.loads(out))


def test_hpa_is_accepted_as_rendered(namespace: str, kubectl: str, kubeconfig: str) -> None:
    (hpa,) = scalers.children(app(namespace, "HPA"), keda_available=False, partitions=6)
    stored = dry_apply(kubectl, kubeconfig, hpa)
    assert contains(hpa["spec"], stored["spec"]) == []
    assert stored["spec"]["maxReplicas"] == 6


def test_scaled_object_and_trigger_authentication_are_accepted_as_rendered(
    namespace: str, kubectl: str, kubeconfig: str
) -> None:
    security = {
        "protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-256", "credentialsSecretRef": {"name": "kafka-user"}},
        "tls": {"caSecretRef": {"name": "kafka-ca"}},
    }
    objs = scalers.children(app(namespace, "KEDA", security=security), keda_available=True)
    assert [o["kind"] for o in objs] == ["TriggerAuthentication", "ScaledObject"]
    for obj in objs:
        stored = dry_apply(kubectl, kubeconfig, obj)
        assert contains(obj["spec"], stored["spec"]) == [], obj["kind"]


def test_a_wrong_type_is_rejected(namespace: str, kubectl: str, kubeconfig: str) -> None:
    so = scalers.scaled_object(app(namespace, "KEDA"))
    so["spec"]["maxReplicaCount"] = "eight"
    proc = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--dry-run=server", "-f", "-"],
        input=yaml.safe_dump(so),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "maxReplicaCount" in proc.stderr
