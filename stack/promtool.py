"""promtool, Prometheus's own rule tester, built with `go install` from the Go module proxy: the
chart's alert rules are evaluated by Prometheus's rule engine in the tests, not by a copy of it."""

from __future__ import annotations

from floe_stack import artifacts, component
from floe_stack.layout import PROMETHEUS_MODULE_VERSION, Layout


class Promtool:
    name = "promtool"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout

    def install(self) -> None:
        artifacts.go_install(
            self.layout,
            package="github.com/prometheus/prometheus/cmd/promtool",
            version=PROMETHEUS_MODULE_VERSION,
            binary="promtool",
        )

    def start(self) -> None:
        """promtool is a client: nothing to run."""

    def wait_ready(self, timeout: float) -> None:
        if not (self.layout.bin / "promtool").exists():
            raise component.StackError("promtool is not installed; run `make up`")

    def env(self) -> dict[str, str]:
        return {"FLOE_PROMTOOL": str(self.layout.bin / "promtool")}

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        return f"promtool (Prometheus module v{PROMETHEUS_MODULE_VERSION}) at {self.layout.bin / 'promtool'}"
