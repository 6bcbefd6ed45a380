"""The real operator, logged in as the chart's ServiceAccount, manages an app end to end.

`kubectl auth can-i` proves single verbs; this proves the set is complete: floe-operator
runs as a local process with a token of the ServiceAccount the chart created (watching one
namespace, the least-privileged mode), provisions the app's state in the real Cassandra,
checks its topic in the real Kafka, creates every child, follows a scale, and finalizes a
deletion, without a single request the RBAC refuses.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..processes import start_operator
from .livekit import ROOT, Run

pytestmark = [pytest.mark.helm, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra]


def service_account_kubeconfig(admin_kubeconfig: str, token: str, path: Path) -> Path:
    """A kubeconfig with the admin's cluster entry and the ServiceAccount's token."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster = {**cluster, "certificate-authority": str(Path(admin_kubeconfig).parent / ca)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def release_watching_a_namespace(
    run: Run,
    kubectl: str,
    kubeconfig: str,
    namespaces: Callable[[str], str],
    install: Callable[..., str],
    tmp_path: Path,
    *,
    prefix: str,
    values: str = "",
) -> tuple[str, str, str, Path]:
    """The CRDs applied and a release of the chart in a namespace of its own, watching another one:
    (release, its namespace, the watched namespace, a kubeconfig with its ServiceAccount's token)."""
    for crd in ("streamingapp.yaml", "streamingappsnapshot.yaml"):
        run(kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds" / crd))
    run(kubectl, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev",
        "crd/streamingappsnapshots.streaming.floe.dev", "--timeout=60s")
    operator_ns = namespaces(f"floe-{prefix}")
    apps_ns = namespaces(f"floe-{prefix}-apps")
    sets = f"crds.enabled=false,operator.watchNamespaces={{{apps_ns}}}" + (f",{values}" if values else "")
    release = install(prefix, operator_ns, "--set", sets)
    token = run(kubectl, "create", "token", f"{release}-floe", "-n", operator_ns, "--duration=1h").stdout.strip()
    sa_kubeconfig = service_account_kubeconfig(kubeconfig, token, tmp_path / "operator.kubeconfig")
    return release, operator_ns, apps_ns, sa_kubeconfig


@pytest.fixture
def kafka_topics(kafka_bootstrap: str) -> Iterator[Callable[[str, int], None]]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[str] = []

    def create(name: str, partitions: int) -> None:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)
        made.append(name)

    yield create
    if made:
        for future in admin.delete_topics(made).values():
            future.exception(timeout=30)


