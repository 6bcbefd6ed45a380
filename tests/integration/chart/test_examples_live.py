"""Every example StreamingApp is accepted by the CRD's schema and CEL rules on the API server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from .livekit import ROOT, Run

pytestmark = pytest.mark.k8s

EXAMPLES = sorted((ROOT / "examples").glob("*/streamingapp.yaml"))


@pytest.fixture
def crd_installed(kubectl: str, run: Run) -> None:
    """The CRD as crds/streamingapp.yaml has it, established."""
    run(kubectl, "apply", "-f", str(ROOT / "crds" / "streamingapp.yaml"))
    run(kubectl, "wait", "--for=condition=Established", "crd/streamingapps.streaming.floe.dev", "--timeout=60s")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_passes_server_side_validation(
    path: Path, kubectl: str, run: Run, namespaces: Callable[[str], str], crd_installed: None
) -> None:
    ns = namespaces("floe-examples")
    proc = run(kubectl, "apply", "--dry-run=server", "-n", ns, "-f", str(path), "-o", "json")
    stored = json.loads(proc.stdout)
    source = yaml.safe_load(path.read_text())
    assert stored["metadata"]["name"] == source["metadata"]["name"] == path.parent.name
    # The defaults the schema fills in are there, and nothing the manifest set was dropped.
    spec = stored["spec"]
    assert spec["shutdown"]["leaveGroupOnClose"] is True
    assert spec["state"]["deletionPolicy"] in ("Retain", "Delete")
    assert contains(spec, source["spec"])


def contains(stored: object, given: object) -> bool:
    """Whether everything in `given` is in `stored` (which may hold defaults besides)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in given.items())
    return stored == given
