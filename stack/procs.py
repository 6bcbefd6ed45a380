"""Starting and stopping the stack's daemons by pid file, never by process name.

A pid file records the pid and a marker that must appear in that process's command line,
so a recycled pid belonging to something else is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from floe_stack.layout import Layout


def _read(pidfile: Path) -> tuple[int, str] | None:
    try:
        pid_s, _, marker = pidfile.read_text().partition("\n")
        return int(pid_s), marker.strip()
    except (OSError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running_pid(layout: Layout, name: str) -> int | None:
    """The pid of the stack's process ``name`` if it is alive and still the one we started."""
    rec = _read(layout.pid(name))
    if rec is None:
        return None
    pid, marker = rec
    cmd = _cmdline(pid)
    if not cmd or marker not in cmd:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except OSError:
        return None
    return pid


def start(
    layout: Layout,
    name: str,
    argv: Sequence[str],
    *,
    marker: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` detached (own session), logging to the component's log file."""
    log = layout.log(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    layout.pid(name).parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    layout.pid(name).write_text(f"{proc.pid}\n{marker}\n")
    # Until exec() completes, /proc shows the parent's command line; wait for the child's,
    # so that an immediate liveness check does not mistake a starting process for a dead one.
    deadline = time.monotonic() + 5
    while proc.poll() is None and marker not in _cmdline(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc.pid


def stop(layout: Layout, name: str, *, timeout: float = 30.0) -> bool:
    """SIGTERM the process recorded for ``name``, then SIGKILL after ``timeout``.

    Returns True when a live process was stopped.
    """
    pid = running_pid(layout, name)
    layout_pid = layout.pid(name)
    if pid is None:
        layout_pid.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running_pid(layout, name) is None:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
        while running_pid(layout, name) is not None:
            time.sleep(0.1)
    layout_pid.unlink(missing_ok=True)
    return True


def rss_bytes(pid: int) -> int:
    """Resident set size of one process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
