"""CPU seconds used on the machine while a benchmark runs, by kind of process (from /proc).

The throughput benchmark shares two cores between the system measured and the services it
uses, so its figures come with where the CPU went: a run that is slower because the state
store's node is busy reads differently from one whose own process is. Processes that start and
end during the run count too (sampled every `interval` seconds; what a process uses after its
last sample is missed, a fraction of one interval). On a machine that other checkouts' stacks and
tests share, `roots` keeps the count to the processes of this run: those pids and every process
descending from them (their Spark JVMs), such as this checkout's stack daemons and the system
measured.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from collections.abc import Collection
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
# (kind, a string its command line holds), the first match wins; a JVM whose command line holds
# "pyspark" (its jars) is a Spark driver, "spark-jvm"; anything else is "other"
KINDS = (
    ("cassandra", "CassandraDaemon"),
    ("kafka", "kafka.Kafka"),
    ("floe-replica", "floe_jobs.cli"),
    ("structured-streaming-driver", "floe-bench-ss-"),
    ("kubernetes", "/kube-"),
    ("kubernetes", "/etcd"),
)
# the kinds whose threads can be counted one by one (`Sampler(threads=True)`)
THREADED = ("spark-jvm", "cassandra")


def _cpu(stat: str) -> tuple[str, float]:
    """(name, user + system seconds) from a /proc stat line."""
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat.rsplit(")", 1)[1].split()
    return name, (int(fields[11]) + int(fields[12])) / HZ


def kind(cmdline: bytes) -> str:
    text = cmdline.decode(errors="replace")
    if "java" in text and "pyspark" in text:
        return "spark-jvm"
    return next((k for k, marker in KINDS if marker in text), "other")


def parents() -> dict[int, int]:
    """pid → parent pid of every process now."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def descendants(roots: set[int], parent_of: dict[int, int]) -> set[int]:
    """The roots and every process below them."""
    found = set(roots)
    for pid in parent_of:
        chain, at = [], pid
        while at not in found and at in parent_of and at > 1 and len(chain) < 64:
            chain.append(at)
            at = parent_of[at]
        if at in found:
            found.update(chain)
    return found


def tree_cpu_seconds(root: int) -> float:
    """User and system seconds a process and every process below it have used so far."""
    total = 0.0
    for pid in descendants({root}, parents()):
        try:
            total += _cpu(Path(f"/proc/{pid}/stat").read_text())[1]
        except OSError:
            continue
    return total


def stack_pids(root: Path) -> set[int]:
    """The daemons of a checkout's local stack, from their pid files (`.floe/pids`)."""
    out = set()
    for path in (root / ".floe" / "pids").glob("*.pid"):
        first = path.read_text().split("\n", 1)[0].strip()
        if first.isdigit():
            out.add(int(first))
    return out


def _largest(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda kv: -kv[1])


class Sampler:
    """Latest CPU time of every process seen (and, with `threads`, of every thread of the
    `THREADED` kinds), from construction until `stop`."""

    def __init__(self, *, threads: bool = False, interval: float = 0.3, roots: Collection[int] | None = None) -> None:
        self.with_threads, self.interval = threads, interval
        # read at every sample: the caller may add the pid of a process it starts later
        self.roots = roots
        self.procs: dict[int, tuple[str, float]] = {}
        self.threads: dict[tuple[int, int], tuple[str, str, float]] = {}
        self._stop = threading.Event()
        self.start = self._sample()
        self.start_threads = dict(self.threads)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> dict[int, tuple[str, float]]:
        seen: dict[int, tuple[str, float]] = {}
        scope = None if self.roots is None else descendants(set(self.roots), parents())
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            if scope is not None and int(entry.name) not in scope:
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if not cmdline:  # a kernel thread, or a process that has just exited
                    continue
                what = kind(cmdline)
                seen[int(entry.name)] = (what, _cpu((entry / "stat").read_text())[1])
                if self.with_threads and what in THREADED:
                    for task in (entry / "task").iterdir():
                        self.threads[(int(entry.name), int(task.name))] = (what, *_cpu((task / "stat").read_text()))
            except (OSError, ValueError):
                continue
        return seen

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.procs.update(self._sample())

    def stop(self) -> dict[str, float]:
        """CPU seconds per kind of process since construction, largest first (≥ 0.05 s)."""
        self._stop.set()
        self._thread.join()
        self.procs.update(self._sample())
        by_kind: collections.defaultdict[str, float] = collections.defaultdict(float)
        for pid, (what, cpu) in self.procs.items():
            before = self.start.get(pid)
            by_kind[what] += cpu - (before[1] if before is not None and before[0] == what else 0.0)
        return {k: round(v, 1) for k, v in _largest(by_kind) if v >= 0.05}

    def by_thread(self, top: int = 12) -> dict[str, dict[str, float]]:
        """After `stop`: CPU seconds per thread name (numbers dropped, so that "C2 CompilerThread0"
        and "C2 CompilerThread1" add up) of each `THREADED` kind, the `top` largest."""
        totals = {k: collections.defaultdict[str, float](float) for k in THREADED}
        for key, (what, name, cpu) in self.threads.items():
            then = self.start_threads.get(key)
            totals[what][re.sub(r"[#:\-\d]+$", "", name).strip()] += cpu - (then[2] if then is not None else 0.0)
        return {k: {n: round(v, 1) for n, v in _largest(c)[:top]} for k, c in totals.items()}
