"""Small helpers the operator's integration tests use to drive the real API server through kubectl."""

from __future__ import annotations

import json
import subprocess
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class Kubectl:
    def __init__(self, binary: str, kubeconfig: str) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl; `timeout` must exceed any `--timeout` passed to kubectl itself."""
        proc = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def apply(self, obj: dict[str, Any]) -> None:
        self.run("apply", "--server-side", "--field-manager=floe-tests", "-f", "-", stdin=yaml.safe_dump(obj))

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        proc = self.run("get", kind, name, "-n", namespace, "-o", "json", "--ignore-not-found", "--show-managed-fields")
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def list(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.run(*args).stdout)["items"])


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
