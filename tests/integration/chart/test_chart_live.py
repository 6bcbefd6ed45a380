"""The chart against the local stack's kube-apiserver: install, upgrade, uninstall, RBAC.

Each test installs its own release into fresh namespaces. The StreamingApp CRD is the one
cluster-scoped object several releases and other tests share: the install test adopts it
into its release for the duration of the test and gives it back its previous owner
afterwards; every other test installs with crds.enabled=false. A release is never
uninstalled with crds.keep=false here, since that would delete every StreamingApp in the
cluster.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from floe_stack import demo

from .livekit import CHART, Run

pytestmark = [pytest.mark.helm, pytest.mark.k8s]

CRD = "streamingapps.streaming.floe.dev"
# Cluster-scoped objects every release of the chart (and other tests) share.
SHARED_CRDS = (*demo.CRDS, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def get_json(run: Run, kubectl: str, *args: str) -> dict[str, Any] | None:
    proc = run(kubectl, "get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


@pytest.fixture
def crd_owner(run: Run, kubectl: str) -> Iterator[Callable[[str, str], None]]:
    """adopt(release, namespace): hand the shared CRDs to a release; restored afterwards."""
    before = {name: get_json(run, kubectl, "crd", name) for name in SHARED_CRDS}
    original = {
        name: {"annotate": body["metadata"].get("annotations") or {}, "label": body["metadata"].get("labels") or {}}
        for name, body in before.items()
        if body is not None
    }

    def adopt(release: str, namespace: str) -> None:
        for name in original:
            owner = [f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}"]
            run(kubectl, "annotate", "crd", name, "--overwrite", *owner)
            run(kubectl, "label", "crd", name, "--overwrite", "app.kubernetes.io/managed-by=Helm")

    yield adopt
    # Back to the labels and annotations they had: the chart's go, the previous owner's return.
    for name, meta in original.items():
        after = get_json(run, kubectl, "crd", name)
        if after is None:
            continue
        for verb, key in (("annotate", "annotations"), ("label", "labels")):
            now = after["metadata"].get(key) or {}
            changes = [f"{k}-" for k in now if k not in meta[verb]]
            changes += [f"{k}={v}" for k, v in meta[verb].items() if now.get(k) != v]
            if changes:
                run(kubectl, verb, "crd", name, "--overwrite", *changes, check=False)


@pytest.mark.exclusive  # hands the shared CRDs to its release (the demo adopts them too)
def test_install_upgrade_uninstall_keeps_the_crd(
    helm: str,
    kubectl: str,
    run: Run,
    namespaces: Callable[[str], str],
    crd_owner: Callable[[str, str], None],
    install: Callable[..., str],
) -> None:
    ns = namespaces("floe-chart")
    release = install("chart", ns, "--set", "crds.enabled=true,crds.keep=true", before=lambda name: crd_owner(name, ns))
    status = json.loads(run(helm, "status", release, "-n", ns, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    assert "kubectl explain streamingapp.spec" in status["info"]["notes"]

    deployment = get_json(run, kubectl, "deployment", f"{release}-floe", "-n", ns)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    assert env_of(deployment)["FLOE_RESYNC_SECONDS"] == "60"
    for kind, name in [("serviceaccount", f"{release}-floe"), ("service", f"{release}-floe")]:
        assert get_json(run, kubectl, kind, name, "-n", ns) is not None, kind
    assert get_json(run, kubectl, "clusterrole", f"{release}-floe") is not None
    assert get_json(run, kubectl, "clusterrolebinding", f"{release}-floe") is not None
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        assert get_json(run, kubectl, kind, f"{release}-floe-operator-writes") is not None, kind
    crd = get_json(run, kubectl, "crd", CRD)
    assert crd is not None
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established.get("Established") == "True"

    # A changed value reaches the cluster, and the pods roll (the template changed).
    run(
        helm,
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        ns,
        "--reuse-values",
        "--set",
        "operator.resyncSeconds=30,operator.logLevel=DEBUG",
    )
    upgraded = get_json(run, kubectl, "deployment", f"{release}-floe", "-n", ns)
    assert upgraded is not None
    assert env_of(upgraded)["FLOE_RESYNC_SECONDS"] == "30"
    assert env_of(upgraded)["FLOE_LOG_LEVEL"] == "DEBUG"
    assert upgraded["metadata"]["generation"] > deployment["metadata"]["generation"]
    history = json.loads(run(helm, "history", release, "-n", ns, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]
    assert history[-1]["status"] == "deployed"

    run(helm, "uninstall", release, "--namespace", ns, "--wait")
    assert get_json(run, kubectl, "deployment", f"{release}-floe", "-n", ns) is None
    assert get_json(run, kubectl, "serviceaccount", f"{release}-floe", "-n", ns) is None
    assert get_json(run, kubectl, "clusterrole", f"{release}-floe") is None
    assert get_json(run, kubectl, "clusterrolebinding", f"{release}-floe") is None
    for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
        assert get_json(run, kubectl, kind, f"{release}-floe-operator-writes") is None, kind
    assert get_json(run, kubectl, "crd", CRD) is not None, "crds.keep=true must leave the CRD in place"


def can_i(run: Run, kubectl: str, sa: str, verb: str, resource: str, namespace: str | None) -> bool:
    args = [kubectl, "auth", "can-i", verb, resource, f"--as={sa}"]
    if "/" in resource:
        resource, sub = resource.split("/", 1)
        args = [kubectl, "auth", "can-i", verb, resource, f"--subresource={sub}", f"--as={sa}"]
    args += ["-n", namespace] if namespace else []
    proc = run(*args, check=False)
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), f"{args}: {proc.stdout} {proc.stderr}"
    return answer == "yes"


def can_i_all(
    run: Run, kubectl: str, sa: str, checks: list[tuple[str, str]], namespace: str | None
) -> dict[tuple[str, str], bool]:
    """can_i for many (verb, resource) pairs at once; each is its own `kubectl auth can-i`."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = pool.map(lambda check: can_i(run, kubectl, sa, check[0], check[1], namespace), checks)
        return dict(zip(checks, answers, strict=True))


