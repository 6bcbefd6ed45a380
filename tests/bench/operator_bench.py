"""Operator benchmark: creation latency, memory, and writes of an unchanged resync.

    .venv/bin/python tests/bench/operator_bench.py [--apps 200] [--total 500] [--resync 15]

Against the local stack (real kube-apiserver + controller-manager, Kafka, Cassandra), with the
operator as its own process (`floe-operator`, watching one fresh namespace):

1. baseline: the same number of Deployments created directly, apply → ADDED seen by a watch;
2. `--apps` StreamingApps created at once on a new keyspace (the first app to arrive creates
   the keyspace and its offsets table; the others wait for them; the apps have no store):
   apply → Deployment ADDED, p50/p99 (`operator-deployment-latency-<n>`);
3. the same apps deleted (deletionPolicy Retain) and created again, their tables already there:
   the operator's own latency (`operator-deployment-latency-<n>-provisioned`);
3b. one app alone, `--single` times one after the other (each deleted before the next), on the
   provisioned keyspace, against one Deployment created directly the same number of times
   (`operator-deployment-latency-1`);
4. more apps up to `--total`, then the operator's RSS (`operator-rss-<total>`);
5. windows of two resync periods of the unchanged apps, the operator alone and then with a
   naive re-applier beside it (every child server-side-applied on every resync), alternated:
   the API server's count of write requests, the operator's own counter, and every
   resourceVersion of apps and children compared (`operator-resync-writes-<total>`).
   `--only resync` creates the apps untimed and measures this row alone; `--only latency` stops
   after rows 1-3b.

Results go to bench/results/operator-*.json, the operator's log to $TMPDIR/floe-operator-bench.log
(FLOE_LOG_LEVEL sets its level), each app's create and Deployment times to
$TMPDIR/floe-operator-bench-{new-keyspace,provisioned}.json.
The namespace and the keyspace are removed at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from floe_stack import envfile  # noqa: E402

NAIVE_WORKERS = 8  # calls in flight of the naive re-applier (the baseline of the resync row)
LATENCY_TARGET_S = 1.0  # p99 of apply → Deployment for --apps at once, new keyspace or not
SINGLE_TARGET_S = 0.3  # p99 of apply → Deployment for one app alone, its keyspace provisioned
RSS_TARGET_MIB = 250.0  # the operator with --total apps


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Bench:
    def __init__(self, args: argparse.Namespace, env: dict[str, str]) -> None:
        import kubernetes

        self.args = args
        self.env = env
        self.cassandra_tables = 0
        os.environ["KUBECONFIG"] = env["KUBECONFIG"]
        kubernetes.config.load_kube_config(config_file=env["KUBECONFIG"])
        configuration = kubernetes.client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = 32
        self.client = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.apps_api = kubernetes.client.AppsV1Api(self.client)
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        suffix = uuid.uuid4().hex[:6]
        self.namespace = f"floe-opbench-{suffix}"
        self.keyspace = f"floe_opbench_{suffix}"
        self.keyspaces = [self.keyspace]  # every keyspace the bench made, dropped at the end
        self.topic = f"floe-opbench-{suffix}"
        self.seen: dict[str, float] = {}
        self.seen_lock = threading.Lock()
        self.operator: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()

    # --- set-up ------------------------------------------------------------------------

    def setup(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        subprocess.run(
            [self.env["FLOE_KUBECTL"], "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")],
            check=True,
            capture_output=True,
        )
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        admin = AdminClient({"bootstrap.servers": self.env["FLOE_KAFKA_BOOTSTRAP"]})
        admin.create_topics([NewTopic(self.topic, num_partitions=3, replication_factor=1)])[self.topic].result(30)
        threading.Thread(target=self._watch, daemon=True).start()
        self.cassandra_tables = self.user_tables()

    def user_tables(self) -> int:
        """Tables outside Cassandra's own keyspaces: every schema change costs more as they grow
        (see `localrun.drop_keyspace`), so the results say how many there were."""
        from cassandra.cluster import Cluster

        cluster = Cluster(self.env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(self.env["FLOE_CASSANDRA_PORT"]))
        try:
            rows = cluster.connect().execute("SELECT keyspace_name FROM system_schema.tables")
            return sum(1 for row in rows if not row[0].startswith("system"))
        finally:
            cluster.shutdown()

    def _watch(self) -> None:
        """Record when each Deployment is first seen. Events stay JSON: turning each into the
        client's model objects costs milliseconds apiece on the cores the burst shares, and the
        last run that did so saw three Deployments together, 2.2 s after their creates."""
        import kubernetes

        while True:
            try:
                for event in kubernetes.watch.Watch().stream(
                    self.apps_api.list_namespaced_deployment, self.namespace, timeout_seconds=600, deserialize=False
                ):
                    if event["type"] == "ADDED":
                        with self.seen_lock:
                            self.seen.setdefault(event["object"]["metadata"]["name"], time.monotonic())
            except Exception:  # a dropped watch is restarted; the set keeps the first sighting
                time.sleep(0.2)

    def start_operator(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": self.env["KUBECONFIG"],
            "FLOE_LOG_LEVEL": os.environ.get("FLOE_LOG_LEVEL", "WARNING"),
        }
        self.operator = subprocess.Popen(
            [
                str(ROOT / ".venv" / "bin" / "floe-operator"),
                "--namespace",
                self.namespace,
                "--metrics-port",
                str(self.metrics_port),
                "--liveness-port",
                str(free_port()),
                "--resync-seconds",
                str(self.args.resync),
                "--lag-interval-seconds",
                str(self.args.lag_interval),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(Path(tempfile.gettempdir()) / "floe-operator-bench.log", "wb"),  # noqa: SIM115
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.writes()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("the operator did not start serving metrics")

    # --- measurements ------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("floe_operator_kube_writes_total"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def writes(self) -> float:
        return sum(self.metrics().values())

    def cpu_s(self) -> float:
        """CPU seconds the operator process has used (user + system)."""
        assert self.operator is not None
        fields = Path(f"/proc/{self.operator.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def api_writes(self) -> dict[str, float]:
        """The API server's own count of write requests so far, by resource (every client's)."""
        text = subprocess.run(
            [self.env["FLOE_KUBECTL"], "get", "--raw", "/metrics"], check=True, capture_output=True, text=True
        ).stdout
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1 : line.rindex("}")].split(","))
            if labels.get("verb", "").strip('"') in ("POST", "PUT", "PATCH", "APPLY", "DELETE"):
                resource = labels.get("resource", "").strip('"') + labels.get("subresource", "/").strip('"')
                out[resource] = out.get(resource, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def rss_mib(self) -> float:
        assert self.operator is not None
        for line in Path(f"/proc/{self.operator.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def app(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "streaming.floe.dev/v1alpha1",
            "kind": "StreamingApp",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "image": "registry.example.com/floe/bench:1.0.0",
                "job": {"entrypoint": "bench.app:transform"},
                # Zero replicas: the Deployment exists and completes at once, without hundreds of
                # Pending pods (no kubelet here) or their progress deadlines changing it later.
                "replicas": 0,
                "kafka": {"bootstrapServers": self.env["FLOE_KAFKA_BOOTSTRAP"], "topics": [self.topic]},
                "state": {
                    "cassandra": {
                        "hosts": self.env["FLOE_CASSANDRA_HOSTS"].split(","),
                        "port": int(self.env["FLOE_CASSANDRA_PORT"]),
                        "keyspace": self.keyspace,
                    },
                    # No store: one writer per store table (an app whose store an elder app of
                    # the keyspace writes is Degraded, StoreInUse), and a table per app would put
                    # 500 tables on the shared node. The offsets table is still provisioned.
                    "stores": [],
                },
            },
        }

    def create_all(self, bodies: list[dict[str, Any]], create: Any) -> dict[str, float]:
        """Create all objects at once (16 client threads); returns name → time the create returned."""
        started: dict[str, float] = {}

        def one(body: dict[str, Any]) -> None:
            create(body)
            started[body["metadata"]["name"]] = time.monotonic()

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(one, bodies))
        return started

    def wait_seen(self, names: list[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.seen_lock:
                if all(n in self.seen for n in names):
                    return {n: self.seen[n] for n in names}
            time.sleep(0.1)
        with self.seen_lock:
            missing = [n for n in names if n not in self.seen]
        raise RuntimeError(f"{len(missing)} Deployments never appeared, e.g. {missing[:3]}")

    def latencies(self, names: list[str], started: dict[str, float], timeout: float, *, tag: str = "") -> list[float]:
        seen = self.wait_seen(names, timeout)
        if tag:  # per-app timeline in wall-clock time, to read against the operator's log
            offset = time.time() - time.monotonic()
            timeline = {n: {"created": started[n] + offset, "deployment_seen": seen[n] + offset} for n in names}
            (Path(tempfile.gettempdir()) / f"floe-operator-bench-{tag}.json").write_text(json.dumps(timeline))
        return [max(0.0, seen[n] - started[n]) for n in names]

    def create_apps(self, names: list[str]) -> dict[str, float]:
        return self.create_all(
            [self.app(n) for n in names],
            lambda body: self.custom.create_namespaced_custom_object(
                "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps", body
            ),
        )

    def baseline(self, count: int) -> list[float]:
        from floe_operator import model, render

        bodies = []
        for i in range(count):
            body = self.app(f"direct-{i:03d}")
            body["metadata"]["uid"] = "x"
            app = model.StreamingApp.from_body(body)
            dep = render.deployment(app, config_digest="direct")
            dep["metadata"].pop("ownerReferences")
            dep["metadata"]["labels"] = {"bench": "direct"}  # not the operator's: it must ignore them
            bodies.append(dep)
        started = self.create_all(bodies, lambda body: self.apps_api.create_namespaced_deployment(self.namespace, body))
        result = self.latencies([b["metadata"]["name"] for b in bodies], started, 120)
        self.apps_api.delete_collection_namespaced_deployment(self.namespace, label_selector="bench=direct")
        # Their ReplicaSets go by garbage collection: wait until it is done, or the collector and
        # the API server would still be busy with 400 deletions while the next burst is measured.
        deadline = time.monotonic() + 120
        while self.apps_api.list_namespaced_replica_set(self.namespace, limit=1).items:
            if time.monotonic() > deadline:
                raise TimeoutError("the baseline's ReplicaSets were not garbage-collected within 120 s")
            time.sleep(0.5)
        return result

    def one_at_a_time(self, names: list[str], create: Any, delete: Any) -> list[float]:
        """Create each object alone, wait for its Deployment, delete it: create returned →
        Deployment ADDED, one latency per name."""
        out = []
        for name in names:
            create(name)
            started = {name: time.monotonic()}
            out += self.latencies([name], started, 60)
            delete(name)
            time.sleep(0.5)  # its deletion's writes settle before the next create
        return out

    def single(self, count: int) -> tuple[list[float], list[float]]:
        """One StreamingApp alone, `count` times, then one Deployment created directly as often
        (the baseline): (app latencies, direct latencies)."""
        from floe_operator import model, render

        group = ("streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps")

        def direct(name: str) -> dict[str, Any]:
            body = self.app(name)
            body["metadata"]["uid"] = "x"
            dep = render.deployment(model.StreamingApp.from_body(body), config_digest="direct")
            dep["metadata"].pop("ownerReferences")
            dep["metadata"]["labels"] = {"bench": "direct"}
            return dep

        apps = self.one_at_a_time(
            [f"solo-{i:02d}" for i in range(count)],
            lambda name: self.custom.create_namespaced_custom_object(*group, self.app(name)),
            lambda name: self.custom.delete_namespaced_custom_object(*group, name),
        )
        base = self.one_at_a_time(
            [f"direct-solo-{i:02d}" for i in range(count)],
            lambda name: self.apps_api.create_namespaced_deployment(self.namespace, direct(name)),
            lambda name: self.apps_api.delete_namespaced_deployment(name, self.namespace),
        )
        return apps, base

    def use_new_keyspace(self) -> None:
        """The apps created from now on name a keyspace that does not exist yet."""
        self.keyspace = f"{self.keyspaces[0]}_{len(self.keyspaces)}"
        self.keyspaces.append(self.keyspace)

    def wait_settled(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.settled(names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the apps' status did not follow their Deployments within {timeout:.0f} s")
            time.sleep(2)

    def delete_apps(self) -> None:
        """Every app of the namespace deleted (deletionPolicy Retain: their tables stay), and
        their Deployments gone."""
        group = ("streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps")
        self.custom.delete_collection_namespaced_custom_object(*group)
        deadline = time.monotonic() + 600
        while (
            self.custom.list_namespaced_custom_object(*group)["items"]
            or self.apps_api.list_namespaced_deployment(self.namespace).items
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("the apps and their Deployments were not gone within 600 s")
            time.sleep(1)

    def settled(self, names: list[str]) -> bool:
        items = self.custom.list_namespaced_custom_object(
            "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps"
        )["items"]
        done = {
            i["metadata"]["name"]
            for i in items
            if (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"]
            and any(
                c["type"] == "Ready" and c["status"] == "True" for c in (i.get("status") or {}).get("conditions", [])
            )
        }
        return set(names) <= done

    def versions(self) -> dict[str, str]:
        out: dict[str, str] = {}
        apps = self.custom.list_namespaced_custom_object(
            "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps"
        )["items"]
        out.update({f"StreamingApp/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in apps})
        for kind, lister in (
            ("Deployment", self.apps_api.list_namespaced_deployment),
            ("ConfigMap", self.core.list_namespaced_config_map),
            ("Service", self.core.list_namespaced_service),
        ):
            for obj in lister(self.namespace, label_selector="app.kubernetes.io/managed-by=floe-operator").items:
                out[f"{kind}/{obj.metadata.name}"] = obj.metadata.resource_version
        from kubernetes.client import PolicyV1Api

        for obj in PolicyV1Api(self.client).list_namespaced_pod_disruption_budget(self.namespace).items:
            out[f"PodDisruptionBudget/{obj.metadata.name}"] = obj.metadata.resource_version
        return out

    # --- the resync baseline --------------------------------------------------------------

    def naive_children(self) -> list[dict[str, Any]]:
        """Every child the operator's own renderers give each StreamingApp now in the namespace."""
        from floe_operator import desired, model

        items = self.custom.list_namespaced_custom_object(
            "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps"
        )["items"]
        out: list[dict[str, Any]] = []
        for body in items:
            app = model.StreamingApp.from_body(body)
            facts = desired.Facts(service_monitor_crd=False, keda_crd=False, partitions=app.status.get("partitions"))
            out += desired.desired(app, facts)
        return out

    def naive_resync(self, until: float) -> dict[str, float]:
        """The baseline: an operator without the in-sync check, which server-side-applies every
        child (rendered as Floe renders it, under Floe's field manager) on every resync, with
        `NAIVE_WORKERS` calls in flight. Runs until `until` (monotonic); returns its calls and
        the resyncs it started."""
        from floe_operator import k8s

        cluster = k8s.Cluster(k8s.load_client(pool_size=NAIVE_WORKERS))
        calls, errors, resyncs, lock = 0, 0, 0, threading.Lock()

        def apply(obj: dict[str, Any]) -> None:
            nonlocal calls, errors
            if time.monotonic() >= until:
                return
            try:
                cluster.apply_sync(obj)
            except k8s.ApiError:
                with lock:
                    errors += 1
                return
            with lock:
                calls += 1

        children, completed = 0, 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=NAIVE_WORKERS) as pool:
            while time.monotonic() < until:
                started = time.monotonic()
                resyncs += 1
                desired = self.naive_children()
                children = len(desired)
                list(pool.map(apply, desired))
                completed += time.monotonic() < until
                time.sleep(max(0.0, min(until, started + self.args.resync) - time.monotonic()))
        # a resync that the window ended before it applied every child is counted as started only:
        # on a busy machine the baseline writes less than an operator would that keeps up
        return {
            "calls": calls,
            "errors": errors,
            "children_per_resync": children,
            "resyncs_started": resyncs,
            "resyncs_completed": completed,
        }

    def resync_window(self, window: float, *, naive: bool) -> dict[str, Any]:
        """Writes during `window` seconds of unchanged apps, counted by the API server (every
        client, leader-election leases left out) and by the operator; with `naive`, the naive
        re-applier runs beside the operator for the window."""
        versions_before, writes_before, api_before = self.versions(), self.metrics(), self.api_writes()
        started = time.monotonic()
        naive_calls = self.naive_resync(started + window) if naive else None
        time.sleep(max(0.0, started + window - time.monotonic()))
        versions_after, writes_after, api_after = self.versions(), self.metrics(), self.api_writes()
        changed = sorted(k for k in versions_before if versions_after.get(k) != versions_before[k])
        by_call = {
            k: writes_after.get(k, 0.0) - writes_before.get(k, 0.0)
            for k in writes_after
            if writes_after.get(k, 0.0) != writes_before.get(k, 0.0)
        }
        api = {
            k: v - api_before.get(k, 0.0)
            for k, v in api_after.items()
            if v != api_before.get(k, 0.0) and not k.startswith("leases")
        }
        return {
            "side": "naive re-applier" if naive else "floe-operator",
            "api_writes": sum(api.values()),
            "api_writes_by_resource": api,
            "operator_writes": sum(by_call.values()),
            "operator_writes_by_call": by_call,
            "naive": naive_calls,
            "objects_checked": len(versions_before),
            "objects_changed": len(changed),
            "changed_examples": changed[:10],
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }

    # --- clean-up ----------------------------------------------------------------------

    def cleanup(self) -> None:
        try:
            self.custom.delete_collection_namespaced_custom_object(
                "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps"
            )
            deadline = time.monotonic() + 180
            while (
                time.monotonic() < deadline
                and self.custom.list_namespaced_custom_object(
                    "streaming.floe.dev", "v1alpha1", self.namespace, "streamingapps"
                )["items"]
            ):
                time.sleep(1)
        finally:
            if self.operator is not None:
                self.operator.send_signal(signal.SIGTERM)
                try:
                    self.operator.wait(30)
                except subprocess.TimeoutExpired:
                    self.operator.kill()
            self.core.delete_namespace(self.namespace)
            from cassandra.cluster import Cluster

            cluster = Cluster(self.env["FLOE_CASSANDRA_HOSTS"].split(","), port=int(self.env["FLOE_CASSANDRA_PORT"]))
            try:
                session = cluster.connect()
                for keyspace in self.keyspaces:
                    try:
                        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=300)
                    except Exception as exc:  # the drop goes on server-side; say so rather than fail the run
                        print(f"DROP KEYSPACE {keyspace} did not answer in time: {exc}", file=sys.stderr)
            finally:
                cluster.shutdown()


