"""The StreamingAppSnapshot CRD: documented and structural everywhere, and agreeing with the
typed model the operator reads it through (same fields, same defaults)."""

from __future__ import annotations

from typing import Any

import yaml
from floe_operator import model

from . import crdtools
from .test_model import _walk

CRD = crdtools.ROOT / "crds" / "streamingappsnapshot.yaml"


def _schema() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _nodes(node["additionalProperties"], f"{path}{{}}")
    return out


def test_every_field_is_described_and_typed() -> None:
    nodes = _nodes(_schema())
    undescribed = [p for p, n in nodes if p.count(".") >= 1 and not p.endswith(("{}", "[]", ".metadata"))
                   and not n.get("description")]
    assert undescribed == []
    assert [p for p, n in nodes if "type" not in n] == []


def test_model_fields_and_defaults_match_the_crd() -> None:
    problems: list[str] = []
    _walk(_schema()["properties"]["spec"], model.SnapshotSpec, "spec", problems)
    assert problems == []
    required = {"app": "wc", "location": "file:///snapshots/wc/1", "volume": {"claimName": "backups"}}
    defaulted = crdtools.apply_defaults(_schema()["properties"]["spec"], required)
    assert model.SnapshotSpec.model_validate(defaulted) == model.SnapshotSpec.model_validate(required)


def test_names_and_columns() -> None:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["names"]["kind"] == model.SNAPSHOT_KIND
    assert crd["spec"]["names"]["plural"] == model.SNAPSHOT_PLURAL
    assert crd["spec"]["names"]["shortNames"] == ["sas", "floesnap"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["App", "Phase", "Size", "Duration", "Age"]
