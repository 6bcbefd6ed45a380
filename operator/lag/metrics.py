"""Prometheus series of consumer lag, named in the style of kafka-lag-exporter with a `floe_` prefix.

Per partition (labels namespace, app, topic, partition), of the input topics and of the app's
repartition topics (`<app id>-<name>-repartition`; the topic label tells them apart):
  floe_consumergroup_lag                 records not yet processed (end - committed offset)
  floe_consumergroup_lag_seconds         estimated time lag; 0 when caught up, never NaN
  floe_consumergroup_group_offset        committed offset (Cassandra, else the Kafka group)
  floe_partition_latest_offset           end offset (high watermark)
  floe_consumergroup_partition_status    Burrow-style status, one series per state, 1 for the current one
Per app (labels namespace, app):
  floe_consumergroup_sum_lag (input and repartition partitions: the app's whole lag),
  floe_consumergroup_repartition_sum_lag (the share of it in the app's repartition topics),
  floe_consumergroup_max_lag, floe_consumergroup_max_lag_seconds,
  floe_consumergroup_consumption_records_per_second, floe_consumergroup_input_records_per_second
  (gauges over the rate window, unit in the name; floe_consumergroup_consumption_rate and
  floe_consumergroup_input_rate, their names before, are exported too for one release),
  floe_lag_metrics_stale (1 while the app's last scrape failed),
  floe_app_partitions_stopped (partitions a poison record stopped under `spec.errors: stop`),
  floe_autoscaler_desired_replicas, floe_autoscaler_decisions_total{action,reason}
Per app, from its status (what alerts need without kube-state-metrics):
  floe_app_condition{condition} (1 while the condition is True: Ready, Progressing, Degraded),
  floe_app_replicas, floe_app_ready_replicas (the Deployment's, as the status reports them)
Per app with scheduled snapshots (spec.snapshots.interval), from status.snapshots:
  floe_app_snapshot_interval_seconds, floe_app_snapshot_failing (1 while the newest scheduled
  snapshot that ended failed), floe_app_snapshot_last_success_timestamp_seconds (once one succeeded)
Exporter:
  floe_lag_scrape_errors_total{source: kafka, cassandra, kubernetes}, floe_lag_last_success_timestamp_seconds,
  floe_lag_scrape_duration_seconds

Series of partitions and apps that are gone are removed, so the label set stays bounded.
On a failed scrape the last values of the app are kept and `floe_lag_metrics_stale` says so.

The per-partition and per-app series are not client-library Gauge children: a collector builds
them from the last scrape when Prometheus asks. Gauge children (each with its own lock and value
object) would hold a second copy of every value the scrape already holds, growing with apps times
partitions (docs/lag-and-autoscaling.md, "How lag is measured").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from floe_operator import model
from floe_operator.lag import decide, scrape
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

PARTITION = ["namespace", "app", "topic", "partition"]
APP = ["namespace", "app"]

# name → help, of the series built from the last scrape
PARTITION_FAMILIES = {
    "floe_consumergroup_lag": "Records not yet processed, per partition",
    "floe_consumergroup_lag_seconds": "Estimated seconds since the oldest unprocessed record reached the log "
    "(0 when caught up)",
    "floe_consumergroup_group_offset": "Committed offset: the next record to process",
    "floe_partition_latest_offset": "End offset (high watermark) of the partition",
}
STATUS_FAMILY = "floe_consumergroup_partition_status"
STATUS_HELP = "Burrow-style partition status: 1 for the current status (OK, WARN, STALL, STOP), 0 for the others"
APP_FAMILIES = {
    "floe_consumergroup_sum_lag": "Lag summed over the app's partitions, input and repartition topics",
    "floe_consumergroup_repartition_sum_lag": "Lag summed over the app's repartition topics (part of "
    "floe_consumergroup_sum_lag)",
    "floe_consumergroup_max_lag": "Largest lag of the app's partitions",
    "floe_consumergroup_max_lag_seconds": "Largest time lag of the app's partitions",
    "floe_consumergroup_consumption_records_per_second": "Records of the input committed per second over the "
    "rate window",
    "floe_consumergroup_input_records_per_second": "Records appended to the input per second over the rate window",
    "floe_lag_metrics_stale": "1 while the app's lag could not be measured",
    "floe_app_partitions_stopped": "Partitions of the app (input or repartition) a poison record stopped "
    "(spec.errors: stop); 0 when none",
    "floe_autoscaler_desired_replicas": "Replicas the native autoscaler decided last",
}
# Deprecated name → the series it repeats: the rates' names before they carried their unit
# (Prometheus naming); exported for one release, so rules and dashboards can move (CHANGELOG.md).
DEPRECATED_FAMILIES = {
    "floe_consumergroup_consumption_rate": "floe_consumergroup_consumption_records_per_second",
    "floe_consumergroup_input_rate": "floe_consumergroup_input_records_per_second",
}
CONDITION_FAMILY = "floe_app_condition"
CONDITION_HELP = "1 while the app's status condition is True (Ready, Progressing, Degraded), else 0"
HEALTH_FAMILIES = {
    "floe_app_replicas": "Replicas of the app's Deployment, as its status reports them",
    "floe_app_ready_replicas": "Ready replicas of the app's Deployment, as its status reports them",
}
WATCHED_CONDITIONS = ("Ready", "Progressing", "Degraded")
SNAPSHOT_FAMILIES = {
    "floe_app_snapshot_interval_seconds": "spec.snapshots.interval of the app, in seconds",
    "floe_app_snapshot_failing": "1 while the newest scheduled snapshot of the app that ended failed "
    "(status.snapshots.lastFailed), else 0",
    "floe_app_snapshot_last_success_timestamp_seconds": "Unix time the newest scheduled snapshot of the app "
    "that succeeded completed (status.snapshots.lastSuccessfulTime)",
}


def app_health(app: model.StreamingApp) -> tuple[dict[str, int], int, int]:
    """(condition → 1/0 for the watched conditions the status has, replicas, ready replicas)."""
    status = app.status
    conds = {
        str(c.get("type")): 1 if c.get("status") == "True" else 0
        for c in status.get("conditions") or []
        if c.get("type") in WATCHED_CONDITIONS
    }
    return conds, int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0)


def snapshot_health(app: model.StreamingApp) -> dict[str, float]:
    """The app's scheduled-snapshot series (family → value); none without a schedule."""
    schedule = app.spec.snapshots
    if schedule is None or not schedule.interval:
        return {}
    record = app.status.get("snapshots") or {}
    out = {
        "floe_app_snapshot_interval_seconds": model.duration_seconds(schedule.interval),
        "floe_app_snapshot_failing": 1.0 if record.get("lastFailed") else 0.0,
    }
    if record.get("lastSuccessfulTime"):
        done = datetime.fromisoformat(str(record["lastSuccessfulTime"]))
        out["floe_app_snapshot_last_success_timestamp_seconds"] = done.timestamp()
    return out


