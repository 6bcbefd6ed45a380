"""The memory of our own writes that bridges the gap until the watch delivers them."""

from __future__ import annotations

from typing import Any

from floe_operator.recent import RecentWrites


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stored(rv: str, name: str = "app", generation: int = 1) -> dict[str, Any]:
    meta = {"namespace": "ns", "name": name, "resourceVersion": rv, "generation": generation}
    return {"kind": "Deployment", "metadata": meta}


def test_a_write_is_known_until_the_watch_delivers_that_version() -> None:
    recent = RecentWrites(clock=Clock())
    recent.remember(stored("7"))
    assert recent.get("ns", "Deployment", "app") == stored("7")
    # An older event (the index catching up with a previous version) keeps the entry.
    recent.observed("ns", "Deployment", "app", stored("6"))
    assert recent.get("ns", "Deployment", "app") == stored("7")
    recent.observed("ns", "Deployment", "app", stored("7"))
    assert recent.get("ns", "Deployment", "app") is None
    assert len(recent) == 0


def test_entries_are_per_object() -> None:
    recent = RecentWrites(clock=Clock())
    recent.remember(stored("7", "a"))
    recent.remember(stored("8", "b"))
    recent.observed("ns", "Deployment", "a", stored("7", "a"))
    assert recent.get("ns", "Deployment", "a") is None
    assert recent.get("ns", "Deployment", "b") == stored("8", "b")
    assert recent.get("ns", "ConfigMap", "b") is None


def test_an_entry_expires_when_its_event_never_comes() -> None:
    clock = Clock()
    recent = RecentWrites(ttl=30.0, clock=clock)
    recent.remember(stored("7"))
    clock.now += 29.0
    assert recent.get("ns", "Deployment", "app") is not None
    clock.now += 2.0
    assert recent.get("ns", "Deployment", "app") is None
    assert len(recent) == 0


def test_a_newer_write_replaces_the_older_one() -> None:
    recent = RecentWrites(clock=Clock())
    recent.remember(stored("7"))
    recent.remember(stored("9"))
    recent.observed("ns", "Deployment", "app", stored("7"))
    assert recent.get("ns", "Deployment", "app") == stored("9")
    recent.forget("ns", "Deployment", "app")
    assert recent.get("ns", "Deployment", "app") is None


def test_a_newer_spec_seen_by_the_watch_retires_our_write() -> None:
    # Kopf may coalesce our version with a later one; a higher generation is proof it is later.
    recent = RecentWrites(clock=Clock())
    recent.remember(stored("7"))
    recent.observed("ns", "Deployment", "app", stored("9", generation=2))
    assert recent.get("ns", "Deployment", "app") is None


def test_fresher_prefers_our_write_unless_the_body_has_a_newer_spec() -> None:
    recent = RecentWrites(clock=Clock())
    assert recent.fresher(stored("5")) == stored("5")
    recent.remember(stored("7"))
    assert recent.fresher(stored("5")) == stored("7")
    assert recent.fresher(stored("8", generation=2)) == stored("8", generation=2)


def test_expired_entries_go_without_being_read_and_managed_fields_are_not_kept() -> None:
    clock = Clock()
    recent = RecentWrites(ttl=30.0, clock=clock)
    recent.remember(stored("7", "a"))
    clock.now += 31.0
    big = stored("8", "b")
    big["metadata"]["managedFields"] = [{"manager": "floe-operator"}] * 100
    recent.remember(big)
    assert len(recent) == 1
    kept = recent.get("ns", "Deployment", "b")
    assert kept is not None and "managedFields" not in kept["metadata"]
    assert kept["metadata"]["resourceVersion"] == "8"
