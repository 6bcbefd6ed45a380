"""Helpers of the chart tests: render charts/floe with helm, pick objects by kind."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "floe"
RELEASE = "floe"
NAMESPACE = "floe-system"

Render = Callable[..., list[dict[str, Any]]]


class RenderError(Exception):
    """helm template failed; the message is helm's stderr."""


def helm_template(
    helm: str, values: Mapping[str, Any] | None, tmp_path: Path, *, release: str = RELEASE
) -> list[dict[str, Any]]:
    args = [helm, "template", release, str(CHART), "--namespace", NAMESPACE]
    if values:
        path = tmp_path / f"values-{abs(hash(yaml.safe_dump(dict(values))))}.yaml"
        path.write_text(yaml.safe_dump(dict(values)))
        args += ["--values", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
