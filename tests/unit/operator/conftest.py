"""Fixtures for the operator's pure unit tests: example StreamingApps, defaulted by the CRD."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from . import crdtools

CASES = Path(__file__).parent / "cases"


def load_case(name: str) -> dict:
    return crdtools.defaulted(yaml.safe_load((CASES / f"{name}.yaml").read_text()))


@pytest.fixture
def minimal_body() -> dict:
    return load_case("minimal")
