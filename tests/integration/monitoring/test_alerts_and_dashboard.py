"""The chart's alert rules and the Grafana dashboard against a real Prometheus fed by a real
operator and a real replica (the local stack's Kafka, Cassandra and API server).

One namespace holds the situations the alerts are about:

- `healthy`: a word-count app whose replica runs as a local process (the pods that the local
  stack cannot run without its node; its Deployment is at zero replicas) and keeps up with
  steady input. No alert may ever be pending or firing for it.
- `stalled`: an app whose pod never becomes Ready (no node to run it, or no image to pull),
  so the operator reports it Degraded with replicas not Ready, while input keeps arriving
  (a lag burst) and its offsets row is committed again and again at the same offset, as a
  replica whose batches fail would: the Burrow status STALL.
- `unmeasured`: an app whose Cassandra cannot be reached, so its lag cannot be measured.

and the operator itself is stopped at the end. The dashboard's queries are the ones in
`charts/floe/dashboards/floe.json`, with its variables set as a user selecting both apps would.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_operator import appids
from floe_stack import localrun, prometheus

from ..lag.conftest import OffsetsRows
from ..processes import OperatorProcess, free_port, start_operator
from ..waiting import wait_for
from .conftest import CHART, LAG_SECONDS_THRESHOLD, Targets, load_rules
from .promapi import PromAPI

pytestmark = [
    pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s, pytest.mark.spark, pytest.mark.helm,
    pytest.mark.prometheus,
]

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "streamingapp.yaml"
DASHBOARD = CHART / "dashboards" / "floe.json"
HEALTHY, STALLED, UNMEASURED = "healthy", "stalled", "unmeasured"
APP_ALERTS = {"FloeLagGrowing", "FloePartitionStalled", "FloeAppDegraded", "FloeReplicasNotReady",
              "FloeLagMetricsStale"}
TICK = 2.0
# The operator's Burrow status window (--lag-status-window-seconds, 120 s by default), set as a
# user would: the stalled app is STALL once its offset has not moved for this long, the same time
# its oldest record needs to cross the lag threshold, so every stalled alert fires at about the
# same moment. The healthy app is watched at least that long under the very rules that fired
# (never active over the whole scenario): 15 feed ticks and lag scrapes, over which a healthy
# replica that fell behind would be judged by the same window and threshold as the stalled one.
STATUS_WINDOW_SECONDS = LAG_SECONDS_THRESHOLD
# Series that a run without faults does not have, with why; their queries must still name
# series that a target declares, so they fill once it happens.
NOT_IN_A_HEALTHY_RUN = {
    "floe_job_repartition_records_skipped_total": "counts repartition records dropped after a replay",
    "floe_store_errors_total": "counts failed store operations, by error type",
    "floe_store_cache_hits_total": "counts hits of a store's read cache, which StreamingApp stores do not use",
    "floe_store_cache_misses_total": "counts misses of a store's read cache",
    "floe_operator_kube_reads_total": "counts GET and LIST calls, which an operator fed by its watches "
    "makes only for what is not in its caches",
}
# Grafana's $__rate_interval for a 2 s scrape interval is at least four scrapes.
RATE_INTERVAL = "20s"


def run_kubectl(binary: str, kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([binary, "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@dataclass
class Scenario:
    namespace: str
    kubectl: str
    kubeconfig: str
    bootstrap: str
    cassandra_hosts: list[str]
    cassandra_port: int
    operator: OperatorProcess
    replica: localrun.Replica
    started: float = field(default_factory=time.monotonic)

    def app(self, name: str, *, topics: list[str], keyspace: str, port: int | None = None,
            **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "streaming.floe.dev/v1alpha1",
            "kind": "StreamingApp",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "image": "example/word-count:1",
                "job": {"entrypoint": "word_count:job"},
                "kafka": {"bootstrapServers": self.bootstrap, "topics": topics},
                "state": {"cassandra": {"hosts": self.cassandra_hosts, "port": port or self.cassandra_port,
                                        "keyspace": keyspace}},
                **spec,
            },
        }

    def apply(self, body: dict[str, Any]) -> None:
        run_kubectl(self.kubectl, self.kubeconfig, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(body))

    def window(self) -> str:
        """A range covering the whole scenario so far, for "never" questions to Prometheus."""
        return f"{int(time.monotonic() - self.started) + 30}s"


class Feeder(threading.Thread):
    """Every TICK: steady input for `healthy`, a burst for `stalled`, and `stalled`'s offsets row
    committed again at offset 0."""

    def __init__(self, bootstrap: str, healthy_topic: str, stalled_topic: str, stalled_rows: OffsetsRows) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.healthy_topic, self.stalled_topic, self.rows = healthy_topic, stalled_topic, stalled_rows
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        lines = localrun.word_lines(100_000)
        i = 0
        try:
            while not self.stop.wait(TICK):
                for _ in range(20):
                    self.producer.produce(self.healthy_topic, value=lines[i % len(lines)].encode())
                    i += 1
                for n in range(100):
                    self.producer.produce(self.stalled_topic, value=b"burst", partition=n % 2)
                self.producer.flush(10)
                self.rows.commit(self.stalled_topic, {0: 0, 1: 0})
        except BaseException as exc:  # reported by the tests, not lost in a thread
            self.error = exc


@pytest.fixture(scope="module")
def scenario(
    stack_env: dict[str, str], kubectl: str, kubeconfig: str, kafka_bootstrap: str, cassandra_hosts: list[str],
    cassandra_port: int, spark_jars: list[str], helm: str, targets: Targets,
    prom: PromAPI, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scenario]:
    from cassandra.cluster import Cluster
    from confluent_kafka.admin import AdminClient

    work = tmp_path_factory.mktemp("monitoring")
    ns = f"floe-mon-{uuid.uuid4().hex[:6]}"
    suffix = ns.rsplit("-", 1)[1]
    healthy_in, healthy_out, stalled_in = (f"{ns}-{t}" for t in ("healthy-in", "healthy-out", "stalled-in"))
    ks_healthy, ks_stalled = f"floe_mon_h_{suffix}", f"floe_mon_s_{suffix}"
    run_kubectl(kubectl, kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    run_kubectl(kubectl, kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/streamingapps.streaming.floe.dev")
    run_kubectl(kubectl, kubeconfig, "create", "namespace", ns)
    for t in (healthy_in, healthy_out, stalled_in):
        localrun.create_topic(kafka_bootstrap, t, 2)
    cluster = Cluster(cassandra_hosts, port=cassandra_port)
    cql = cluster.connect()
    cql.execute(f"CREATE KEYSPACE IF NOT EXISTS {ks_stalled} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}")

    # The healthy app's replica, as its pod would run it, scraped as its ServiceMonitor would.
    app = localrun.App(
        app_id=appids.new_id(ns, HEALTHY), bootstrap=kafka_bootstrap, cassandra_hosts=cassandra_hosts,
        cassandra_port=cassandra_port, keyspace=ks_healthy, topics=[healthy_in], output_topics=[healthy_out],
        entrypoint=str(localrun.ROOT / "examples/word-count/word_count.py"),
        stores=[{"name": "word-count", "type": "partitioned"}], spark_jars=spark_jars, workdir=work,
        # the name the operator renders into its pods' floe.yaml (app_name)
        extra_env={"FLOE_KAFKA_STARTING_OFFSETS": "earliest", "FLOE_APP_NAME": HEALTHY},
    )
    replica = localrun.Replica(app, f"{HEALTHY}-local-0").start()
    targets.replica(replica.name, replica.metrics_port, namespace=ns, service=HEALTHY)
    operator = start_operator(kubeconfig, work / "operator.log", FLOE_WATCH_NAMESPACES=ns,
                              FLOE_LAG_INTERVAL_SECONDS=str(TICK), FLOE_RESYNC_SECONDS="10",
                              FLOE_LAG_STATUS_WINDOW_SECONDS=str(STATUS_WINDOW_SECONDS))
    targets.operator(ns, operator.metrics_port)
    s = Scenario(ns, kubectl, kubeconfig, kafka_bootstrap, cassandra_hosts, cassandra_port, operator, replica)
    feeder: Feeder | None = None
    unload: Callable[[], None] | None = None
    try:
        wait_for(lambda: replica.ready() or (not replica.alive() and pytest.fail(f"replica exited; see "
                                                                              f"{replica.log_path}")),
                 timeout=300, what="the healthy app's replica to be Ready", every=1)
        healthy = s.app(HEALTHY, topics=[healthy_in], keyspace=ks_healthy, replicas=0)
        healthy["spec"]["state"]["stores"] = app.stores
        healthy["spec"]["kafka"]["outputTopics"] = [healthy_out]
        s.apply(healthy)
        # Its pod exists but never runs, with or without the stack's node: an image the node's
        # admission accepts (one built here, when there is a node) and a node selector no node has.
        stalled_image = stack_env.get("FLOE_JOB_IMAGE", "example/word-count:1")
        s.apply(s.app(STALLED, topics=[stalled_in], keyspace=ks_stalled, replicas=1, image=stalled_image,
                      imagePullPolicy="Never", pod={"nodeSelector": {"floe.dev/monitoring-test": "no-such-node"}},
                      autoscaling={"mode": "Native", "minReplicas": 1, "maxReplicas": 1}))
        stalled_rows = OffsetsRows(cql, ks_stalled, appids.new_id(ns, STALLED))
        feeder = Feeder(kafka_bootstrap, healthy_in, stalled_in, stalled_rows)
        feeder.start()
        # The rules load once the operator is scraped, so that FloeOperatorDown is about it alone.
        wait_for(lambda: prom.query(f'up{{job="{prometheus.OPERATOR_JOB}"}} == 1'), timeout=60,
                 what="Prometheus to scrape the operator")
        unload = load_rules(stack_env, helm, prom)
        s.started = time.monotonic()
        yield s
        assert feeder.error is None, f"the feeder failed: {feeder.error!r}"
    finally:
        if unload is not None:
            unload()
        if feeder is not None:
            feeder.stop.set()
            feeder.join(30)
        replica.stop()
        if operator.proc.poll() is None:
            operator.proc.terminate()
            operator.proc.wait(60)
        targets.remove()
        run_kubectl(kubectl, kubeconfig, "delete", "namespace", ns, "--wait=false")
        for fut in AdminClient({"bootstrap.servers": kafka_bootstrap}).delete_topics(
                [healthy_in, healthy_out, stalled_in]).values():
            with contextlib.suppress(Exception):
                fut.result(timeout=30)
        for ks in (ks_healthy, ks_stalled):
            localrun.drop_keyspace(cql, ks)
        cluster.shutdown()


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, query) of every query of the dashboard."""
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


