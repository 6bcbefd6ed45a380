"""The chart's leader election on the local API server: the Lease it creates, RBAC limited to
that one Lease (asked with `kubectl auth can-i`), the real operator electing itself with
only the chart's ServiceAccount, an upgrade that leaves the holder alone, and an uninstall
that leaves nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..processes import start_operator
from .livekit import CHART, Run
from .test_operator_rbac_live import release_watching_a_namespace

pytestmark = [pytest.mark.helm, pytest.mark.k8s]


def get_json(run: Run, kubectl: str, *args: str) -> dict[str, Any] | None:
    proc = run(kubectl, "get", *args, "-o", "json", "--ignore-not-found")
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def can_i(run: Run, kubectl: str, sa: str, verb: str, what: str, namespace: str) -> bool:
    proc = run(kubectl, "auth", "can-i", verb, what, "-n", namespace, "--as", sa, check=False)
    return proc.stdout.strip() == "yes"


def test_lease_is_the_charts_limited_to_its_name_and_gone_after_uninstall(
    helm: str,
    kubectl: str,
    kubeconfig: str,
    run: Run,
    namespaces: Callable[[str], str],
    install: Callable[..., str],
    tmp_path: Path,
) -> None:
    release, ns, apps, sa_kubeconfig = release_watching_a_namespace(
        run, kubectl, kubeconfig, namespaces, install, tmp_path, prefix="lease", values="replicaCount=2"
    )
    fullname = f"{release}-floe"
    lease = get_json(run, kubectl, "lease", fullname, "-n", ns)
    assert lease is not None, "the chart did not create the Lease"
    assert lease["metadata"]["labels"]["app.kubernetes.io/instance"] == release
    assert not (lease.get("spec") or {}).get("holderIdentity")

    sa = f"system:serviceaccount:{ns}:{fullname}"
    for verb in ("get", "update"):
        assert can_i(run, kubectl, sa, verb, f"leases.coordination.k8s.io/{fullname}", ns), verb
        assert not can_i(run, kubectl, sa, verb, "leases.coordination.k8s.io/kube-scheduler", ns), verb
        assert not can_i(run, kubectl, sa, verb, f"leases.coordination.k8s.io/{fullname}", apps), verb
    for verb in ("create", "delete", "list", "watch"):
        assert not can_i(run, kubectl, sa, verb, "leases.coordination.k8s.io", ns), verb

    # The operator, logged in as the chart's ServiceAccount, takes the chart's Lease.
    log = tmp_path / "operator.log"
    proc = start_operator(
        sa_kubeconfig,
        log,
        FLOE_WATCH_NAMESPACES=apps,
        FLOE_LAG_INTERVAL_SECONDS="0",
        FLOE_CHECK_KAFKA="false",
        FLOE_LEADER_ELECTION="true",
        FLOE_LEASE_NAME=fullname,
        FLOE_RETRY_PERIOD_SECONDS="0.5",
        POD_NAMESPACE=ns,
        POD_NAME=f"{fullname}-0",
    ).proc
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "Started floe-operator" not in log.read_text():
            time.sleep(0.5)
        assert "Started floe-operator" in log.read_text(), log.read_text()[-3000:]
        held = get_json(run, kubectl, "lease", fullname, "-n", ns)
        assert held is not None and held["spec"]["holderIdentity"] == f"{fullname}-0"

        # An upgrade leaves what the operator wrote into the Lease (three-way merge).
        run(helm, "upgrade", release, str(CHART), "-n", ns, "--reuse-values", "--set", "operator.resyncSeconds=30")
        after = get_json(run, kubectl, "lease", fullname, "-n", ns)
        assert after is not None and after["spec"]["holderIdentity"] == f"{fullname}-0"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "Released the Lease" in text, text[-3000:]
    for refusal in ("Forbidden", "forbidden", "HTTP 403"):
        assert refusal not in text, text[-3000:]
    released = get_json(run, kubectl, "lease", fullname, "-n", ns)
    assert released is not None and not released["spec"].get("holderIdentity")

    run(helm, "uninstall", release, "-n", ns, "--wait")
    assert get_json(run, kubectl, "lease", fullname, "-n", ns) is None
    for kind in ("role", "rolebinding"):
        assert get_json(run, kubectl, kind, f"{fullname}-leader-election", "-n", ns) is None, kind
    # the Deployment's ReplicaSets and pods go by garbage collection, after `helm uninstall
    # --wait` has seen the Deployment deleted: gone means gone within the collector's time
    deadline = time.monotonic() + 60
    while True:
        left = run(
            kubectl,
            "get",
            "all,lease,role,rolebinding",
            "-n",
            ns,
            "-l",
            f"app.kubernetes.io/instance={release}",
            "-o",
            "name",
        )
        if not left.stdout.strip() or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not left.stdout.strip(), left.stdout