def result(name: str, **fields: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "command": ".venv/bin/python tests/bench/operator_bench.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "p50_s": None,
        "p99_s": None,
    }
    base.update(fields)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(base, indent=2) + "\n")
    print(json.dumps(base))
    return base


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "runs": len(values)}


def resync_row(bench: Bench, args: argparse.Namespace, machine: str, apps: int) -> None:
    """Windows of two resync periods, the operator alone (value) and with the naive re-applier
    beside it (baseline), alternated; both counted by the API server's own request counter."""
    window = args.resync * 2 + 2
    windows: list[dict[str, Any]] = []
    for _ in range(args.windows):
        for naive in (False, True):
            windows.append(bench.resync_window(window, naive=naive))
            print(json.dumps(windows[-1]), flush=True)
    value = [w["api_writes"] for w in windows if w["side"] == "floe-operator"]
    base = [w["api_writes"] for w in windows if w["side"] != "floe-operator"]
    v, b = spread(value)["median"], spread(base)["median"]
    result(
        f"operator-resync-writes-{apps}",
        metric=f"write requests the Kubernetes API server counted (every client; leader-election leases left out) "
        f"during {window:.0f} s (2 resyncs of {args.resync:.0f} s) of {apps} unchanged StreamingApps: "
        f"floe-operator alone (value) vs with a naive re-applier beside it (baseline), median of {args.windows} "
        "alternated windows each; lower is better, ratio = value / baseline",
        unit="requests",
        value=v,
        # the worst window too: a median of 0 can hide a window with writes
        value_max=max(value),
        baseline=f"measured: an operator without the in-sync check, server-side-applying every child Floe's "
        f"renderers give (under Floe's field manager, {NAIVE_WORKERS} calls in flight) on every resync",
        baseline_value=b,
        ratio=round(v / b, 4) if b else None,
        target="median 0",
        target_met=v == 0,
        spread={"value": spread(value), "baseline": spread(base)},
        windows=windows,
        load_average_1m=round(os.getloadavg()[0], 2),
        cpu_count=os.cpu_count(),
        machine=machine,
    )


