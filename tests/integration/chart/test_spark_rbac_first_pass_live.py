"""New apps with a k8s:// Spark master, reconciled by the operator with only the chart's RBAC:
not one status write of any of them says Degraded on the way to Ready.

The drivers' RoleBinding is what made it say so: the chart grants the operator what the drivers'
Role grants but not `bind`, so the API server reads the Role a new RoleBinding refers to before
it admits the binding, and refused it ("not found") whenever the binding overtook its Role.
Every status change of the apps is watched from before they exist, so a Degraded that a later
pass repaired cannot hide behind the end state.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from ..processes import start_operator
from .livekit import Run
from .test_operator_rbac_live import release_watching_a_namespace, wait_for

pytestmark = [pytest.mark.helm, pytest.mark.k8s, pytest.mark.kafka, pytest.mark.cassandra]

APPS = 5
GROUP, VERSION, PLURAL = "streaming.floe.dev", "v1alpha1", "streamingapps"


class StatusWatch:
    """Every version of the namespace's StreamingApps the API server delivers, from a given
    resourceVersion on: (name, Degraded status and reason, Ready status) of each."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        self.api = kubernetes.client.CustomObjectsApi(client)
        self.namespace = namespace
        listed: Any = self.api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        self.since = listed["metadata"]["resourceVersion"]
        self.seen: list[tuple[str, dict[str, tuple[str, str]]]] = []
        self.error: BaseException | None = None
        self.stopped = False
        self.gaps = 0
        self._watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Watch from `since`, and again from the last version seen whenever the API server ends
        the watch (it does when the CRD is applied again: "storage is (re)initializing"), so no
        version is missed. When the last version is too old to resume from (410), the apps are
        listed again and `gaps` counts it: the Warning events (see the test) cover what a gap hides."""
        while not self.stopped:
            try:
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self.api.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                    resource_version=self.since, timeout_seconds=600,
                ):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        raise AssertionError(f"the watch ended: {obj}")
                    self.since = obj["metadata"]["resourceVersion"]
                    self._record(obj)
            except kubernetes.client.ApiException as exc:
                if exc.status == 410:  # Gone: versions may have been missed
                    self.gaps += 1
                    self._relist()
                else:
                    time.sleep(1)  # e.g. 429 while the API server reinitializes the CRD's storage
            except AssertionError as exc:
                self.error = exc
                return
            except Exception:  # the connection ended under the reader: resume
                if not self.stopped:
                    time.sleep(1)

    def _relist(self) -> None:
        listed: Any = self.api.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
        for obj in listed["items"]:
            self._record(obj)
        self.since = listed["metadata"]["resourceVersion"]

    def _record(self, obj: dict[str, Any]) -> None:
        conds = {
            c["type"]: (c.get("status", ""), c.get("reason", ""))
            for c in (obj.get("status") or {}).get("conditions") or []
        }
        self.seen.append((obj["metadata"]["name"], conds))

    def stop(self) -> None:
        self.stopped = True
        self._watch.stop()  # type: ignore[no-untyped-call]

    def degraded(self) -> list[tuple[str, tuple[str, str]]]:
        return [(name, conds["Degraded"]) for name, conds in self.seen if conds.get("Degraded", ("",))[0] == "True"]


@pytest.fixture
def topic(kafka_bootstrap: str) -> Iterator[str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"floe-sparkrb-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])[name].result(timeout=30)
    yield name
    admin.delete_topics([name])[name].exception(timeout=30)


@pytest.fixture
def keyspace(cassandra_hosts: list[str], cassandra_port: int) -> Iterator[str]:
    from cassandra.cluster import Cluster

    name = f"floe_sparkrb_{uuid.uuid4().hex[:6]}"
    yield name
    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
    finally:
        cluster.shutdown()


def _app(
    name: str, namespace: str, *, topic: str, keyspace: str, kafka: str, hosts: list[str], port: int
) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StreamingApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "registry.example.com/floe/word-count:1.0.0",
            "job": {"entrypoint": "wordcount.app:transform"},
            # No pods: their image is not built here, a fault of its own; the drivers' RBAC is
            # applied all the same.
            "replicas": 0,
            "kafka": {"bootstrapServers": kafka, "topics": [topic]},
            "state": {"cassandra": {"hosts": hosts, "port": port, "keyspace": keyspace}},
            "spark": {"master": "k8s://https://kubernetes.default.svc:443", "executor": {"instances": 1}},
        },
    }


def test_new_k8s_master_apps_never_say_degraded_on_their_first_pass(
    kubectl: str,
    kubeconfig: str,
    run: Run,
    namespaces: Callable[[str], str],
    install: Callable[..., str],
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    topic: str,
    keyspace: str,
    tmp_path: Path,
) -> None:
    _, _, apps_ns, sa_kubeconfig = release_watching_a_namespace(
        run, kubectl, kubeconfig, namespaces, install, tmp_path, prefix="sparkrb"
    )
    log = tmp_path / "operator.log"
    proc = start_operator(sa_kubeconfig, log, FLOE_WATCH_NAMESPACES=apps_ns, FLOE_RESYNC_SECONDS="5").proc
    watch = StatusWatch(kubeconfig, apps_ns)
    names = [f"spark-{i}-{uuid.uuid4().hex[:4]}" for i in range(APPS)]
    try:
        wait_for("the operator to start", lambda: "Started floe-operator" in log.read_text(), timeout=60, log=log)
        manifests = [
            _app(n, apps_ns, topic=topic, keyspace=keyspace, kafka=kafka_bootstrap, hosts=cassandra_hosts,
                 port=cassandra_port)
            for n in names
        ]
        (tmp_path / "apps.yaml").write_text(yaml.safe_dump_all(manifests))
        run(kubectl, "apply", "-f", str(tmp_path / "apps.yaml"))

        def settled() -> bool:
            latest: dict[str, dict[str, tuple[str, str]]] = dict(watch.seen)
            return all(
                latest.get(n, {}).get("Ready") == ("True", "ScaledToZero")
                and latest.get(n, {}).get("StateProvisioned", ("",))[0] == "True"
                and latest.get(n, {}).get("Degraded") == ("False", "AsExpected")
                for n in names
            )

        try:
            wait_for(f"{APPS} apps Ready (ScaledToZero), provisioned, not Degraded", settled, timeout=180, log=log)
        except AssertionError as exc:
            raise AssertionError(f"last seen: {dict(watch.seen)}; watch error: {watch.error!r}") from exc
        for n in names:
            binding = run(kubectl, "get", "rolebinding", f"{n}-spark", "-n", apps_ns, "-o", "json").stdout
            assert f'"name": "{n}-spark"' in binding
    finally:
        watch.stop()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert watch.error is None, watch.error
    assert watch.seen, "the watch saw no status at all"
    assert watch.degraded() == [], f"a status write said Degraded: {watch.degraded()}\n{log.read_text()[-3000:]}"
    # The operator posts a Warning event on every transition to Degraded=True: none either.
    events = json.loads(run(kubectl, "get", "events", "-n", apps_ns, "-o", "json").stdout)["items"]
    warnings = [
        (e["involvedObject"]["name"], e["reason"], e["message"])
        for e in events
        if e.get("type") == "Warning" and (e.get("source") or {}).get("component") == "floe-operator"
    ]
    assert warnings == [], f"the operator warned: {warnings}"
    text = log.read_text()
    print(f"watch gaps: {watch.gaps}; versions seen: {len(watch.seen)}; "
          f"applies tried again: {text.count('Applying again after a transient refusal')}")
    for refusal in ("Forbidden", "forbidden", "HTTP 403"):
        assert refusal not in text, f"the operator was refused something ({refusal}):\n{text[-4000:]}"