def substitute(expr: str, *, namespace: str, apps: list[str]) -> str:
    """The query Grafana sends with `namespace` and `apps` selected (multi-value: a regex group)."""
    values = {"namespace": namespace, "app": f"({'|'.join(apps)})", "topic": ".*",
              "__rate_interval": RATE_INTERVAL}
    return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], expr)


def firing(prom: PromAPI, namespace: str | None = None) -> set[tuple[str, str]]:
    """(alert, app) of the firing alerts (of `namespace`, or without one)."""
    return {(a["labels"]["alertname"], a["labels"].get("app", "")) for a in prom.alerts()
            if a["state"] == "firing" and a["labels"].get("namespace") == namespace}


def never_active(prom: PromAPI, selector: str, window: str) -> list[dict[str, Any]]:
    """Series of ALERTS (pending or firing) matching `selector` at any point of `window`."""
    return prom.query(f"count_over_time(ALERTS{{{selector}}}[{window}])")


def test_every_dashboard_query_returns_series(scenario: Scenario, prom: PromAPI) -> None:
    apps = [HEALTHY, STALLED]
    queries = panel_queries()
    assert len(queries) >= 30, f"{DASHBOARD} has only {len(queries)} queries"

    def empty() -> list[tuple[str, str]]:
        return [(title, expr) for title, expr in queries
                if not prom.query(substitute(expr, namespace=scenario.namespace, apps=apps))]

    def unexplained() -> list[str]:
        return [f"{title}: {expr}" for title, expr in empty()
                if not set(re.findall(r"floe_\w+", expr)) <= set(NOT_IN_A_HEALTHY_RUN)]

    missing = unexplained()
    deadline = time.monotonic() + 240
    while missing and time.monotonic() < deadline:
        time.sleep(5)
        missing = unexplained()
    assert not missing, "dashboard queries without series:\n" + "\n".join(missing)
    # Those left empty name metrics that the replica or the operator declares.
    undeclared = {m for _, expr in empty() for m in re.findall(r"floe_\w+", expr) if not prom.declared(m)}
    assert not undeclared, f"dashboard queries name metrics no target declares: {sorted(undeclared)}"
    # The variables list what was selected above.
    for var, series in (("namespace", "floe_consumergroup_sum_lag"), ("app", "floe_consumergroup_sum_lag")):
        values = {r["metric"][var] for r in prom.query(f'{series}{{namespace="{scenario.namespace}"}}')}
        assert values >= ({scenario.namespace} if var == "namespace" else set(apps)), (var, values)


