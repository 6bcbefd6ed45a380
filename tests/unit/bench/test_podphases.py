"""A pod handover's phases, read from the pods' logs (`kubectl logs --timestamps`), their status
and the offsets table's ownership changes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import podphases  # a script's module, on its folder's path

T0 = podphases.wall("2026-11-27T22:00:00Z")


def line(offset_s: float, text: str) -> str:
    whole, frac = divmod(offset_s, 1)
    return f"2026-11-27T22:00:{int(whole):02d}.{round(frac * 1e9):09d}Z 2026-11-27 22:00:00,000 INFO floe_jobs {text}"


def test_wall_reads_nanoseconds_and_whole_seconds() -> None:
    assert podphases.wall("2026-11-27T22:00:01.250000999Z") - T0 == 1.25
    assert podphases.wall("2026-11-27T22:00:03Z") - T0 == 3.0


def test_the_phases_of_a_handover_in_order() -> None:
    a, b, c = ("input", 0), ("input", 1), ("input", 2)
    phases = podphases.handover(
        T0,
        victim="old",
        victim_log=[line(0.0, "Committed batch"), line(0.4, "Received signal=15; draining deadline_seconds=20.0"),
                    line(1.1, "Stopped app=wc member=old/1 left_group=True")],
        survivor_logs={"s1": [line(1.5, "Assigned partitions=[('input', 0)] owned=3")],
                       "s2": [line(1.3, "Assigned partitions=[('input', 1)] owned=3"), "no time here"]},
        new_pod={"metadata": {"name": "new", "creationTimestamp": "2026-11-27T22:00:01Z"},
                 "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                            "lastTransitionTime": "2026-11-27T22:00:01Z"},
                                           {"type": "Ready", "status": "True",
                                            "lastTransitionTime": "2026-11-27T22:00:20Z"}],
                            "containerStatuses": [{"state": {"running": {"startedAt": "2026-11-27T22:00:02Z"}}}]}},
        new_log=[line(2.5, "Starting"), line(12.0, "Warmed up stage=split records=50"),
                 line(14.0, "Warmed up stage=count records=50"), line(15.0, "Assigned partitions=[('input', 0)]")],
        owned_before={a: "old", b: "old", c: "s1"},
        moves=[(T0 - 5, c, "s1"), (T0 + 1.9, b, "s2"), (T0 + 2.2, a, "s1"), (T0 + 16.5, a, "new")],
    )
    assert phases == {
        "sigterm_s": 0.4,
        "left_group_s": 1.1,
        "survivors_assigned_s": 1.3,
        "survivors_first_commit_s": 1.9,
        "survivors_all_committed_s": 2.2,
        "new_pod_created_s": 1.0,
        "new_pod_scheduled_s": 1.0,
        "new_container_started_s": 2.0,
        "new_first_log_s": 2.5,
        "new_warmed_up_s": 14.0,
        "new_assigned_s": 15.0,
        "new_first_commit_s": 16.5,
        "new_ready_s": 20.0,
    }


def test_a_phase_that_did_not_happen_is_none() -> None:
    phases = podphases.handover(
        T0, victim="old", victim_log=[], survivor_logs={"s1": []}, new_pod=None, new_log=[],
        owned_before={("input", 0): "old"}, moves=[],
    )
    assert set(phases.values()) == {None}


def test_medians_skip_the_runs_a_phase_was_missing_from() -> None:
    runs = [{"sigterm_s": 0.4, "new_ready_s": None}, {"sigterm_s": 0.6, "new_ready_s": 20.0},
            {"sigterm_s": 0.5, "new_ready_s": None}]
    assert podphases.medians(runs) == {"sigterm_s": 0.5, "new_ready_s": 20.0}
    assert podphases.medians([{"x": None}]) == {"x": None}


def test_the_phases_of_a_scale_up_from_the_surge() -> None:
    app_replicas = [(T0 - 30, "1"), (T0 + 5, "1"), (T0 + 21.25, "2"), (T0 + 22.0, "2")]
    deployment_replicas = [(T0 - 30, "1"), (T0 + 21.5, "2")]
    phases = podphases.scale_up(
        T0,
        to=2,
        app_replicas=app_replicas,
        deployment_replicas=deployment_replicas,
        new_pod={"metadata": {"name": "new", "creationTimestamp": "2026-11-27T22:00:22Z"},
                 "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                            "lastTransitionTime": "2026-11-27T22:00:22Z"}],
                            "containerStatuses": [{"state": {"running": {"startedAt": "2026-11-27T22:00:23Z"}}}]}},
        new_log=[line(24.0, "Starting"), line(33.0, "Warmed up stage=split records=50"),
                 line(35.0, "Warmed up stage=count records=50"), line(36.5, "Assigned partitions=[('input', 3)]")],
        # the old pod's own commits, one before the surge, are not the new pod's
        moves=[(T0 - 10, ("input", 0), "old"), (T0 + 36.0, ("input", 0), "old"), (T0 + 38.25, ("input", 3), "new"),
               (T0 + 39.0, ("input", 4), "new")],
    )
    assert phases == {
        "decision_s": 21.25,
        "deployment_scaled_s": 21.5,
        "new_pod_created_s": 22.0,
        "new_pod_scheduled_s": 22.0,
        "new_container_started_s": 23.0,
        "new_first_log_s": 24.0,
        "new_warmed_up_s": 35.0,
        "new_assigned_s": 36.5,
        "new_first_commit_s": 38.25,
        "new_ready_s": None,
    }


def test_a_scale_up_that_did_not_happen_has_no_decision_and_no_pod() -> None:
    phases = podphases.scale_up(T0, to=2, app_replicas=[(T0 - 30, "2"), (T0 + 1, "1")],
                                deployment_replicas=[(T0 + 1, "1")], new_pod=None, new_log=[], moves=[])
    assert set(phases.values()) == {None}  # a 2 printed before the surge is not this surge's decision


def test_a_watch_line_counts_when_its_value_arrived_after_the_start() -> None:
    lines = [(T0 - 1, "2"), (T0 + 2, "1 "), (T0 + 3, " 2")]
    assert podphases.arrived(lines, "2", since=T0) == T0 + 3
    assert podphases.arrived(lines, "3", since=T0) is None
