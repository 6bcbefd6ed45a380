"""Fixtures of the monitoring tests: the local stack's Prometheus, the chart's alert rules loaded
into it with short `for` windows, and target files for what a test runs.

The rules are the chart's own expressions, rendered by `helm template` (floe_stack.alertrules);
only the values a user would set differ (`for` durations, the lag threshold), and each group is
evaluated every 2 s instead of Prometheus's default minute, so an alert's life fits in a test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import yaml
from floe_stack import alertrules, prometheus

from .promapi import PromAPI

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "floe"
FOR = "4s"
LAG_SECONDS_THRESHOLD = 30
RULE_VALUES = {
    "lagSecondsThreshold": str(LAG_SECONDS_THRESHOLD),
    "lagFor": FOR,
    "stallFor": FOR,
    "degradedFor": FOR,
    "notReadyFor": FOR,
    "staleFor": FOR,
    "operatorDownFor": FOR,
    "snapshotFailedFor": FOR,
    "snapshotOverdueFor": FOR,
}


@pytest.fixture(scope="session")
def prom(stack_env: dict[str, str]) -> PromAPI:
    return PromAPI(stack_env["FLOE_PROMETHEUS_URL"])


def load_rules(env: Mapping[str, str], helm: str, prom: PromAPI) -> Callable[[], None]:
    """Load the chart's rules, rendered with RULE_VALUES, into Prometheus (in place of any a
    stopped run left); returns what unloads them."""
    rules = alertrules.render(helm, CHART, values=RULE_VALUES)
    for group in rules["groups"]:
        group["interval"] = "2s"
    where = Path(env["FLOE_PROMETHEUS_RULES"])
    for old in where.glob("chart-*.yml"):
        old.unlink()
    path = where / f"chart-{os.getpid()}.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    prom.reload()
    loaded = {r["name"] for g in prom.rule_groups() for r in g["rules"]}
    wanted = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert wanted <= loaded, f"Prometheus did not load {sorted(wanted - loaded)} from {path}"

    def unload() -> None:
        path.unlink(missing_ok=True)
        prom.reload()

    return unload


class Targets:
    """Target files of one test module, removed when it ends."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.operator_dir = Path(env["FLOE_PROMETHEUS_OPERATOR_TARGETS"])
        self.apps_dir = Path(env["FLOE_PROMETHEUS_APP_TARGETS"])
        self.files: list[Path] = []

    def operator(self, name: str, port: int) -> None:
        self.files.append(prometheus.write_targets(self.operator_dir, name, [f"127.0.0.1:{port}"], {}))

    def replica(self, name: str, port: int, *, namespace: str, service: str) -> None:
        """A replica, labelled as the app's ServiceMonitor labels its pods' targets."""
        labels = {"namespace": namespace, "service": service, "pod": name}
        self.files.append(prometheus.write_targets(self.apps_dir, name, [f"127.0.0.1:{port}"], labels))

    def remove(self) -> None:
        for f in self.files:
            f.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def targets(stack_env: dict[str, str]) -> Iterator[Targets]:
    t = Targets(stack_env)
    yield t
    t.remove()