def test_the_replicas_and_the_operators_series_carry_one_namespace_and_app(scenario: Scenario, prom: PromAPI) -> None:
    ns = scenario.namespace
    # As each target exposes them: the replica names its app, the operator its app and namespace.
    with urllib.request.urlopen(f"http://127.0.0.1:{scenario.replica.metrics_port}/metrics", timeout=10) as r:
        replica_text = r.read().decode()
    assert f'floe_job_owned_partitions{{app="{HEALTHY}"}}' in replica_text
    assert "namespace=" not in "".join(line for line in replica_text.splitlines() if line.startswith("floe_job_"))

    def labels(query: str) -> set[tuple[str, str]]:
        rows = prom.query(query)
        assert all("exported_namespace" not in r["metric"] and "exported_app" not in r["metric"] for r in rows), rows
        return {(r["metric"].get("namespace", ""), r["metric"].get("app", "")) for r in rows}

    # As Prometheus stores them, scraped with the labels the app's ServiceMonitor gives its targets.
    replica = wait_for(lambda: labels(f'floe_job_owned_partitions{{namespace="{ns}"}}'), timeout=120,
                       what="the replica's series in Prometheus")
    lag = wait_for(lambda: labels(f'floe_consumergroup_sum_lag{{namespace="{ns}",app="{HEALTHY}"}}'), timeout=120,
                   what="the operator's lag series of the healthy app in Prometheus")
    assert replica == lag == {(ns, HEALTHY)}
    joined = prom.query(f'floe_job_owned_partitions{{namespace="{ns}"}} * on(namespace, app) group_left '
                        f'floe_consumergroup_sum_lag')
    assert {(r["metric"]["namespace"], r["metric"]["app"]) for r in joined} == {(ns, HEALTHY)}


