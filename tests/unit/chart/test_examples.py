"""The example StreamingApps point at job code that exists and opens the stores they declare."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from . import chartkit

EXAMPLES = sorted((chartkit.ROOT / "examples").glob("*/streamingapp.yaml"))


def test_there_are_three_examples() -> None:
    assert {p.parent.name for p in EXAMPLES} == {"word-count", "order-locations", "dedup"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_entrypoint_and_stores_match_the_job_code(path: Path) -> None:
    spec = yaml.safe_load(path.read_text())["spec"]
    entrypoint = chartkit.ROOT / spec["job"]["entrypoint"]
    assert entrypoint.is_file(), f"{path}: entrypoint {entrypoint} does not exist"
    code = entrypoint.read_text()
    for store in spec["state"]["stores"]:
        assert f'"{store["name"]}"' in code, f"{path}: the job never opens store {store['name']!r}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_readme_shows_kubectl_get_output(path: Path) -> None:
    readme = (path.parent / "README.md").read_text()
    assert "kubectl get streamingapps" in readme
    assert "NAME" in readme and "READY" in readme and "REPLICAS" in readme and "LAG" in readme
