"""Shared names of the chart's live tests."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "floe"

Run = Callable[..., subprocess.CompletedProcess[str]]
