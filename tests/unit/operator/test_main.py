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