def test_each_app_alert_fires_for_the_stalled_app_and_never_for_the_healthy_one(
    scenario: Scenario, prom: PromAPI
) -> None:
    want = {(a, STALLED) for a in APP_ALERTS - {"FloeLagMetricsStale"}}
    wait_for(lambda: want <= firing(prom, scenario.namespace), timeout=300, every=2,
             what=f"{sorted(want)} to fire; firing: {sorted(firing(prom, scenario.namespace))}")
    lag = prom.query(f'floe_consumergroup_max_lag_seconds{{namespace="{scenario.namespace}",app="{STALLED}"}}')
    assert float(lag[0]["value"][1]) > LAG_SECONDS_THRESHOLD
    # The same question about the stalled app has answers, so its empty answer for the healthy app means "never".
    assert never_active(prom, f'namespace="{scenario.namespace}",app="{STALLED}"', scenario.window())
    active = never_active(prom, f'namespace="{scenario.namespace}",app="{HEALTHY}"', scenario.window())
    assert not active, f"alerts were active for the healthy app: {active}"
    assert scenario.replica.alive(), f"the healthy app's replica exited; see {scenario.replica.log_path}"


def test_lag_metrics_stale_fires_for_an_app_whose_cassandra_is_unreachable(
    scenario: Scenario, prom: PromAPI
) -> None:
    scenario.apply(scenario.app(UNMEASURED, topics=[f"{scenario.namespace}-stalled-in"],
                                keyspace="floe_mon_unreachable", port=free_port(), replicas=0))
    wait_for(lambda: ("FloeLagMetricsStale", UNMEASURED) in firing(prom, scenario.namespace), timeout=120,
             every=2, what=f"FloeLagMetricsStale for {UNMEASURED}")
    stale = prom.query(f'floe_lag_metrics_stale{{namespace="{scenario.namespace}",app="{HEALTHY}"}}')
    assert [float(r["value"][1]) for r in stale] == [0.0]
    active = never_active(prom, f'namespace="{scenario.namespace}",app="{HEALTHY}"', scenario.window())
    assert not active, f"alerts were active for the healthy app: {active}"


