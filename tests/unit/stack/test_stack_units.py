"""The stack's process, port and env-file handling, on real processes and sockets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from floe_stack import component, envfile, ports, procs
from floe_stack.layout import Layout
from floe_stack.spark import artifact_name


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(root=tmp_path / "repo", cache=tmp_path / "cache")


def test_start_and_stop_by_pid_file(layout: Layout) -> None:
    marker = f"floe-test-{time.time_ns()}"
    pid = procs.start(layout, "sleeper", [sys.executable, "-c", "import time; time.sleep(300)", marker],
                      marker=marker)
    assert procs.running_pid(layout, "sleeper") == pid
    assert procs.stop(layout, "sleeper", timeout=10)
    assert procs.running_pid(layout, "sleeper") is None
    assert not layout.pid("sleeper").exists()


def test_a_recycled_pid_is_never_signalled(layout: Layout) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        layout.pid("ghost").parent.mkdir(parents=True)
        layout.pid("ghost").write_text(f"{other.pid}\nsome-marker-that-is-not-there\n")
        assert procs.running_pid(layout, "ghost") is None
        assert procs.stop(layout, "ghost") is False
        assert other.poll() is None, "a process that is not ours was signalled"
    finally:
        other.kill()
        other.wait()


def test_busy_port_is_reported_with_its_holder_and_replaced(layout: Layout) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        assert not ports.is_free(busy)
        assert ports.holder(busy).startswith("pid ")
        book = component.PortBook(layout=layout)
        chosen = book.get("thing", busy, owned_by_us=False)
        assert chosen != busy and ports.is_free(chosen)
        assert f"port {busy} for thing is held by pid" in book.notes[0]


def test_port_book_remembers_its_choices(layout: Layout) -> None:
    book = component.PortBook(layout=layout)
    port = book.get("kafka", ports.free_port(), owned_by_us=False)
    book.save()
    assert component.PortBook.load(layout).chosen == {"kafka": port}


def test_env_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "stack.env"
    envfile.write(path, {"B": "2", "A": "x=y"})
    assert path.read_text() == "A=x=y\nB=2\n"
    assert envfile.read(path) == {"A": "x=y", "B": "2"}


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("scala-library-2.13.15.jar", "scala-library"),
        ("spark-sql-kafka-0-10_2.13-4.0.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("kafka-clients-3.9.0.jar", "kafka-clients"),
        ("snappy-java-1.1.10.5.jar", "snappy-java"),
    ],
)
def test_artifact_name_strips_the_version(jar: str, artifact: str) -> None:
    assert artifact_name(jar) == artifact


def test_wait_until_fails_fast_when_the_process_died(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("boom: bad config\n")
    with pytest.raises(component.StackError, match=r"(?s)exited during start-up.*boom: bad config"):
        component.wait_until(lambda: False, what="X", timeout=30, alive=lambda: False, log=str(log))


def test_benchmark_tables_and_plots_match_the_results() -> None:
    """The README's headline and plots, docs/benchmarks.md's full table and the docs' short
    tables are what bench/results/*.json gives, regenerated here and compared byte for byte."""
    from floe_stack import benchtable

    root = Path(__file__).resolve().parents[3]
    assert benchtable.stale(root) == [], (
        "generated benchmark files are stale: run python -m floe_stack.benchtable (make bench does)"
    )


def test_benchmark_figures_read_without_exponents() -> None:
    from floe_stack.benchtable import _fmt

    assert _fmt(10362.7) == "10,363"
    assert _fmt(229.5) == "229.5"
    assert _fmt(0.04731) == "0.04731"
    assert _fmt(1024) == "1,024"
    assert _fmt(None) == "None"
    assert _fmt("ratio >= 1.0") == "ratio >= 1.0"
