"""values.schema.json rejects values of the wrong type, naming the key, before anything renders."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from . import chartkit

BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("replicas as text", {"replicaCount": "two"}, "replicaCount"),
    ("negative replicas", {"replicaCount": -1}, "replicaCount"),
    ("crds.enabled as text", {"crds": {"enabled": "yes"}}, "crds"),
    ("crds.keep as number", {"crds": {"keep": 1}}, "crds"),
    ("watchNamespaces as one string", {"operator": {"watchNamespaces": "team-a"}}, "watchNamespaces"),
    ("watchNamespaces with an invalid name", {"operator": {"watchNamespaces": ["Team_A"]}}, "watchNamespaces"),
    ("unknown log level", {"operator": {"logLevel": "verbose"}}, "logLevel"),
    ("unknown log format", {"operator": {"logFormat": "logfmt"}}, "logFormat"),
    ("checkKafka as text", {"operator": {"checkKafka": "no"}}, "checkKafka"),
    ("port out of range", {"operator": {"metricsPort": 70000}}, "metricsPort"),
    ("unknown pull policy", {"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ("malformed digest", {"image": {"digest": "latest"}}, "digest"),
    ("peering as text", {"peering": {"enabled": "true"}}, "peering"),
    ("leader election as text", {"leaderElection": {"enabled": "yes"}}, "leaderElection"),
    ("lease duration zero", {"leaderElection": {"leaseDurationSeconds": 0}}, "leaseDurationSeconds"),
    ("scrape interval as number", {"serviceMonitor": {"interval": 30}}, "interval"),
    ("dashboard labels with a number", {"grafanaDashboard": {"labels": {"grafana_dashboard": 1}}}, "grafana_dashboard"),
    ("rbac flag as text", {"rbac": {"sparkOnKubernetes": "on"}}, "sparkOnKubernetes"),
    ("misspelt top-level key", {"replicas": 2}, "replicas"),
    ("misspelt nested key", {"operator": {"watchNamespace": ["a"]}}, "watchNamespace"),
    ("unknown update strategy", {"updateStrategy": {"type": "BlueGreen"}}, "type"),
]


@pytest.mark.helm
@pytest.mark.parametrize(("case", "values", "key"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_wrong_values_are_rejected_naming_the_key(
    render: chartkit.Render, case: str, values: dict[str, Any], key: str
) -> None:
    with pytest.raises(chartkit.RenderError) as err:
        render(values)
    message = str(err.value)
    assert "values don't meet the specifications of the schema" in message, message
    assert re.search(rf"\b{re.escape(key)}\b", message), f"{case}: {message}"


def _schema_paths(schema: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = (*prefix, name)
        paths.add(path)
        paths |= _schema_paths(sub, path)
    return paths


def _value_paths(values: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    paths: set[tuple[str, ...]] = set()
    if isinstance(values, dict):
        for name, sub in values.items():
            path = (*prefix, name)
            paths.add(path)
            paths |= _value_paths(sub, path)
    return paths


def test_every_default_value_is_declared_in_the_schema() -> None:
    schema = json.loads((chartkit.CHART / "values.schema.json").read_text())
    values = yaml.safe_load((chartkit.CHART / "values.yaml").read_text())
    declared = _schema_paths(schema)
    top = {p for p in _value_paths(values) if len(p) == 1}
    assert top <= declared, top - declared
    # Every key the schema declares has a description.
    for path in declared:
        node: dict[str, Any] = schema
        for part in path:
            node = node["properties"][part]
        assert node.get("description"), f"{'.'.join(path)} has no description in values.schema.json"


def test_every_key_of_values_yaml_has_a_comment() -> None:
    schema = json.loads((chartkit.CHART / "values.schema.json").read_text())
    declared = _schema_paths(schema)
    lines = (chartkit.CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z0-9_.-]+):", line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        path = tuple(k for _, k in stack)
        if path not in declared:
            continue  # free-form content, e.g. inside securityContext
        above = lines[i - 1].strip() if i else ""
        # A map of settings may be introduced by its children's comments alone.
        is_group = i + 1 < len(lines) and lines[i + 1].strip().startswith("#") and line.rstrip().endswith(":")
        if not above.startswith("#") and not is_group:
            missing.append(".".join(path))
    assert not missing, f"keys without a comment in values.yaml: {missing}"


def test_docs_list_every_value() -> None:
    schema = json.loads((chartkit.CHART / "values.schema.json").read_text())
    values = yaml.safe_load((chartkit.CHART / "values.yaml").read_text())
    doc = (chartkit.ROOT / "docs" / "chart.md").read_text()
    missing = []
    for path in _value_paths(values):
        node: dict[str, Any] = schema
        for part in path:
            node = (node.get("properties") or {}).get(part) or {}
        if not node or node.get("properties"):
            continue  # free-form content, or a group whose keys are listed one by one
        if f"`{'.'.join(path)}`" not in doc:
            missing.append(".".join(path))
    assert not missing, f"docs/chart.md does not list: {missing}"
