"""The test budget: each lane's wall time and the slowest tests of a `make test` run.

`make test` runs two lanes (the parallel one under pytest-xdist, then the serial one of the
tests marked `exclusive`), each writing JUnit XML (`--junitxml`) under build/test/. This prints,
at the end of `make test` and of `.ci/run`, what each lane took and which tests take the time, so
that a test that grows the suite's time is seen the day it lands, not when CI runs out of it.

    python -m floe_stack.testbudget build/test/parallel.xml build/test/serial.xml

A lane's wall time is its JUnit test suite's `time` (pytest's session, collection included); a
test's time is its setup, call and teardown together, as the JUnit test case has it.

Two sums say where to cut. A one-worker group (xdist's loadgroup runs a group's tests on one
worker, one after another) takes at least its tests' sum of the parallel lane's wall time however
many workers there are; and the time of each test file, which points at the modules whose waits or
start-ups are worth sharing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SLOWEST = 25
FILES = 10
GROUP_FLOOR_S = 60.0  # a group shorter than this bounds nothing worth printing


@dataclass(frozen=True)
class Case:
    lane: str
    test: str
    seconds: float
    outcome: str  # passed, failed, error or skipped
    group: str | None = None  # the xdist group that ran it on one worker, if any

    @property
    def file(self) -> str:
        """`tests/unit/x/test_y.py` from the test's dotted module (a class's name dropped)."""
        parts = self.test.split("::", 1)[0].split(".")
        while len(parts) > 1 and not parts[-1].startswith("test"):
            parts.pop()
        return "/".join(parts) + ".py"


@dataclass(frozen=True)
class Lane:
    name: str
    seconds: float
    cases: tuple[Case, ...]

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)


def _test_id(classname: str, name: str) -> tuple[str, str | None]:
    """`tests.unit.x.test_y::test_z` from the JUnit names and the `@group` suffix that
    pytest-xdist's loadgroup adds to a grouped test's id, apart (a parameter may hold `@` too)."""
    group = None
    if name.rfind("@") > name.rfind("]"):
        name, group = name[: name.rfind("@")], name[name.rfind("@") + 1 :]
    return (f"{classname}::{name}" if classname else name), group


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return "failed" if tag == "failure" else tag
    return "passed"


def _case(lane: str, case: ET.Element) -> Case:
    test, group = _test_id(case.get("classname", ""), case.get("name", ""))
    return Case(lane, test, float(case.get("time") or 0), _outcome(case), group)


def parse(lane: str, xml: str) -> Lane:
    """One lane from the text of its JUnit XML (a <testsuites> holding one <testsuite>, or a
    bare <testsuite>)."""
    root = ET.fromstring(xml)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError(f"{lane}: no <testsuite> in the JUnit XML")
    cases = tuple(_case(lane, c) for suite in suites for c in suite.iter("testcase"))
    return Lane(lane, sum(float(s.get("time") or 0) for s in suites), cases)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def report(lanes: Sequence[Lane], missing: Sequence[str] = (), slowest: int = SLOWEST) -> str:
    """The lines `make test` ends with: one per lane, then the `slowest` tests of all lanes."""
    lines = ["test budget:"]
    for lane in lanes:
        outcomes = ", ".join(f"{lane.count(o)} {o}" for o in ("failed", "error", "skipped") if lane.count(o))
        lines.append(
            f"  {lane.name} lane: {_clock(lane.seconds)} wall, {len(lane.cases)} tests"
            + (f" ({outcomes})" if outcomes else "")
        )
    for name in missing:
        lines.append(f"  {name} lane: no result (it did not run, or pytest stopped before writing its report)")
    cases = sorted((c for lane in lanes for c in lane.cases), key=lambda c: c.seconds, reverse=True)[:slowest]
    if cases:
        width = max(len(lane.name) for lane in lanes)
        lines.append(f"  {len(cases)} slowest tests (setup, call and teardown):")
        lines.extend(f"    {c.seconds:7.1f} s  {c.lane:<{width}}  {c.test}" for c in cases)
    every = [c for lane in lanes for c in lane.cases]
    groups = [g for g in _sums(every, lambda c: c.group) if g[1] >= GROUP_FLOOR_S]
    if groups:
        lines.append("  one-worker groups (each takes at least this much of the parallel lane's wall time):")
        lines.extend(f"    {_clock(s):>12}  {name} ({_tests(n)})" for name, s, n in groups)
    files = _sums(every, lambda c: c.file)[:FILES]
    if files:
        lines.append(f"  {len(files)} test files that take the most time:")
        lines.extend(f"    {_clock(s):>12}  {name} ({_tests(n)})" for name, s, n in files)
    return "\n".join(lines)


def _tests(n: int) -> str:
    return f"{n} test" if n == 1 else f"{n} tests"


def _sums(cases: Sequence[Case], key: Callable[[Case], str | None]) -> list[tuple[str, float, int]]:
    """(key, seconds, tests) per key that is not None, the largest sum first."""
    seconds: dict[str, float] = {}
    count: dict[str, int] = {}
    for c in cases:
        k = key(c)
        if k is not None:
            seconds[k] = seconds.get(k, 0.0) + c.seconds
            count[k] = count.get(k, 0) + 1
    return sorted(((k, s, count[k]) for k, s in seconds.items()), key=lambda t: t[1], reverse=True)


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m floe_stack.testbudget LANE.xml...  (the lane is named by the file)", file=sys.stderr)
        return 2
    lanes = [parse(p.stem, p.read_text()) for p in paths if p.is_file()]
    print(report(lanes, missing=[p.stem for p in paths if not p.is_file()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
