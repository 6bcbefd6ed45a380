"""Spark executors on Kubernetes, on real pods (marker ``node``, ``make up NODE=1``): the chart
installs the operator with its default RBAC; the word-count StreamingApp runs one replica whose
driver has a ``k8s://`` master (the API server as pods reach it) and 2 executors, in a namespace
that enforces the restricted Pod Security Standard. The executor pods start from the operator's
template (``floe-job executor``), owned by their driver's pod; a batch above the driver's
thresholds is read and re-keyed by Spark, so its tasks run on the executors (in client mode a
driver on Kubernetes runs no task itself), and the counts are exact. Deleting the driver's pod
removes its executors; its replacement starts two of its own and the counts stay exact.

Kafka, Cassandra and the API server are addressed as the pods reach them; the test itself
produces and reads over loopback. Each run has its own namespaces, release, topics and keyspace."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_stack import demo, localrun

from tests import counting, leftovers

from ..integration.waiting import wait_for
from ..nodekit import TEST_POD_CPU, kubectl
from .test_pods import (  # noqa: F401  (node_env is a fixture)
    _conditions,
    _describe,
    _metrics,
    _pods,
    kubectl_text,
    node_env,
)

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.helm, pytest.mark.kafka, pytest.mark.cassandra,
              pytest.mark.spark, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
EXECUTORS = 2
# Records above which a batch leaves the driver: its input is read with Spark's Kafka source and
# its re-key runs as Spark jobs, on the executors. The first batch holds every line produced
# before the app starts (the example caps a batch at 20,000 records).
THRESHOLD = 1000
LINES = 8000
MORE_LINES = 2000


def _executor_pods(env: dict[str, str], namespace: str, app: str) -> list[dict[str, Any]]:
    """The app's executor pods that are not on their way out."""
    pods = _pods(env, namespace, f"spark-role=executor,streaming.floe.dev/executor-of={app}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _owner(pod: dict[str, Any]) -> tuple[str, str] | None:
    refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "Pod"]
    return (refs[0]["name"], refs[0]["uid"]) if refs else None


def _driver_and_executors(env: dict[str, str], namespace: str, app: str) -> tuple[dict[str, Any], list[Any]] | None:
    """The one Ready driver pod and its Running executor pods; None while there is no such driver."""
    drivers = [p for p in _pods(env, namespace, f"streaming.floe.dev/app={app}")
               if not p["metadata"].get("deletionTimestamp")]
    ready = [p for p in drivers if _conditions(p).get("Ready") == "True"]
    if len(drivers) != 1 or len(ready) != 1:
        return None
    driver = ready[0]
    mine = [p for p in _executor_pods(env, namespace, app)
            if _owner(p) == (driver["metadata"]["name"], driver["metadata"]["uid"])]
    return driver, [p for p in mine if p["status"].get("phase") == "Running"]


def _driver_with_executors(env: dict[str, str], namespace: str, app: str) -> tuple[dict[str, Any], list[Any]] | None:
    """The one Ready driver pod and its EXECUTORS Running executor pods, once there are."""
    found = _driver_and_executors(env, namespace, app)
    return found if found is not None and len(found[1]) == EXECUTORS else None


def _finished_tasks(env: dict[str, str], namespace: str, pods: list[dict[str, Any]]) -> dict[str, int]:
    """Spark tasks each executor finished, from its log (Executor: Finished task …)."""
    return {p["metadata"]["name"]: kubectl_text(env, "logs", p["metadata"]["name"], "-n", namespace).count(
        "Finished task") for p in pods}


def _counts(session: Any, keyspace: str) -> dict[Any, Any] | None:
    """Word → count in the app's store; None while its table does not exist."""
    try:
        counts: dict[Any, Any] = localrun.read_store(session, keyspace, "word-count", key_serde="str",
                                                     value_serde="long")
    except Exception:  # the table is not there yet
        return None
    return counts


