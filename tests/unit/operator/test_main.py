"""The operator's entry point: replicas that peer get distinct priorities, so one of them works."""

from __future__ import annotations

import pytest
from floe_operator import main


def test_peering_priorities_differ_between_pods_and_are_stable() -> None:
    a, b = main.peering_priority("floe-7c9d-abcde"), main.peering_priority("floe-7c9d-fghij")
    assert a != b
    assert main.peering_priority("floe-7c9d-abcde") == a
    assert 0 <= a < 16**6


def test_peering_flags_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOE_PEERING", "true")
    monkeypatch.setenv("FLOE_PEERING_NAME", "floe-ops")
    monkeypatch.setenv("FLOE_PEERING_PRIORITY", "42")
    args = main.parse_args([])
    assert (args.peering, args.peering_name, args.peering_priority) == (True, "floe-ops", 42)


def test_a_standalone_operator_gets_no_peering_settings() -> None:
    """Handed a peering name, a standalone Kopf operator waits for the peering object and never works."""
    assert main.peering_options(main.parse_args([])) == {}
    opts = main.peering_options(main.parse_args(["--peering", "--peering-priority", "7"]))
    assert opts == {"peering_name": "default", "priority": 7}


class _Answers:
    """Stands for the API server's answers to the start-up LIST, in order."""

    def __init__(self, *answers: int) -> None:
        self.answers = list(answers)
        self.paths: list[str] = []

    def list_status_sync(self, path: str) -> tuple[int, str]:
        self.paths.append(path)
        return self.answers.pop(0), "storage is (re)initializing"


def test_start_waits_while_the_crd_storage_initializes() -> None:
    answers = _Answers(429, 0, 503, 200, 200)
    main.wait_until_served(answers, "apps", pause=0)  # type: ignore[arg-type]
    assert answers.answers == [200]
    assert answers.paths[0] == "/apis/streaming.floe.dev/v1alpha1/namespaces/apps/streamingapps"


def test_start_does_not_wait_for_a_missing_crd_or_forever() -> None:
    missing = _Answers(404, 200)
    main.wait_until_served(missing, None, pause=0)  # type: ignore[arg-type]
    assert missing.answers == [200] and missing.paths == ["/apis/streaming.floe.dev/v1alpha1/streamingapps"]
    stuck = _Answers(*([429] * 5))
    main.wait_until_served(stuck, None, timeout=0, pause=0)  # type: ignore[arg-type]
    assert len(stuck.answers) == 4


def test_the_lag_status_window_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert main.parse_args([]).lag_status_window_seconds == 120
    monkeypatch.setenv("FLOE_LAG_INTERVAL_SECONDS", "2")
    monkeypatch.setenv("FLOE_LAG_STATUS_WINDOW_SECONDS", "20")
    assert main.parse_args([]).lag_status_window_seconds == 20


@pytest.mark.parametrize("window", ["15", "700"])
def test_a_lag_status_window_outside_2_to_64_intervals_is_refused_naming_the_flag(
    window: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main.parse_args(["--lag-interval-seconds", "10", "--lag-status-window-seconds", window])
    err = capsys.readouterr().err
    assert "--lag-status-window-seconds (FLOE_LAG_STATUS_WINDOW_SECONDS) must hold 2 to 64 lag intervals" in err
    assert f"(got {window})" in err
