"""What `make test`'s two lanes need to know about a test besides its markers.

`make test` runs the suite in two lanes on the one local stack: the tests marked `exclusive` one
after another with nothing beside them (they stop, pause or saturate a component every test
shares, or change cluster-wide state others read), then every other test on several pytest-xdist
workers at once (`--dist loadgroup`). Tests of the parallel lane use names of their own (topics,
keyspaces, namespaces, releases), so any two may run side by side, except where a resource exists
once and only one test at a time may hold it. Such a test gets the xdist group of its resource,
and xdist runs a group's tests on one worker, one after another, beside the other workers' tests.

The tests of a module that share a module-scoped fixture (an app applied once, an operator
watching the module's namespace) are written to run in the module's order on that one fixture
(a StreamingApp's life: create, resync, scale, roll out, delete): they form a group of their own,
so a worker runs them as pytest always did, while other workers run other modules. A resource
group comes first: a test holding the node runs in the node's group, with its own module
fixtures on that worker.

A test belongs to at most one group (xdist would make a new group of two names, shared with
nobody); one that would need two resource groups is marked `exclusive` instead. A test that asks for a fixture
which stops or floods a shared component must be marked `exclusive`: collection stops there
otherwise, before anything runs beside it.
"""

from __future__ import annotations

from collections.abc import Iterable

# marker -> (group, why one test at a time)
GROUP_OF_MARKER = {
    "node": (
        "node",
        "the stack's one node has 2 CPUs and an app's pod asks for 1 by default: two tests' pods at "
        "once would wait for room (Insufficient cpu) and time out",
    ),
}

# marker -> the group marker it lifts: the test needs the resource but holds none of what one
# test at a time may hold of it
LIFTS = {"node_no_cpu": "node"}

# fixture -> (group, why one test at a time)
GROUP_OF_FIXTURE = {
    "secured_cassandra_port": (
        "secured-cassandra",
        "the secured Cassandra node is started on first use and stopped when the session that "
        "started it ends: only one worker may own its life",
    ),
    "prom": (
        "prometheus",
        "the chart's rules are loaded into the stack's one Prometheus in place of any other "
        "file of rules, and FloeOperatorDown looks at every operator target",
    ),
}

# fixture -> what it does to a component every test shares
EXCLUSIVE_FIXTURES = {
    "services": "stops and starts the stack's own Kafka broker or Cassandra node",
    "ring": "starts a 3-node Cassandra ring beside the stack and SIGKILLs one of its nodes",
}


class LaneError(Exception):
    """A test declared so that no lane can run it safely."""


def group(
    nodeid: str, markers: Iterable[str], fixtures: Iterable[str], module_fixtures: Iterable[str] = ()
) -> str | None:
    """The xdist group of a parallel-lane test: the one-at-a-time resource it holds, else its
    module when it uses a module-scoped fixture (`module_fixtures`), else None."""
    marks, used = set(markers), set(fixtures)
    if "exclusive" in marks:
        return None
    lifted = {LIFTS[m] for m in marks if m in LIFTS}
    found = {g for m, (g, _why) in GROUP_OF_MARKER.items() if m in marks and m not in lifted}
    found |= {g for f, (g, _why) in GROUP_OF_FIXTURE.items() if f in used}
    if len(found) > 1:
        raise LaneError(
            f"{nodeid} holds {' and '.join(sorted(found))}, each one test at a time: mark it "
            "`exclusive` (the serial lane) or split it"
        )
    if found:
        return found.pop()
    if any(True for _ in module_fixtures):
        return "module:" + nodeid.split("::", 1)[0]
    return None


def check(nodeid: str, markers: Iterable[str], fixtures: Iterable[str]) -> None:
    """Refuse a test that uses an exclusive fixture without the `exclusive` marker."""
    if "exclusive" in set(markers):
        return
    needs = sorted(f for f in fixtures if f in EXCLUSIVE_FIXTURES)
    if needs:
        what = "; ".join(f"`{f}` {EXCLUSIVE_FIXTURES[f]}" for f in needs)
        raise LaneError(f"{nodeid} must be marked `exclusive`: {what}")
