"""The chart's ValidatingAdmissionPolicy confines the operator to its StreamingApps' children.

Issue 32, part 1. RBAC lets the operator write Deployments, ConfigMaps, Roles… wherever it
reaches (every namespace with the default values); the policy makes the real API server
refuse every such write by the operator's ServiceAccount unless the object is labelled
app.kubernetes.io/managed-by=floe-operator and owned by a StreamingApp (a Job: or by a
StreamingAppSnapshot); StreamingAppSnapshots it may create and delete only as an app's. Each request here is
made as that ServiceAccount (`kubectl --as`) with `--dry-run=server`, which runs validating
admission but stores nothing, in both install modes. No operator pod runs (replicaCount=0):
the requests are the ones a bug or a compromise of the operator could make.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .livekit import ROOT, Run

pytestmark = [pytest.mark.helm, pytest.mark.k8s]

MODES = {
    "every-namespace": "",
    "watch-namespaces": "operator.watchNamespaces={{{apps}}}",
}


def configmap(name: str, namespace: str, *, labels: dict[str, str] | None = None, owner: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def deployment(name: str, namespace: str, *, labels: dict[str, str] | None = None, owner: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": name, **(labels or {})}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
            },
        },
    }


def job(name: str, namespace: str, *, labels: dict[str, str] | None = None, owner: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}},
        },
    }


def role(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }


def role_binding(name: str, namespace: str, subject: dict[str, str], *, labels: Any, owner: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [subject],
    }


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_operator_writes_only_children_of_streamingapps(
    mode: str,
    kubectl: str,
    run: Run,
    namespaces: Callable[[str], str],
    install: Callable[..., str],
    tmp_path: Path,
) -> None:
    for crd in ("streamingapp.yaml", "streamingappsnapshot.yaml"):
        run(kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / crd))
    run(kubectl, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev",
        "crd/streamingappsnapshots.streaming.floe.dev", "--timeout=60s")
    ns = namespaces("floe-vap")
    apps = namespaces("floe-vap-apps")
    sets = ",".join(s for s in ("crds.enabled=false,replicaCount=0", MODES[mode].format(apps=apps)) if s)
    release = install("vap", ns, "--set", sets)
    policy = f"{release}-floe-operator-writes"
    operator = f"--as=system:serviceaccount:{ns}:{release}-floe"

    # A real StreamingApp (no operator runs, so nothing reconciles it), to own the children.
    manifest = yaml.safe_load((ROOT / "examples" / "word-count" / "streamingapp.yaml").read_text())
    manifest["metadata"] = {"name": "owner", "namespace": apps}
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(manifest))
    run(kubectl, "apply", "-f", str(tmp_path / "app.yaml"))
    uid = run(kubectl, "get", "streamingapp", "owner", "-n", apps, "-o", "jsonpath={.metadata.uid}").stdout.strip()
    owner = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingApp", "name": "owner", "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
    floes = {"app.kubernetes.io/managed-by": "floe-operator"}
    # A real StreamingAppSnapshot of it, to own a Job (a Floe Job's owner is a snapshot or an app).
    snapshot = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingAppSnapshot",
                "metadata": {"name": "owner-snap", "namespace": apps},
                "spec": {"app": "owner", "location": "s3a://backups/owner/1"}}
    (tmp_path / "snap.yaml").write_text(yaml.safe_dump(snapshot))
    run(kubectl, "apply", "-f", str(tmp_path / "snap.yaml"))
    snap_uid = run(kubectl, "get", "streamingappsnapshot", "owner-snap", "-n", apps,
                   "-o", "jsonpath={.metadata.uid}").stdout.strip()
    snap_owner = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingAppSnapshot", "name": "owner-snap",
                  "uid": snap_uid, "controller": True, "blockOwnerDeletion": True}

    # Objects the cluster's administrator made in the apps' namespace: one of Floe's, one not.
    for obj in (deployment("theirs", apps), deployment("owner", apps, labels=floes, owner=owner)):
        (tmp_path / "obj.yaml").write_text(json.dumps(obj))
        run(kubectl, "apply", "-f", str(tmp_path / "obj.yaml"))
    run(kubectl, "create", "service", "clusterip", "theirs", "-n", apps, "--tcp=80:80")
    # The drivers' Role of a k8s:// app, which a RoleBinding of Floe's may bind to its own ServiceAccount only.
    (tmp_path / "obj.yaml").write_text(json.dumps(role("owner-spark", apps)))
    run(kubectl, "apply", "-f", str(tmp_path / "obj.yaml"))
    drivers = {"kind": "ServiceAccount", "name": "owner-spark", "namespace": apps}

    def as_operator(verb: str, *args: str, obj: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        argv = [kubectl, verb, *args, operator, "--dry-run=server"]
        if obj is not None:
            path = tmp_path / f"{obj['kind']}-{obj['metadata']['name']}.json"
            path.write_text(json.dumps(obj))
            argv += ["-f", str(path)]
        return run(*argv, check=False)

    def refused(proc: subprocess.CompletedProcess[str], *, by_policy: bool = True) -> bool:
        if proc.returncode == 0:
            return False
        assert "forbidden" in proc.stderr.lower() or "denied" in proc.stderr.lower(), proc.stderr
        return not by_policy or f"ValidatingAdmissionPolicy '{policy}'" in proc.stderr

    # The API server enforces a new policy once its informer has read it and the binding: probe
    # with a write only the policy refuses until it does (a bounded wait, not a sleep).
    deadline = time.monotonic() + 30
    while not refused(as_operator("create", obj=configmap("floe-vap-ready", apps, labels=floes))):
        assert time.monotonic() < deadline, f"{policy} not enforced 30 s after the install"
        time.sleep(0.5)

    # In the namespaced mode RBAC already keeps the operator out of kube-system; the policy
    # is what refuses it with the default values (every namespace watched).
    outside = mode == "every-namespace"
    unowned = {
        "create ConfigMap in kube-system": as_operator("create", obj=configmap("floe-vap-probe", "kube-system")),
        "create Deployment in kube-system": as_operator("create", obj=deployment("floe-vap-probe", "kube-system")),
        "create Role in kube-system": as_operator("create", obj=role("floe-vap-probe", "kube-system")),
        # Labelled and owned as Floe's does not open kube-system.
        "create a Floe-labelled ConfigMap in kube-system": as_operator(
            "create", obj=configmap("floe-vap-probe", "kube-system", labels=floes, owner=owner)
        ),
    }
    wrong = {what: p.stderr or "allowed" for what, p in unowned.items() if not refused(p, by_policy=outside)}
    assert not wrong, f"{mode}: not refused by {policy}: {wrong}"

    inside = {
        "patch an unlabelled Deployment": as_operator(
            "patch", "deployment", "theirs", "-n", apps, "--type=merge", "-p", '{"spec":{"replicas":1}}'
        ),
        "adopt an unlabelled Deployment": as_operator(
            "patch", "deployment", "theirs", "-n", apps, "--type=merge",
            "-p", json.dumps({"metadata": {"labels": floes, "ownerReferences": [owner]}}),
        ),
        "delete an unlabelled Service": as_operator("delete", "service", "theirs", "-n", apps),
        "create an unowned ConfigMap": as_operator("create", obj=configmap("loose", apps, labels=floes)),
        "create an unlabelled, owned ConfigMap": as_operator("create", obj=configmap("loose", apps, owner=owner)),
        "bind a Role to another subject": as_operator(
            "create", obj=role_binding("owner-spark", apps, {"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                                             "name": "mallory"}, labels=floes, owner=owner),
        ),
        "create an unlabelled Job owned by the StreamingApp": as_operator("create", obj=job("app-job", apps,
                                                                                         owner=owner)),
        "create a snapshot no app owns": as_operator("create", obj={**snapshot, "metadata": {
            "name": "loose-snap", "namespace": apps, "labels": floes}}),
        "delete a snapshot of someone's": as_operator("delete", "streamingappsnapshot", "owner-snap", "-n", apps),
        "create an unlabelled Job owned by the snapshot": as_operator("create", obj=job("loose-job", apps,
                                                                                     owner=snap_owner)),
        "release a Floe Deployment": as_operator(
            "patch", "deployment", "owner", "-n", apps, "--type=json",
            "-p", '[{"op":"remove","path":"/metadata/ownerReferences"}]',
        ),
    }
    wrong = {what: p.stderr or "allowed" for what, p in inside.items() if not refused(p)}
    assert not wrong, f"{mode}: not refused by {policy}: {wrong}"

    allowed = {
        "create a child of the StreamingApp": as_operator(
            "create", obj=configmap("owner-config", apps, labels=floes, owner=owner)
        ),
        "apply a child of the StreamingApp": as_operator(
            "apply", "--server-side", "--field-manager=floe-operator",
            obj=deployment("owner-2", apps, labels=floes, owner=owner),
        ),
        "bind the drivers' Role to their ServiceAccount": as_operator(
            "create", obj=role_binding("owner-spark", apps, drivers, labels=floes, owner=owner)
        ),
        "patch a child of the StreamingApp": as_operator(
            "patch", "deployment", "owner", "-n", apps, "--type=merge", "-p", '{"spec":{"replicas":1}}'
        ),
        "post an Event": as_operator(
            "create", obj={"apiVersion": "v1", "kind": "Event",
                           "metadata": {"name": "owner.probe", "namespace": apps},
                           "involvedObject": {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingApp",
                                              "name": "owner", "namespace": apps, "uid": uid},
                           "reason": "Probe", "message": "probe", "type": "Normal"}
        ),
        "create the snapshot's Job": as_operator("create", obj=job("owner-snap", apps, labels=floes,
                                                                    owner=snap_owner)),
        "create the app's restore Job": as_operator("create", obj=job("owner-restore", apps, labels=floes,
                                                                       owner=owner)),
        "create a scheduled snapshot of the app": as_operator("create", obj={**snapshot, "metadata": {
            "name": "owner-20261129-060000", "namespace": apps, "labels": floes, "ownerReferences": [owner]}}),
        "patch a snapshot's annotations (Kopf)": as_operator(
            "annotate", "streamingappsnapshot", "owner-snap", "-n", apps, "kopf.zalando.org/probe=1"),
        "patch the snapshot's status": as_operator(
            "patch", "streamingappsnapshot", "owner-snap", "-n", apps, "--subresource=status", "--type=merge",
            "-p", '{"status":{"phase":"Pending"}}',
        ),
        "patch the StreamingApp's status": as_operator(
            "patch", "streamingapp", "owner", "-n", apps, "--subresource=status", "--type=merge",
            "-p", '{"status":{"observedGeneration":1}}',
        ),
    }
    wrong = {what: p.stderr for what, p in allowed.items() if p.returncode != 0}
    assert not wrong, f"{mode}: refused but Floe's own: {wrong}"
