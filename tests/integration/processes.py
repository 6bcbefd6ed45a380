"""`floe-operator` started as a local process the way the tests run it: its settings from the
environment (none inherited from the test's own), free ports, output into a log file."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from floe_stack.ports import free_port


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start_operator(kubeconfig: str | Path, log: Path, **settings: str) -> OperatorProcess:
    """Run floe-operator logged in with `kubeconfig`; `settings` are its environment variables
    (FLOE_…, POD_…), on top of free metrics and liveness ports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOE_", "POD_"))}
    metrics = free_port()
    env.update(KUBECONFIG=str(kubeconfig), FLOE_METRICS_PORT=str(metrics), FLOE_LIVENESS_PORT=str(free_port()))
    env.update(settings)
    script = Path(sys.executable).parent / "floe-operator"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(script)], env=env, stdout=out, stderr=subprocess.STDOUT)
    return OperatorProcess(proc=proc, log=log, metrics_port=metrics)
