"""What the tests on the stack's node (marker ``node``; `make test NODE=0` deselects them) share: kubectl as the
stack's admin, and the node's settings from the stack's env file."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

# What each pod a test starts asks of the node's 2 CPUs: a request, not a limit, so a pod still
# uses what is free. Small, because pod tests run side by side in lanes, next to the operator pods
# they install and the demo's app a user may have left running; README's Tests section has the sum.
TEST_POD_CPU = "100m"


def kubectl(env: dict[str, str], *args: str, input: str | None = None, timeout: float = 120) -> str:
    """Run kubectl against the stack's API server as its admin; a failure fails the test with kubectl's words."""
    proc = subprocess.run([env["FLOE_KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", *args],
                          capture_output=True, text=True, input=input, timeout=timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def kubectl_floe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl floe <args>` as a user runs it: the plugin found on PATH beside kubectl, logged in
    as the stack's admin; the result, checked by the caller."""
    import os
    import sys
    from pathlib import Path

    path = os.pathsep.join([str(Path(sys.executable).parent), str(Path(env["FLOE_KUBECTL"]).parent),
                            "/usr/bin", "/bin"])
    return subprocess.run(["kubectl", "floe", *args], capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "PATH": path, "KUBECONFIG": env["KUBECONFIG"]})


def require_node(env: dict[str, str]) -> dict[str, str]:
    """The stack's env when it runs the node; fails (never skips) otherwise."""
    if env.get("FLOE_NODE") != "1":
        raise AssertionError("the stack has no node (it was started with NODE=0): run `make down && make up`, "
                             "or deselect these tests with `make test NODE=0`")
    return env


def word_count_app(env: dict[str, str], *, namespace: str, name: str, partitions: int, replicas: int,
                   cpu: str = TEST_POD_CPU) -> dict[str, Any]:
    """The word-count example as a StreamingApp named `<name>-<run>` on fresh topics of
    `partitions` partitions and a fresh keyspace, requesting `cpu` per pod; not applied."""
    import uuid
    from pathlib import Path

    from floe_operator import appids
    from floe_stack import demo, localrun

    from tests import leftovers

    run = uuid.uuid4().hex[:8]
    topic_in, topic_out, keyspace = f"{name}-in-{run}", f"{name}-out-{run}", f"{name}_{run}"
    # removed when the test ends: its keyspace, and the topics its app makes (`<app id>-dlq`, ...)
    leftovers.keyspace(keyspace)
    leftovers.prefix(appids.new_id(namespace, f"{name}-{run}") + "-")
    for topic in (topic_in, topic_out):
        localrun.create_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic, partitions)
    body = demo.app_body(Path(__file__).resolve().parents[1], env, namespace=namespace, topic_in=topic_in,
                         topic_out=topic_out, keyspace=keyspace, replicas=replicas)
    body["metadata"]["name"] = f"{name}-{run}"
    body["spec"]["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"memory": "1536Mi"}}
    return body


def wait_exact_counts(env: dict[str, str], *, keyspace: str, topic_out: str, truth: dict[str, int],
                      timeout: float = 420, explain: Callable[[], str] = str,
                      pods: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
                      tolerate: Collection[str] = (), emitted: Collection[str] | None = None) -> float:
    """Wait until the word-count store in Cassandra, then the output topic's latest values, equal
    `truth`; seconds until Cassandra matched. `explain` adds what the pods did to a failure; the
    wait gives up early on a blocked pod of `pods()` (see `waiting.wait_for`). `emitted`: the words
    the output topic must carry, when not all of them (an app restored from a snapshot emits only
    what it counts itself), each with its count in `truth`."""
    from cassandra.cluster import Cluster
    from floe_stack import localrun

    from tests import counting

    from .integration.waiting import wait_for

    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    try:
        session = cluster.connect()

        def counted() -> bool:
            try:
                got = localrun.read_store(session, keyspace, "word-count", key_serde="str", value_serde="long")
            except Exception:  # the table is not there yet
                return False
            return got == truth

        start = time.monotonic()
        try:
            wait_for(counted, timeout=timeout, what="the counts in Cassandra to match the text", every=2,
                     pods=pods, tolerate=tolerate)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{explain()}") from None
        took = time.monotonic() - start
    finally:
        cluster.shutdown()

    def topic_exact() -> bool:
        latest = localrun.last_values(localrun.read_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic_out, timeout=10))
        got = {k: int(v) for k, v in latest.items()}
        if emitted is None:
            return counting.counters_equal(got, truth) is None
        # every word it carries at its count, and at least the `emitted` ones
        return set(emitted) <= set(got) and counting.counters_equal(got, {k: truth.get(k, -1) for k in got}) is None

    wait_for(topic_exact, timeout=120, what="the output topic to carry every final count", every=2)
    return took


def main_pid(env: dict[str, str], pod: dict[str, Any], *, container: str = "app") -> int:
    """The host pid of the first process of the pod's container (`app`, the replica's, unless
    named), from containerd's task list."""
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    container = status["containerID"].split("://", 1)[1]
    out = subprocess.run(["ctr", "--address", env["FLOE_CONTAINERD_ADDRESS"], "-n", "k8s.io", "task", "ls"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines()[1:]:
        task, pid, state = line.split()[:3]
        if task == container and state == "RUNNING":
            return int(pid)
    raise AssertionError(f"no running task {container} in containerd:\n{out}")
