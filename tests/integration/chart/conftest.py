"""Fixtures of the chart's tests against the local stack's API server: fresh namespaces,
helm and kubectl runs that fail with their output."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests import leftovers

from .livekit import CHART, Run


@pytest.fixture
def run(kubeconfig: str) -> Run:
    """run(*argv, check=True) → the finished process; a failure shows stdout and stderr."""

    def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return _run


@pytest.fixture
def namespaces(kubectl: str, run: Run) -> Iterator[Callable[[str], str]]:
    """new(prefix) → the name of a namespace created for this test, deleted afterwards."""
    created: list[str] = []

    def new(prefix: str) -> str:
        name = leftovers.prefix(f"{prefix}-{uuid.uuid4().hex[:6]}")  # its apps' topics start with it
        run(kubectl, "create", "namespace", name)
        created.append(name)
        return name

    yield new
    for name in created:
        run(kubectl, "delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def install(helm: str, run: Run) -> Iterator[Callable[..., str]]:
    """install(prefix, namespace, *helm_args) → the release, named prefix-<random>; uninstalled afterwards.

    Cluster-scoped objects (ClusterRoles) outlive a deleted namespace, so every release is
    uninstalled even when the test fails.
    """
    installed: list[tuple[str, str]] = []

    def _install(prefix: str, namespace: str, *args: str, before: Callable[[str], None] | None = None) -> str:
        release = f"{prefix}-{uuid.uuid4().hex[:5]}"
        installed.append((release, namespace))
        if before is not None:
            before(release)
        run(helm, "install", release, str(CHART), "--namespace", namespace, *args)
        return release

    yield _install
    for release, namespace in installed:
        run(helm, "uninstall", release, "--namespace", namespace, check=False)