def _histogram_above(text: str, name: str, labels: dict[str, str], bound: float) -> float:
    """Observations of a Prometheus histogram above `bound` (which must be one of its buckets)."""
    def value(line_name: str, extra: str = "") -> float:
        for line in text.splitlines():
            if line.startswith(line_name + "{") and extra in line and all(
                    f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0
    return value(f"{name}_count") - value(f"{name}_bucket", f'le="{bound}"')


def _executor_app(env: dict[str, str], app_ns: str, lines: list[str], *, executor: dict[str, Any],
                  conf: dict[str, str] | None = None) -> tuple[dict[str, Any], str, str, str]:
    """A one-replica word count whose driver has a k8s:// master and `executor` sizing, on this
    run's topics (`lines` produced before it starts, so its first batch leaves the driver);
    (its body, input topic, output topic, keyspace)."""
    run = uuid.uuid4().hex[:8]
    topic_in, topic_out, keyspace = f"wc-exec-in-{run}", f"wc-exec-out-{run}", leftovers.keyspace(f"wc_exec_{run}")
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]
    localrun.create_topic(bootstrap, topic_in, 6)
    localrun.create_topic(bootstrap, topic_out, 6)
    localrun.produce(bootstrap, topic_in, lines)

    body = demo.app_body(ROOT, env, namespace=app_ns, topic_in=topic_in, topic_out=topic_out, keyspace=keyspace)
    spec = body["spec"]
    spec["replicas"] = 1
    spec["kafka"]["sparkReadMinRecords"] = THRESHOLD
    spec["spark"].update(
        master=f"k8s://{env['FLOE_KUBE_APISERVER_PODS']}",
        executor={"cores": 1, "memory": "768m", **executor},
        driverBatchMaxRecords=THRESHOLD,
    )
    # two cores on the node, shared with other tests: the driver and each executor ask for a fraction of one
    spec["spark"]["conf"]["spark.kubernetes.executor.request.cores"] = TEST_POD_CPU
    spec["spark"]["conf"].update(conf or {})
    spec["resources"] = {"requests": {"cpu": TEST_POD_CPU, "memory": "1Gi"}, "limits": {"memory": "1536Mi"}}
    return body, topic_in, topic_out, keyspace


@dataclass
class Install:
    """The module's operator release: its namespace, and the restricted app namespaces it watches
    that no test has taken yet."""

    release: str
    namespace: str
    free: list[str]