# (verb, resource) the operator needs in every namespace it manages.
NEEDED = [
    ("get", "streamingapps.streaming.floe.dev"),
    ("list", "streamingapps.streaming.floe.dev"),
    ("watch", "streamingapps.streaming.floe.dev"),
    ("patch", "streamingapps.streaming.floe.dev"),
    ("patch", "streamingapps.streaming.floe.dev/status"),
    ("patch", "streamingapps.streaming.floe.dev/scale"),
    ("update", "streamingapps.streaming.floe.dev/finalizers"),
    ("create", "deployments.apps"),
    ("patch", "deployments.apps"),
    ("watch", "deployments.apps"),
    ("create", "configmaps"),
    ("patch", "configmaps"),
    ("create", "services"),
    ("delete", "services"),
    ("create", "poddisruptionbudgets.policy"),
    ("get", "secrets"),
    ("create", "secrets"),
    ("list", "pods"),
    ("watch", "pods"),
    ("create", "events"),
    ("get", "serviceaccounts"),
    ("get", "roles.rbac.authorization.k8s.io"),
    ("get", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "horizontalpodautoscalers.autoscaling"),
    # ServiceMonitors and ScaledObjects too, but kubectl cannot name kinds whose CRDs are not
    # installed here; tests/unit/chart/test_rbac_rules.py checks those rules.
]
# (verb, resource) for apps with a k8s:// Spark master (rbac.sparkOnKubernetes, on by default):
# the drivers' ServiceAccount, Role and RoleBinding, what that Role grants, and the executor pods.
SPARK_ON_KUBERNETES = [
    ("delete", "pods"),
    ("create", "pods"),
    ("get", "pods"),
    ("list", "pods"),
    ("delete", "configmaps"),
    ("create", "serviceaccounts"),
    ("create", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("create", "persistentvolumeclaims"),
]
# (verb, resource) it never needs.
REFUSED = [
    ("list", "secrets"),
    ("watch", "secrets"),
    ("delete", "secrets"),
    ("delete", "deployments.apps"),
    ("escalate", "roles.rbac.authorization.k8s.io"),
    ("bind", "roles.rbac.authorization.k8s.io"),
    ("create", "streamingapps.streaming.floe.dev"),
    ("delete", "streamingapps.streaming.floe.dev"),
]


def test_rbac_cluster_wide_allows_what_the_operator_needs_and_no_more(
    kubectl: str, run: Run, namespaces: Callable[[str], str], install: Callable[..., str]
) -> None:
    ns = namespaces("floe-rbac")
    elsewhere = namespaces("floe-apps")
    release = install("rbac", ns, "--set", "crds.enabled=false")
    sa = f"system:serviceaccount:{ns}:{release}-floe"
    answers = can_i_all(run, kubectl, sa, NEEDED + SPARK_ON_KUBERNETES + REFUSED, elsewhere)
    wrong = [check for check in NEEDED + SPARK_ON_KUBERNETES if not answers[check]]
    assert not wrong, f"denied but needed: {wrong}"
    wrong = [check for check in REFUSED if answers[check]]
    assert not wrong, f"allowed but never needed: {wrong}"
    # Cluster-scoped.
    assert can_i(run, kubectl, sa, "list", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert can_i(run, kubectl, sa, "watch", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert not can_i(run, kubectl, sa, "create", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert not can_i(run, kubectl, sa, "delete", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert not can_i(run, kubectl, sa, "list", "namespaces", None)
    assert not can_i(run, kubectl, sa, "get", "nodes", None)
    assert not can_i(run, kubectl, sa, "create", "clusterroles.rbac.authorization.k8s.io", None)


def test_rbac_for_a_list_of_namespaces_stays_inside_them(
    kubectl: str, run: Run, namespaces: Callable[[str], str], install: Callable[..., str]
) -> None:
    ns = namespaces("floe-rbac")
    watched = namespaces("floe-watched")
    other = namespaces("floe-other")
    release = install("scoped", ns, "--set", f"crds.enabled=false,operator.watchNamespaces={{{watched}}}")
    sa = f"system:serviceaccount:{ns}:{release}-floe"
    inside = can_i_all(run, kubectl, sa, NEEDED + SPARK_ON_KUBERNETES + REFUSED, watched)
    outside = can_i_all(run, kubectl, sa, NEEDED + SPARK_ON_KUBERNETES, other)
    assert not [c for c in NEEDED + SPARK_ON_KUBERNETES if not inside[c]], f"denied in {watched}"
    assert not [c for c in REFUSED if inside[c]], f"allowed in {watched} but never needed"
    assert not [c for c in NEEDED + SPARK_ON_KUBERNETES if outside[c]], f"allowed in {other}, which is not watched"
    assert not can_i(run, kubectl, sa, "list", "streamingapps.streaming.floe.dev", None), "no cluster-wide list"
    assert can_i(run, kubectl, sa, "list", "namespaces", None), "Kopf follows the watched namespaces"


def test_operator_pod_is_admitted_under_restricted_pod_security(
    kubectl: str, run: Run, namespaces: Callable[[str], str], install: Callable[..., str],
    stack_env: dict[str, str],
) -> None:
    ns = namespaces("floe-psa")
    run(kubectl, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    # The stack's node admits only images built here: the operator's, watching only its own
    # namespace while it runs.
    image = stack_env.get("FLOE_OPERATOR_IMAGE")
    local = [] if image is None else [
        "--set", f"image.repository={image.rsplit(':', 1)[0]},image.tag={image.rsplit(':', 1)[1]}",
        "--set", f"image.pullPolicy=Never,operator.watchNamespaces={{{ns}}}"]
    release = install("psa", ns, "--set", "crds.enabled=false", *local)
    # The ReplicaSet creates the pod only if admission accepts it, which is what is tested here.
    deadline = time.monotonic() + 60
    pods: list[Any] = []
    while time.monotonic() < deadline:
        listed = get_json(run, kubectl, "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={release}")
        pods = (listed or {}).get("items", [])
        if pods:
            break
        time.sleep(0.5)
    events = run(kubectl, "get", "events", "-n", ns, "-o", "json").stdout
    assert pods, f"no operator pod was admitted: {[e['message'] for e in json.loads(events)['items']]}"


@pytest.mark.exclusive  # hands the shared CRDs to its release and installs the kopf peering CRDs
def test_two_replicas_meet_in_the_peering_object(
    helm: str,
    kubectl: str,
    run: Run,
    namespaces: Callable[[str], str],
    crd_owner: Callable[[str, str], None],
    install: Callable[..., str],
) -> None:
    ns = namespaces("floe-peering")
    watched = namespaces("floe-watched")
    release = install(
        "peer",
        ns,
        "--set",
        f"replicaCount=2,leaderElection.enabled=false,peering.enabled=true,operator.watchNamespaces={{{watched}}}",
        before=lambda name: crd_owner(name, ns),
    )
    # The peering kinds exist, and the hook created the object the pods meet in.
    for name in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        crd = get_json(run, kubectl, "crd", name)
        assert crd is not None, name
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    peering = get_json(run, kubectl, "kopfpeerings.kopf.dev", "default", "-n", watched)
    assert peering is not None, "the post-install hook did not create the KopfPeering"
    deployment = get_json(run, kubectl, "deployment", f"{release}-floe", "-n", ns)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 2
    assert env_of(deployment)["FLOE_PEERING"] == "true"
    sa = f"system:serviceaccount:{ns}:{release}-floe"
    assert can_i(run, kubectl, sa, "patch", "kopfpeerings.kopf.dev", watched)
    assert not can_i(run, kubectl, sa, "patch", "kopfpeerings.kopf.dev", ns)
    # Helm keeps hook objects after uninstall; the pre-delete twin takes the peering object along.
    run(helm, "uninstall", release, "--namespace", ns, "--wait")
    assert get_json(run, kubectl, "kopfpeerings.kopf.dev", "default", "-n", watched) is None


def test_notes_render_with_next_steps(helm: str, kubeconfig: str) -> None:
    """NOTES only render on install (helm template never prints them), and helm install asks
    the API server for its version even with --dry-run=client, so this test is a live one."""
    release = f"notes-{uuid.uuid4().hex[:6]}"  # a name no installed release holds
    # The CRD is left out: install would refuse to adopt one it does not own.
    proc = subprocess.run(
        [helm, "install", release, str(CHART), "-n", "ops", "--dry-run=client", "--set", "crds.enabled=false"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert f"kubectl -n ops rollout status deployment/{release}-floe" in notes
    assert "kubectl explain streamingapp.spec" in notes
    assert "examples/word-count/streamingapp.yaml" in notes
