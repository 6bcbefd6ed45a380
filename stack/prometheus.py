"""Prometheus and promtool, built from the Go module proxy, and one Prometheus server on loopback
that scrapes what the tests run: the operator and an app's replicas, as local processes.

The local stack has no Prometheus Operator (and without the node no pods to discover), so the
server finds its targets in files (file-based service discovery): whoever starts an operator or
a replica writes a target file into ``targets/operator`` or ``targets/apps`` under
``.floe/prometheus`` and removes it when done; Prometheus notices within a second. The labels
of a target file are the ones the chart's ServiceMonitors would give (``namespace``,
``service``, ``pod``), and the operator's job is named ``floe``, the chart's fullname for a
release named floe, which is what the chart's ``FloeOperatorDown`` rule looks for.

Rule files dropped into ``.floe/prometheus/rules`` are loaded on ``POST /-/reload``
(``--web.enable-lifecycle``, reachable on loopback only). Prometheus's module versions are
``v0.<major><minor>.<patch>`` (3.16.0 is ``v0.316.0``); the build leaves out every service
discovery but files and HTTP (tag ``remove_all_sd``), which the stack does not use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from floe_stack import artifacts, component, procs
from floe_stack.layout import PROMETHEUS_VERSION, Layout

NAME = "prometheus"
PACKAGE = "github.com/prometheus/prometheus/cmd"
OPERATOR_JOB = "floe"
APPS_JOB = "floe-apps"
SCRAPE_INTERVAL = "2s"


def module_version(version: str = PROMETHEUS_VERSION) -> str:
    """``3.16.0`` → ``0.316.0``: how Prometheus 3.x is tagged as a Go module."""
    major, minor, patch = (int(part) for part in version.split("."))
    return f"0.{major}{minor:02d}.{patch}"


def build(layout: Layout, binary: str) -> Path:
    """Build ``prometheus`` or ``promtool`` into the cache (a no-op when it is there)."""
    v = "github.com/prometheus/common/version"
    return artifacts.go_install(
        layout, package=f"{PACKAGE}/{binary}", version=module_version(), binary=binary, tags="remove_all_sd",
        ldflags=f"-X {v}.Version={PROMETHEUS_VERSION} -X {v}.Branch=release -X {v}.BuildUser=floe-stack",
    )


class Paths:
    """Where the server's configuration, rule files and target files live for one checkout."""

    def __init__(self, layout: Layout) -> None:
        self.root = layout.run / NAME
        self.config = layout.conf("prometheus.yml")
        self.rules = self.root / "rules"
        self.operator_targets = self.root / "targets" / "operator"
        self.app_targets = self.root / "targets" / "apps"
        self.data = layout.data / NAME


def config(paths: Paths) -> dict[str, object]:
    """The server's configuration: two file-discovered jobs and every rule file of ``rules``."""

    def files(where: Path) -> list[dict[str, object]]:
        return [{"files": [str(where / "*.json")], "refresh_interval": "5s"}]

    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(paths.rules / "*.yml")],
        "scrape_configs": [
            # The operator's series carry the app's namespace; keep it (the chart's ServiceMonitor
            # sets honorLabels for the same reason).
            {"job_name": OPERATOR_JOB, "honor_labels": True, "file_sd_configs": files(paths.operator_targets)},
            {"job_name": APPS_JOB, "file_sd_configs": files(paths.app_targets)},
        ],
    }


def write_targets(where: Path, name: str, addresses: list[str], labels: Mapping[str, str]) -> Path:
    """A target file of ``addresses`` (host:port) with ``labels``, replaced atomically so that
    Prometheus never reads half of it."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.json"
    tmp = where / f".{name}.tmp"
    tmp.write_text(json.dumps([{"targets": addresses, "labels": dict(labels)}]))
    tmp.replace(path)
    return path


class Prometheus:
    name = NAME

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout
        self.paths = Paths(layout)
        self.port = book.get("prometheus", 9090, owned_by_us=procs.running_pid(layout, NAME) is not None)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def install(self) -> None:
        build(self.layout, "prometheus")
        build(self.layout, "promtool")

    def start(self) -> None:
        p = self.paths
        for d in (p.rules, p.operator_targets, p.app_targets, p.data, p.config.parent):
            d.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no YAML writer needed.
        p.config.write_text(json.dumps(config(p), indent=2) + "\n")
        if procs.running_pid(self.layout, NAME):
            return
        procs.start(self.layout, NAME, [
            str(self.layout.bin / "prometheus"), f"--config.file={p.config}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
            f"--storage.tsdb.path={p.data}", "--storage.tsdb.retention.time=1d", "--log.level=warn",
        ], marker=f"--web.listen-address=127.0.0.1:{self.port}")

    def _ready(self) -> bool:
        return component.answers(f"{self.url}/-/ready")

    def wait_ready(self, timeout: float) -> None:
        component.wait_until(self._ready, what=NAME, timeout=timeout, alive=component.alive(self.layout, NAME),
                             log=str(self.layout.log(NAME)))

    def env(self) -> dict[str, str]:
        p = self.paths
        return {
            "FLOE_PROMETHEUS_URL": self.url,
            "FLOE_PROMETHEUS_VERSION": PROMETHEUS_VERSION,
            "FLOE_PROMETHEUS_RULES": str(p.rules),
            "FLOE_PROMETHEUS_OPERATOR_TARGETS": str(p.operator_targets),
            "FLOE_PROMETHEUS_APP_TARGETS": str(p.app_targets),
            "FLOE_PROMTOOL": str(self.layout.bin / "promtool"),
        }

    def processes(self) -> list[str]:
        return [NAME]

    def describe(self) -> str:
        return (f"Prometheus {PROMETHEUS_VERSION}: {self.url} (targets and rules from files under "
                f"{self.paths.root})")