def burst(bench: Bench, names: list[str], *, tag: str) -> dict[str, Any]:
    """The apps `names` created at once (16 client threads): their latencies, the operator's CPU
    seconds and the API server's writes per app until the last Deployment, then settled."""
    with bench.seen_lock:
        bench.seen.clear()
    cpu, api = bench.cpu_s(), bench.api_writes()
    started = bench.create_apps(names)
    latencies = bench.latencies(names, started, 900, tag=tag)
    cpu_s, api_after = bench.cpu_s() - cpu, bench.api_writes()
    with bench.seen_lock:
        last = max(bench.seen[n] for n in names)
    out = {
        "p50_s": round(percentile(latencies, 0.50), 3),
        "p99_s": round(percentile(latencies, 0.99), 3),
        "operator_cpu_s": round(cpu_s, 2),
        "create_span_s": round(max(started.values()) - min(started.values()), 2),
        "first_create_to_last_deployment_s": round(last - min(started.values()), 2),
        "api_writes_per_app_until_last_deployment": {
            k: round((v - api.get(k, 0.0)) / len(names), 2)
            for k, v in sorted(api_after.items(), key=lambda kv: kv[0])
            if round((v - api.get(k, 0.0)) / len(names), 2)
        },
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps({"burst": tag, **out}), flush=True)
    bench.wait_settled(names, 600)
    return out


