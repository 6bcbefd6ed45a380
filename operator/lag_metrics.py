"""Prometheus series of consumer lag, named in the style of kafka-lag-exporter with a `floe_` prefix.

Per partition (labels namespace, app, topic, partition):
  floe_consumergroup_lag                 records not yet processed (end - committed offset)
  floe_consumergroup_lag_seconds         estimated time lag; 0 when caught up, never NaN
  floe_consumergroup_group_offset        committed offset (Cassandra, else the Kafka group)
  floe_partition_latest_offset           end offset (high watermark)
  floe_consumergroup_partition_status    Burrow-style status, one series per state, 1 for the current one
Per app (labels namespace, app):
  floe_consumergroup_sum_lag, floe_consumergroup_max_lag, floe_consumergroup_max_lag_seconds,
  floe_consumergroup_consumption_rate, floe_consumergroup_input_rate (records/s),
  floe_lag_metrics_stale (1 while the app's last scrape failed),
  floe_autoscaler_desired_replicas, floe_autoscaler_decisions_total{action,reason}
Exporter:
  floe_lag_scrape_errors_total{source: kafka, cassandra, kubernetes}, floe_lag_last_success_timestamp_seconds,
  floe_lag_scrape_duration_seconds

Series of partitions and apps that are gone are removed, so the label set stays bounded.
On a failed scrape the last values of the app are kept and `floe_lag_metrics_stale` says so.
"""

from __future__ import annotations

import contextlib

from floe_operator import autoscale, lag
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

PARTITION = ["namespace", "app", "topic", "partition"]
APP = ["namespace", "app"]


class LagMetrics:
    """The exporter's series on one registry (the process registry unless a test passes its own)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        self.lag = Gauge("floe_consumergroup_lag", "Records not yet processed, per partition", PARTITION, registry=r)
        self.lag_seconds = Gauge(
            "floe_consumergroup_lag_seconds",
            "Estimated seconds since the oldest unprocessed record reached the log (0 when caught up)",
            PARTITION,
            registry=r,
        )
        self.group_offset = Gauge(
            "floe_consumergroup_group_offset", "Committed offset: the next record to process", PARTITION, registry=r
        )
        self.latest_offset = Gauge(
            "floe_partition_latest_offset", "End offset (high watermark) of the partition", PARTITION, registry=r
        )
        self.status = Gauge(
            "floe_consumergroup_partition_status",
            "Burrow-style partition status: 1 for the current status (OK, WARN, STALL, STOP), 0 for the others",
            [*PARTITION, "status"],
            registry=r,
        )
        self.sum_lag = Gauge(
            "floe_consumergroup_sum_lag", "Lag summed over the app's input partitions", APP, registry=r
        )
        self.max_lag = Gauge("floe_consumergroup_max_lag", "Largest lag of the app's partitions", APP, registry=r)
        self.max_lag_seconds = Gauge(
            "floe_consumergroup_max_lag_seconds", "Largest time lag of the app's partitions", APP, registry=r
        )
        self.consumption_rate = Gauge(
            "floe_consumergroup_consumption_rate", "Records committed per second over the rate window", APP, registry=r
        )
        self.input_rate = Gauge(
            "floe_consumergroup_input_rate",
            "Records appended to the input per second over the rate window",
            APP,
            registry=r,
        )
        self.stale = Gauge("floe_lag_metrics_stale", "1 while the app's lag could not be measured", APP, registry=r)
        self.desired = Gauge(
            "floe_autoscaler_desired_replicas", "Replicas the native autoscaler decided last", APP, registry=r
        )
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
        self._partitions: set[tuple[str, str, str, str]] = set()
        self._apps: set[tuple[str, str]] = set()
        for source in ("kafka", "cassandra", "kubernetes"):
            self.errors.labels(source=source)

    def update(self, scrape: lag.Scrape) -> None:
        self.duration.observe(scrape.duration)
        for source, _ in scrape.errors:
            self.errors.labels(source=source).inc()
        if not scrape.errors:
            self.last_success.set(scrape.at)
        seen_parts: set[tuple[str, str, str, str]] = set()
        seen_apps: set[tuple[str, str]] = set()
        for app in scrape.apps:
            ak = (app.namespace, app.name)
            seen_apps.add(ak)
            self.stale.labels(*ak).set(1 if app.stale else 0)
            if app.stale:
                seen_parts.update(p for p in self._partitions if p[:2] == ak)
                continue
            for p in app.partitions:
                pk = (app.namespace, app.name, p.topic, str(p.partition))
                seen_parts.add(pk)
                self.lag.labels(*pk).set(p.lag)
                self.lag_seconds.labels(*pk).set(p.lag_seconds)
                if p.committed is not None:
                    self.group_offset.labels(*pk).set(p.committed)
                self.latest_offset.labels(*pk).set(p.end)
                for state in lag.STATUSES:
                    self.status.labels(*pk, state).set(1 if state == p.status else 0)
            self.sum_lag.labels(*ak).set(app.total)
            self.max_lag.labels(*ak).set(app.max_lag)
            self.max_lag_seconds.labels(*ak).set(app.max_seconds)
            self.consumption_rate.labels(*ak).set(app.consumption_rate or 0.0)
            self.input_rate.labels(*ak).set(app.input_rate or 0.0)
        for pk in self._partitions - seen_parts:
            self._remove_partition(pk)
        for ak in self._apps - seen_apps:
            for g in (self.sum_lag, self.max_lag, self.max_lag_seconds, self.consumption_rate, self.input_rate):
                _discard(g, ak)
            _discard(self.stale, ak)
            _discard(self.desired, ak)
        self._partitions = seen_parts
        self._apps = seen_apps

    def _remove_partition(self, pk: tuple[str, str, str, str]) -> None:
        for g in (self.lag, self.lag_seconds, self.group_offset, self.latest_offset):
            _discard(g, pk)
        for state in lag.STATUSES:
            _discard(self.status, (*pk, state))

    def record_decision(self, namespace: str, app: str, decision: autoscale.Decision) -> None:
        self.desired.labels(namespace, app).set(decision.replicas)
        self.decisions.labels(namespace, app, decision.action, decision.reason).inc()


def _discard(metric: Gauge, labels: tuple[str, ...]) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
