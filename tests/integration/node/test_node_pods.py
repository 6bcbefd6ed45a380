"""Pods on the stack's node: a pod from the job image built here reaches
Running and Ready, and from inside it Kafka, Cassandra and the API server (through the
``kubernetes`` Service, with the pod's own service-account token) answer, while no address
beyond the pod network has a route."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ...nodekit import kubectl
from ..waiting import wait_for

# Runs inside the pod as its command: real requests to each service, one JSON line of results,
# then the readiness file the probe waits for.
PROBE = r"""
import json, os, ssl, urllib.request
out = {}
from confluent_kafka.admin import AdminClient
md = AdminClient({"bootstrap.servers": os.environ["KAFKA"]}).list_topics(timeout=20)
out["kafka_brokers"] = [f"{b.host}:{b.port}" for b in md.brokers.values()]
from cassandra.cluster import Cluster
cluster = Cluster([os.environ["CASSANDRA_HOST"]], port=int(os.environ["CASSANDRA_PORT"]))
out["cassandra_release"] = cluster.connect().execute("SELECT release_version FROM system.local").one()[0]
cluster.shutdown()
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
req = urllib.request.Request(f"https://{host}:{port}/version",
                             headers={"Authorization": "Bearer " + open(f"{sa}/token").read()})
out["apiserver_version"] = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"]
out["apiserver_via"] = f"{host}:{port}"
# the pod's routes, read rather than tried: no packet is sent anywhere beyond the pod network
routes = [line.split() for line in open("/proc/net/route").read().splitlines()[1:]]
out["default_route"] = any(r[1] == "00000000" for r in routes)
print(json.dumps(out), flush=True)
open("/tmp/ready", "w").close()
import time
time.sleep(3600)
"""


@pytest.mark.node
def test_a_pod_from_the_local_job_image_is_ready_and_reaches_the_stack(
    node_env: dict[str, str], namespace: str
) -> None:
    env = node_env
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "probe", "image": env["FLOE_JOB_IMAGE"], "imagePullPolicy": "Never",
                "command": ["python", "-c", PROBE],
                "env": [{"name": "KAFKA", "value": env["FLOE_KAFKA_BOOTSTRAP_PODS"]},
                        {"name": "CASSANDRA_HOST", "value": env["FLOE_CASSANDRA_HOSTS_PODS"]},
                        {"name": "CASSANDRA_PORT", "value": env["FLOE_CASSANDRA_PORT"]}],
                "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1},
            }],
        },
    }
    t0 = time.monotonic()
    kubectl(env, "apply", "-f", "-", input=json.dumps(pod))
    now: dict[str, Any] = {}

    def settled() -> bool:
        nonlocal now
        now = json.loads(kubectl(env, "get", "pod", "probe", "-n", namespace, "-o", "json"))
        conds = {c["type"]: c["status"] for c in now["status"].get("conditions", [])}
        return now["status"].get("phase") == "Failed" or conds.get("Ready") == "True"

    wait_for(settled, timeout=180, what="the probe pod Ready (or Failed)", every=0.5, pods=lambda: [now])
    took = time.monotonic() - t0
    status = now["status"]
    logs = kubectl(env, "logs", "probe", "-n", namespace)
    conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
    assert status.get("phase") == "Running", f"pod status {status}\nlogs:\n{logs}"
    # Running is not Ready: the readiness probe must have passed (the kubelet ran it in the pod)
    assert conds.get("Ready") == "True", f"pod Running but not Ready after {took:.0f} s: {status}\nlogs:\n{logs}"
    print(f"pod apply → Ready in {took:.1f} s")
    result = json.loads(logs.strip().splitlines()[-1])
    assert result["kafka_brokers"] == [env["FLOE_KAFKA_BOOTSTRAP_PODS"]]
    assert result["cassandra_release"] == env["FLOE_CASSANDRA_VERSION"]
    assert result["apiserver_version"] == f"v{env['FLOE_KUBE_VERSION']}"
    assert result["apiserver_via"] == env["FLOE_KUBE_APISERVER_PODS"].removeprefix("https://")
    assert result["default_route"] is False, "a pod must have no route beyond the pod network"
    pod_ip = str(status["podIP"])
    assert pod_ip.startswith(env["FLOE_POD_CIDR"].rsplit(".", 1)[0] + ".")
