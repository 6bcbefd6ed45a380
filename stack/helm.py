"""Helm 3, built with `go install` from the Go module proxy (its go.mod has no replace lines)."""

from __future__ import annotations

from floe_stack import artifacts, component
from floe_stack.layout import HELM_VERSION, Layout


def build(layout: Layout) -> None:
    """Build helm into the cache (a no-op when it is there)."""
    # Without the version stamped in, `helm version` reports only the minor release.
    artifacts.go_install(
        layout, package="helm.sh/helm/v3/cmd/helm", version=HELM_VERSION, binary="helm",
        ldflags=f"-X helm.sh/helm/v3/internal/version.version=v{HELM_VERSION}",
    )


class Helm:
    name = "helm"

    def __init__(self, layout: Layout, book: component.PortBook) -> None:
        self.layout = layout

    def install(self) -> None:
        build(self.layout)

    def start(self) -> None:
        """Helm is a client: nothing to run."""

    def wait_ready(self, timeout: float) -> None:
        if not (self.layout.bin / "helm").exists():
            raise component.StackError("helm is not installed; run `make up`")

    def env(self) -> dict[str, str]:
        return {"FLOE_HELM": str(self.layout.bin / "helm"), "FLOE_HELM_VERSION": HELM_VERSION}

    def processes(self) -> list[str]:
        return []

    def describe(self) -> str:
        return f"Helm {HELM_VERSION} at {self.layout.bin / 'helm'}"
