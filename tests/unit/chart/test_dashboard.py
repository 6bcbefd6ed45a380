"""The Grafana dashboard is valid JSON whose queries use only metrics Floe defines.

Metric names are collected from the Counter/Gauge/Histogram definitions in jobs/ and
operator/, and from what the operator's lag exporter registers (its per-partition and per-app
series are built by a collector), so renaming a metric without updating the dashboard fails here.
"""

from __future__ import annotations

import json
import re
from typing import Any

from floe_operator.lag import metrics as lag_metrics
from prometheus_client import CollectorRegistry

from . import chartkit

DASHBOARD = chartkit.CHART / "dashboards" / "floe.json"
DEFINITION = re.compile(r"(?:Counter|Gauge|Histogram|Summary)(?:MetricFamily)?\(\s*\"(floe_[a-z0-9_]+)\"")
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def _base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _defined_metrics() -> set[str]:
    names: set[str] = set()
    for folder in ("jobs", "operator"):
        for path in (chartkit.ROOT / folder).rglob("*.py"):
            for m in DEFINITION.finditer(path.read_text()):
                names.add(_base(m.group(1)))
    registry = CollectorRegistry()
    lag_metrics.LagMetrics(registry)
    names |= {family.name for family in registry.collect()}
    return names


def _used_metrics(dash: dict[str, Any]) -> set[str]:
    used = set()
    for p in _panels(dash):
        for t in p.get("targets", []):
            used |= {_base(n) for n in re.findall(r"\bfloe_[a-z0-9_]+", t["expr"])}
    for v in dash["templating"]["list"]:
        query = v.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        used |= {_base(n) for n in re.findall(r"\bfloe_[a-z0-9_]+", text)}
    return used


def test_dashboard_is_well_formed() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "floe-streamingapps"
    assert dash["title"]
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "namespace", "app"} <= names
    for p in _panels(dash):
        if p["type"] == "row":
            continue
        assert p["title"] and p.get("description"), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert p["targets"], p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert t["expr"].count("{") == t["expr"].count("}"), t["expr"]


def test_panels_filter_on_the_selected_apps() -> None:
    dash = json.loads(DASHBOARD.read_text())
    for p in _panels(dash):
        for t in p.get("targets", []):
            if re.search(r"floe_operator_|floe_lag_scrape_|floe_lag_last_success", t["expr"]):
                continue  # the operator's own series
            # Store metrics carry no app label; the app's Service (named after it) stands in.
            assert re.search(r'(app|service)=~"\$app"', t["expr"]), f"{p['title']}: {t['expr']}"


def test_dashboard_uses_only_metrics_floe_exports() -> None:
    dash = json.loads(DASHBOARD.read_text())
    used = _used_metrics(dash)
    defined = _defined_metrics()
    assert defined, "no floe_ metric found in jobs/ or operator/"
    unknown = used - defined
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"


def test_dashboards_doc_lists_every_metric_the_dashboard_uses() -> None:
    doc = (chartkit.ROOT / "docs" / "dashboards.md").read_text()
    for name in _used_metrics(json.loads(DASHBOARD.read_text())):
        assert name in doc, f"docs/dashboards.md does not mention {name}"
