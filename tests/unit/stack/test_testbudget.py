"""The test budget `make test` ends with, from the lanes' JUnit XML as pytest writes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from floe_stack import testbudget

# pytest's JUnit XML (xunit2) of a parallel lane: a test grouped by xdist (a parameter holding
# `@`), a failure, a skip, an error at setup and a test of a class
PARALLEL = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest"
 errors="1" failures="1" skipped="1" tests="6" time="612.400" timestamp="2026-11-27T14:40:02" hostname="vm">
<testcase classname="tests.e2e.test_pods" name="test_word_count_on_pods@node" time="63.700" />
<testcase classname="tests.integration.stores.test_x" name="test_p[a@b]" time="0.202" />
<testcase classname="tests.integration.lag.test_lag_scrape" name="test_fallback" time="12.5">
<failure message="assert 0">E assert 0</failure></testcase>
<testcase classname="tests.integration.chart.test_chart_live" name="test_skip" time="0.000">
<skipped type="pytest.skip" message="why">why</skipped></testcase>
<testcase classname="tests.integration.operator.test_faults" name="test_err" time="3.0">
<error message="failed on setup">E boom</error></testcase>
<testcase classname="tests.unit.stack.test_k.TestK" name="test_m" time="0.010" />
</testsuite></testsuites>"""

SERIAL = """<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="2" time="371.6">
<testcase classname="tests.integration.runtime.test_restarts" name="test_cassandra_restart_is_waited_out"
 time="233.36"/>
<testcase classname="tests.integration.runtime.test_restarts" name="test_kafka_restart_is_waited_out" time="138.2"/>
</testsuite>"""


def test_a_lane_has_its_wall_time_and_each_test_its_time_and_outcome() -> None:
    lane = testbudget.parse("parallel", PARALLEL)
    assert lane.seconds == pytest.approx(612.4)
    assert [(c.test, c.seconds, c.outcome) for c in lane.cases] == [
        ("tests.e2e.test_pods::test_word_count_on_pods", 63.7, "passed"),
        ("tests.integration.stores.test_x::test_p[a@b]", 0.202, "passed"),
        ("tests.integration.lag.test_lag_scrape::test_fallback", 12.5, "failed"),
        ("tests.integration.chart.test_chart_live::test_skip", 0.0, "skipped"),
        ("tests.integration.operator.test_faults::test_err", 3.0, "error"),
        ("tests.unit.stack.test_k.TestK::test_m", 0.01, "passed"),
    ]
    assert (lane.count("failed"), lane.count("error"), lane.count("skipped")) == (1, 1, 1)


def test_a_bare_testsuite_is_read_too() -> None:
    lane = testbudget.parse("serial", SERIAL)
    assert (lane.seconds, len(lane.cases)) == (pytest.approx(371.6), 2)


def test_a_file_without_a_testsuite_is_refused_naming_the_lane() -> None:
    with pytest.raises(ValueError, match="serial: no <testsuite>"):
        testbudget.parse("serial", "<testsuites/>")


def test_the_report_gives_each_lane_and_the_slowest_tests_of_all_lanes() -> None:
    lanes = [testbudget.parse("parallel", PARALLEL), testbudget.parse("serial", SERIAL)]
    text = testbudget.report(lanes, slowest=3)
    assert text.splitlines() == [
        "test budget:",
        "  parallel lane: 10 min 12 s wall, 6 tests (1 failed, 1 error, 1 skipped)",
        "  serial lane: 6 min 12 s wall, 2 tests",
        "  3 slowest tests (setup, call and teardown):",
        "      233.4 s  serial    tests.integration.runtime.test_restarts::test_cassandra_restart_is_waited_out",
        "      138.2 s  serial    tests.integration.runtime.test_restarts::test_kafka_restart_is_waited_out",
        "       63.7 s  parallel  tests.e2e.test_pods::test_word_count_on_pods",
        "  one-worker groups (each takes at least this much of the parallel lane's wall time):",
        "      1 min 04 s  node (1 test)",
        "  7 test files that take the most time:",
        "      6 min 12 s  tests/integration/runtime/test_restarts.py (2 tests)",
        "      1 min 04 s  tests/e2e/test_pods.py (1 test)",
        "            12 s  tests/integration/lag/test_lag_scrape.py (1 test)",
        "             3 s  tests/integration/operator/test_faults.py (1 test)",
        "             0 s  tests/integration/stores/test_x.py (1 test)",
        "             0 s  tests/unit/stack/test_k.py (1 test)",
        "             0 s  tests/integration/chart/test_chart_live.py (1 test)",
    ]


def test_a_grouped_test_keeps_its_group_and_a_test_of_a_class_its_file() -> None:
    cases = testbudget.parse("parallel", PARALLEL).cases
    assert [(c.group, c.file) for c in cases if c.group or "TestK" in c.test] == [
        ("node", "tests/e2e/test_pods.py"),
        (None, "tests/unit/stack/test_k.py"),
    ]


def test_a_lane_without_a_report_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "parallel.xml").write_text(PARALLEL)
    assert testbudget.main([str(tmp_path / "parallel.xml"), str(tmp_path / "serial.xml")]) == 0
    out = capsys.readouterr().out
    assert "  parallel lane: 10 min 12 s wall, 6 tests" in out
    assert "  serial lane: no result" in out
    assert out.count(" s  parallel  ") == 6