class LagMetrics:
    """The exporter's series on one registry (the process registry unless a test passes its own)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        self.decisions = Counter(
            "floe_autoscaler_decisions",
            "Scaling decisions of the native autoscaler",
            [*APP, "action", "reason"],
            registry=r,
        )
        self.errors = Counter(
            "floe_lag_scrape_errors", "Lag scrapes that failed to read a source", ["source"], registry=r
        )
        self.last_success = Gauge(
            "floe_lag_last_success_timestamp_seconds", "Unix time of the last scrape that read every source", registry=r
        )
        self.duration = Histogram(
            "floe_lag_scrape_duration_seconds",
            "Duration of one scrape of every app",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        for source in ("kafka", "cassandra", "kubernetes"):
            self.errors.labels(source=source)
        # Replaced whole on each update, so a concurrent collect sees one scrape or the next.
        self._measured: dict[tuple[str, str], scrape.AppLag] = {}  # last app lag with values
        self._stale: dict[tuple[str, str], bool] = {}
        self._desired: dict[tuple[str, str], int] = {}
        self._health: dict[tuple[str, str], tuple[dict[str, int], int, int]] = {}
        self._snapshots: dict[tuple[str, str], dict[str, float]] = {}
        r.register(_ScrapeCollector(self))

    def record_apps(self, apps: Iterable[model.StreamingApp]) -> None:
        """The conditions and replicas of every app the loop tracks (apps gone lose their series)."""
        apps = list(apps)
        self._health = {(a.namespace, a.name): app_health(a) for a in apps}
        self._snapshots = {(a.namespace, a.name): series for a in apps if (series := snapshot_health(a))}

    def update(self, result: scrape.Scrape) -> None:
        self.duration.observe(result.duration)
        for source, _ in result.errors:
            self.errors.labels(source=source).inc()
        if not result.errors:
            self.last_success.set(result.at)
        measured: dict[tuple[str, str], scrape.AppLag] = {}
        stale: dict[tuple[str, str], bool] = {}
        for app in result.apps:
            stale[app.key] = app.stale
            last = app if not app.stale else self._measured.get(app.key)
            if last is not None:
                measured[app.key] = last
        self._measured, self._stale = measured, stale
        self._desired = {k: v for k, v in self._desired.items() if k in stale}

    def record_decision(self, namespace: str, app: str, decision: decide.Decision) -> None:
        self._desired = {**self._desired, (namespace, app): decision.replicas}
        self.decisions.labels(namespace, app, decision.action, decision.reason).inc()

    def families(self) -> Iterator[GaugeMetricFamily]:
        """The per-partition and per-app series of the last scrape (what the collector yields)."""
        measured, stale, desired, healths = self._measured, self._stale, self._desired, self._health
        part, status, per_app = _empty_families()
        condition, health = _health_families()
        snapshots = _snapshot_families()
        for (namespace, name), series in self._snapshots.items():
            for family, value in series.items():
                snapshots[family].add_metric([namespace, name], value)
        for (namespace, name), app in measured.items():
            for p in app.partitions:
                pk = [namespace, name, p.topic, str(p.partition)]
                part["floe_consumergroup_lag"].add_metric(pk, p.lag)
                part["floe_consumergroup_lag_seconds"].add_metric(pk, p.lag_seconds)
                if p.committed is not None:
                    part["floe_consumergroup_group_offset"].add_metric(pk, p.committed)
                part["floe_partition_latest_offset"].add_metric(pk, p.end)
                for state in scrape.STATUSES:
                    status.add_metric([*pk, state], 1 if state == p.status else 0)
            ak = [namespace, name]
            per_app["floe_consumergroup_sum_lag"].add_metric(ak, app.total)
            per_app["floe_consumergroup_repartition_sum_lag"].add_metric(ak, app.repartition_total)
            per_app["floe_consumergroup_max_lag"].add_metric(ak, app.max_lag)
            per_app["floe_consumergroup_max_lag_seconds"].add_metric(ak, app.max_seconds)
            for family, rate in (
                ("floe_consumergroup_consumption_records_per_second", app.consumption_rate),
                ("floe_consumergroup_input_records_per_second", app.input_rate),
            ):
                per_app[family].add_metric(ak, rate or 0.0)
            per_app["floe_app_partitions_stopped"].add_metric(ak, len(app.stopped))
        for (namespace, name), is_stale in stale.items():
            per_app["floe_lag_metrics_stale"].add_metric([namespace, name], 1 if is_stale else 0)
        for (namespace, name), replicas in desired.items():
            per_app["floe_autoscaler_desired_replicas"].add_metric([namespace, name], replicas)
        for (namespace, name), (conds, replicas, ready) in healths.items():
            for type_, value in sorted(conds.items()):
                condition.add_metric([namespace, name, type_], value)
            health["floe_app_replicas"].add_metric([namespace, name], replicas)
            health["floe_app_ready_replicas"].add_metric([namespace, name], ready)
        yield from part.values()
        yield status
        yield from per_app.values()
        yield from _deprecated(per_app)
        yield condition
        yield from health.values()
        yield from snapshots.values()


def _empty_families() -> tuple[dict[str, GaugeMetricFamily], GaugeMetricFamily, dict[str, GaugeMetricFamily]]:
    """The scrape-built families without samples: per partition, the status, per app."""
    part = {name: GaugeMetricFamily(name, text, labels=PARTITION) for name, text in PARTITION_FAMILIES.items()}
    status = GaugeMetricFamily(STATUS_FAMILY, STATUS_HELP, labels=[*PARTITION, "status"])
    per_app = {name: GaugeMetricFamily(name, text, labels=APP) for name, text in APP_FAMILIES.items()}
    return part, status, per_app


def _deprecated(per_app: dict[str, GaugeMetricFamily]) -> Iterator[GaugeMetricFamily]:
    """The deprecated families, each with the samples of the one that replaced it."""
    for old, new in DEPRECATED_FAMILIES.items():
        family = GaugeMetricFamily(old, f"Deprecated: use {new}", labels=APP)
        for sample in per_app[new].samples:
            family.add_metric([sample.labels[k] for k in APP], sample.value)
        yield family


def _health_families() -> tuple[GaugeMetricFamily, dict[str, GaugeMetricFamily]]:
    """The per-app health families without samples: conditions, replicas."""
    condition = GaugeMetricFamily(CONDITION_FAMILY, CONDITION_HELP, labels=[*APP, "condition"])
    return condition, {name: GaugeMetricFamily(name, text, labels=APP) for name, text in HEALTH_FAMILIES.items()}


def _snapshot_families() -> dict[str, GaugeMetricFamily]:
    return {name: GaugeMetricFamily(name, text, labels=APP) for name, text in SNAPSHOT_FAMILIES.items()}


class _ScrapeCollector(Collector):
    """Hands the registry the series `LagMetrics.families` builds."""

    def __init__(self, metrics: LagMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return self._metrics.families()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # the families without samples, so registering does not build a collect
        part, status, per_app = _empty_families()
        condition, health = _health_families()
        deprecated = list(_deprecated(per_app))
        snapshots = _snapshot_families().values()
        return iter([*part.values(), status, *per_app.values(), *deprecated, condition, *health.values(), *snapshots])
