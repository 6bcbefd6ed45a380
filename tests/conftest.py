"""Session fixtures that hand tests the local stack (Kafka, Cassandra, Kubernetes, Helm, Spark jars).

The stack is the real thing, started by `make up` (or by these fixtures when it is not up),
and described by `.floe/stack.env`. A test that needs a component carries that component's
marker (kafka, cassandra, k8s, spark, helm); deselecting the marker (`-m "not k8s"`) is the
only way such a test does not run. A component that is selected but cannot be reached is an
error, never a skip.

`make test` runs the suite in two lanes (`tests/lanes.py`): collection here gives each test of the
parallel lane the xdist group of the one-at-a-time resource it holds, and refuses a test that
would stop or flood a shared component beside others. Session fixtures run once per xdist
worker, so none of them may assume it is alone on the stack.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from floe_stack import envfile, localrun
from floe_stack import helm as helm_binary
from floe_stack.layout import Layout

from tests import lanes, leftovers

if TYPE_CHECKING:
    from floe_jobs.config import FloeConfig

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Topics and keyspaces a test, a module or the session makes are removed when it ends
    (`tests/leftovers.py`)."""
    leftovers.instrument(localrun)
    config.pluginmanager.register(leftovers.Plugin(), "floe-leftovers")


@pytest.fixture(autouse=True)
def _leftovers() -> Iterator[None]:
    """What this test and its function fixtures make on the stack, removed after their teardown."""
    made = leftovers.open_scope()
    yield
    leftovers.close_scope(made)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (it appends them to the test ids)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        markers = [m.name for m in item.iter_markers()]
        fixtures = getattr(item, "fixturenames", ())
        try:
            lanes.check(item.nodeid, markers, fixtures)
            defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
            per_module = [n for n, d in defs.items() if d and d[-1].scope == "module"]
            name = lanes.group(item.nodeid, markers, fixtures, per_module)
        except lanes.LaneError as exc:
            problems.append(str(exc))
            continue
        if name is not None:
            item.add_marker(pytest.mark.xdist_group(name))
    if problems:
        raise pytest.UsageError("tests that no lane can run safely:\n  " + "\n  ".join(problems))


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    """An exclusive test run beside other workers (`pytest -n N` without `-m "not exclusive"`)
    would stop or flood what they use: it fails instead of running."""
    if item.get_closest_marker("exclusive") and int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        pytest.fail("an `exclusive` test runs alone: `make test` runs it in its serial lane (pytest -p no:xdist)")


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The running stack's settings, starting the stack first when it is not up. The xdist
    workers of a run take turns here (a lock in the temporary directory they share), so a stack
    that is down is started once, not by every worker at the same time."""
    import fcntl

    with open(tmp_path_factory.getbasetemp().parent / "floe-stack-env.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = envfile.ensure_stack(ROOT)
    leftovers.STACK.update(env)
    # local replicas (`localrun.App`) and in-process sessions map the stack's class archive, as
    # pods map their image's
    if env.get("FLOE_SPARK_CLASS_ARCHIVE"):
        os.environ.setdefault("FLOE_SPARK_CLASS_ARCHIVE", env["FLOE_SPARK_CLASS_ARCHIVE"])
    return env


@pytest.fixture(scope="session")
def kafka_bootstrap(stack_env: dict[str, str]) -> str:
    return stack_env["FLOE_KAFKA_BOOTSTRAP"]


@pytest.fixture(scope="session")
def cassandra_hosts(stack_env: dict[str, str]) -> list[str]:
    return stack_env["FLOE_CASSANDRA_HOSTS"].split(",")


@pytest.fixture(scope="session")
def cassandra_port(stack_env: dict[str, str]) -> int:
    return int(stack_env["FLOE_CASSANDRA_PORT"])


@pytest.fixture(scope="session")
def kubeconfig(stack_env: dict[str, str]) -> str:
    os.environ["KUBECONFIG"] = stack_env["KUBECONFIG"]
    return stack_env["KUBECONFIG"]


@pytest.fixture(scope="session")
def kubectl(stack_env: dict[str, str]) -> str:
    return stack_env["FLOE_KUBECTL"]


@pytest.fixture(scope="session")
def helm() -> str:
    """Helm is a client: it is built into the cache when missing, and the stack is not started
    for it, so `make unit` renders the chart without Kafka, Cassandra or Kubernetes."""
    layout = Layout.discover(ROOT)
    helm_binary.build(layout)
    return str(layout.bin / "helm")


@pytest.fixture(scope="session")
def spark_jars(stack_env: dict[str, str]) -> list[str]:
    return stack_env["FLOE_SPARK_JARS"].split(",")


@pytest.fixture(scope="session")
def rekeyed_table() -> Callable[[Sequence[Sequence[Any]]], Any]:
    """Re-keyed rows given as tuples `(key, value, src topic, src partition, src offset, src
    index)` as the Arrow table `floe_jobs.runs.pack` takes (what a combining re-key holds)."""
    import pyarrow as pa

    types = (pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(), pa.int32())
    names = ["key", "value", "src_topic", "src_partition", "src_offset", "src_idx"]

    def table(rows: Sequence[Sequence[Any]]) -> Any:
        columns = list(zip(*rows, strict=True)) if rows else [() for _ in types]
        return pa.Table.from_arrays([pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=names)

    return table


@pytest.fixture(scope="session")
def job_config(kafka_bootstrap: str, spark_jars: list[str], stack_env: dict[str, str]) -> FloeConfig:
    """A job configuration for tests that drive runtime pieces in-process (no Cassandra used)."""
    from floe_jobs import config  # imported here: the unit tests of the stack and chart need no runtime

    return config.load(
        environ={
            "FLOE_APP_ID": localrun.unique("it"),
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "FLOE_KAFKA_TOPICS": "lines",
            "FLOE_CASSANDRA_KEYSPACE": "unused",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
            "FLOE_SPARK_MASTER": "local[2]",
            "FLOE_SPARK_JARS": ",".join(spark_jars),
            "FLOE_SPARK_CLASS_ARCHIVE": stack_env.get("FLOE_SPARK_CLASS_ARCHIVE", ""),
        }
    )


@pytest.fixture(scope="session")
def spark(job_config: FloeConfig) -> Iterator[Any]:
    """One Spark session for the in-process tests, with the connector jars: the JVM outlives a
    stopped session, and a session started in it later does not load Spark's Kafka sink."""
    from floe_jobs import sparkio

    session = sparkio.build_session(job_config, app_name=job_config.app_id)
    yield session
    session.stop()
