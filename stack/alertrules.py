"""The chart's alert rules as a Prometheus rule file, and `promtool check rules` over them.

The PrometheusRule in the chart is a Helm template; Prometheus reads plain rule files. Rendering
the template with `helm template` and taking its `spec` gives the rule file Prometheus Operator
would hand its Prometheus, so `make lint` and the alert tests check the chart's own expressions,
with whatever values (thresholds, `for` durations) they pass.

`python -m floe_stack.alertrules` (part of `make lint`) builds helm and promtool when they are
not in the cache yet, so it works on a fresh machine.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from floe_stack import helm, prometheus
from floe_stack.layout import HELM_VERSION, PROMETHEUS_VERSION, Layout

RELEASE = "floe"  # the release name the local stack's Prometheus job is named after
TEMPLATE = "templates/prometheusrule.yaml"


class RulesError(RuntimeError):
    """The chart's rules could not be rendered or do not pass promtool; the message says which."""


def render(helm_bin: Path | str, chart: Path, *, values: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The rule file (``{"groups": [...]}``) of the chart's PrometheusRule, rendered with ``values``
    (``--set`` keys under ``prometheusRule``, e.g. ``{"lagFor": "10s"}``)."""
    sets = ["prometheusRule.enabled=true", *(f"prometheusRule.{k}={v}" for k, v in (values or {}).items())]
    argv = [str(helm_bin), "template", RELEASE, str(chart), "--show-only", TEMPLATE]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RulesError(f"helm template of {chart / TEMPLATE} failed: {proc.stderr.strip()}")
    doc = yaml.safe_load(proc.stdout)
    if not isinstance(doc, dict) or doc.get("kind") != "PrometheusRule":
        raise RulesError(f"{chart / TEMPLATE} did not render a PrometheusRule")
    return {"groups": doc["spec"]["groups"]}


def check(promtool: Path | str, rules: Mapping[str, Any]) -> str:
    """Run `promtool check rules` on ``rules``; its report, or RulesError with it."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="floe-rules-") as f:
        yaml.safe_dump(dict(rules), f, sort_keys=False)
        f.flush()
        proc = subprocess.run([str(promtool), "check", "rules", f.name], capture_output=True, text=True)
    report = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise RulesError(f"promtool check rules refused the chart's rules ({TEMPLATE}):\n{report}")
    return report


def main() -> int:
    layout = Layout.discover()
    try:
        helm.build(layout)
        promtool = prometheus.build(layout, "promtool")
        rules = render(layout.bin / "helm", layout.root / "charts" / "floe")
        report = check(promtool, rules)
    except Exception as exc:
        print(f"alertrules: {exc}", file=sys.stderr)
        return 1
    names = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
    print(f"alertrules: promtool (Prometheus {PROMETHEUS_VERSION}) accepts the chart's "
          f"{len(names)} alerts, rendered by helm {HELM_VERSION}: {report.splitlines()[-1].strip() if report else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
