"""The operator, as its own process, SIGKILLed 20 times during a burst of 50 StreamingApp
creates, updates and deletes (Retain and Delete apps, names reused after a delete): once it
runs undisturbed, everything converges. Every live app is observed at its generation with one
of each child, owned by its own uid, and Degraded for nothing but what its pods meet on this
stack (the image is not built here); no child of a deleted app survives; a Delete app's tables
are gone, and every table a Retain app had is still there.

Kills land at random moments after each start (Kopf's start-up included), so some hit the
operator in the middle of a reconcile: between the provisioning DDL and the children, between
two children, or in a finalizer.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from floe_jobs.stores import schema

from ..processes import RestartableOperator
from ..waiting import wait_for
from .conftest import app_manifest, pods_state
from .kube import Kubectl, condition

# exclusive: a burst of 50 app writes and 20 operator SIGKILLs floods the API server and controller-manager
pytestmark = [
    pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka, pytest.mark.slow,
    pytest.mark.exclusive,
]

OPERATIONS = 50
KILLS = 20
NAMES = 12
CHILD_KINDS = ("deployment", "configmap", "service", "poddisruptionbudget")


@pytest.fixture
def storm_namespace(kube: Kubectl) -> Iterator[str]:
    name = f"floe-storm-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false")


def _tables(cql: Any, keyspace: str) -> set[str]:
    rows = cql.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,))
    return {r.table_name for r in rows}


def _differences(kube: Kubectl, ns: str, live: dict[str, dict[str, Any]], stack_env: dict[str, str]) -> list[str]:
    """How the namespace differs from converged, one line per app or child, naming what differs
    and how; empty once it has converged. Converged: exactly the live apps exist, each observed
    at its generation with one of each child kind owned by its uid only (a Deployment at its
    replicas), and no child whose app is gone. Each app is Degraded only for what its pods meet
    on this stack and nothing the operator found: the image is not built here, so the node's
    admission refuses the pods (without a node the scheduler has nowhere to put them)."""
    pods = pods_state(stack_env)
    found: list[str] = []
    apps = {a["metadata"]["name"]: a for a in kube.list("streamingapp", ns)}
    for name in sorted(set(live) - set(apps)):
        found.append(f"app {name}: applied and not deleted, but not found")
    for name in sorted(set(apps) - set(live)):
        meta = apps[name]["metadata"]
        found.append(
            f"app {name}: deleted but still there (deletionTimestamp={meta.get('deletionTimestamp')} "
            f"finalizers={meta.get('finalizers')})"
        )
    children = {kind: kube.list(kind, ns, selector="app.kubernetes.io/part-of=floe") for kind in CHILD_KINDS}
    for name in sorted(set(apps) & set(live)):
        app = apps[name]
        meta = app["metadata"]
        status = app.get("status") or {}
        if status.get("observedGeneration") != meta["generation"]:
            observed = status.get("observedGeneration")
            found.append(f"app {name}: observedGeneration {observed} != generation {meta['generation']}")
        degraded = condition(app, "Degraded")
        if (degraded.get("status"), degraded.get("reason")) != pods:
            found.append(
                f"app {name}: Degraded {degraded.get('status')} {degraded.get('reason')}, want {' '.join(pods)} "
                f"(what its pods meet here): {degraded.get('message')}"
            )
        uid = meta["uid"]
        for kind, objs in children.items():
            mine = [o for o in objs if o["metadata"]["labels"].get("app.kubernetes.io/instance") == name]
            owners = [[r["uid"] for r in o["metadata"].get("ownerReferences", [])] for o in mine]
            # exactly one, owned by this app's uid only (not an earlier app of that name)
            if len(mine) != 1 or owners[0] != [uid]:
                found.append(
                    f"app {name} (uid {uid}): {len(mine)} {kind}(s) "
                    f"{[o['metadata']['name'] for o in mine]} owned by {owners}, want one owned by [{uid}]"
                )
            elif kind == "deployment" and mine[0]["spec"]["replicas"] != live[name]["spec"]["replicas"]:
                found.append(
                    f"app {name}: deployment replicas {mine[0]['spec']['replicas']} != spec.replicas "
                    f"{live[name]['spec']['replicas']}"
                )
    # no child outlives its app (the garbage collector removes those of deleted apps)
    uids = {a["metadata"]["uid"] for a in apps.values()}
    for kind, objs in children.items():
        for obj in objs:
            refs = {r["uid"] for r in obj["metadata"].get("ownerReferences", [])}
            if not refs & uids:
                found.append(f"{kind} {obj['metadata']['name']}: owned by {sorted(refs)}, an app that is gone")
    return found


@pytest.mark.timeout(900)
def test_operator_killed_during_a_burst_converges(
    kube: Kubectl,
    kubeconfig: str,
    storm_namespace: str,
    topic: str,
    keyspace: str,
    cql: Any,
    kafka_bootstrap: str,
    cassandra_hosts: list[str],
    cassandra_port: int,
    stack_env: dict[str, str],
    tmp_path: Path,
) -> None:
    ns = storm_namespace
    args = {
        "namespace": ns,
        "topic": topic,
        "keyspace": keyspace,
        "kafka": kafka_bootstrap,
        "hosts": cassandra_hosts,
        "port": cassandra_port,
    }
    rng = random.Random(20)
    live: dict[str, dict[str, Any]] = {}
    # every body ever applied, by name and in order: a name reused after a delete gets new stores
    history: dict[str, list[dict[str, Any]]] = {}
    retained_tables: set[str] = set()
    op_log: list[str] = []

    def body_for(name: str, policy: str, stores: list[str], replicas: int) -> dict[str, Any]:
        body = app_manifest(name, **args)
        body["spec"]["replicas"] = replicas
        body["spec"]["state"]["stores"] = [{"name": s} for s in stores]
        body["spec"]["state"]["deletionPolicy"] = policy
        return body

    def operate(i: int) -> None:
        name = f"app-{rng.randrange(NAMES):02d}"
        if name not in live:
            if name in history:
                # a deleted app is gone only once its finalizer ran; an apply before that would
                # change the terminating object, not create a new one (as `kubectl apply` does)
                wait_for(lambda: kube.get("streamingapp", name, ns) is None, timeout=120, what=f"{name} gone")
            policy = rng.choice(["Retain", "Delete"])
            stores = [f"{name.replace('-', '_')}_{i}_s0"]
            body = body_for(name, policy, stores, rng.randint(1, 3))
            kube.apply(body)
            live[name] = body
            history.setdefault(name, []).append(body)
            op_log.append(f"create {name} {policy} {stores}")
        elif rng.random() < 0.6:
            body = live[name]
            spec = body["spec"]
            stores = [s["name"] for s in spec["state"]["stores"]]
            if rng.random() < 0.5:
                stores.append(f"{name.replace('-', '_')}_{i}_s{len(stores)}")
            new = body_for(name, spec["state"]["deletionPolicy"], stores, rng.randint(1, 3))
            kube.apply(new)
            live[name] = new
            history[name].append(new)
            op_log.append(f"update {name} stores={stores} replicas={new['spec']['replicas']}")
        else:
            kube.run("delete", "streamingapp", name, "-n", ns, "--wait=false")
            del live[name]
            op_log.append(f"delete {name}")

    def note_retained_tables() -> None:
        """Tables of Retain apps seen so far: each must outlive everything that follows."""
        tables = _tables(cql, keyspace)
        for bodies in history.values():
            for body in bodies:
                if body["spec"]["state"]["deletionPolicy"] == "Retain":
                    for s in body["spec"]["state"]["stores"]:
                        if schema.table_name(s["name"]) in tables:
                            retained_tables.add(schema.table_name(s["name"]))

    operator = RestartableOperator(kubeconfig, ns, tmp_path / "operator")
    stop_storm = threading.Event()
    storm_error: list[BaseException] = []

    def storm() -> None:
        try:
            for i in range(OPERATIONS):
                if stop_storm.is_set():
                    return
                operate(i)
                note_retained_tables()
                time.sleep(rng.uniform(0.3, 1.2))
        except BaseException as exc:
            storm_error.append(exc)

    t0 = time.monotonic()
    operator.start()
    storm_thread = threading.Thread(target=storm, name="storm")
    storm_thread.start()
    kill_rng = random.Random(7)
    try:
        for _ in range(KILLS):
            time.sleep(kill_rng.uniform(1.0, 4.0))
            operator.kill()
            time.sleep(kill_rng.uniform(0.0, 0.5))
            operator.start()
        storm_thread.join(timeout=300)
        assert not storm_thread.is_alive(), "the storm did not finish"
        assert not storm_error, storm_error
        burst_seconds = time.monotonic() - t0

        # from here the operator runs undisturbed: everything converges
        t_converge = time.monotonic()

        differences: list[str] = []

        def converged() -> bool:
            differences[:] = _differences(kube, ns, live, stack_env)
            return not differences

        try:
            wait_for(converged, timeout=240, what="the apps to converge", every=2.0)
        except AssertionError:
            raise AssertionError(
                f"timed out after 240s waiting for the apps to converge; {len(differences)} difference(s):\n  "
                + "\n  ".join(differences)
            ) from None
        converge_seconds = time.monotonic() - t_converge

        tables = _tables(cql, keyspace)
        note_retained_tables()
        missing = sorted(retained_tables - tables)
        assert not missing, f"tables of Retain apps were dropped: {missing}"
        for name, body in live.items():
            want = {schema.table_name(s["name"]) for s in body["spec"]["state"]["stores"]}
            assert want <= tables, f"{name} lacks tables {sorted(want - tables)}"
        # a deleted Delete app's tables are gone, unless a later app of that name declares them
        needed = {schema.table_name(s["name"]) for b in live.values() for s in b["spec"]["state"]["stores"]}
        for name, bodies in history.items():
            for body in bodies:
                if body["spec"]["state"]["deletionPolicy"] != "Delete" or (name in live and body is bodies[-1]):
                    continue
                leftover = {schema.table_name(s["name"]) for s in body["spec"]["state"]["stores"]} & tables
                assert not leftover - needed - retained_tables, f"deleted app {name} left tables {leftover}"
        text = operator.text()
        print(
            f"operator storm: operations={OPERATIONS} kills={KILLS} starts={operator.starts} "
            f"burst_seconds={burst_seconds:.1f} converge_seconds={converge_seconds:.1f} live_apps={len(live)} "
            f"retained_tables={len(retained_tables)} tracebacks={text.count('Traceback')}"
        )
    except BaseException:
        print("operations:\n  " + "\n  ".join(op_log))
        lines = operator.text().splitlines()
        print(f"operator logs {operator.logs} ({len(lines)} lines), their end:\n" + "\n".join(lines[-80:]))
        raise
    finally:
        stop_storm.set()
        storm_thread.join(timeout=60)
        # leave nothing behind: the operator finalizes the Delete apps it still holds
        kube.run("delete", "streamingapp", "--all", "-n", ns, "--wait=true", "--timeout=120s", timeout=150, check=False)
        operator.stop()
