"""Floe end to end on real pods (marker ``node``): the chart installs the
operator as a pod from the image built here, with its ServiceAccount and RBAC; the word-count
StreamingApp runs as pods in a namespace that enforces the restricted Pod Security Standard;
each replica's JVM maps the job image's class archive; the counts in Cassandra and in the
output topic match the produced text exactly; the app is
READY True and its lag is on the operator pod's /metrics; uninstalling leaves no pod.

Kafka and Cassandra are addressed as the pods reach them (the node's bridge address); the test
itself produces and reads over loopback. Each run has its own namespaces, release, topics and
keyspace."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_stack import demo, kube, localrun

from tests import leftovers

from ..integration.waiting import wait_for
from ..nodekit import kubectl, main_pid, require_node, wait_exact_counts

ROOT = Path(__file__).resolve().parents[2]
LINES = 3000
REPLICAS = 3


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions") or []}


def _pods(env: dict[str, str], namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", namespace, "-o", "json"] + (["-l", selector] if selector else [])
    items: list[dict[str, Any]] = json.loads(kubectl(env, *args))["items"]
    return items


def _ready_pods(env: dict[str, str], namespace: str, selector: str, want: int) -> list[dict[str, Any]] | None:
    pods = [p for p in _pods(env, namespace, selector) if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in pods if p["status"].get("phase") == "Running" and _conditions(p).get("Ready") == "True"]
    return ready if len(ready) == want else None


def _describe(env: dict[str, str], namespace: str) -> str:
    """What the pods of `namespace` are doing, for a failure message."""
    out = [kubectl(env, "get", "pods,events", "-n", namespace, "-o", "wide")]
    for pod in _pods(env, namespace):
        name = pod["metadata"]["name"]
        proc = kubectl_text(env, "logs", name, "-n", namespace, "--tail=30")
        out.append(f"--- logs of {name}:\n{proc}")
    return "\n".join(out)


def kubectl_text(env: dict[str, str], *args: str) -> str:
    """kubectl's output, or its error, for a failure message (never fails itself)."""
    try:
        return kubectl(env, *args)
    except AssertionError as exc:
        return str(exc)


def _metrics_url(pod_ip: str, port: int) -> str:
    return f"http://{pod_ip}:{port}/metrics"


def _metrics(pod_ip: str, port: int) -> str:
    """A pod's /metrics text (the host reaches pods on the node's bridge)."""
    with urllib.request.urlopen(_metrics_url(pod_ip, port), timeout=5) as r:
        text: str = r.read().decode()
    return text


@pytest.fixture(scope="module")
def node_env(stack_env: dict[str, str]) -> dict[str, str]:
    return require_node(stack_env)


