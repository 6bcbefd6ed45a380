"""The Grafana dashboard is valid JSON whose queries use metrics Floe exports.

Runtime and store metrics must be defined in jobs/ or operator/ today. The lag metrics are
specified by name (floe_consumergroup_lag, floe_consumergroup_lag_seconds,
floe_lag_scrape_errors_total); once the operator defines any floe_consumergroup_ metric,
every lag metric the dashboard uses must be defined too.
"""

from __future__ import annotations

import json
import re
from typing import Any

import chartkit

DASHBOARD = chartkit.CHART / "dashboards" / "floe.json"
LAG_CONTRACT = {"floe_consumergroup_lag", "floe_consumergroup_lag_seconds", "floe_lag_scrape_errors"}
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
            for m in re.finditer(r"(?:Counter|Gauge|Histogram|Summary)\(\s*\"(floe_[a-z0-9_]+)\"", path.read_text()):
                names.add(_base(m.group(1)))
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
            if "floe_operator_" in t["expr"] or "floe_lag_scrape_errors" in t["expr"]:
                continue  # operator-wide series
            assert 'app=~"$app"' in t["expr"], f"{p['title']}: {t['expr']}"


def test_dashboard_uses_only_metrics_floe_exports() -> None:
    dash = json.loads(DASHBOARD.read_text())
    used = _used_metrics(dash)
    defined = _defined_metrics()
    assert defined, "no floe_ metric found in jobs/ or operator/"
    unknown = used - defined - LAG_CONTRACT
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"
    if any(n.startswith("floe_consumergroup_") for n in defined):
        missing = (used & LAG_CONTRACT) - defined
        assert not missing, f"the operator exports lag metrics, but not these the dashboard uses: {sorted(missing)}"


def test_dashboards_doc_lists_every_metric_the_dashboard_uses() -> None:
    doc = (chartkit.ROOT / "docs" / "dashboards.md").read_text()
    for name in _used_metrics(json.loads(DASHBOARD.read_text())):
        assert name in doc, f"docs/dashboards.md does not mention {name}"
