"""The Argo CD health check of StreamingApp, run by a real Lua runtime over its test cases.

The cases live in Argo CD's layout (charts/floe/argocd/health_test.yaml naming
testdata/*.yaml with the expected status and message), so the same files can be dropped
into Argo CD's resource_customizations tree and checked there too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from . import chartkit

ARGOCD = chartkit.CHART / "argocd"
CASES = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]
STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

try:
    import lupa.lua54 as lupa_runtime
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "the Argo CD health check tests run the Lua script with lupa; install the dev extras "
        "(pip install lupa) to run them"
    ) from exc


def run_health(obj: dict[str, Any], where: Path = ARGOCD) -> dict[str, Any]:
    lua = lupa_runtime.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    script = (where / "health.lua").read_text()
    # Argo CD runs the script as a chunk whose return value is the health table.
    result = lua.execute(script)
    return {"status": result["status"], "message": result["message"]}


@pytest.mark.parametrize("case", CASES, ids=[Path(c["inputPath"]).stem for c in CASES])
def test_health_case(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
    assert obj["kind"] == "StreamingApp"
    assert case["healthStatus"]["status"] in STATUSES
    assert run_health(obj) == case["healthStatus"]


def test_cases_cover_every_status_floe_reports() -> None:
    assert {c["healthStatus"]["status"] for c in CASES} == {"Healthy", "Progressing", "Degraded", "Suspended"}
    listed = {Path(c["inputPath"]).name for c in CASES}
    assert listed == {p.name for p in (ARGOCD / "testdata").glob("*.yaml")}


def test_case_conditions_use_the_operators_reasons() -> None:
    source = (chartkit.ROOT / "operator" / "conditions.py").read_text()
    for case in CASES:
        obj = yaml.safe_load((ARGOCD / case["inputPath"]).read_text())
        for cond in (obj.get("status") or {}).get("conditions") or []:
            assert f'"{cond["type"]}"' in source, cond["type"]
            assert f'"{cond["reason"]}"' in source, f"{case['inputPath']}: reason {cond['reason']} unknown"


def test_script_uses_no_library_argo_cd_withholds() -> None:
    script = (ARGOCD / "health.lua").read_text()
    for forbidden in ("os.", "io.", "require", "dofile", "loadfile"):
        assert forbidden not in script


# --- StreamingAppSnapshot: charts/floe/argocd/snapshot, in the same layout ----------------------

SNAPSHOT = ARGOCD / "snapshot"
SNAPSHOT_CASES = yaml.safe_load((SNAPSHOT / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", SNAPSHOT_CASES, ids=[Path(c["inputPath"]).stem for c in SNAPSHOT_CASES])
def test_snapshot_health_case(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((SNAPSHOT / case["inputPath"]).read_text())
    assert obj["kind"] == "StreamingAppSnapshot"
    assert run_health(obj, SNAPSHOT) == case["healthStatus"]


def test_snapshot_cases_cover_every_phase_and_use_the_operators_reasons() -> None:
    from floe_operator import snapshotjob

    assert {c["healthStatus"]["status"] for c in SNAPSHOT_CASES} == {"Healthy", "Progressing", "Degraded"}
    listed = {Path(c["inputPath"]).name for c in SNAPSHOT_CASES}
    assert listed == {p.name for p in (SNAPSHOT / "testdata").glob("*.yaml")}
    phases = set()
    reasons = {value for name, value in vars(snapshotjob).items() if name.isupper() and isinstance(value, str)}
    for case in SNAPSHOT_CASES:
        status = yaml.safe_load((SNAPSHOT / case["inputPath"]).read_text()).get("status") or {}
        phases.add(status.get("phase"))
        for cond in status.get("conditions") or []:
            assert cond["type"] in (snapshotjob.READY, snapshotjob.FAILED_CONDITION)
            assert cond["reason"] in reasons, cond["reason"]
    assert phases == {None, *snapshotjob.TERMINAL, snapshotjob.PENDING, snapshotjob.RUNNING}
    script = (SNAPSHOT / "health.lua").read_text()
    assert not any(forbidden in script for forbidden in ("os.", "io.", "require", "dofile", "loadfile"))
