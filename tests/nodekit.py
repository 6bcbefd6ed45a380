"""What the tests on the stack's node (marker ``node``; `make test NODE=0` deselects them) share: kubectl as the
stack's admin, and the node's settings from the stack's env file."""

from __future__ import annotations

import subprocess


def kubectl(env: dict[str, str], *args: str, input: str | None = None, timeout: float = 120) -> str:
    """Run kubectl against the stack's API server as its admin; a failure fails the test with kubectl's words."""
    proc = subprocess.run([env["FLOE_KUBECTL"], f"--kubeconfig={env['KUBECONFIG']}", *args],
                          capture_output=True, text=True, input=input, timeout=timeout)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def require_node(env: dict[str, str]) -> dict[str, str]:
    """The stack's env when it runs the node; fails (never skips) otherwise."""
    if env.get("FLOE_NODE") != "1":
        raise AssertionError("the stack has no node (it was started with NODE=0): run `make down && make up`, "
                             "or deselect these tests with `make test NODE=0`")
    return env
