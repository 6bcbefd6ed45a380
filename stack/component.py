"""What every stack component provides, and the port book that keeps ports stable.

A component installs itself into the cache, starts its processes (only those not already
running), waits until it answers, and contributes lines to the stack's env file.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from floe_stack import ports, procs
from floe_stack.layout import Layout


class Component(Protocol):
    """One part of the stack (a service or a set of files)."""

    name: str

    def install(self) -> None:
        """Fetch or build into the cache (a no-op when the cache is warm)."""

    def start(self) -> None:
        """Start this component's processes that are not running."""

    def wait_ready(self, timeout: float) -> None:
        """Return when the component answers; raise StackError otherwise."""

    def env(self) -> dict[str, str]:
        """Lines for the env file."""

    def processes(self) -> list[str]:
        """Names of this component's pid files."""

    def describe(self) -> str:
        """Where it listens, for people."""


class StackError(RuntimeError):
    """The stack could not be brought up; the message says what and where to look."""


@dataclass
class PortBook:
    """Ports chosen for this checkout, remembered in ``.floe/ports.json``.

    The default port is used when free; a port held by another program is reported with
    its holder and replaced by a free one, which the env file then carries.
    """

    layout: Layout
    chosen: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, layout: Layout) -> PortBook:
        path = layout.run / "ports.json"
        chosen = json.loads(path.read_text()) if path.exists() else {}
        return cls(layout=layout, chosen=chosen)

    def save(self) -> None:
        path = self.layout.run / "ports.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.chosen, indent=2, sort_keys=True) + "\n")

    def get(self, key: str, default: int, *, owned_by_us: bool) -> int:
        """The port for ``key``; ``owned_by_us`` says the owning process is ours and running,
        so a busy remembered port is in use by the stack itself."""
        port = self.chosen.get(key, default)
        if owned_by_us or ports.is_free(port):
            self.chosen[key] = port
            return port
        if port != default and ports.is_free(default):
            self.chosen[key] = default
            return default
        new = ports.free_port()
        self.notes.append(f"port {port} for {key} is held by {ports.holder(port)}; using {new} instead")
        self.chosen[key] = new
        return new


def answers(url: str, *, context: ssl.SSLContext | None = None) -> bool:
    """Whether a health or readiness endpoint answers 200 now (anything else, or no answer
    within 2 s, is "not yet")."""
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def wait_until(
    check: Callable[[], bool],
    *,
    what: str,
    timeout: float,
    alive: Callable[[], bool],
    log: str,
) -> None:
    """Poll ``check`` until it is true; fail fast if the process died, with its log's tail.

    A process is taken for dead when two looks a second apart miss it: one look can miss a
    live process (a launcher re-executing itself, /proc read while the machine is loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not alive() and not _alive_after_a_second(alive):
            raise StackError(f"{what} exited during start-up; its log: {log}\n{tail(log)}")
        time.sleep(0.5)
    raise StackError(f"{what} did not become ready within {timeout:.0f} s; its log: {log}\n{tail(log)}")


def _alive_after_a_second(alive: Callable[[], bool]) -> bool:
    time.sleep(1.0)
    return alive()


def tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def alive(layout: Layout, name: str) -> Callable[[], bool]:
    return lambda: procs.running_pid(layout, name) is not None
