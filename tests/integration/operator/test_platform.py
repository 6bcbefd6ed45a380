"""Suspend and resume, restart, offset reset and the pod template, as a user drives them: against
the real API server and controller-manager (Deployments, ReplicaSets, Pods admitted under the
restricted Pod Security profile, the HPA controller), Kafka and Cassandra, with the operator and
its lag loop in-process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kopf.testing
import pytest
from floe_jobs import offsets, planning
from floe_operator import appids, handlers, render
from floe_operator.lag import loop as lag_loop
from floe_operator.lag import scalers

from ...nodekit import TEST_POD_CPU, require_node
from ..waiting import wait_for
from .conftest import RESYNC_SECONDS, app_manifest
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[3]
KEDA_CRDS = ROOT / "tests/unit/lag/keda-crds.yaml"
RECORDS = 10  # per partition and per time: RECORDS old ones, then RECORDS new ones
# records older and newer than the reset time, within what the broker accepts as record times
OLD_AGE_MS, NEW_AGE_MS = 20 * 60_000, 10 * 60_000


@pytest.fixture(scope="module")
def restricted(kube: Kubectl, namespace: str) -> str:
    """The test namespace enforcing the restricted Pod Security profile: every pod the
    ReplicaSets create must pass it."""
    kube.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    return namespace


@pytest.fixture(scope="module")
def keda_crds(kube: Kubectl) -> Iterator[None]:
    """KEDA's CRDs (their structural schemas; no KEDA controller), applied and established (a test
    beside this module may have just created them), and left installed: a test beside this
    module may be using them (only KEDA-mode apps read them)."""
    kube.run("apply", "--server-side", "-f", str(KEDA_CRDS))
    kube.run("wait", "--for=condition=Established", "--timeout=60s", f"crd/{scalers.KEDA_CRD}")
    yield


@pytest.fixture(scope="module")
def operator(kube: Kubectl, restricted: str, keda_crds: None) -> Iterator[kopf.testing.KopfRunner]:
    """The operator with its lag loop (the native autoscaler), watching the test namespace."""
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=RESYNC_SECONDS, started=started))
    lag_loop.register(registry, lag_loop.Options(interval_seconds=1.0, status_seconds=1.0))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", restricted], registry=registry, timeout=60)
    with runner:
        assert started.wait(timeout=30), "the operator did not start"
        yield runner
        kube.run("delete", "streamingapp", "--all", "-n", restricted, "--wait=true", "--timeout=90s", timeout=120)
    assert runner.exception is None, runner.exception


def _patch(kube: Kubectl, namespace: str, name: str, spec: dict[str, Any]) -> None:
    import json

    kube.run("patch", "streamingapp", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec}))


def _app(kube: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get("streamingapp", name, namespace)
    assert obj is not None
    return obj


def _replicas(kube: Kubectl, namespace: str, name: str) -> int | None:
    dep = kube.get("deployment", name, namespace)
    return None if dep is None else int(dep["spec"]["replicas"])


def _observed(kube: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    obj = _app(kube, namespace, name)
    return obj if obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"] else None


# --- suspend and resume ----------------------------------------------------------------


def test_suspend_removes_the_hpa_and_resume_restores_replicas_and_hpa(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns, name = spec_args["namespace"], "sus-hpa"
    kube.apply(app_manifest(name, **spec_args, autoscaling={"mode": "HPA", "minReplicas": 1, "maxReplicas": 3}))
    wait_for(lambda: _replicas(kube, ns, name) == 2, what="the Deployment at 2 replicas")
    wait_for(lambda: kube.get("hpa", name, ns), what="the HPA")

    _patch(kube, ns, name, {"suspend": True})
    wait_for(lambda: _replicas(kube, ns, name) == 0, what="the Deployment at 0 replicas")
    wait_for(lambda: kube.get("hpa", name, ns) is None, what="the HPA removed")
    # Ready turns Suspended once the Deployment has scaled to zero; until then it still carries the
    # pods' fault (this namespace's pods are refused: the app's image is not one of the node's)
    obj = wait_for(
        lambda: (o := _observed(kube, ns, name)) is not None and condition(o, "Suspended").get("status") == "True"
        and condition(o, "Ready").get("reason") == "Suspended" and o,
        what="Suspended, and Ready saying so",
    )
    assert obj["spec"]["replicas"] == 2
    assert obj["status"]["suspension"]["replicas"] == 2
    assert condition(obj, "Ready")["reason"] == "Suspended"
    wait_for(lambda: not kube.list("pod", ns, f"{render.APP_LABEL}={name}"), what="no pod left")
    time.sleep(3 * RESYNC_SECONDS)  # resyncs change nothing while suspended
    assert _replicas(kube, ns, name) == 0 and kube.get("hpa", name, ns) is None

    _patch(kube, ns, name, {"suspend": False})
    wait_for(lambda: _replicas(kube, ns, name) == 2, what="the Deployment back at 2 replicas")
    wait_for(lambda: kube.get("hpa", name, ns), what="the HPA back")
    obj = wait_for(lambda: _observed(kube, ns, name), what="the resumed status")
    suspended = condition(obj, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "Resumed")
    assert "suspension" not in obj["status"]


def test_suspend_pauses_the_keda_scaled_object(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> None:
    ns, name = spec_args["namespace"], "sus-keda"
    kube.apply(app_manifest(name, **spec_args, suspend=True, autoscaling={"mode": "KEDA", "maxReplicas": 3}))
    so = wait_for(lambda: kube.get("scaledobject", name, ns), what="the ScaledObject")
    assert so["metadata"]["annotations"][scalers.KEDA_PAUSED] == "true"
    assert _replicas(kube, ns, name) == 0

    _patch(kube, ns, name, {"suspend": False})
    wait_for(
        lambda: (
            scalers.KEDA_PAUSED not in (kube.get("scaledobject", name, ns) or {})["metadata"].get("annotations", {})
        ),
        what="the paused annotation removed",
    )
    wait_for(lambda: _replicas(kube, ns, name) == 2, what="the Deployment at 2 replicas")


def test_the_native_autoscaler_leaves_a_suspended_app_alone(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    """0 replicas below minReplicas 2: the native autoscaler corrects that at once, but not while
    suspended. (0 replicas, because pods never become ready without a kubelet and the autoscaler
    waits for a rollout to finish.)"""
    ns, name = spec_args["namespace"], "sus-native"
    body = app_manifest(
        name, **spec_args, suspend=True, autoscaling={"mode": "Native", "minReplicas": 2, "maxReplicas": 3}
    )
    body["spec"]["replicas"] = 0
    kube.apply(body)

    def holding() -> dict[str, Any] | None:
        obj = _app(kube, ns, name)
        return obj if (obj.get("status", {}).get("autoscaling") or {}).get("reason") == "Suspended" else None

    obj = wait_for(holding, what="the native autoscaler holding")
    assert obj["status"]["autoscaling"]["action"] == "Hold"
    time.sleep(3)  # three lag ticks
    assert _app(kube, ns, name)["spec"]["replicas"] == 0

    _patch(kube, ns, name, {"suspend": False})
    wait_for(lambda: _app(kube, ns, name)["spec"]["replicas"] == 2, what="the native autoscaler scaling to 2")
    wait_for(lambda: _replicas(kube, ns, name) == 2, what="the Deployment at 2 replicas")


# --- restart nonce -----------------------------------------------------------------------


def test_a_new_restart_nonce_rolls_the_pods_and_changes_nothing_else(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns, name = spec_args["namespace"], "restart"
    kube.apply(app_manifest(name, **spec_args))
    wait_for(lambda: len(kube.list("replicaset", ns, f"{render.APP_LABEL}={name}")) == 1, what="a ReplicaSet")
    wait_for(lambda: _observed(kube, ns, name), what="a settled status")
    cm = kube.get("configmap", f"{name}-config", ns)
    assert cm is not None
    before = kube.get("deployment", name, ns)
    assert before is not None

    _patch(kube, ns, name, {"restartNonce": "1"})
    sets = wait_for(
        lambda: len(found := kube.list("replicaset", ns, f"{render.APP_LABEL}={name}")) == 2 and found,
        what="a second ReplicaSet",
    )
    nonces = sorted(str(rs["spec"]["template"]["metadata"]["annotations"].get(render.RESTART_NONCE)) for rs in sets)
    assert nonces == ["1", "None"]
    after = kube.get("deployment", name, ns)
    assert after is not None
    strip = {render.RESTART_NONCE}
    spec_before, spec_after = before["spec"], after["spec"]
    for spec in (spec_before, spec_after):
        notes = spec["template"]["metadata"]["annotations"]
        spec["template"]["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in strip}
    assert spec_before == spec_after
    cm_after = kube.get("configmap", f"{name}-config", ns)
    assert cm_after is not None and cm_after["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]


# --- Spark UI on demand -------------------------------------------------------------------


def test_the_spark_ui_gets_a_port_and_a_service_on_demand_and_loses_them_when_off(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns, name = spec_args["namespace"], "ui"
    kube.apply(app_manifest(name, **spec_args))
    wait_for(lambda: _observed(kube, ns, name), what="a settled status")
    assert kube.get("service", f"{name}-spark-ui", ns) is None

    _patch(kube, ns, name, {"spark": {"ui": {"enabled": True, "port": 4050}}})
    svc = wait_for(lambda: kube.get("service", f"{name}-spark-ui", ns), what="the Spark UI Service")
    assert svc["spec"]["ports"] == [{"name": "spark-ui", "port": 4050, "targetPort": "spark-ui", "protocol": "TCP"}]
    assert svc["spec"]["sessionAffinity"] == "ClientIP"
    assert svc["spec"]["selector"] == {render.APP_LABEL: name}

    def container_port() -> bool:
        dep = kube.get("deployment", name, ns) or {}
        app = next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "app")
        return {"name": "spark-ui", "containerPort": 4050, "protocol": "TCP"} in app.get("ports", [])

    wait_for(container_port, what="the app container's spark-ui port")
    cm = kube.get("configmap", f"{name}-config", ns)
    assert cm is not None and "spark.ui.enabled: 'true'" in cm["data"]["floe.yaml"], cm["data"]["floe.yaml"]

    _patch(kube, ns, name, {"spark": {"ui": {"enabled": False}}})
    wait_for(lambda: kube.get("service", f"{name}-spark-ui", ns) is None, what="the Spark UI Service deleted")
    kube.run("delete", "streamingapp", name, "-n", ns, "--wait=true", "--timeout=60s", timeout=90)


# --- pod template ------------------------------------------------------------------------

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"cost-center": "42"}, "annotations": {"example.com/note": "hi"}},
    "spec": {
        "containers": [
            {
                "name": "app",
                "volumeMounts": [{"name": "rules", "mountPath": "/opt/rules", "readOnly": True}],
                "envFrom": [{"configMapRef": {"name": "settings", "optional": True}}],
            },
            # nothing about security: Floe adds what the restricted profile needs
            {"name": "shipper", "image": "registry.example.com/shipper:1", "ports": [{"containerPort": 2020}]},
        ],
        "initContainers": [{"name": "fetch", "image": "registry.example.com/fetch:1", "command": ["true"]}],
        "volumes": [{"name": "rules", "emptyDir": {}}],
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "securityContext": {"fsGroup": 185},
    },
}


def _with_images(template: dict[str, Any], image: str) -> dict[str, Any]:
    """TEMPLATE with its extra containers on `image` (the node runs only images built here)."""
    spec = template["spec"]
    return {**template, "spec": {
        **spec,
        "containers": [c if "image" not in c else {**c, "image": image, "command": ["sleep", "infinity"]}
                       for c in spec["containers"]],
        "initContainers": [{**c, "image": image} for c in spec["initContainers"]],
    }}


@pytest.mark.node
def test_pod_template_pods_pass_the_restricted_profile(
    kube: Kubectl, spec_args: dict[str, Any], operator: object, stack_env: dict[str, str]
) -> None:
    image = require_node(stack_env)["FLOE_JOB_IMAGE"]
    ns, name = spec_args["namespace"], "templated"
    kube.apply(app_manifest(name, **spec_args, image=image, podTemplate=_with_images(TEMPLATE, image),
                            resources={"requests": {"cpu": TEST_POD_CPU}}))  # not the default whole CPU each
    pods = wait_for(
        lambda: len(found := kube.list("pod", ns, f"{render.APP_LABEL}={name}")) == 2 and found,
        what="2 pods admitted under the restricted profile",
    )
    pod = pods[0]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app", "shipper"]
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fetch"]
    app_container = pod["spec"]["containers"][0]
    assert {"name": "rules", "mountPath": "/opt/rules", "readOnly": True} in app_container["volumeMounts"]
    assert app_container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["metadata"]["labels"]["cost-center"] == "42"
    assert pod["spec"]["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {render.APP_LABEL: name}}
    assert pod["spec"]["securityContext"]["fsGroup"] == 185


def test_a_template_only_the_operator_can_check_degrades_the_app_naming_the_field(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    ns, name = spec_args["namespace"], "templated-bad"
    # No pods: their images are not on the node, which would be a fault of its own.
    kube.apply(app_manifest(name, **spec_args, replicas=0, podTemplate=TEMPLATE))
    wait_for(lambda: kube.get("deployment", name, ns), what="the Deployment")
    broken = {
        "spec": {
            **TEMPLATE["spec"],
            "containers": [{"name": "app", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}],
        }
    }
    _patch(kube, ns, name, {"podTemplate": broken})

    def degraded() -> dict[str, str] | None:
        cond = condition(_observed(kube, ns, name), "Degraded")
        return cond if cond.get("reason") == "InvalidPodTemplate" else None

    cond = wait_for(degraded, what="Degraded InvalidPodTemplate")
    assert "spec.podTemplate.spec.containers[0].volumeMounts[0].name: no volume 'nope'" in cond["message"]
    dep = kube.get("deployment", name, ns)
    assert dep is not None
    mounts = dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert "nope" not in {m["name"] for m in mounts}  # nothing half-valid rolled out

    _patch(kube, ns, name, {"podTemplate": TEMPLATE})
    wait_for(lambda: condition(_observed(kube, ns, name), "Degraded").get("status") == "False", what="Degraded False")


# --- offset reset --------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str) -> int:
    """RECORDS old records, then RECORDS new ones, in each partition; the new ones' first time."""
    from confluent_kafka import Producer

    now = int(time.time() * 1000)
    failed: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(3):
        for at in (now - OLD_AGE_MS, now - NEW_AGE_MS):
            for i in range(RECORDS):
                producer.produce(
                    topic,
                    value=f"r{i}".encode(),
                    partition=partition,
                    timestamp=at + i,
                    on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
                )
    assert producer.flush(30) == 0
    assert failed == []
    return now - NEW_AGE_MS


