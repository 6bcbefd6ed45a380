"""Pod health on the stack's node: what the kubelet does for a replica that is alive but stuck,
and for one that outgrows its memory limit.

- A replica whose Spark JVM stops answering (SIGSTOP from the host, while a batch needs it) stops
  turning its batch loop: /healthz fails after spec.metrics.stallSeconds, the liveness probe
  (spec.metrics.livenessPeriodSeconds x livenessFailureThreshold) has the kubelet restart the
  container, and the restarted replica finishes the work exactly.
- A replica that allocates past spec.resources.limits.memory is OOM-killed by the kernel, the
  kubelet says so (OOMKilled) and restarts it, and no committed count is lost or doubled.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from floe_stack import demo, localrun

from ...nodekit import main_pid, require_node, wait_exact_counts, word_count_app
from ..waiting import wait_for
from .kube import Kubectl

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[3]
HOG_JOB = Path(__file__).parent / "jobs" / "hog_word_count.py"
# The wedge's timing, set as a user would: /healthz fails after stallSeconds (30, the CRD's least),
# then LIVENESS_FAILURES probes LIVENESS_PERIOD s apart fail (10 s x 6 by default), then the
# kubelet's termination (preStop, then SIGTERM, SIGKILL at the grace period: a wedged replica
# cannot drain). Three failures, not one, so the restart still follows a sustained failure.
STALL_SECONDS = 30
LIVENESS_PERIOD, LIVENESS_FAILURES = 2, 3
WEDGE_SHUTDOWN = {"terminationGracePeriodSeconds": 10, "preStopDelaySeconds": 1, "drainTimeoutSeconds": 5}


def _one_app(kube: Kubectl, namespace: str, env: dict[str, str], name: str, **spec: Any) -> dict[str, Any]:
    """A one-replica word count on this run's topics, `spec`'s sections merged in, applied; its body."""
    body = word_count_app(env, namespace=namespace, name=name, partitions=2, replicas=1)
    for key, value in spec.items():
        body["spec"][key] = {**body["spec"].get(key, {}), **value}
    kube.apply(body)
    return body


def _app_pods(kube: Kubectl, namespace: str, app: str) -> list[dict[str, Any]]:
    return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")


def _the_pod(kube: Kubectl, namespace: str, app: str) -> dict[str, Any] | None:
    pods = [p for p in _app_pods(kube, namespace, app) if not p["metadata"].get("deletionTimestamp")]
    return pods[0] if len(pods) == 1 else None


def _app_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in pod["status"].get("containerStatuses") or [] if s["name"] == "app")


def _ready_after(kube: Kubectl, namespace: str, app: str, restarts: int) -> dict[str, Any] | None:
    pod = _the_pod(kube, namespace, app)
    if pod is None or not demo.is_ready(pod) or _app_container(pod).get("restartCount", 0) < restarts:
        return None
    return pod


def _names(body: dict[str, Any]) -> tuple[str, str, str, str]:
    """The app's name, input and output topics and keyspace."""
    spec = body["spec"]
    return (body["metadata"]["name"], spec["kafka"]["topics"][0], spec["kafka"]["outputTopics"][0],
            spec["state"]["cassandra"]["keyspace"])


def _first_wave(kube: Kubectl, namespace: str, env: dict[str, str], body: dict[str, Any]
                ) -> tuple[dict[str, Any], list[str]]:
    """Wait for the app's pod to be Ready, count a first wave of lines exactly; (the pod, the lines)."""
    app, topic_in, topic_out, keyspace = _names(body)
    pod = wait_for(lambda: _ready_after(kube, namespace, app, 0), timeout=480, what="the app's pod Ready", every=2,
                   pods=lambda: _app_pods(kube, namespace, app))
    lines = localrun.word_lines(300, seed=1)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, lines)
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(localrun.word_truth(lines)),
                      pods=lambda: _app_pods(kube, namespace, app))
    return pod, lines