@pytest.fixture
def keyspace(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[str]:
    from cassandra.cluster import Cluster

    name = f"floe_chart_{uuid.uuid4().hex[:6]}"
    yield name
    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
    finally:
        cluster.shutdown()


def committed_as_a_replica(hosts: list[str], port: int, keyspace: str, app_id: str, topic: str) -> None:
    """Partition 0 of `topic` claimed and committed to offset 10 by the input stage, as a replica
    of word count leaves its offsets row."""
    from cassandra.cluster import Cluster
    from floe_jobs import offsets, planning

    cluster = Cluster(hosts, port=port)
    try:
        table = offsets.OffsetsTable(cluster.connect(), keyspace=keyspace, app_id=app_id, owner="replica-0/t1")
        table.create([planning.OffsetRow(topic, 0, next_offset=0, planned_ts=1)], stage="split")
        rows = table.read([topic], stage="split")
        plan = [planning.PartitionPlan(topic, 0, 1, 0, 10, replay=False, stamp=10)]
        assert table.claim(plan, rows, stage="split") and table.commit(plan, stage="split")
    finally:
        cluster.shutdown()


def wait_for(what: str, probe: Callable[[], Any], *, timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; operator log:\n{log.read_text()[-4000:]}")


def test_operator_manages_an_app_with_only_the_charts_rbac(
    kubectl: str,
    kubeconfig: str,
    run: Run,
    namespaces: Callable[[str], str],
    install: Callable[..., str],
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    kafka_topics: Callable[[str, int], None],
    keyspace: str,
    tmp_path: Path,
) -> None:
    _, _, apps_ns, sa_kubeconfig = release_watching_a_namespace(
        run, kubectl, kubeconfig, namespaces, install, tmp_path, prefix="oprbac"
    )

    app = f"wc-{uuid.uuid4().hex[:6]}"
    kafka_topics(f"{app}-input", 3)
    kafka_topics(f"{app}-output", 3)
    manifest = yaml.safe_load((ROOT / "examples" / "word-count" / "streamingapp.yaml").read_text())
    manifest["metadata"] = {"name": app, "namespace": apps_ns}
    spec = manifest["spec"]
    spec["replicas"] = 1
    spec["kafka"].update(bootstrapServers=kafka_bootstrap, topics=[f"{app}-input"], outputTopics=[f"{app}-output"])
    spec["state"]["cassandra"].update(hosts=cassandra_hosts, port=cassandra_port, keyspace=keyspace)
    spec["state"]["deletionPolicy"] = "Delete"
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(manifest))

    log = tmp_path / "operator.log"
    proc = start_operator(
        sa_kubeconfig, log, FLOE_WATCH_NAMESPACES=apps_ns, FLOE_RESYNC_SECONDS="5", FLOE_LAG_INTERVAL_SECONDS="5"
    ).proc
    try:
        run(kubectl, "apply", "-f", str(tmp_path / "app.yaml"))

        def status() -> dict[str, Any]:
            body = json.loads(run(kubectl, "get", "streamingapp", app, "-n", apps_ns, "-o", "json").stdout)
            return body.get("status") or {}

        def conditions() -> dict[str, str]:
            return {c["type"]: c["status"] for c in status().get("conditions", [])}

        wait_for("StateProvisioned=True", lambda: conditions().get("StateProvisioned") == "True", timeout=120, log=log)
        children = [f"deployment/{app}", f"configmap/{app}-config", f"service/{app}", f"poddisruptionbudget/{app}",
                    f"networkpolicy/{app}", f"secret/{app}-query"]
        for child in children:

            def exists(child: str = child) -> bool:
                return run(kubectl, "get", child, "-n", apps_ns, check=False).returncode == 0

            wait_for(child, exists, timeout=60, log=log)
        assert status().get("observedGeneration") == 1

        # A snapshot of it: the operator creates its Job (RBAC on jobs, the admission policy's
        # check of a Job's owner) and writes its status, as the ServiceAccount. The app has no pod
        # here, so a commit as a replica leaves it stands for its having run.
        committed_as_a_replica(cassandra_hosts, cassandra_port, keyspace, status()["appId"], f"{app}-input")
        snapshot = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingAppSnapshot",
                    "metadata": {"name": f"{app}-snap", "namespace": apps_ns},
                    "spec": {"app": app, "location": f"s3a://backups/{app}/1", "writers": {"word-count": "count"}}}
        (tmp_path / "snapshot.yaml").write_text(yaml.safe_dump(snapshot))
        run(kubectl, "apply", "-f", str(tmp_path / "snapshot.yaml"))

        def snapshot_job() -> dict[str, Any] | None:
            found = run(kubectl, "get", "job", f"{app}-snap", "-n", apps_ns, "-o", "json", check=False)
            return json.loads(found.stdout) if found.returncode == 0 else None

        job = wait_for("the snapshot's Job", snapshot_job, timeout=60, log=log)
        assert job["metadata"]["ownerReferences"][0]["kind"] == "StreamingAppSnapshot"
        snap_status = json.loads(run(kubectl, "get", "streamingappsnapshot", f"{app}-snap", "-n", apps_ns,
                                     "-o", "json").stdout).get("status") or {}
        assert snap_status.get("job") == f"{app}-snap", snap_status
        run(kubectl, "delete", "streamingappsnapshot", f"{app}-snap", "-n", apps_ns, "--wait=true", "--timeout=60s")
        wait_for("the snapshot's Job gone with it", lambda: snapshot_job() is None, timeout=60, log=log)

        # A scale through the subresource reaches the Deployment.
        run(kubectl, "scale", "streamingapp", app, "-n", apps_ns, "--replicas=2")

        def deployment_replicas() -> int:
            out = run(kubectl, "get", "deployment", app, "-n", apps_ns, "-o", "jsonpath={.spec.replicas}").stdout
            return int(out or 0)

        wait_for("the Deployment at 2 replicas", lambda: deployment_replicas() == 2, timeout=60, log=log)

        # Deletion runs the finalizer (dropping the store tables) under the same RBAC.
        run(kubectl, "delete", "streamingapp", app, "-n", apps_ns, "--wait=false")

        def gone() -> bool:
            return run(kubectl, "get", "streamingapp", app, "-n", apps_ns, check=False).returncode != 0

        wait_for("the app's finalizer", gone, timeout=180, log=log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    text = log.read_text()
    assert f"Finalized app={apps_ns}/{app}" in text, text[-4000:]
    for refusal in ("Forbidden", "forbidden", "HTTP 403", "Not enough permissions"):
        assert refusal not in text, f"the operator was refused something ({refusal}):\n{text[-4000:]}"
