"""`kubectl floe` as users run it: the stack's real kubectl finds the plugin `kubectl-floe` on PATH
(this venv's bin) and the plugin talks to the real API server through that kubectl, with the
operator (in-process, watching the test namespace) acting on what it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

APP = "kf"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def floe_env(kubectl: str, kubeconfig: str) -> dict[str, str]:
    """PATH with this venv's bin (where `kubectl-floe` is installed) and the stack's kubectl, and
    nothing else of the tests' own: plugin discovery is kubectl's."""
    path = os.pathsep.join([str(BIN), str(Path(kubectl).parent), "/usr/bin", "/bin"])
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECTL",)}
    env.update(PATH=path, KUBECONFIG=kubeconfig)
    return env


def floe(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`kubectl floe ARGS`, `kubectl` being the stack's (first on PATH after this venv's bin)."""
    return subprocess.run(
        ["kubectl", "floe", *args], input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def _deployment_replicas(kube: Kubectl, namespace: str) -> int | None:
    dep = kube.get("deployment", APP, namespace) or {}
    return (dep.get("spec") or {}).get("replicas")


@pytest.fixture(scope="module")
def app(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> dict[str, Any]:
    body = app_manifest(APP, **spec_args)
    kube.apply(body)
    ns = spec_args["namespace"]
    wait_for(lambda: _deployment_replicas(kube, ns) == 2, timeout=60, what="the app's Deployment at 2 replicas")
    return body


def test_plugin_list_shows_kubectl_floe(floe_env: dict[str, str]) -> None:
    proc = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True, env=floe_env, timeout=60)
    assert str(BIN / "kubectl-floe") in proc.stdout, proc.stdout + proc.stderr


def test_validate_refuses_a_bad_manifest_naming_the_field(
    floe_env: dict[str, str], kube: Kubectl, spec_args: dict[str, Any]
) -> None:
    ns = spec_args["namespace"]
    bad = app_manifest("kf-bad", **spec_args, replicas=-1)
    proc = floe(floe_env, "validate", "-f", "-", stdin=yaml.safe_dump(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "refused by the API server" in proc.stderr and "spec.replicas" in proc.stderr, proc.stderr
    assert kube.get("streamingapp", "kf-bad", ns) is None  # a dry run


def test_validate_refuses_what_only_the_operator_checks_naming_the_field(
    floe_env: dict[str, str], kube: Kubectl, spec_args: dict[str, Any]
) -> None:
    # the schema lets it through; the operator would make the app Degraded (InvalidPodTemplate)
    side = {"name": "side", "image": "busybox", "ports": [{"containerPort": 9400}]}
    bad = app_manifest("kf-side", **spec_args, podTemplate={"spec": {"containers": [side]}})
    proc = floe(floe_env, "validate", "-f", "-", stdin=yaml.safe_dump(bad))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the API server accepts it, but the runtime would refuse it" in proc.stderr, proc.stderr
    assert "spec.podTemplate.spec.containers[0].ports[0].containerPort: 9400 is a port of Floe's container" in (
        proc.stderr
    )
    assert kube.get("streamingapp", "kf-side", spec_args["namespace"]) is None


def test_validate_accepts_a_good_manifest(floe_env: dict[str, str], spec_args: dict[str, Any],
                                          tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(yaml.safe_dump(app_manifest("kf-good", **spec_args)))
    proc = floe(floe_env, "validate", "-f", str(manifest))
    assert proc.returncode == 0, proc.stderr
    assert "streamingapp/kf-good valid" in proc.stdout


def test_validate_accepts_a_change_to_an_app_another_manager_applied(
    floe_env: dict[str, str], kube: Kubectl, app: dict[str, Any], spec_args: dict[str, Any]
) -> None:
    # spec.replicas belongs to the tests' field manager: a dry run must not report that as a conflict
    changed = {**app, "spec": {**app["spec"], "replicas": 3}}
    proc = floe(floe_env, "validate", "-f", "-", stdin=yaml.safe_dump(changed))
    assert proc.returncode == 0, proc.stderr
    assert f"streamingapp/{APP} valid" in proc.stdout
    assert (kube.get("streamingapp", APP, spec_args["namespace"]) or {})["spec"]["replicas"] == 2  # nothing stored


def test_suspend_and_resume_change_spec_and_the_deployment_replicas(
    floe_env: dict[str, str], kube: Kubectl, app: dict[str, Any], spec_args: dict[str, Any]
) -> None:
    ns = spec_args["namespace"]
    proc = floe(floe_env, "suspend", APP, "-n", ns)
    assert proc.returncode == 0, proc.stderr
    assert (kube.get("streamingapp", APP, ns) or {})["spec"]["suspend"] is True
    wait_for(lambda: _deployment_replicas(kube, ns) == 0, timeout=60, what="the Deployment scaled to 0")
    proc = floe(floe_env, "-n", ns, "resume", APP)
    assert proc.returncode == 0, proc.stderr
    assert (kube.get("streamingapp", APP, ns) or {})["spec"]["suspend"] is False
    wait_for(lambda: _deployment_replicas(kube, ns) == 2, timeout=60, what="the Deployment back at 2 replicas")


def test_reset_offsets_writes_spec_offset_reset(
    floe_env: dict[str, str], kube: Kubectl, app: dict[str, Any], spec_args: dict[str, Any]
) -> None:
    ns, topic = spec_args["namespace"], spec_args["topic"]
    first = floe(floe_env, "reset-offsets", APP, "-n", ns, "--to", "timestamp",
                 "--timestamp", "2025-03-01T12:00:00Z", "--id", "it-1")
    assert first.returncode == 0, first.stderr
    assert "kubectl floe suspend" in first.stdout  # the app runs: the reset waits, and says for what
    reset = (kube.get("streamingapp", APP, ns) or {})["spec"]["offsetReset"]
    assert reset == {"id": "it-1", "to": "timestamp", "timestamp": "2025-03-01T12:00:00Z"}
    # the second leaves nothing of the first (the CRD refuses a timestamp with to earliest)
    second = floe(floe_env, "reset-offsets", APP, "-n", ns, "--to", "earliest", "--topic", topic,
                  "--id", "it-2")
    assert second.returncode == 0, second.stderr
    reset = (kube.get("streamingapp", APP, ns) or {})["spec"]["offsetReset"]
    assert reset == {"id": "it-2", "to": "earliest", "topics": [topic]}


def test_restart_sets_the_nonce_the_pod_template_carries(
    floe_env: dict[str, str], kube: Kubectl, app: dict[str, Any], spec_args: dict[str, Any]
) -> None:
    ns = spec_args["namespace"]
    nonce = f"it-{uuid.uuid4().hex[:8]}"
    proc = floe(floe_env, "restart", APP, "-n", ns, "--nonce", nonce)
    assert proc.returncode == 0, proc.stderr

    def annotated() -> bool:
        dep = kube.get("deployment", APP, ns) or {}
        notes = (((dep.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
        return notes.get("streaming.floe.dev/restart-nonce") == nonce

    wait_for(annotated, timeout=60, what="the restart nonce on the Deployment's pod template")


def test_status_json_through_the_named_context(
    floe_env: dict[str, str], kube: Kubectl, app: dict[str, Any], spec_args: dict[str, Any]
) -> None:
    ns = spec_args["namespace"]
    context = kube.run("config", "current-context").stdout.strip()
    proc = floe(floe_env, "status", APP, "-n", ns, "--context", context, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert (view["name"], view["namespace"], view["replicas"]["desired"]) == (APP, ns, 2)
    assert {c["type"] for c in view["conditions"]} >= {"Ready", "Degraded"}
    # the stack's node refuses the test image, so no pod runs to read the offsets rows in
    assert view["partitions"] == [] and "no running pod" in view["partitionsError"]
    wrong = floe(floe_env, "status", APP, "-n", ns, "--context", "no-such-context")
    assert wrong.returncode == 1 and "no-such-context" in wrong.stderr, wrong.stderr
