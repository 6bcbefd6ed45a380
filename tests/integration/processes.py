"""`floe-operator` started as a local process the way the tests run it: its settings from the
environment (none inherited from the test's own), free ports, output into a log file."""

from __future__ import annotations

import os
import signal
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


class RestartableOperator:
    """`floe-operator` watching one namespace, which a test SIGKILLs and starts again as often as
    it wants; each start logs to a file of its own under `logs` (`text` reads them in order)."""

    def __init__(self, kubeconfig: str | Path, namespace: str, logs: Path, **settings: str) -> None:
        self.kubeconfig, self.namespace, self.logs = kubeconfig, namespace, logs
        self.settings = {"FLOE_WATCH_NAMESPACES": namespace, "FLOE_RESYNC_SECONDS": "2",
                         "FLOE_LAG_INTERVAL_SECONDS": "0", **settings}
        self.run: OperatorProcess | None = None
        self.starts = 0

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        self.run = start_operator(self.kubeconfig, self.logs / f"operator-{self.starts}.log", **self.settings)

    def running(self) -> bool:
        return self.run is not None and self.run.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a node loses a process: nothing of the operator's own shutdown runs."""
        assert self.run is not None
        self.run.proc.send_signal(signal.SIGKILL)
        self.run.proc.wait()

    def stop(self) -> None:
        """SIGTERM, and SIGKILL after 30 s."""
        if not self.running():
            return
        assert self.run is not None
        self.run.proc.send_signal(signal.SIGTERM)
        try:
            self.run.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def text(self) -> str:
        """Every start's log, in the order they started, each under a line naming the start."""
        parts = []
        for n in range(1, self.starts + 1):
            log = self.logs / f"operator-{n}.log"
            if log.exists():
                parts.append(f"==== start {n}\n" + log.read_text(errors="replace"))
        return "".join(parts)
