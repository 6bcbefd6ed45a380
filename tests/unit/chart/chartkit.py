"""Helpers of the chart tests: render charts/floe with helm, pick objects by kind."""

from __future__ import annotations

import copy
import functools
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
    """The chart rendered with `values`, a copy of its own for the caller to change. Renders are
    kept per process: many tests render the same values, and each render is a helm process and
    the CRDs' YAML parsed again."""
    text = yaml.safe_dump(dict(values)) if values else ""
    return copy.deepcopy(_render(helm, text, str(tmp_path.parent), release))


@functools.cache
def _render(helm: str, values: str, tmp_dir: str, release: str) -> list[dict[str, Any]]:
    args = [helm, "template", release, str(CHART), "--namespace", NAMESPACE]
    if values:
        path = Path(tmp_dir) / f"values-{abs(hash(values))}.yaml"
        path.write_text(values)
        args += ["--values", str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RenderError(proc.stderr.strip())
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are most of the text
    return [d for d in yaml.load_all(proc.stdout, Loader=loader) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