def _descendants(pid: int) -> list[int]:
    """Host pids of every process below `pid` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _jvm_of(pid: int) -> int:
    jvms = [p for p in _descendants(pid) if Path(f"/proc/{p}/comm").read_text().strip() == "java"]
    assert len(jvms) == 1, f"expected one Spark JVM below pid {pid}, found {jvms}"
    return jvms[0]


def _events(kube: Kubectl, namespace: str, pod: str) -> list[dict[str, Any]]:
    return [e for e in kube.list("event", namespace) if e.get("involvedObject", {}).get("name") == pod]


def test_a_wedged_runtime_is_restarted_by_its_liveness_probe(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    # every batch runs Spark jobs, so a batch waits on the JVM the test stops
    body = _one_app(kube, namespace, env, "wedge",
                    metrics={"stallSeconds": STALL_SECONDS, "livenessPeriodSeconds": LIVENESS_PERIOD,
                             "livenessFailureThreshold": LIVENESS_FAILURES},
                    spark={"driverBatchMaxRecords": 0}, shutdown=WEDGE_SHUTDOWN)
    app, topic_in, topic_out, keyspace = _names(body)
    pod, lines = _first_wave(kube, namespace, env, body)
    probe = next(c for c in pod["spec"]["containers"] if c["name"] == "app")["livenessProbe"]
    assert (probe["periodSeconds"], probe["failureThreshold"]) == (LIVENESS_PERIOD, LIVENESS_FAILURES), probe
    assert pod["spec"]["terminationGracePeriodSeconds"] == WEDGE_SHUTDOWN["terminationGracePeriodSeconds"]

    jvm = _jvm_of(main_pid(env, pod))
    os.kill(jvm, signal.SIGSTOP)
    more = localrun.word_lines(300, seed=2)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, more)
    name = pod["metadata"]["name"]
    # stallSeconds, then LIVENESS_FAILURES failed probes LIVENESS_PERIOD s apart, then the termination grace
    wait_for(lambda: _ready_after(kube, namespace, app, 1), timeout=420,
             what=f"{name} restarted by its liveness probe and Ready again", every=2,
             pods=lambda: _app_pods(kube, namespace, app), tolerate={"CrashLoopBackOff"})
    reasons = [(e.get("reason"), e.get("message", "")) for e in _events(kube, namespace, name)]
    assert any(r == "Unhealthy" and "Liveness probe failed" in m for r, m in reasons), reasons
    assert any(r == "Killing" and "liveness" in m for r, m in reasons), reasons
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(localrun.word_truth(lines + more)))
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)


def test_a_replica_over_its_memory_limit_is_oom_killed_and_loses_nothing(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str]
) -> None:
    env = require_node(stack_env)
    config = f"hog-job-{uuid.uuid4().hex[:6]}"
    kube.run("create", "configmap", config, "-n", namespace, f"--from-file={HOG_JOB}")
    body = _one_app(kube, namespace, env, "oom", job={"entrypoint": f"/opt/floe-test/{HOG_JOB.name}"},
                    podTemplate={"spec": {
                        "containers": [{"name": "app", "volumeMounts": [
                            {"name": "hog-job", "mountPath": "/opt/floe-test", "readOnly": True}]}],
                        "volumes": [{"name": "hog-job", "configMap": {"name": config}}]}})
    app, topic_in, topic_out, keyspace = _names(body)
    pod, lines = _first_wave(kube, namespace, env, body)

    more = localrun.word_lines(300, seed=2)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, more)
    Path(f"/proc/{main_pid(env, pod)}/root/tmp/oom-now").touch()
    name = pod["metadata"]["name"]
    back = wait_for(lambda: _ready_after(kube, namespace, app, 1), timeout=420,
                    what=f"{name} OOM-killed, restarted and Ready again", every=2,
                    pods=lambda: _app_pods(kube, namespace, app), tolerate={"CrashLoopBackOff"})
    last = _app_container(back).get("lastState", {}).get("terminated", {})
    assert last.get("reason") == "OOMKilled", f"the container's last termination: {last}"
    wait_exact_counts(env, keyspace=keyspace, topic_out=topic_out, truth=dict(localrun.word_truth(lines + more)))
    status = wait_for(lambda: ((kube.get("streamingapp", app, namespace) or {}).get("status") or {})
                      .get("restarts", 0) >= 1, timeout=60, what="status.restarts >= 1")
    assert status
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)


def test_the_spark_ui_on_demand_serves_a_replicas_jobs_through_its_service(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str]
) -> None:
    import urllib.request

    env = require_node(stack_env)
    body = _one_app(kube, namespace, env, "ui", spark={"ui": {"enabled": True}})
    app = body["metadata"]["name"]
    pod, _ = _first_wave(kube, namespace, env, body)
    service = kube.get("service", f"{app}-spark-ui", namespace)
    assert service is not None
    for host in (pod["status"]["podIP"], service["spec"]["clusterIP"]):
        with urllib.request.urlopen(f"http://{host}:4040/jobs/", timeout=30) as page:
            text = page.read().decode(errors="replace")
        assert page.status == 200 and "Spark Jobs" in text, f"{host}: {text[:300]}"
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=120s", timeout=150)