# the stage whose rows a replica of the tests' app leaves (its job has one stage)
STAGE = "main"


def _positions(cql: Any, keyspace: str, app_id: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) → (next_offset, committed_seq, planned_seq)."""
    return {tp: row[:3] for tp, row in offsets.progress(cql, keyspace=keyspace, app_id=app_id).items()}


def _committed_by_a_replica(cql: Any, keyspace: str, app_id: str, topic: str) -> offsets.OffsetsTable:
    """Rows as a replica leaves them: partition 0 committed to 15, 1 to 20, 2 killed mid-batch [5, 12)."""
    table = offsets.OffsetsTable(cql, keyspace=keyspace, app_id=app_id, owner="replica-0/t1")
    table.create([planning.OffsetRow(topic, p, next_offset=0, planned_ts=1) for p in range(3)], stage=STAGE)
    rows = table.read([topic], stage=STAGE)
    first = [planning.PartitionPlan(topic, p, 1, 0, (15, 20, 5)[p], replay=False, stamp=10) for p in range(3)]
    assert table.claim(first, rows, stage=STAGE) and table.commit(first, stage=STAGE)
    rows = table.read([topic], stage=STAGE)
    second = [planning.PartitionPlan(topic, 2, 2, 5, 12, replay=False, stamp=20)]
    assert table.claim(second, rows, stage=STAGE)  # never committed
    return table


def _reset_status(kube: Kubectl, namespace: str, name: str, reset_id: str, phase: str) -> dict[str, Any] | None:
    obj = _observed(kube, namespace, name)
    record = ((obj or {}).get("status") or {}).get("offsetReset") or {}
    return obj if record.get("id") == reset_id and record.get("phase") == phase else None


def _group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in found.topic_partitions if tp.topic == topic}


def _explicit_reset(kube: Kubectl, namespace: str, name: str, positions: dict[tuple[str, int], int]) -> None:
    """Ask for reset r3 to explicit offsets (dropping the timestamp a previous reset had)."""
    offsets_ = [{"topic": t, "partition": p, "offset": o} for (t, p), o in positions.items()]
    reset = {"id": "r3", "to": "offsets", "timestamp": None, "offsets": offsets_}
    _patch(kube, namespace, name, {"offsetReset": reset})


def test_offset_reset_waits_until_nothing_runs_then_moves_the_offsets_once(
    kube: Kubectl, spec_args: dict[str, Any], operator: object, cql: Any, kafka_bootstrap: str
) -> None:
    from confluent_kafka import Consumer

    ns, name, topic, keyspace = spec_args["namespace"], "replay", spec_args["topic"], spec_args["keyspace"]
    app_id, group = appids.new_id(ns, name), f"floe.{ns}.{name}"
    new_ms = _produce(kafka_bootstrap, topic)
    body = app_manifest(name, **spec_args, offsetReset={"id": "r1", "to": "earliest"})
    body["spec"]["replicas"] = 1
    kube.apply(body)

    # 1. Not suspended: it waits, saying for what, and touches nothing.
    obj = wait_for(lambda: _reset_status(kube, ns, name, "r1", "Waiting"), what="the reset waiting")
    cond = condition(obj, "OffsetReset")
    assert (cond["status"], cond["reason"]) == ("False", "AppNotSuspended")
    assert "spec.suspend: true" in cond["message"]
    wait_for(lambda: condition(_app(kube, ns, name), "StateProvisioned").get("status") == "True", what="tables")
    table = _committed_by_a_replica(cql, keyspace, app_id, topic)
    stale_rows = table.read([topic], stage=STAGE)
    before = _positions(cql, keyspace, app_id)
    assert before == {(topic, 0): (15, 1, 1), (topic, 1): (20, 1, 1), (topic, 2): (5, 1, 2)}

    # 2. Suspended, but a replica running outside Kubernetes is still in the group: it waits.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "session.timeout.ms": 10000})
    try:
        consumer.subscribe([topic])
        wait_for(lambda: consumer.poll(0.5) is not None or consumer.assignment(), what="the consumer assigned")
        _patch(kube, ns, name, {"suspend": True})
        obj = wait_for(
            lambda: (
                condition(_app(kube, ns, name), "OffsetReset").get("reason") == "ConsumerGroupActive"
                and _app(kube, ns, name)
            ),
            what="the reset waiting for the group",
        )
        assert group in condition(obj, "OffsetReset")["message"]
        assert _positions(cql, keyspace, app_id) == before
    finally:
        consumer.close()  # leaves the group

    # 3. Nothing runs any more: done once, recorded.
    obj = wait_for(lambda: _reset_status(kube, ns, name, "r1", "Done"), what="the reset done", timeout=90)
    record = obj["status"]["offsetReset"]
    moved = {(p["topic"], p["partition"]): p for p in record["partitions"]}
    row = {"topic": topic, "stage": STAGE, "to": 0}
    assert moved[(topic, 0)] == {**row, "partition": 0, "from": 15}
    assert moved[(topic, 1)] == {**row, "partition": 1, "from": 20}
    assert moved[(topic, 2)] == {**row, "partition": 2, "from": 5, "abandonedBatch": 2}
    cond = condition(obj, "OffsetReset")
    assert (cond["status"], cond["reason"]) == ("True", "OffsetsReset")
    # the in-flight batch is closed (never replayed); sequences never go back
    assert _positions(cql, keyspace, app_id) == {(topic, 0): (0, 1, 1), (topic, 1): (0, 1, 1), (topic, 2): (0, 2, 2)}
    assert _group_offsets(kafka_bootstrap, group, topic) == {0: 0, 1: 0, 2: 0}

    # The fence holds: the stale replica's plans and commits fail; a new claim starts at the new offset.
    stale = [planning.PartitionPlan(topic, 2, 2, 5, 12, replay=True, stamp=20)]
    assert not table.commit(stale, stage=STAGE)
    late = [planning.PartitionPlan(topic, 0, 2, 15, 20, replay=False, stamp=30)]
    assert not table.claim(late, stale_rows, stage=STAGE)
    rows = table.read([topic], stage=STAGE)
    plan = planning.plan_batch(
        owned=[(topic, 0)],
        rows=rows,
        watermarks={(topic, 0): planning.Watermarks(0, 2 * RECORDS)},
        starting_offsets="latest",
        budget=5,
        now_us=time.time_ns() // 1000,
    )
    (fresh,) = plan.partitions
    assert (fresh.start, fresh.seq) == (0, 2)
    assert table.claim(plan.partitions, rows, stage=STAGE)

    # 4. Once per id: later passes leave the rows alone.
    time.sleep(3 * RESYNC_SECONDS)
    assert _positions(cql, keyspace, app_id)[(topic, 0)] == (0, 1, 2)

    # 5. A new id, to a time: the first record at or after it.
    at = datetime.fromtimestamp(new_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    _patch(kube, ns, name, {"offsetReset": {"id": "r2", "to": "timestamp", "timestamp": at}})
    obj = wait_for(lambda: _reset_status(kube, ns, name, "r2", "Done"), what="the timestamp reset done")
    assert {p["to"] for p in obj["status"]["offsetReset"]["partitions"]} == {RECORDS}
    assert {tp: v[0] for tp, v in _positions(cql, keyspace, app_id).items()} == {(topic, p): RECORDS for p in range(3)}

    # 6. Explicit offsets: a partition that does not exist is refused naming the field; then one moves.
    _explicit_reset(kube, ns, name, {(topic, 7): 1})
    obj = wait_for(lambda: _reset_status(kube, ns, name, "r3", "Failed"), what="the bad reset refused")
    assert (
        f"spec.offsetReset.offsets[0].partition: topic {topic} has no partition 7"
        in condition(obj, "OffsetReset")["message"]
    )
    _explicit_reset(kube, ns, name, {(topic, 1): 3})
    obj = wait_for(lambda: _reset_status(kube, ns, name, "r3", "Done"), what="the explicit reset done")
    moved_one = {"topic": topic, "partition": 1, "stage": STAGE, "from": RECORDS, "to": 3}
    assert obj["status"]["offsetReset"]["partitions"] == [moved_one]
    assert {tp: v[0] for tp, v in _positions(cql, keyspace, app_id).items()} == {
        (topic, 0): RECORDS,
        (topic, 1): 3,
        (topic, 2): RECORDS,
    }

    # 7. Resume: the app runs again, the record stays.
    _patch(kube, ns, name, {"suspend": False})
    wait_for(lambda: _replicas(kube, ns, name) == 1, what="the Deployment back at 1 replica")
    assert _app(kube, ns, name)["status"]["offsetReset"]["id"] == "r3"
