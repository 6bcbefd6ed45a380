"""Golden files: the exact objects and job configuration rendered for each example app.

The children are rendered as a reconcile renders them (`desired.desired`), the autoscaler's
among them, with every optional CRD present and the input partitions of `FACTS`.

Regenerate after an intended change with `FLOE_UPDATE_GOLDEN=1 pytest tests/unit/operator`
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from floe_operator import desired, model, render

from .conftest import CASES, load_case

GOLDEN = Path(__file__).parent / "golden"
NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))
# Fewer partitions than the HPA case's maxReplicas, so its cap shows.
FACTS = desired.Facts(service_monitor_crd=True, keda_crd=True, partitions=6)
# Kinds kubernetes-validate does not know; test_lag_scalers checks KEDA's against its CRDs.
CUSTOM_KINDS = ("ServiceMonitor", "ScaledObject", "TriggerAuthentication")


def rendered(name: str) -> dict[str, Any]:
    app = model.StreamingApp.from_body(load_case(name))
    return {
        "jobConfig": render.job_config(app),
        "process": dict(render.process(app)),
        "children": desired.desired(app, FACTS),
    }


@pytest.mark.parametrize("name", NAMES)
def test_matches_golden(name: str) -> None:
    actual = yaml.safe_dump(rendered(name), sort_keys=True, default_flow_style=False)
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("FLOE_UPDATE_GOLDEN") == "1":
        path.write_text(actual)
    assert path.exists(), f"no golden file for {name}; run with FLOE_UPDATE_GOLDEN=1"
    assert actual == path.read_text(), f"{name} renders differently from {path}"


@pytest.mark.parametrize("name", NAMES)
def test_children_are_valid_kubernetes_objects(name: str) -> None:
    for obj in rendered(name)["children"]:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, "1.34", strict=True)


def test_there_are_many_cases() -> None:
    assert len(NAMES) >= 8


def test_the_autoscalers_children_are_pinned() -> None:
    kinds = {obj["kind"] for name in NAMES for obj in rendered(name)["children"]}
    assert {"HorizontalPodAutoscaler", "ScaledObject", "TriggerAuthentication"} <= kinds
