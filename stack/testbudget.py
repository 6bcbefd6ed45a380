"""The test budget: each lane's wall time and the slowest tests of a `make test` run.

`make test` runs two lanes (the parallel one under pytest-xdist, then the serial one of the
tests marked `exclusive`), each writing JUnit XML (`--junitxml`) under build/test/. This prints,
at the end of `make test` and of `.ci/run`, what each lane took and which tests take the time, so
that a test that grows the suite's time is seen the day it lands, not when CI runs out of it.

    python -m floe_stack.testbudget build/test/parallel.xml build/test/serial.xml

A lane's wall time is its JUnit test suite's `time` (pytest's session, collection included); a
test's time is its setup, call and teardown together, as the JUnit test case has it.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SLOWEST = 25


@dataclass(frozen=True)
class Case:
    lane: str
    test: str
    seconds: float
    outcome: str  # passed, failed, error or skipped


@dataclass(frozen=True)
class Lane:
    name: str
    seconds: float
    cases: tuple[Case, ...]

    def count(self, outcome: str) -> int:
        return sum(1 for c in self.cases if c.outcome == outcome)


def _test_id(classname: str, name: str) -> str:
    """`tests.unit.x.test_y::test_z` from the JUnit names, without the `@group` suffix that
    pytest-xdist's loadgroup adds to a grouped test's id (a parameter may hold `@` too)."""
    if name.rfind("@") > name.rfind("]"):
        name = name[: name.rfind("@")]
    return f"{classname}::{name}" if classname else name


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return "failed" if tag == "failure" else tag
    return "passed"


def parse(lane: str, xml: str) -> Lane:
    """One lane from the text of its JUnit XML (a <testsuites> holding one <testsuite>, or a
    bare <testsuite>)."""
    root = ET.fromstring(xml)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError(f"{lane}: no <testsuite> in the JUnit XML")
    cases = tuple(
        Case(lane, _test_id(c.get("classname", ""), c.get("name", "")), float(c.get("time") or 0), _outcome(c))
        for suite in suites
        for c in suite.iter("testcase")
    )
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
    return "\n".join(lines)


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
