"""Which xdist group a test of `make test`'s parallel lane gets, and which tests no lane may run."""

from __future__ import annotations

from typing import Any

import pytest

from tests import lanes


def test_a_test_on_the_node_is_grouped_with_the_others_on_the_node() -> None:
    assert lanes.group("t", ["node", "k8s"], ["stack_env"]) == "node"


def test_a_test_whose_pods_take_no_node_cpu_runs_beside_the_nodes_group() -> None:
    assert lanes.group("t", ["node", "node_no_cpu", "k8s"], ["node_env"]) is None
    assert lanes.group("t", ["node", "node_no_cpu"], ["node_env", "app"], ["app"]) == "module:t"


def test_a_test_using_the_secured_node_or_prometheus_is_grouped_by_its_fixture() -> None:
    assert lanes.group("t", ["kafka"], ["secured_cassandra_port", "tls"]) == "secured-cassandra"
    assert lanes.group("t", ["prometheus"], ["prom", "helm"]) == "prometheus"


def test_a_test_holding_nothing_of_one_at_a_time_is_not_grouped() -> None:
    assert lanes.group("t", ["kafka", "cassandra"], ["kafka_bootstrap", "session"]) is None


def test_tests_sharing_a_module_fixture_are_grouped_by_their_module() -> None:
    assert lanes.group("tests/x/test_y.py::test_z[1]", ["k8s"], ["app", "kube"], ["app"]) == "module:tests/x/test_y.py"


def test_a_resource_group_comes_before_the_module() -> None:
    assert lanes.group("tests/x/test_y.py::test_z", ["node"], ["app"], ["app"]) == "node"


def test_an_exclusive_test_needs_no_group() -> None:
    assert lanes.group("t", ["node", "exclusive"], ["secured_cassandra_port"], ["app"]) is None


def test_a_test_holding_two_resources_must_be_exclusive() -> None:
    with pytest.raises(lanes.LaneError, match=r"^t holds node and secured-cassandra, .*mark it `exclusive`"):
        lanes.group("t", ["node"], ["secured_cassandra_port"])


def test_a_test_stopping_a_shared_service_must_be_marked_exclusive() -> None:
    with pytest.raises(lanes.LaneError, match=r"^t must be marked `exclusive`: `services` stops and starts"):
        lanes.check("t", ["kafka"], ["services", "session"])
    lanes.check("t", ["kafka", "exclusive"], ["services"])
    lanes.check("t", ["kafka"], ["session"])


def test_only_the_suites_spark_fixture_builds_or_stops_the_in_process_spark_session() -> None:
    """getOrCreate in a test returns the session every later test of that process shares, and
    stopping it there fails them all, in whichever order a worker ran the modules."""
    from pathlib import Path

    tests = Path(__file__).resolve().parents[2]
    builder = "SparkSession" + ".builder"
    builders = sorted(
        str(p.relative_to(tests))
        for p in tests.rglob("*.py")
        if builder in p.read_text() and p.parent.name != "bench" and p != tests / "conftest.py"
    )
    assert builders == []


def test_the_locked_pytest_and_xdist_keep_a_group_on_one_worker(tmp_path: Any) -> None:
    """`--dist loadgroup` is what keeps a one-holder resource's tests apart; an upgrade that
    stops applying groups (xdist 3.8 under pytest 9) would spread them silently."""
    import subprocess
    import sys

    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.mark.xdist_group('one')\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_grouped(i):\n"
        "    open(f'ran-{i}', 'w').write(os.environ['PYTEST_XDIST_WORKER'])\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_free(i):\n"
        "    pass\n"
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's settings
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    workers = [(tmp_path / f"ran-{i}").read_text() for i in range(8)]
    assert len(set(workers)) == 1, workers
