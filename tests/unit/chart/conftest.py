"""Fixtures of the chart's offline tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from . import chartkit


@pytest.fixture
def render(helm: str, tmp_path: Path) -> chartkit.Render:
    """render(values=None, release=...) → the rendered objects; chartkit.RenderError on failure."""

    def _render(values: Mapping[str, Any] | None = None, *, release: str = chartkit.RELEASE) -> list[dict[str, Any]]:
        return chartkit.helm_template(helm, values, tmp_path, release=release)

    return _render