def burst_row(
    name: str,
    setting: str,
    bursts: list[dict[str, Any]],
    base: list[dict[str, float]],
    args: argparse.Namespace,
    bench: Bench,
    machine: str,
) -> None:
    """A latency row over `args.bursts` bursts, each after its own burst of direct Deployments:
    the median burst's p99 is the value, the worst one's beside it."""
    p99s, base_p99s = [b["p99_s"] for b in bursts], [b["p99_s"] for b in base]
    value, baseline = statistics.median(p99s), statistics.median(base_p99s)
    result(
        name,
        metric=f"seconds from creating {args.apps} StreamingApps at once to each one's Deployment existing "
        f"(create returned → Deployment ADDED seen by a watch), {setting}; value: the median over "
        f"{len(bursts)} bursts of each burst's p99, baseline: the same for {args.apps} Deployments created "
        "directly, a burst of them just before each burst of apps; lower is better, ratio = value / baseline "
        "(how many times slower)",
        unit="s",
        value=value,
        value_max=max(p99s),
        p50_s=statistics.median(b["p50_s"] for b in bursts),
        p99_s=value,
        baseline=f"{args.apps} Deployments created directly by a client, create → watch ADDED (p99)",
        baseline_value=baseline,
        ratio=round(value / max(baseline, 1e-3), 2),
        target=f"p99 <= {LATENCY_TARGET_S:g} s (median burst)",
        target_met=value <= LATENCY_TARGET_S,
        spread={"value": spread(p99s), "baseline": spread(base_p99s)},
        operator_cpu_s=statistics.median(b["operator_cpu_s"] for b in bursts),
        bursts=bursts,
        baseline_bursts=base,
        cassandra_tables_at_start=bench.cassandra_tables,
        load_average=max(b["load_average"] for b in bursts),
        machine=machine,
    )