def test_snapshot_alerts_fire_while_the_schedules_status_says_failed_and_overdue_and_clear_once_one_succeeds(
    scenario: Scenario, prom: PromAPI
) -> None:
    # status.snapshots as the operator writes it once a scheduled snapshot ends (the outcome of the
    # schedule, `snapshotschedule.outcome`): here the newest failed, the newest success is 3
    # intervals old. The app runs no replica, so it is never Ready and takes none itself.
    name = "scheduled"
    scenario.apply(scenario.app(name, topics=[f"{scenario.namespace}-healthy-in"], keyspace="floe_mon_scheduled",
                                replicas=0, snapshots={"location": "s3a://backups/scheduled", "interval": "1m"}))

    def status(record: dict[str, Any]) -> None:
        run_kubectl(scenario.kubectl, scenario.kubeconfig, "patch", "streamingapp", name, "-n", scenario.namespace,
                    "--subresource=status", "--type=merge", "-p", json.dumps({"status": {"snapshots": record}}))

    def utc(seconds_ago: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))

    status({"lastSuccessfulTime": utc(180), "lastFailed": f"{name}-20261207-120000"})
    want = {("FloeSnapshotFailed", name), ("FloeSnapshotOverdue", name)}
    wait_for(lambda: want <= firing(prom, scenario.namespace), timeout=120, every=2,
             what=f"{sorted(want)} to fire; firing: {sorted(firing(prom, scenario.namespace))}")
    status({"lastSuccessfulTime": utc(0), "lastFailed": None})
    wait_for(lambda: not want & firing(prom, scenario.namespace), timeout=120, every=2,
             what=f"{sorted(want)} to resolve once a scheduled snapshot succeeded")
    active = never_active(prom, f'namespace="{scenario.namespace}",app="{HEALTHY}"', scenario.window())
    assert not active, f"alerts were active for the healthy app: {active}"


def test_operator_down_fires_only_once_the_operator_is_gone(scenario: Scenario, prom: PromAPI) -> None:
    assert not never_active(prom, 'alertname="FloeOperatorDown"', scenario.window())
    scenario.operator.proc.terminate()
    scenario.operator.proc.wait(60)
    wait_for(lambda: ("FloeOperatorDown", "") in firing(prom), timeout=120, every=2,
             what="FloeOperatorDown to fire")
