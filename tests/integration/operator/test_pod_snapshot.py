"""A StreamingAppSnapshot taken on the stack's node: word count runs in a namespace that enforces
the restricted Pod Security profile, a snapshot resource asks for a cut of it to a file:// location
on a PersistentVolumeClaim, and the operator's Job (the app's image, configuration and security)
writes it while the input flows. The status ends Succeeded with the size the manifest gives, and
the manifest's positions lie between the app's offsets rows before the snapshot and after it.
Deleting the snapshot deletes its Job and leaves the data. A snapshot whose pod is killed while it
cuts ends Failed, with no manifest at its location; one whose operator is killed once its Job
exists ends Succeeded when an operator runs again.

The Job's pod runs the app image built by the stack from the main checkout: it needs
`floe-job snapshot --summary-file` and the floe_jobs.snapshots package in that image.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import demo, localrun

from tests import leftovers

from ...nodekit import kubectl_floe, main_pid, require_node, wait_exact_counts, word_count_app
from ..processes import RestartableOperator
from ..waiting import wait_for
from .kube import Kubectl, condition

pytestmark = [pytest.mark.node, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

SNAPSHOT_LABEL = "streaming.floe.dev/snapshot"
MOUNT = "/snapshots"


@contextlib.contextmanager
def _volume(kube: Kubectl, namespace: str, host_dir: Path) -> Iterator[str]:
    """A PersistentVolumeClaim in `namespace` bound to a hostPath PersistentVolume of `host_dir`
    (the node has no dynamic provisioner; the volume is the admin's part): its name."""
    os.chmod(host_dir, 0o777)  # the Job's pod runs as uid 185; a hostPath volume takes no fsGroup
    pv = f"floe-it-snapshots-{uuid.uuid4().hex[:8]}"
    pvc = f"backups-{pv[-8:]}"
    kube.apply({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(host_dir), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": pvc}},
    })
    kube.apply({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": pvc, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    try:
        yield pvc
    finally:
        kube.run("delete", "pvc", pvc, "-n", namespace, "--wait=false", check=False)
        kube.run("delete", "pv", pv, "--wait=false", check=False)


@pytest.fixture
def claim(kube: Kubectl, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A claim in the module's namespace on a fresh host directory (`_volume`), and that
    directory, which the test reads the snapshot from."""
    host_dir = tmp_path_factory.mktemp("snapshots")
    with _volume(kube, namespace, host_dir) as pvc:
        yield pvc, host_dir


def _snapshot_done(kube: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    found = kube.get("streamingappsnapshot", name, namespace)
    return found if (found or {}).get("status", {}).get("phase") in ("Succeeded", "Failed") else None


def _manifest(location_dir: Path) -> dict[str, Any]:
    parts = sorted((location_dir / "manifest").glob("part-*"))
    assert parts, f"no manifest under {location_dir}: {sorted(p.name for p in location_dir.rglob('*'))}"
    return dict(json.loads("".join(p.read_text() for p in parts)))


def _positions(env: dict[str, str], keyspace: str, app_id: str) -> dict[tuple[str | None, str, int], tuple[int, int]]:
    """(stage, topic, partition) → (next_offset, committed_seq) of every offsets row of the app."""
    from cassandra.cluster import Cluster

    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    try:
        rows = offsets.stage_progress(cluster.connect(), keyspace=keyspace, app_id=app_id)
    finally:
        cluster.shutdown()
    return {key: (row[0], row[1]) for key, row in rows.items()}


def _snapshot(namespace: str, name: str, app: str, *, claim_name: str, location: str) -> dict[str, Any]:
    return {
        "apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingAppSnapshot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"app": app, "location": location, "volume": {"claimName": claim_name},
                 "writers": {"word-count": "count"}, "activeDeadlineSeconds": 900},
    }


def _counted_app(kube: Kubectl, namespace: str, env: dict[str, str],
                 **spec_fields: Any) -> tuple[str, dict[str, Any], str]:
    """Word count, one replica, in `namespace` (enforcing the restricted profile), with a first
    wave of lines counted exactly: (its name, its spec, its app id); `spec_fields` added to its spec."""
    kube.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    body = word_count_app(env, namespace=namespace, name="snap", partitions=2, replicas=1)
    body["spec"].update(spec_fields)
    app = body["metadata"]["name"]
    spec = body["spec"]
    kube.apply(body)

    def app_pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")

    wait_for(lambda: any(demo.is_ready(p) for p in app_pods()), timeout=480, what="the app's pod Ready", every=2,
             pods=app_pods)
    first = localrun.word_lines(300, seed=11)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], spec["kafka"]["topics"][0], first)
    wait_exact_counts(env, keyspace=spec["state"]["cassandra"]["keyspace"], topic_out=spec["kafka"]["outputTopics"][0],
                      truth=dict(localrun.word_truth(first)), pods=app_pods)
    app_id = str(kube.get("streamingapp", app, namespace)["status"]["appId"])  # type: ignore[index]
    return app, spec, app_id


def test_a_snapshot_resource_cuts_a_running_app_to_a_volume_and_kubectl_floe_restore_puts_the_app_back_to_it(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str], claim: tuple[str, Path]
) -> None:
    """The snapshot: Succeeded, its manifest a cut between the offsets rows before and after it,
    its Job the snapshot's. Then, with more lines counted, `kubectl floe restore --snapshot` puts
    the running app back to it in place (spec.stateRestore): the restore Succeeded and, run on,
    the app ends with every line of the input counted once in Cassandra and in the output topic
    (what it had counted after the cut is counted again from the cut, not on top). Deleting the
    snapshot then deletes its Job and keeps the data."""
    env = require_node(stack_env)
    app, spec, app_id = _counted_app(kube, namespace, env)
    topic_in, keyspace = spec["kafka"]["topics"][0], spec["state"]["cassandra"]["keyspace"]
    before = _positions(env, keyspace, app_id)

    claim_name, host_dir = claim
    name = "nightly-1"
    kube.apply(_snapshot(namespace, name, app, claim_name=claim_name, location=f"file://{MOUNT}/{app}/1"))
    # the input keeps flowing while the snapshot is taken
    second = localrun.word_lines(300, seed=12)
    feeder = threading.Thread(target=localrun.produce, args=(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, second))
    feeder.start()

    def job_pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"{SNAPSHOT_LABEL}={name}")

    done = wait_for(lambda: _snapshot_done(kube, namespace, name), timeout=600, every=2,
                    what="the snapshot Succeeded or Failed", pods=job_pods)
    feeder.join(timeout=60)
    status = done["status"]
    logs = kube.run("logs", f"job/{name}", "-n", namespace, "--tail=40", check=False).stdout
    assert status["phase"] == "Succeeded", f"{json.dumps(status, indent=1)}\nJob's log:\n{logs}"
    assert condition(done, "Ready")["status"] == "True"
    assert condition(done, "Failed")["status"] == "False"
    assert status["sizeBytes"] > 0 and status["rows"] > 0 and status["durationSeconds"] > 0
    assert status["startTime"] <= status["completionTime"]
    assert (status["appId"], status["image"], status["location"]) == (app_id, spec["image"], f"file://{MOUNT}/{app}/1")

    # The manifest, read where the Job wrote it: what the status says, and a cut between the
    # offsets rows before the snapshot and now.
    manifest = _manifest(host_dir / app / "1")
    assert manifest["app_id"] == app_id
    assert manifest["image"] == spec["image"]
    assert manifest["generation"] == status["appGeneration"]
    assert status["sizeBytes"] == sum(part["bytes"] for part in (*manifest["stores"], *manifest["tails"]))
    assert {s["name"]: s["partitions"] for s in status["stages"]} == {
        s["name"]: len(s["partitions"]) for s in manifest["stages"]}
    after = _positions(env, keyspace, app_id)
    cut = 0
    for stage in manifest["stages"]:
        for part in stage["partitions"]:
            key = (stage["name"], stage["topic"], part["partition"])
            assert key in after, f"{key} is in the manifest and not among the app's offsets rows {sorted(after)}"
            then, now = before.get(key, (0, 0)), after[key]
            assert then[0] <= part["next_offset"] <= now[0], (key, then, part, now)
            assert then[1] <= part["committed_seq"] <= now[1], (key, then, part, now)
            cut += 1
    assert cut == len([k for k in after if k[0] in {s["name"] for s in manifest["stages"]}])

    # The Job is the snapshot's: its pod ran as the app's pods do, never counted as one of them.
    (job,) = kube.list("job", namespace, f"{SNAPSHOT_LABEL}={name}")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "StreamingAppSnapshot"
    (pod,) = job_pods()
    assert "streaming.floe.dev/app" not in pod["metadata"]["labels"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True

    print(kube.run("get", "streamingappsnapshot", "-n", namespace, "-o", "wide").stdout)
    print(f"snapshot: {status['rows']} rows, {status['sizeBytes']} bytes in {status['durationSeconds']} s"
          f" (Job {status['startTime']} to {status['completionTime']}), stages {status['stages']}")

    # kubectl floe restore: the app back to the snapshot, in place, while it runs and more lines come
    third = localrun.word_lines(200, seed=13)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, third)
    asked = kubectl_floe(env, "restore", app, "-n", namespace, "--snapshot", name, "--id", "back-1")
    assert asked.returncode == 0, asked.stderr

    def restored() -> dict[str, Any] | None:
        record = ((kube.get("streamingapp", app, namespace) or {}).get("status") or {}).get("stateRestore") or {}
        return record if record.get("id") == "back-1" and record.get("phase") in ("Succeeded", "Failed") else None

    def app_pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")

    record = wait_for(restored, timeout=480, every=2, what="the restore in place Succeeded or Failed",
                      pods=lambda: kube.list("pod", namespace, "app.kubernetes.io/component"))
    assert record["phase"] == "Succeeded", record
    everything = [value.decode() for _, value in localrun.read_topic(env["FLOE_KAFKA_BOOTSTRAP"], topic_in)
                  if value is not None]
    assert len(everything) == 300 + 300 + 200
    wait_exact_counts(env, keyspace=keyspace, topic_out=spec["kafka"]["outputTopics"][0],
                      truth=dict(localrun.word_truth(everything)), pods=app_pods)

    # Deleting the snapshot deletes its Job, never the data.
    kube.run("delete", "streamingappsnapshot", name, "-n", namespace, "--wait=true", "--timeout=60s", timeout=90)
    wait_for(lambda: not kube.list("job", namespace, f"{SNAPSHOT_LABEL}={name}"), timeout=120,
             what="the snapshot's Job deleted with it")
    assert _manifest(host_dir / app / "1")["app_id"] == app_id


@pytest.fixture
def operator_process(kube: Kubectl, tmp_path: Path) -> Iterator[RestartableOperator]:
    """The operator as a restartable process, in a namespace of its own (the module's in-process
    operator watches the module's namespace for the module's life); running again at the end, it
    deletes the namespace's apps and snapshots (their finalizers are its own) before it is stopped
    and the namespace deleted."""
    namespace = leftovers.prefix(f"floe-op-it-{uuid.uuid4().hex[:6]}")  # its apps' topics start with it
    kube.run("create", "namespace", namespace)
    op = RestartableOperator(kube.kubeconfig, namespace, tmp_path)
    op.start()
    try:
        yield op
    finally:
        if not op.running():
            op.start()
        kube.run("delete", "streamingapp", "--all", "-n", namespace, "--wait=true", "--timeout=90s", timeout=120)
        kube.run("delete", "streamingappsnapshot", "--all", "-n", namespace, "--wait=true", "--timeout=120s",
                 timeout=150)
        op.stop()
        kube.run("delete", "namespace", namespace, "--wait=false")


def test_a_snapshot_whose_pod_is_killed_fails_without_a_manifest_and_one_whose_operator_is_killed_succeeds(
    kube: Kubectl, operator_process: RestartableOperator, stack_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Two snapshots of one running app, each interrupted, in a namespace of its own watched by the
    operator as a process (`operator_process`). The first's pod is SIGKILLed while it
    cuts: Failed (JobFailed, exit code 137), no manifest at its location. The second's operator
    is SIGKILLed as soon as its Job exists (before or after it recorded the Job in status) and
    kept down until the Job has finished: the Job takes the snapshot on its own, and the next
    operator reads it back, ending Succeeded with the manifest's size and the start the first
    operator meant to record (the Job, app id, image, location)."""
    env = require_node(stack_env)
    namespace = operator_process.namespace
    host_dir = tmp_path_factory.mktemp("snapshots")
    with _volume(kube, namespace, host_dir) as claim_name:
        _pod_then_operator_killed(kube, namespace, env, claim_name, host_dir, operator_process)


def _pod_then_operator_killed(kube: Kubectl, namespace: str, env: dict[str, str], claim_name: str, host_dir: Path,
                              operator_process: RestartableOperator) -> None:
    app, spec, app_id = _counted_app(kube, namespace, env)

    name = "killed"
    kube.apply(_snapshot(namespace, name, app, claim_name=claim_name, location=f"file://{MOUNT}/{app}/killed"))

    def cutting() -> dict[str, Any] | None:
        """The Job's pod once its log says a stage is cut (nothing is written before every stage
        is), or once the snapshot has finished (which the assertions below then explain)."""
        pods = kube.list("pod", namespace, f"{SNAPSHOT_LABEL}={name}")
        if _snapshot_done(kube, namespace, name) is not None:
            return {"finished": True}
        if not pods or pods[0]["status"].get("phase") != "Running":
            return None
        log = kube.run("logs", pods[0]["metadata"]["name"], "-n", namespace, check=False).stdout
        return pods[0] if "Cut stage=" in log else None

    pod = wait_for(cutting, timeout=480, every=0.3, what="the snapshot's pod cutting")
    assert "finished" not in pod, f"the snapshot finished before it was killed: {kube.get('sas', name, namespace)}"
    os.kill(main_pid(env, pod, container="snapshot"), signal.SIGKILL)
    done = wait_for(lambda: _snapshot_done(kube, namespace, name), timeout=180, every=1,
                    what="the killed snapshot Failed")
    failed = condition(done, "Failed")
    assert (done["status"]["phase"], failed["status"], failed["reason"]) == ("Failed", "True", "JobFailed"), done
    assert "exit code 137" in failed["message"], failed
    assert not (host_dir / app / "killed" / "manifest").exists(), "a manifest without its data"

    name = "operator-killed"
    kube.apply(_snapshot(namespace, name, app, claim_name=claim_name, location=f"file://{MOUNT}/{app}/{name}"))
    wait_for(lambda: kube.get("job", name, namespace), timeout=120, every=0.1, what="the snapshot's Job created")
    operator_process.kill()

    def finished() -> dict[str, Any] | None:
        job = kube.get("job", name, namespace) or {}
        types = {c["type"] for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
        return job if types & {"Complete", "Failed"} else None

    wait_for(finished, timeout=480, every=2, what="the snapshot's Job finished with no operator running",
             pods=lambda: kube.list("pod", namespace, f"{SNAPSHOT_LABEL}={name}"))
    assert (kube.get("streamingappsnapshot", name, namespace) or {}).get("status", {}).get("phase") not in (
        "Succeeded", "Failed"), "an operator ran meanwhile"
    operator_process.start()
    done = wait_for(lambda: _snapshot_done(kube, namespace, name), timeout=180, every=1,
                    what="the snapshot Succeeded or Failed once an operator ran again")
    status = done["status"]
    assert status["phase"] == "Succeeded", f"{json.dumps(status, indent=1)}\n{operator_process.text()[-3000:]}"
    assert condition(done, "Ready")["status"] == "True"
    assert (status["job"], status["appId"], status["image"], status["location"]) == (
        name, app_id, spec["image"], f"file://{MOUNT}/{app}/{name}")
    manifest = _manifest(host_dir / app / name)
    assert manifest["app_id"] == app_id
    assert status["sizeBytes"] == sum(part["bytes"] for part in (*manifest["stores"], *manifest["tails"])) > 0


SCHEDULED_LABEL = "streaming.floe.dev/scheduled-by"


def test_scheduled_snapshots_are_kept_or_deleted_with_their_data_and_a_new_app_restores_from_the_kept_one(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str], claim: tuple[str, Path]
) -> None:
    """spec.snapshots every minute, keeping one: the first is taken at once, the second a minute
    later; once the second succeeded, the first resource is deleted and the Job its finalizer
    runs deletes its directory on the volume, while the second's stays whole. Then two new apps
    read the same input: one with spec.restoreFrom the kept snapshot starts once its restore Job
    succeeded and ends with every line's count, those before the cut restored and those after it
    read; one whose restoreFrom holds no snapshot never gets a Deployment and says RestoreFailed,
    naming the missing manifest. Deleting the first app leaves the kept snapshot's data (the Job
    that would delete it runs as the app)."""
    env = require_node(stack_env)
    app, spec, app_id = _counted_app(kube, namespace, env)
    claim_name, host_dir = claim
    schedule = {"location": f"file://{MOUNT}/{app}", "interval": "1m", "keep": 1,
                "volume": {"claimName": claim_name}, "writers": {"word-count": "count"}}
    kube.run("patch", "streamingapp", app, "-n", namespace, "--type=merge",
             "-p", json.dumps({"spec": {"snapshots": schedule}}))

    def scheduled() -> list[dict[str, Any]]:
        return kube.list("streamingappsnapshot", namespace, f"{SCHEDULED_LABEL}={app}")

    def succeeded(but: set[str]) -> dict[str, Any] | None:
        done = [s for s in scheduled() if s.get("status", {}).get("phase") == "Succeeded"
                and s["metadata"]["name"] not in but]
        failed = [s for s in scheduled() if s.get("status", {}).get("phase") == "Failed"]
        assert not failed, json.dumps([s["status"] for s in failed], indent=1)
        return done[0] if done else None

    def job_pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, SNAPSHOT_LABEL)

    first = wait_for(lambda: succeeded(set()), timeout=420, every=2, what="the first scheduled snapshot Succeeded",
                     pods=job_pods)
    name1 = first["metadata"]["name"]
    assert first["spec"]["location"] == f"file://{MOUNT}/{app}/{name1}"
    assert first["spec"]["deletionPolicy"] == "Delete"
    assert _manifest(host_dir / app / name1)["app_id"] == app_id
    recorded = kube.get("streamingapp", app, namespace)["status"]["snapshots"]  # type: ignore[index]
    assert recorded["last"] == name1, recorded

    second = wait_for(lambda: succeeded({name1}), timeout=420, every=2,
                      what="the second scheduled snapshot Succeeded, a minute after the first", pods=job_pods)
    name2 = second["metadata"]["name"]
    gap = (datetime.fromisoformat(second["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
           - datetime.fromisoformat(first["metadata"]["creationTimestamp"].replace("Z", "+00:00")))
    assert gap.total_seconds() >= 60, (name1, name2, gap)
    # the schedule's outcome, what its alerts read: the newest success, no failure
    done = second["status"]["completionTime"]

    def outcome() -> dict[str, Any] | None:
        record = ((kube.get("streamingapp", app, namespace) or {}).get("status") or {}).get("snapshots") or {}
        return record if record.get("lastSuccessfulTime") == done else None

    recorded = wait_for(outcome, timeout=60, every=1, what=f"status.snapshots.lastSuccessfulTime {done}")
    assert "lastFailed" not in recorded, recorded

    def retained() -> bool:
        return kube.get("streamingappsnapshot", name1, namespace) is None and not (host_dir / app / name1).exists()

    wait_for(retained, timeout=300, every=2, what=f"retention deleting {name1} and its data", pods=job_pods)
    assert _manifest(host_dir / app / name2)["app_id"] == app_id
    events = kube.run("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name1}",
                      "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert "SnapshotDataDeleted" in events, events

    # no more snapshots, and none deleted, while a new app restores from the kept one
    kube.run("patch", "streamingapp", app, "-n", namespace, "--type=merge", "-p",
             json.dumps({"spec": {"snapshots": {**schedule, "interval": "24h", "keep": 10}}}))
    _restores_from(kube, namespace, env, spec, location=second["spec"]["location"], claim_name=claim_name,
                   source_id=app_id)
    assert _manifest(host_dir / app / name2)["app_id"] == app_id

    # the schedule is the app's: deleting the app deletes its snapshots' resources, not their data
    kube.run("delete", "streamingapp", app, "-n", namespace, "--wait=true", "--timeout=90s", timeout=120)
    wait_for(lambda: not scheduled(), timeout=180, every=2, what="the app's snapshots deleted with it")
    assert _manifest(host_dir / app / name2)["app_id"] == app_id


# A broken release of word count, mounted from a ConfigMap: its split stage is word count's, its
# count stage also counts the key `broken-release` (never emitted) and its process exits at its
# second count batch, so each start commits one batch of state and then crashes.
BROKEN_JOB = """
import os

from floe_jobs.api import Batch, Emit, Job
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

job = Job()
calls = [0]


@job.stage()
def split(batch: Batch) -> Emit:
    words = batch.df.select(
        "topic", "partition", "offset",
        F.explode(F.split(F.lower(F.col("value").cast("string")), r"[^\\p{L}\\p{N}']+")).alias("word"),
    ).where(F.col("word") != "")
    return batch.rekey(words, name="words", key=F.col("word"), combine="count")


@job.stage(source="words")
def count(batch: Batch) -> DataFrame:
    if not batch.dry_run:  # the runtime's warm-up runs each stage once, writing nothing
        calls[0] += 1
    if calls[0] > 1:
        os._exit(3)
    partial = F.coalesce(F.col("value").cast("string").cast("long"), F.lit(1).cast("long"))
    rows = batch.df.withColumn("key", F.col("key").cast("string")).withColumn("n", partial)
    marker = rows.limit(1).withColumn("key", F.lit("broken-release")).withColumn("n", F.lit(1).cast("long"))
    rows = rows.unionByName(marker)
    counts = batch.aggregate(rows, store="word-count", key=F.col("key"), value=F.col("n"))
    return counts.where(F.col("key") != "broken-release").select(
        F.col("key"), F.col("value").cast("string").alias("value"))
"""
MARKER = "broken-release"


def test_a_broken_job_rolls_out_after_a_snapshot_of_the_running_generation_and_its_rollback_restores_it(
    kube: Kubectl, namespace: str, operator: object, stack_env: dict[str, str], claim: tuple[str, Path]
) -> None:
    """spec.rollout.upgradeMode snapshot with autoRollback: a new job waits, with the pod of the
    running generation untouched and the app Progressing (SnapshotBeforeUpgrade), until a snapshot
    of that generation succeeded. Then it rolls out, writes state (a marker key) and crash-loops;
    the operator rolls back to generation 1 and restores the snapshot in place
    (status.rollbackRestore, `rollback-2`): the marker is gone and, with lines flowing throughout,
    the counts end exact (nothing the broken job wrote stays, nothing is lost or doubled)."""
    env = require_node(stack_env)
    claim_name, host_dir = claim
    snapshots = {"location": f"file://{MOUNT}/upgrades", "volume": {"claimName": claim_name},
                 "writers": {"word-count": "count"}}
    # the old pod goes before the new one starts, so the new one holds every partition and counts
    # (with a surge pod, one stage's partitions alone could keep it Ready until the rollout ended)
    rollout = {"upgradeMode": "snapshot", "autoRollback": True, "maxSurge": 0, "maxUnavailable": 1}
    app, spec, app_id = _counted_app(kube, namespace, env, rollout=rollout, snapshots=snapshots)
    topic_in, keyspace = spec["kafka"]["topics"][0], spec["state"]["cassandra"]["keyspace"]
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "broken-job", "namespace": namespace},
                "data": {"broken_count.py": BROKEN_JOB}})

    def app_pods() -> list[dict[str, Any]]:
        return kube.list("pod", namespace, f"app.kubernetes.io/instance={app}")

    def status() -> dict[str, Any]:
        return dict((kube.get("streamingapp", app, namespace) or {}).get("status") or {})

    wait_for(lambda: status().get("lastReady", {}).get("generation") == 1, timeout=120,
             what="generation 1 recorded as the last Ready one")
    (before,) = app_pods()
    broken = {"job": {"entrypoint": "/opt/broken/broken_count.py"},
              "podTemplate": {"spec": {"volumes": [{"name": "broken", "configMap": {"name": "broken-job"}}],
                                       "containers": [{"name": "app", "volumeMounts": [
                                           {"name": "broken", "mountPath": "/opt/broken"}]}]}}}
    kube.run("patch", "streamingapp", app, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": broken}))
    name = f"{app}-upgrade-2"

    def held() -> dict[str, Any] | None:
        body = kube.get("streamingapp", app, namespace) or {}
        ready = condition(body, "Ready") if body.get("status", {}).get("conditions") else {}
        return body if ready.get("reason") == "SnapshotBeforeUpgrade" else None

    def config() -> str:
        return json.dumps((kube.get("configmap", f"{app}-config", namespace) or {}).get("data", {}))

    waiting = wait_for(held, timeout=120, every=0.5, what="generation 2 waiting for its snapshot")
    assert condition(waiting, "Progressing")["status"] == "True"
    # what runs is generation 1, children and all
    assert [p["metadata"]["uid"] for p in app_pods()] == [before["metadata"]["uid"]]
    assert "broken_count.py" not in config()

    done = wait_for(lambda: _snapshot_done(kube, namespace, name), timeout=600, every=2,
                    what="the snapshot before the upgrade Succeeded or Failed",
                    pods=lambda: kube.list("pod", namespace, f"{SNAPSHOT_LABEL}={name}"))
    assert done["status"]["phase"] == "Succeeded", json.dumps(done["status"], indent=1)
    assert done["status"]["appGeneration"] == 1
    assert _manifest(host_dir / "upgrades" / name)["generation"] == 1

    lines: list[str] = []
    stop = threading.Event()

    def feed() -> None:
        seed = 100
        while not stop.is_set():
            wave = localrun.word_lines(40, seed=seed)
            localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, wave)
            lines.extend(wave)
            seed += 1
            stop.wait(1.0)

    from cassandra.cluster import Cluster

    cluster = Cluster(env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(env["FLOE_CASSANDRA_PORT"]))
    session = cluster.connect()
    marked = threading.Event()

    def restored() -> dict[str, Any] | None:
        if not marked.is_set():
            store = localrun.read_store(session, keyspace, "word-count", key_serde="str", value_serde="long")
            if MARKER in store:
                marked.set()
        record = status().get("rollbackRestore") or {}
        return record if record.get("phase") in ("Succeeded", "Failed") else None

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        record = wait_for(restored, timeout=900, every=1, what="the rollback's restore Succeeded or Failed",
                          pods=app_pods, tolerate=("CrashLoopBackOff", "Error"))
        time.sleep(5)  # lines still flow while the restored generation 1 starts
    finally:
        stop.set()
        feeder.join()
    try:
        assert record["phase"] == "Succeeded", json.dumps(record, indent=1)
        assert record["id"] == "rollback-2" and record["from"] == f"file://{MOUNT}/upgrades/{name}", record
        now = status()
        assert marked.is_set(), f"the broken job never wrote its marker, nothing to undo: {now.get('rolledBack')}"
        assert now["rolledBack"]["generation"] == 2, now.get("rolledBack")
        assert "broken_count.py" not in config()
        assert str(now["appId"]) == app_id
        truth = dict(localrun.word_truth(localrun.word_lines(300, seed=11) + lines))
        wait_exact_counts(env, keyspace=keyspace, topic_out=spec["kafka"]["outputTopics"][0], truth=truth,
                          pods=app_pods)
        store = localrun.read_store(session, keyspace, "word-count", key_serde="str", value_serde="long")
        assert MARKER not in store
    finally:
        cluster.shutdown()
    body = kube.get("streamingapp", app, namespace) or {}
    assert condition(body, "RolledBack")["status"] == "True"
    assert body["spec"]["job"]["entrypoint"] == "/opt/broken/broken_count.py"  # the spec stays as declared


def _restores_from(kube: Kubectl, namespace: str, env: dict[str, str], spec: dict[str, Any], *, location: str,
                   claim_name: str, source_id: str) -> None:
    """Two new apps on the input of the app `spec` is of: one restored from the snapshot at
    `location` counts every line exactly; one restored from a location without a snapshot never
    starts (see the test above)."""
    topic_in = spec["kafka"]["topics"][0]
    later = localrun.word_lines(300, seed=14)
    localrun.produce(env["FLOE_KAFKA_BOOTSTRAP"], topic_in, later)

    def new_app(name: str, source: str) -> dict[str, Any]:
        body = word_count_app(env, namespace=namespace, name=name, partitions=2, replicas=1)
        body["spec"]["kafka"]["topics"] = [topic_in]
        body["spec"]["restoreFrom"] = {"location": source, "volume": {"claimName": claim_name}}
        kube.apply(body)
        return body

    good = new_app("rest", location)
    bad = new_app("norest", f"file://{MOUNT}/nothing-here")
    good_name, bad_name = good["metadata"]["name"], bad["metadata"]["name"]

    def restore_of(app: str, phase: str) -> dict[str, Any] | None:
        found = dict((kube.get("streamingapp", app, namespace) or {}).get("status", {}).get("restore") or {})
        return found if found.get("phase") == phase else None

    refused = wait_for(lambda: restore_of(bad_name, "Failed"), timeout=420, every=2,
                       what="the restore from an empty location refused")
    assert "no snapshot at" in refused["message"], refused
    bad_body = kube.get("streamingapp", bad_name, namespace)
    assert (condition(bad_body, "Degraded")["status"], condition(bad_body, "Degraded")["reason"]) == (
        "True", "RestoreFailed")
    assert condition(bad_body, "Stalled")["status"] == "True"
    assert kube.list("deployment", namespace, f"app.kubernetes.io/instance={bad_name}") == []

    restored = wait_for(lambda: restore_of(good_name, "Succeeded"), timeout=420, every=2, what="the restore Succeeded")
    assert restored["fromApp"] == source_id and restored["rows"] > 0, restored
    truth = dict(localrun.word_truth(localrun.word_lines(300, seed=11) + later))
    wait_exact_counts(env, keyspace=good["spec"]["state"]["cassandra"]["keyspace"],
                      topic_out=good["spec"]["kafka"]["outputTopics"][0], truth=truth,
                      pods=lambda: kube.list("pod", namespace, f"app.kubernetes.io/instance={good_name}"),
                      emitted=dict(localrun.word_truth(later)))
    assert condition(kube.get("streamingapp", good_name, namespace), "Ready")["status"] == "True"