def latency_rows(bench: Bench, args: argparse.Namespace, machine: str) -> list[str]:
    """Rows 1-3b, `--bursts` times alternated: direct Deployments, the apps on a new keyspace,
    the same apps again on it; the last burst's apps are left running. Returns their names."""
    names = [f"app-{i:03d}" for i in range(args.apps)]
    base: list[dict[str, float]] = []
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    for i in range(args.bursts):
        direct = bench.baseline(args.apps)
        base.append({"p50_s": round(percentile(direct, 0.50), 3), "p99_s": round(percentile(direct, 0.99), 3)})
        if i:
            bench.use_new_keyspace()
        cold.append(burst(bench, names, tag=f"new-keyspace-{i}"))
        bench.delete_apps()
        warm.append(burst(bench, names, tag=f"provisioned-{i}"))
        if i < args.bursts - 1:
            bench.delete_apps()
    burst_row(
        f"operator-deployment-latency-{args.apps}",
        "on a new Cassandra keyspace, created with its tables by the first app",
        cold,
        base,
        args,
        bench,
        machine,
    )
    burst_row(
        f"operator-deployment-latency-{args.apps}-provisioned",
        "their Cassandra tables already present",
        warm,
        base,
        args,
        bench,
        machine,
    )
    return names


def single_row(bench: Bench, args: argparse.Namespace, machine: str) -> None:
    """One app alone, `--single` times one after the other on the provisioned keyspace, with the
    apps of the rows before settled: the operator's latency when nothing else is going on."""
    with bench.seen_lock:
        bench.seen.clear()
    alone, base = bench.single(args.single)
    result(
        "operator-deployment-latency-1",
        metric=f"seconds from creating one StreamingApp alone to its Deployment existing (create returned → "
        f"Deployment ADDED seen by a watch), {args.single} apps one after the other (each deleted before the "
        "next), their Cassandra tables already present; value: p99, baseline: one Deployment created directly "
        f"as often, measured in the same run; lower is better, ratio = value / baseline (how many times slower)",
        unit="s",
        value=round(percentile(alone, 0.99), 3),
        p50_s=round(percentile(alone, 0.50), 3),
        p99_s=round(percentile(alone, 0.99), 3),
        latencies_s=[round(x, 3) for x in alone],
        baseline="one Deployment created directly by a client, create → watch ADDED (p99)",
        baseline_value=round(percentile(base, 0.99), 3),
        baseline_p50_s=round(percentile(base, 0.50), 3),
        ratio=round(percentile(alone, 0.99) / max(percentile(base, 0.99), 1e-3), 2),
        target=f"p99 <= {SINGLE_TARGET_S:g} s",
        target_met=percentile(alone, 0.99) <= SINGLE_TARGET_S,
        cassandra_tables_at_start=bench.cassandra_tables,
        load_average=os.getloadavg()[0],
        machine=machine,
    )


