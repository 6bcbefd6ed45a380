"""A process handover's phases, read from the replicas' log files and the offsets table's advances."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import procphases  # a script's module, on its folder's path

T0 = datetime(2026, 11, 28, 15, 0, 0).timestamp()


def text(offset_s: float, message: str) -> str:
    whole, frac = divmod(offset_s, 1)
    return f"2026-11-28 15:00:{int(whole):02d},{round(frac * 1000):03d} INFO floe_jobs {message}"


def test_log_lines_keep_the_timed_lines_written_since(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    log.write_text(
        "\n".join(["==== start 1 at 0", text(0.5, "old line"), "Traceback without a time", text(2.25, "new line")])
    )
    assert procphases.log_lines(log, since=T0 + 1) == [(T0 + 2.25, "INFO floe_jobs new line")]
    assert procphases.log_lines(tmp_path / "missing.log", since=T0) == []


def test_a_committed_batch_started_its_seconds_before_its_line() -> None:
    lines = [(T0 + 3.0, "INFO floe_jobs Committed stage=count partitions=3 records=9 out=9 seconds=0.750 plan=0.1")]
    assert procphases.batches(lines) == [(T0 + 2.25, T0 + 3.0, "count")]


def test_the_phases_of_a_process_handover_in_order() -> None:
    a, b = ("lines", 0), ("lines", 1)

    def lines(*entries: tuple[float, str]) -> list[tuple[float, str]]:
        return [(T0 + t, f"INFO floe_jobs {m}") for t, m in entries]

    phases = procphases.handover(
        T0,
        victim="leaving0",
        victim_log=lines(
            (-2.0, "Received signal=15; draining deadline_seconds=20.0"),  # an earlier replica's
            (0.1, "Received signal=15; draining deadline_seconds=20.0"),
            (0.6, "Committed stage=split partitions=2 records=5 out=9 seconds=0.400 plan=0.1"),
            (0.7, "Left group group=g"),
        ),
        survivor_logs={
            # a batch from 0.5 to 1.0 was running when the assignment came at 0.8
            "r0": lines(
                (0.8, "Assigned partitions=[('lines', 0)] owned=3"),
                (1.0, "Committed stage=split partitions=2 records=5 out=9 seconds=0.500 plan=0.1"),
                (1.5, "Committed stage=split partitions=3 records=5 out=9 seconds=0.450 plan=0.1"),
            ),
            "r1": lines((0.9, "Assigned partitions=[('lines', 1)] owned=3")),
        },
        moves=[(T0 - 1, a, "leaving0"), (T0 + 0.6, a, "leaving0"), (T0 + 1.6, a, "r0"), (T0 + 2.1, b, "r1")],
        theirs=[a, b],
    )
    assert phases == {
        "sigterm_s": 0.1,
        "drain_last_commit_s": 0.6,
        "left_group_s": 0.7,
        "assigned_s": 0.8,
        "all_assigned_s": 0.9,
        "running_at_assignment_end_s": 1.0,
        "first_planned_after_assignment_s": 1.05,
        "taken_first_commit_s": 1.6,
        "taken_all_committed_s": 2.1,
    }


def test_a_partition_not_committed_again_leaves_the_last_phase_open() -> None:
    phases = procphases.handover(
        T0, victim="v", victim_log=[], survivor_logs={}, moves=[(T0 + 1, ("t", 0), "s")], theirs=[("t", 0), ("t", 1)]
    )
    assert phases["taken_first_commit_s"] == 1.0
    assert phases["taken_all_committed_s"] is None
    assert phases["assigned_s"] is None and phases["all_assigned_s"] is None
