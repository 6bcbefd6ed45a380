"""Prometheus naming for rates: a gauge that holds a rate says its unit in its name
(`..._records_per_second`); a count is a counter (`_total`) for rate() in PromQL. The rates'
names before they carried a unit are exported for one release, with the same values."""

from __future__ import annotations

from floe_jobs import health
from floe_operator import model
from floe_operator.lag import metrics as lag_metrics
from floe_operator.lag import scrape as lag_scrape
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

RATE_WORDS = ("per second", "/s", "rate")


def _families(registry: CollectorRegistry) -> dict[str, tuple[str, str]]:
    """name → (type, help) of every family the registry describes."""
    return {f.name: (f.type, f.documentation) for f in registry.collect()}


def test_every_gauge_that_holds_a_rate_names_its_unit() -> None:
    registry = CollectorRegistry()
    lag_metrics.LagMetrics(registry)
    families = _families(registry)
    for metric in vars(health).values():
        if isinstance(metric, (Counter, Gauge, Histogram)):
            families[metric._name] = (metric._type, metric._documentation)
    rates = {
        name
        for name, (type_, text) in families.items()
        if type_ == "gauge" and any(w in text.lower() for w in RATE_WORDS)
        and name not in lag_metrics.DEPRECATED_FAMILIES
    }
    assert rates == {
        "floe_consumergroup_consumption_records_per_second",
        "floe_consumergroup_input_records_per_second",
    }
    for name in rates:
        assert name.endswith("_per_second"), name
    assert not [n for n, (t, _) in families.items() if t == "gauge" and n.endswith("_rate")
                and n not in lag_metrics.DEPRECATED_FAMILIES]


def test_the_rates_old_names_are_exported_for_one_release_with_the_same_values() -> None:
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    app = lag_scrape.AppLag("ns", "a", 1000.0, (), end_total=500, committed_total=400, input_rate=5.0,
                            consumption_rate=4.0)
    metrics.update(lag_scrape.Scrape(at=1000.0, duration=0.01, apps=(app,), errors=()))
    labels = {"namespace": "ns", "app": "a"}
    get = registry.get_sample_value
    for old, new in lag_metrics.DEPRECATED_FAMILIES.items():
        assert get(old, labels) == get(new, labels) is not None
    text = generate_latest(registry).decode()
    assert "# HELP floe_consumergroup_input_rate Deprecated: use floe_consumergroup_input_records_per_second" in text


def _app(name: str, snapshots: dict[str, object] | None, record: dict[str, object]) -> model.StreamingApp:
    spec = {
        "image": "i",
        "job": {"entrypoint": "m:f"},
        "kafka": {"bootstrapServers": "k:9092", "topics": ["in"]},
        "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}},
    }
    if snapshots is not None:
        spec["snapshots"] = snapshots
    return model.StreamingApp.from_body(
        {"metadata": {"name": name, "namespace": "ns", "uid": name}, "spec": spec, "status": {"snapshots": record}}
    )


def test_an_apps_scheduled_snapshots_are_series_from_its_status_and_an_app_without_a_schedule_has_none() -> None:
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    metrics.record_apps([
        _app("failing", {"location": "file:///s", "interval": "1h30m"},
             {"lastSuccessfulTime": "2026-11-29T03:02:00Z", "lastFailed": "failing-20261129-040000"}),
        _app("fresh", {"location": "file:///s", "interval": "6h"}, {}),
        _app("upgrades-only", {"location": "file:///s"}, {}),
        _app("none", None, {}),
    ])
    get = registry.get_sample_value

    def labels(app: str) -> dict[str, str]:
        return {"namespace": "ns", "app": app}

    assert get("floe_app_snapshot_failing", labels("failing")) == 1
    assert get("floe_app_snapshot_interval_seconds", labels("failing")) == 5400
    assert get("floe_app_snapshot_last_success_timestamp_seconds", labels("failing")) == 1795921320
    # a schedule with nothing ended yet: not failing, no success to date
    assert get("floe_app_snapshot_failing", labels("fresh")) == 0
    assert get("floe_app_snapshot_interval_seconds", labels("fresh")) == 21600
    assert get("floe_app_snapshot_last_success_timestamp_seconds", labels("fresh")) is None
    for app in ("upgrades-only", "none"):
        for family in lag_metrics.SNAPSHOT_FAMILIES:
            assert get(family, labels(app)) is None, (app, family)
    # an app gone loses its series
    metrics.record_apps([])
    assert get("floe_app_snapshot_failing", labels("failing")) is None
