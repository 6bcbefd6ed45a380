"""Test helpers that read the CRD: its schema, and its defaults applied as the API server would."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "streamingapp.yaml"


@functools.cache
def _parsed() -> dict[str, Any]:
    """The CRD, parsed once per test process: its YAML (CEL rules and descriptions for every field)
    took about 0.3 s of CPU to parse, and tests that build an app body defaulted it for each one."""
    return dict(yaml.load(CRD_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def crd() -> dict[str, Any]:
    """The CRD, a copy of its own for the caller to change."""
    return copy.deepcopy(_parsed())


def _schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def schema() -> dict[str, Any]:
    return _schema_of(crd())


def apply_defaults(node: dict[str, Any], value: Any) -> Any:
    """Structural defaulting: fill absent properties that have a default, then recurse."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in node:
        for name, sub in node["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    elif isinstance(value, list) and "items" in node:
        value = [apply_defaults(node["items"], v) for v in value]
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        value = {k: apply_defaults(node["additionalProperties"], v) for k, v in value.items()}
    return value


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the API server stores it after defaulting."""
    return apply_defaults(_schema_of(_parsed()), obj)  # the parsed schema is read, never changed