def resync_only(bench: Bench, args: argparse.Namespace, machine: str) -> None:
    """`--only resync`: the apps created (not timed), then the resync row alone."""
    bench.start_operator()
    names = [f"app-{i:03d}" for i in range(args.total)]
    for start in range(0, len(names), args.apps):
        chunk = names[start : start + args.apps]
        started = bench.create_apps(chunk)
        bench.latencies(chunk, started, 1800)
    bench.wait_settled(names, 900)
    time.sleep(args.resync * 2)  # let the first resync after creation pass
    resync_row(bench, args, machine, len(names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", type=int, default=200, help="apps created at once (latency)")
    parser.add_argument("--total", type=int, default=500, help="apps alive for the memory and resync measurements")
    parser.add_argument("--resync", type=float, default=15.0, help="operator resync interval, seconds")
    parser.add_argument("--lag-interval", type=float, default=10.0, help="operator lag loop interval; 0 = off")
    parser.add_argument("--windows", type=int, default=3, help="resync windows of each side, alternated")
    parser.add_argument("--bursts", type=int, default=3, help="bursts of each latency row, alternated")
    parser.add_argument("--single", type=int, default=8, help="creates of one app alone (latency-1 row)")
    parser.add_argument(
        "--only", choices=["resync", "latency"], default=None, help="only the resync row, or only the latency rows"
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = envfile.ensure_stack(ROOT)
    bench = Bench(args, env)
    bench.setup()
    machine = f"{os.cpu_count()} CPUs shared with the local stack (kube-apiserver, etcd, Kafka, Cassandra)"
    try:
        if args.only == "resync":
            resync_only(bench, args, machine)
            return
        bench.start_operator()
        idle_rss = bench.rss_mib()

        names = latency_rows(bench, args, machine)
        single_row(bench, args, machine)
        if args.only == "latency":
            return

        more = [f"app-{i:03d}" for i in range(args.apps, args.total)]
        started = bench.create_apps(more)
        bench.latencies(more, started, 1800)
        all_names = names + more
        bench.wait_settled(all_names, 900)
        time.sleep(args.resync * 2)  # let the first resync after creation pass
        rss = bench.rss_mib()
        result(
            f"operator-rss-{args.total}",
            metric=f"resident memory (VmRSS) of the operator process with {args.total} StreamingApps and their "
            "children reconciled, read after two resyncs; baseline: the same process before any StreamingApp, "
            "measured in the same run; lower is better, ratio = value / baseline",
            unit="MiB",
            value=round(rss, 1),
            baseline="the same operator process with no StreamingApp",
            baseline_value=round(idle_rss, 1),
            ratio=round(rss / idle_rss, 2),
            target=f"<= {RSS_TARGET_MIB:g} MiB",
            target_met=rss <= RSS_TARGET_MIB,
            machine=machine,
        )

        resync_row(bench, args, machine, len(all_names))
    finally:
        bench.cleanup()


if __name__ == "__main__":
    main()
