"""A StreamingApp's life against the real API server, controller-manager, Kafka and Cassandra:
create → children, unchanged resync → no writes, scale → only scale, new image → rollout,
too many replicas → warning, delete → garbage collection and the deletion policy."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from floe_jobs import config as job_config
from floe_jobs import offsets
from floe_jobs.stores import schema
from floe_operator import appids, k8s, render

from ..waiting import wait_for
from .conftest import RESYNC_SECONDS, app_manifest, counts_store, pods_state
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

APP = "wc"
DROPPED = "wc-drop"


@pytest.fixture(scope="module")
def app(kube: Kubectl, spec_args: dict[str, Any], operator: object) -> dict[str, Any]:
    body = app_manifest(APP, **spec_args)
    kube.apply(body)
    return body


def _tables(cql: Any, keyspace: str) -> set[str]:
    rows = cql.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", [keyspace])
    return {r.table_name for r in rows}


def _writes() -> float:
    return sum(s.value for m in k8s.WRITES.collect() for s in m.samples if s.name.endswith("_total"))


def _settled(kube: Kubectl, namespace: str, replicas: int) -> dict[str, Any] | None:
    """The app's status has caught up with its spec and with its Deployment at `replicas`
    (whose pods the stack's node refuses, or, without a node, the scheduler cannot place)."""
    obj = kube.get("streamingapp", APP, namespace)
    dep = kube.get("deployment", APP, namespace)
    status = (obj or {}).get("status") or {}
    meta = (obj or {}).get("metadata") or {}
    dep_status = (dep or {}).get("status") or {}
    ok = (
        status.get("observedGeneration") == meta.get("generation")
        and (dep or {}).get("spec", {}).get("replicas") == replicas
        and dep_status.get("observedGeneration") == (dep or {}).get("metadata", {}).get("generation")
        and status.get("replicas") == dep_status.get("replicas", 0)
        and condition(obj, "Ready").get("reason") in ("ReplicasNotReady", "PodsRejected", "Unschedulable")
    )
    return obj if ok else None


def test_create_makes_children(
    app: dict[str, Any], kube: Kubectl, namespace: str, topic: str, keyspace: str, cql: Any,
    stack_env: dict[str, str],
) -> None:
    dep = wait_for(lambda: kube.get("deployment", APP, namespace), what="the Deployment")
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert spec["replicas"] == 2
    assert spec["minReadySeconds"] == 10
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert pod["terminationGracePeriodSeconds"] == 60
    assert "lifecycle" not in container  # no preStop pause: SIGTERM starts the drain at once
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    owner = dep["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("StreamingApp", APP, True)
    managers = {m["manager"] for m in dep["metadata"]["managedFields"] if m["operation"] == "Apply"}
    assert managers == {"floe-operator"}

    cm = kube.get("configmap", f"{APP}-config", namespace)
    assert cm is not None
    cfg = job_config.from_dict(yaml.safe_load(cm["data"]["floe.yaml"]))
    assert cfg.kafka.topics == [topic]
    assert cfg.cassandra.keyspace == keyspace
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations[render.CONFIG_HASH] == render.config_hash(cm)
    # The Service and the PodDisruptionBudget are written after the writes a new app's pods wait
    # for (the Deployment, its ConfigMap), so they may land a moment after the Deployment.
    svc = wait_for(lambda: kube.get("service", APP, namespace), what="the Service")
    assert svc["spec"]["clusterIP"] == "None"
    pdb = wait_for(lambda: kube.get("poddisruptionbudget", APP, namespace), what="the PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == {render.APP_LABEL: APP}
    wait_for(lambda: kube.list("replicaset", namespace, f"{render.APP_LABEL}={APP}"), what="a ReplicaSet")

    tables = _tables(cql, keyspace)
    assert {schema.table_name(counts_store(APP)), "latest_kstreams_store"} <= tables
    assert offsets.TABLE in tables

    obj = wait_for(lambda: _settled(kube, namespace, 2), what="status to follow the Deployment")
    status = obj["status"]
    assert condition(obj, "StateProvisioned")["status"] == "True"
    assert status["partitions"] == 3
    assert status["labelSelector"] == f"{render.APP_LABEL}={APP}"
    # The image is not built here: the node's admission refuses the pods (without a node they
    # stay Pending), so the app is honestly not ready, and says why.
    degraded, reason = pods_state(stack_env)
    obj = wait_for(lambda: (o := kube.get("streamingapp", APP, namespace)) and
                   condition(o, "Ready").get("reason") == reason and o, what=f"Ready False {reason}")
    assert condition(obj, "Ready")["status"] == "False"
    assert condition(obj, "Progressing")["status"] == "True"
    assert condition(obj, "Degraded")["status"] == degraded
    assert condition(obj, "ReplicasWithinPartitions")["status"] == "True"


def _versions(kube: Kubectl, namespace: str) -> dict[str, str]:
    kinds = {
        "streamingapp": APP,
        "deployment": APP,
        "configmap": f"{APP}-config",
        "service": APP,
        "poddisruptionbudget": APP,
    }
    result = {}
    for kind, name in kinds.items():
        obj = kube.get(kind, name, namespace)
        assert obj is not None, kind
        result[kind] = obj["metadata"]["resourceVersion"]
    return result


def test_unchanged_resync_writes_nothing(app: dict[str, Any], kube: Kubectl, namespace: str) -> None:
    wait_for(lambda: _settled(kube, namespace, 2), what="a settled app")
    time.sleep(RESYNC_SECONDS * 2)
    before, writes = _versions(kube, namespace), _writes()
    time.sleep(RESYNC_SECONDS * 3 + 1)
    assert _versions(kube, namespace) == before
    assert _writes() == writes


def test_replicas_change_only_scales(app: dict[str, Any], kube: Kubectl, namespace: str) -> None:
    selector = f"{render.APP_LABEL}={APP}"
    sets_before = {rs["metadata"]["name"] for rs in kube.list("replicaset", namespace, selector)}
    dep_before = kube.get("deployment", APP, namespace)
    cm_before = kube.get("configmap", f"{APP}-config", namespace)
    assert dep_before and cm_before

    kube.run("scale", "streamingapp", APP, "-n", namespace, "--replicas=3")  # the scale subresource
    dep = wait_for(
        lambda: (d := kube.get("deployment", APP, namespace)) and d["spec"]["replicas"] == 3 and d,
        what="the Deployment to scale to 3",
    )
    assert dep["spec"]["template"] == dep_before["spec"]["template"]
    cm = kube.get("configmap", f"{APP}-config", namespace)
    assert cm and cm["metadata"]["resourceVersion"] == cm_before["metadata"]["resourceVersion"]
    wait_for(lambda: _settled(kube, namespace, 3), what="status.replicas 3")
    assert {rs["metadata"]["name"] for rs in kube.list("replicaset", namespace, selector)} == sets_before


def test_image_change_rolls_out(app: dict[str, Any], kube: Kubectl, namespace: str) -> None:
    image = "registry.example.com/floe/word-count:1.1.0"
    selector = f"{render.APP_LABEL}={APP}"
    sets_before = {rs["metadata"]["name"] for rs in kube.list("replicaset", namespace, selector)}
    patch = json.dumps({"spec": {"image": image}})
    kube.run("patch", "streamingapp", APP, "-n", namespace, "--type=merge", "-p", patch)

    def new_set() -> dict[str, Any] | None:
        for rs in kube.list("replicaset", namespace, selector):
            if rs["metadata"]["name"] not in sets_before:
                return rs
        return None

    rs = wait_for(new_set, what="a new ReplicaSet")
    assert rs["spec"]["template"]["spec"]["containers"][0]["image"] == image
    obj = wait_for(
        lambda: (
            (o := kube.get("streamingapp", APP, namespace))
            and condition(o, "Progressing").get("observedGeneration") == o["metadata"]["generation"]
            and o
        ),
        what="status of the new generation",
    )
    assert condition(obj, "Progressing")["reason"] == "RollingOut"
    assert condition(obj, "Ready")["status"] == "False"
    # maxUnavailable 0: the old ReplicaSet keeps its pods until new ones are available.
    old = [r for r in kube.list("replicaset", namespace, selector) if r["metadata"]["name"] in sets_before]
    assert old and old[0]["spec"]["replicas"] == 3


def test_replicas_beyond_partitions_warn(app: dict[str, Any], kube: Kubectl, namespace: str) -> None:
    kube.run("scale", "streamingapp", APP, "-n", namespace, "--replicas=5")
    obj = wait_for(
        lambda: (
            (o := kube.get("streamingapp", APP, namespace))
            and condition(o, "ReplicasWithinPartitions").get("status") == "False"
            and o
        ),
        what="the partitions warning",
    )
    assert condition(obj, "ReplicasWithinPartitions")["reason"] == "ReplicasExceedPartitions"
    events = wait_for(
        lambda: [
            e
            for e in kube.list("event", namespace)
            if e["involvedObject"]["name"] == APP and e["reason"] == "ReplicasExceedPartitions"
        ],
        what="a Warning event",
    )
    assert events[0]["type"] == "Warning"


def test_delete_collects_children_and_retains_state(
    app: dict[str, Any], kube: Kubectl, namespace: str, keyspace: str, cql: Any
) -> None:
    wait_for(lambda: kube.get("deployment", APP, namespace), what="the Deployment (state provisioned before it)")
    # Retain has nothing to do at deletion: no finalizer, so the delete never waits for the operator.
    assert "streaming.floe.dev/finalizer" not in (kube.get("streamingapp", APP, namespace) or {})["metadata"].get(
        "finalizers", []
    )
    kube.run("delete", "streamingapp", APP, "-n", namespace, "--wait=true", "--timeout=45s")
    for kind, name in (("deployment", APP), ("configmap", f"{APP}-config"), ("service", APP)):
        wait_for(lambda k=kind, n=name: kube.get(k, n, namespace) is None, what=f"{kind} {name} to be collected")
    assert {schema.table_name(counts_store(APP)), "latest_kstreams_store"} <= _tables(cql, keyspace)


def test_delete_policy_drops_only_own_tables_and_repartition_topics(
    kube: Kubectl, spec_args: dict[str, Any], namespace: str, keyspace: str, cql: Any, operator: object
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from floe_jobs.planning import OffsetRow

    body = app_manifest(DROPPED, **spec_args)
    body["spec"]["state"]["stores"] = [{"name": "dedup", "type": "global"}]
    body["spec"]["state"]["deletionPolicy"] = "Delete"
    kube.apply(body)
    wait_for(lambda: kube.get("deployment", DROPPED, namespace), what="the Deployment")
    assert "dedup_kstreams_store" in _tables(cql, keyspace)
    finalizers = (kube.get("streamingapp", DROPPED, namespace) or {})["metadata"].get("finalizers", [])
    assert "streaming.floe.dev/finalizer" in finalizers  # in place before any table was created
    # What a running replica leaves behind: a repartition topic with offsets recorded for it.
    app_id = appids.new_id(namespace, DROPPED)
    internal = f"{app_id}-words-repartition"
    admin = AdminClient({"bootstrap.servers": spec_args["kafka"]})
    admin.create_topics([NewTopic(internal, num_partitions=1, replication_factor=1)])[internal].result(timeout=30)
    table = offsets.OffsetsTable(cql, keyspace=keyspace, app_id=app_id)
    table.create([OffsetRow(topic=spec_args["topic"], partition=0, next_offset=0)], stage="split")
    table.create([OffsetRow(internal, 0, 0)], stage="count")
    neighbour_id = appids.new_id(namespace, APP)
    neighbour = offsets.OffsetsTable(cql, keyspace=keyspace, app_id=neighbour_id)
    neighbour.create([OffsetRow(topic=spec_args["topic"], partition=0, next_offset=7)], stage="main")

    kube.run("delete", "streamingapp", DROPPED, "-n", namespace, "--wait=true", "--timeout=45s")
    tables = _tables(cql, keyspace)
    assert "dedup_kstreams_store" not in tables
    assert {schema.table_name(counts_store(APP)), "latest_kstreams_store"} <= tables  # the other app's state stays
    assert offsets.TABLE in tables  # shared by the keyspace's apps: only the app's rows go
    assert offsets.progress(cql, keyspace=keyspace, app_id=app_id) == {}
    assert offsets.progress(cql, keyspace=keyspace, app_id=neighbour_id)[(spec_args["topic"], 0)][0] == 7
    topics = wait_for(
        lambda: (t := set(admin.list_topics(timeout=10).topics)) and internal not in t and t,
        what=f"{internal} deleted",
    )
    assert spec_args["topic"] in topics  # the input topic is the user's: kept
    events = [e for e in kube.list("event", namespace) if e["involvedObject"]["name"] == DROPPED]
    assert any(e["reason"] == "StateDropped" for e in events)


def test_spark_on_kubernetes_children_come_and_go(
    kube: Kubectl, spec_args: dict[str, Any], namespace: str, operator: object
) -> None:
    name = "sparky"
    body = app_manifest(name, **spec_args)
    body["spec"]["spark"] = {"master": "k8s://https://kubernetes.default.svc:443", "executor": {"instances": 2}}
    kube.apply(body)
    sa = f"{name}-spark"
    for kind, obj_name in (
        ("serviceaccount", sa),
        ("role", sa),
        ("rolebinding", sa),
        ("service", f"{name}-driver"),
    ):
        wait_for(lambda k=kind, n=obj_name: kube.get(k, n, namespace), what=f"{kind} {obj_name}")
    dep = wait_for(lambda: kube.get("deployment", name, namespace), what="the Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa
    role = kube.get("role", sa, namespace)
    assert role is not None and any("pods" in r["resources"] for r in role["rules"])
    # Roles are not watched: one deleted behind the operator's back comes back with the resync.
    kube.run("delete", "role", sa, "-n", namespace)
    wait_for(lambda: kube.get("role", sa, namespace), what="the Role back after a resync", timeout=RESYNC_SECONDS * 10)

    body["spec"]["spark"] = {"master": "local[2]"}
    kube.apply(body)
    for kind, obj_name in (("serviceaccount", sa), ("role", sa), ("rolebinding", sa), ("service", f"{name}-driver")):
        wait_for(lambda k=kind, n=obj_name: kube.get(k, n, namespace) is None, what=f"{kind} {obj_name} removed")
    dep = wait_for(
        lambda: (
            (d := kube.get("deployment", name, namespace))
            and d["spec"]["template"]["spec"].get("serviceAccountName", "default") == "default"
            and d
        ),
        what="the Deployment without the Spark service account",
    )
    assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