@pytest.fixture(scope="module")
def install(node_env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[Install]:  # noqa: F811
    """The operator in-cluster from the chart with its default values (Spark-on-Kubernetes RBAC
    included), installed once for the module's tests (one helm install, one operator pod start)
    and watching one app namespace per test, so that no test sees another's apps; uninstalled
    when the module ends. Every namespace enforces the restricted Pod Security Standard."""
    env = node_env
    suffix = uuid.uuid4().hex[:6]
    tests = sum(1 for item in request.session.items if item.path == request.path)
    op_ns, app_namespaces = f"floe-e2e-system-{suffix}", [f"floe-e2e-{suffix}-{i}" for i in range(tests)]
    for name in app_namespaces:  # the topics their apps make start with them
        leftovers.prefix(f"{name}-")
    release = f"floe-exec-{suffix}"
    repository, tag = env["FLOE_OPERATOR_IMAGE"].rsplit(":", 1)
    helm = [env["FLOE_HELM"], f"--kubeconfig={env['KUBECONFIG']}"]
    for name in (op_ns, *app_namespaces):
        kubectl(env, "create", "namespace", name)
        kubectl(env, "label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    try:
        kubectl(env, "apply", "-f", str(ROOT / "crds" / "streamingapp.yaml"))
        kubectl(env, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev", "--timeout=60s")
        proc = subprocess.run([*helm, "install", release, str(ROOT / "charts" / "floe"), "-n", op_ns,
                               "--set", "crds.enabled=false", "--set", f"image.repository={repository}",
                               "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
                               "--set", f"operator.watchNamespaces={{{','.join(app_namespaces)}}}"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"helm install: {proc.stderr}"
        try:
            yield Install(release, op_ns, list(app_namespaces))
        finally:
            subprocess.run([*helm, "uninstall", release, "-n", op_ns, "--wait"], capture_output=True, timeout=180)
    finally:
        for name in (op_ns, *app_namespaces):
            kubectl_text(env, "delete", "namespace", name, "--wait=false")


@pytest.fixture
def namespaces(node_env: dict[str, str], install: Install) -> Iterator[tuple[str, str]]:  # noqa: F811
    """(operator's namespace, an app namespace of this test's own, empty); the test's apps are
    deleted when it ends, while their operator can still run their finalizers."""
    assert install.free, "more tests than app namespaces: the module's install counts its tests"
    app_ns = install.free.pop(0)
    yield install.namespace, app_ns
    kubectl_text(node_env, "delete", "streamingapp", "--all", "-n", app_ns, "--timeout=180s")


@pytest.fixture
def operator_release(install: Install, namespaces: tuple[str, str]) -> str:
    """The module's operator release, watching this test's app namespace."""
    return install.release


def test_word_count_with_executors_on_kubernetes(
    node_env: dict[str, str], namespaces: tuple[str, str], operator_release: str  # noqa: F811
) -> None:
    env = node_env
    op_ns, app_ns = namespaces
    lines = localrun.word_lines(LINES, seed=23)
    body, topic_in, topic_out, keyspace = _executor_app(env, app_ns, lines, executor={"instances": EXECUTORS})
    name = body["metadata"]["name"]
    bootstrap = env["FLOE_KAFKA_BOOTSTRAP"]

    t0 = time.monotonic()
    kubectl(env, "apply", "-f", "-", input=yaml.safe_dump(body))
    try:
        driver, executors = wait_for(lambda: _driver_with_executors(env, app_ns, name), timeout=600,
                                     what=f"the driver Ready with {EXECUTORS} executor pods Running", every=2,
                                     pods=lambda: _pods(env, app_ns))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_describe(env, app_ns)}\n{_describe(env, op_ns)}") from None
    print(f"driver {driver['metadata']['name']} Ready with executors "
          f"{[p['metadata']['name'] for p in executors]} in {time.monotonic() - t0:.1f} s")

    # The executors run as the drivers do (the restricted namespace admitted them) and are
    # never taken for drivers (no selector label: the Deployment, Services and PDB count drivers).
    for pod in executors:
        (container,) = pod["spec"]["containers"]
        assert container["image"] == env["FLOE_JOB_IMAGE"] and container["imagePullPolicy"] == "Never"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert "streaming.floe.dev/app" not in pod["metadata"]["labels"]
        assert pod["spec"].get("automountServiceAccountToken") is False

    truth = dict(localrun.word_truth(lines))

    from cassandra.cluster import Cluster

    session = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"])).connect()
    try:
        def exact(what: str) -> None:
            """Wait for the store to hold exactly `truth` (each word's count)."""
            try:
                wait_for(lambda: _counts(session, keyspace) == truth, timeout=420, what=what, every=2,
                         pods=lambda: _pods(env, app_ns))
            except AssertionError as exc:
                diff = counting.counters_equal(_counts(session, keyspace) or {}, truth)
                raise AssertionError(f"{exc}\n{diff}\n{_describe(env, app_ns)}") from None

        exact("the counts in Cassandra to match the text")

        # A batch above the thresholds was committed, so Spark read and re-keyed it: on the executors.
        (container,) = driver["spec"]["containers"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
        above = _histogram_above(_metrics(driver["status"]["podIP"], port), "floe_job_batch_records",
                                 {"stage": "split"}, float(THRESHOLD))
        assert above >= 1, f"no batch of stage split above {THRESHOLD} records was committed"
        tasks = _finished_tasks(env, app_ns, executors)
        assert sum(tasks.values()) > 0, f"no Spark task ran on the executors: {tasks}"
        print(f"counts: {len(truth)} words exact in Cassandra; {above:.0f} split batch(es) above {THRESHOLD} "
              f"records; tasks finished per executor: {tasks}")

        def topic_exact() -> bool:
            emitted = localrun.last_values(localrun.read_topic(bootstrap, topic_out, timeout=10))
            return counting.counters_equal({k: int(v) for k, v in emitted.items()}, truth) is None

        wait_for(topic_exact, timeout=120, what="the output topic to carry every final count", every=2)

        # Deleting the driver's pod removes its executors (owned by it); the replacement starts its own.
        gone = driver["metadata"]["name"]
        t1 = time.monotonic()
        kubectl(env, "delete", "pod", gone, "-n", app_ns, "--wait=false")
        wait_for(lambda: not [p for p in _pods(env, app_ns, "spark-role=executor")
                              if (_owner(p) or ("",))[0] == gone],
                 timeout=180, what=f"no executor pod of the deleted driver {gone} left", every=2)
        removed_s = time.monotonic() - t1
        try:
            driver, executors = wait_for(lambda: _driver_with_executors(env, app_ns, name), timeout=600,
                                         what=f"a new driver Ready with {EXECUTORS} executor pods Running", every=2,
                                         pods=lambda: _pods(env, app_ns))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_describe(env, app_ns)}") from None
        assert driver["metadata"]["name"] != gone
        print(f"deleted driver {gone}: its executors gone in {removed_s:.1f} s; {driver['metadata']['name']} "
              f"runs {[p['metadata']['name'] for p in executors]}")

        more = localrun.word_lines(MORE_LINES, seed=29)
        localrun.produce(bootstrap, topic_in, more)
        for word, count in localrun.word_truth(more).items():
            truth[word] = truth.get(word, 0) + count
        exact("the counts in Cassandra to match both waves of text")
        print(kubectl(env, "get", "streamingapp", name, "-n", app_ns))
        app = json.loads(kubectl(env, "get", "streamingapp", name, "-n", app_ns, "-o", "json"))
        degraded = [c for c in app["status"]["conditions"] if c["type"] == "Degraded"]
        assert degraded and degraded[0]["status"] == "False", degraded
    finally:
        session.cluster.shutdown()

    # Deleting the app takes its drivers, and with them every executor.
    kubectl(env, "delete", "streamingapp", name, "-n", app_ns, "--wait=true", "--timeout=180s", timeout=200)
    wait_for(lambda: not _pods(env, app_ns), timeout=180, what="no pods left in the app's namespace", every=2)


@pytest.mark.slow  # a proof that needs minutes (executors idle out, then start again): `make test-all`
def test_dynamic_allocation_releases_idle_executors_and_asks_again_for_a_large_batch(
    node_env: dict[str, str], namespaces: tuple[str, str], operator_release: str  # noqa: F811
) -> None:
    """Spark's dynamic allocation, turned on in spec.spark.conf: `instances` is where it starts,
    idle executors are released down to minExecutors (0), and a batch above the driver's
    thresholds asks for executors again, which come up as pods of the same driver; counts exact."""
    env = node_env
    _, app_ns = namespaces
    lines = localrun.word_lines(LINES, seed=31)
    body, _, _, keyspace = _executor_app(env, app_ns, lines, executor={"instances": 1}, conf={
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        # shuffle files keep an executor until the driver's cleaner drops them; do not wait for it
        "spark.dynamicAllocation.shuffleTracking.timeout": "5s",
        "spark.dynamicAllocation.minExecutors": "0",
        "spark.dynamicAllocation.maxExecutors": str(EXECUTORS),
        # the release is what is waited for: short, as a user saving node capacity would set it
        # (Spark's default is 60 s); an executor released between two busy batches is asked for
        # again, which the counts do not mind
        "spark.dynamicAllocation.executorIdleTimeout": "5s",
        "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
    })
    name = body["metadata"]["name"]
    kubectl(env, "apply", "-f", "-", input=yaml.safe_dump(body))
    truth = dict(localrun.word_truth(lines))

    from cassandra.cluster import Cluster

    session = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"])).connect()
    try:
        wait_for(lambda: _counts(session, keyspace) == truth, timeout=600, every=2, pods=lambda: _pods(env, app_ns),
                 what="the first wave counted (its batches ran on the executor the driver started with)")
        driver, _ = wait_for(lambda: (found := _driver_and_executors(env, app_ns, name)) and not found[1] and found,
                             timeout=180, every=2, what="the idle executors released (none Running)")
        asked: list[int] = []

        def second_wave_counted() -> bool:
            found = _driver_and_executors(env, app_ns, name)
            asked.append(len(found[1]) if found else 0)
            return _counts(session, keyspace) == truth

        more = localrun.word_lines(MORE_LINES, seed=37)
        localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], body["spec"]["kafka"]["topics"][0], more)
        for word, count in localrun.word_truth(more).items():
            truth[word] = truth.get(word, 0) + count
        try:
            wait_for(second_wave_counted, timeout=420, every=1, what="the second wave counted",
                     pods=lambda: _pods(env, app_ns))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_describe(env, app_ns)}") from None
        assert max(asked) >= 1, f"no executor came back for the large batch: {asked}"
        again = _driver_and_executors(env, app_ns, name)
        assert again is not None and again[0]["metadata"]["uid"] == driver["metadata"]["uid"], "the driver changed"
        print(f"executors Running while the second wave ran: up to {max(asked)}")
    finally:
        session.cluster.shutdown()