@pytest.fixture
def namespaces(node_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(operator's namespace, app's namespace): both enforce the restricted Pod Security Standard."""
    suffix = uuid.uuid4().hex[:6]
    names = (f"floe-e2e-system-{suffix}", f"floe-e2e-{suffix}")
    leftovers.prefix(f"{names[1]}-")  # the topics its app makes start with it
    for name in names:
        kubectl(node_env, "create", "namespace", name)
        kubectl(node_env, "label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    yield names
    for name in names:
        kubectl_text(node_env, "delete", "namespace", name, "--wait=false")


@pytest.mark.node
@pytest.mark.k8s
@pytest.mark.helm
@pytest.mark.kafka
@pytest.mark.cassandra
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_word_count_on_pods_with_the_operator_from_the_chart(
    node_env: dict[str, str], namespaces: tuple[str, str]
) -> None:
    env = node_env
    op_ns, app_ns = namespaces
    release = f"floe-e2e-{op_ns.rsplit('-', 1)[1]}"
    repository, tag = env["FLOE_OPERATOR_IMAGE"].rsplit(":", 1)
    helm = [env["FLOE_HELM"], f"--kubeconfig={env['KUBECONFIG']}"]
    metrics_port = 8080

    # The CRD is cluster-wide and shared with the other tests and the demo's release: applied
    # from crds/ rather than owned by this release, which then keeps it out (crds.enabled=false).
    kubectl(env, "apply", "-f", str(ROOT / "crds" / "streamingapp.yaml"))
    kubectl(env, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev", "--timeout=60s")

    def helm_run(*args: str, timeout: float = 300) -> str:
        proc = subprocess.run([*helm, *args], capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    # 1. The operator in-cluster from the chart.
    t0 = time.monotonic()
    helm_run("install", release, str(ROOT / "charts" / "floe"), "-n", op_ns,
             "--set", "crds.enabled=false",
             "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
             "--set", "image.pullPolicy=Never",
             "--set", f"operator.watchNamespaces={{{app_ns}}}",
             "--set", "operator.lagIntervalSeconds=5",
             "--set", f"operator.metricsPort={metrics_port}")
    uninstalled = False
    try:
        try:
            op_pods = wait_for(lambda: _ready_pods(env, op_ns, f"app.kubernetes.io/instance={release}", 1),
                               timeout=240, what="the operator pod Running and Ready", every=1,
                               pods=lambda: _pods(env, op_ns))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_describe(env, op_ns)}") from None
        op_ready_s = time.monotonic() - t0
        op_pod = op_pods[0]
        sa = op_pod["spec"]["serviceAccountName"]
        assert sa == release, f"the operator runs as {sa}, not the chart's ServiceAccount"
        op_ip = op_pod["status"]["podIP"]
        assert op_ip.startswith(env["FLOE_POD_CIDR"].rsplit(".", 1)[0] + ".")
        assert "# HELP floe_" in _metrics(op_ip, metrics_port), "the operator pod's /metrics has no Floe metric"
        print(f"operator: helm install → pod Ready in {op_ready_s:.1f} s ({op_pod['metadata']['name']}, {op_ip})")

        # 2. The word-count app in the restricted namespace.
        run = uuid.uuid4().hex[:8]
        topic_in, topic_out = f"wc-pods-in-{run}", f"wc-pods-out-{run}"
        keyspace = leftovers.keyspace(f"wc_pods_{run}")
        bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
        localrun.create_topic(bootstrap, topic_in, 6)
        localrun.create_topic(bootstrap, topic_out, 6)
        body = demo.app_body(ROOT, env, namespace=app_ns, topic_in=topic_in, topic_out=topic_out, keyspace=keyspace,
                             replicas=REPLICAS)
        name = body["metadata"]["name"]
        # Cassandra credentials from a Secret (the stack's node accepts any: it checks none); they
        # must reach the replica's process and nothing else.
        password = f"pw-{run}"
        kubectl(env, "create", "secret", "generic", "cass-creds", "-n", app_ns, "--from-literal=username=floe",
                f"--from-literal=password={password}")
        body["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": "cass-creds"}
        t1 = time.monotonic()
        kubectl(env, "apply", "-f", "-", input=yaml.safe_dump(body))
        selector = f"app.kubernetes.io/instance={name}"
        try:
            wait_for(lambda: _ready_pods(env, app_ns, selector, REPLICAS), timeout=600,
                     what=f"{REPLICAS} app pods Running and Ready", every=2, pods=lambda: _pods(env, app_ns))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_describe(env, app_ns)}\n{_describe(env, op_ns)}") from None
        app_ready_s = time.monotonic() - t1
        print(f"app: apply → {REPLICAS} pods Ready in {app_ready_s:.1f} s")

        # Cluster DNS: a replica finds Services by name through the pod's search path, and the
        # kubelet had a DNS server to give the pods (no MissingClusterDNS event).
        # The app's metrics Service is headless: its name resolves to a replica's pod IP.
        pod_ips = {p["status"]["podIP"] for p in _pods(env, app_ns, selector)}
        first = _pods(env, app_ns, selector)[0]["metadata"]["name"]
        resolved = kubectl(env, "exec", first, "-n", app_ns, "-c", "app", "--", "python3", "-c",
                           "import socket, sys; print(*(socket.gethostbyname(n) for n in sys.argv[1:]))",
                           "kubernetes.default.svc", name).split()
        assert resolved[0] == kube.SERVICE_IP and resolved[1] in pod_ips, (resolved, pod_ips)
        # No upstream: a name outside the cluster fails at once, instead of waiting on a resolver.
        outside = kubectl(env, "exec", first, "-n", app_ns, "-c", "app", "--", "python3", "-c",
                          "import socket, time\nt = time.monotonic()\ntry:\n    socket.gethostbyname('floe.example')"
                          "\nexcept socket.gaierror:\n    print('unresolved', time.monotonic() - t)").split()
        assert outside[0] == "unresolved" and float(outside[1]) < 5, outside
        events = json.loads(kubectl(env, "get", "events", "-n", app_ns, "-o", "json"))["items"]
        assert not [e for e in events if e.get("reason") == "MissingClusterDNS"], "pods were started without DNS"

        # The images carry the product: the runtime (and in the operator's, the operator), never
        # the local stack.
        probe = "import importlib.util as u, sys; print(*(u.find_spec(m) is not None for m in sys.argv[1:]))"
        for pod, ns, container in ((first, app_ns, "app"), (op_pod["metadata"]["name"], op_ns, None)):
            found = kubectl(env, "exec", pod, "-n", ns, *(["-c", container] if container else []), "--",
                            "python3", "-c", probe, "floe_jobs", "floe_operator", "floe_stack").split()
            assert found == ["True", "True", "False"], (pod, found)
        # The job image's class archive (floe_jobs.classarchive): every replica's JVM maps it.
        for pod in _pods(env, app_ns, selector):
            logs = kubectl(env, "logs", pod["metadata"]["name"], "-n", app_ns, "-c", "app")
            assert "The JVM maps the class archive /opt/floe/spark-classes.jsa" in logs, pod["metadata"]["name"]

        # The Secret and the ConfigMap reach the process (its environment, its topics), and the
        # ConfigMap carries no credential.
        for pod in _pods(env, app_ns, selector):
            environ = Path(f"/proc/{main_pid(env, pod)}/environ").read_bytes().split(b"\0")
            assert f"FLOE_CASSANDRA_PASSWORD={password}".encode() in environ, pod["metadata"]["name"]
            assert any(e.startswith(b"FLOE_CONFIG=") for e in environ)
        config = kubectl(env, "get", "configmap", f"{name}-config", "-n", app_ns, "-o", "json")
        assert password not in config and topic_in in config

        lines = localrun.word_lines(LINES, seed=21)
        truth = dict(localrun.word_truth(lines))
        localrun.produce(bootstrap, topic_in, lines)

        count_s = wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=truth,
                                    explain=lambda: _describe(env, app_ns), pods=lambda: _pods(env, app_ns))
        print(f"counts: {len(truth)} words, {sum(truth.values())} occurrences exact in Cassandra and "
              f"{topic_out} ({count_s:.1f} s after producing)")

        # READY True, and the lag on the operator pod's metrics is measured and caught up.
        def app_ready() -> bool:
            app = json.loads(kubectl(env, "get", "streamingapp", name, "-n", app_ns, "-o", "json"))
            return _conditions(app).get("Ready") == "True"

        wait_for(app_ready, timeout=120, what="the StreamingApp's Ready condition True", every=2)
        print(kubectl(env, "get", "streamingapp", name, "-n", app_ns))
        labels = {"namespace": app_ns, "app": name, "topic": topic_in}
        wait_for(lambda: demo.metric_sum(_metrics_url(op_ip, metrics_port), "floe_consumergroup_lag", labels) == 0.0,
                 timeout=120, what="lag 0 for the app on the operator pod's /metrics", every=2)
        lag_s = demo.metric_sum(_metrics_url(op_ip, metrics_port), "floe_consumergroup_lag_seconds", labels)
        print(f"lag on the operator's /metrics: 0 records, time lag {lag_s} s")

        # Delete the app (its finalizer needs the operator), then uninstall: no pod is left.
        kubectl(env, "delete", "streamingapp", name, "-n", app_ns, "--wait=true", "--timeout=180s", timeout=200)
        helm_run("uninstall", release, "-n", op_ns, "--wait")
        uninstalled = True
        wait_for(lambda: not _pods(env, app_ns) and not _pods(env, op_ns), timeout=180,
                 what="no pods left in the app's and the operator's namespaces", every=2)
    finally:
        if not uninstalled:
            # The app first, while its operator can still run its finalizer.
            kubectl_text(env, "delete", "streamingapp", "--all", "-n", app_ns, "--timeout=120s")
            subprocess.run([*helm, "uninstall", release, "-n", op_ns], capture_output=True, timeout=120)
