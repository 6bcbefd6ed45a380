"""The one place `kubectl floe` talks to the API server: the user's own `kubectl`, as a subprocess.

Going through kubectl rather than a client library means the plugin works wherever the user's
kubectl works (any kubeconfig, context, exec credential plugin, proxy or certificate) and needs
nothing of its own: `--kubeconfig`, `--context` and `-n` are handed through unchanged, and
KUBECONFIG is inherited. The binary is `kubectl` on PATH, as kubectl's plugin discovery found
this plugin there; `KUBECTL` names another one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class KubectlError(RuntimeError):
    """kubectl failed; the message is its own (what the API server said)."""


@dataclass(frozen=True)
class Target:
    """Where to talk to: what the user passed as kubectl's global flags (None: kubectl's default)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None

    def flags(self, *, namespaced: bool = True) -> list[str]:
        out = []
        if self.kubeconfig:
            out += ["--kubeconfig", self.kubeconfig]
        if self.context:
            out += ["--context", self.context]
        if namespaced and self.namespace:
            out += ["--namespace", self.namespace]
        return out


def binary() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not found:
        raise KubectlError("kubectl was not found on PATH (kubectl floe runs the user's kubectl); install it")
    return found


class Kubectl:
    def __init__(self, target: Target, *, timeout: float = 120.0) -> None:
        self.target = target
        self.timeout = timeout
        self.binary = binary()

    def argv(self, *args: str) -> list[str]:
        return [self.binary, *self.target.flags(), *args]

    def run(self, *args: str, stdin: str | None = None) -> str:
        """kubectl's stdout; KubectlError with its stderr when it fails."""
        try:
            proc = subprocess.run(
                self.argv(*args), input=stdin, capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"kubectl {' '.join(args[:2])} did not answer within {self.timeout:.0f} s") from exc
        if proc.returncode != 0:
            raise KubectlError(proc.stderr.strip() or f"kubectl {' '.join(args[:2])} exited {proc.returncode}")
        return proc.stdout

    def json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self.run(*args, "-o", "json", stdin=stdin))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """One object, or None when it does not exist."""
        out = self.run("get", kind, name, "--ignore-not-found", "-o", "json")
        return json.loads(out) if out.strip() else None

    def list(self, kind: str, selector: str) -> list[dict[str, Any]]:
        return list(self.json("get", kind, "-l", selector).get("items") or [])

    def patch(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): keys set to None are removed."""
        return dict(self.json("patch", kind, name, "--type", "merge", "-p", json.dumps(body)))

    def stream(self, args: Sequence[str]) -> int:
        """Run kubectl with this terminal (logs -f): its output goes straight to the user."""
        return subprocess.call(self.argv(*args))
