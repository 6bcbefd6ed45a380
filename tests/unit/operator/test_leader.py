"""Leader election: the decisions on a Lease as read, and two electors sharing one Lease store
that behaves like the API server's optimistic concurrency (a PUT with a stale resourceVersion
is a 409)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from floe_operator import k8s, leader, main

NOW = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def record(holder: str = "a", *, renew: str | None = "t1", transitions: int = 0, rv: str = "7") -> leader.Record:
    return leader.Record(
        holder=holder,
        lease_duration=15,
        acquire_time="t0",
        renew_time=renew,
        transitions=transitions,
        resource_version=rv,
    )


def test_decisions() -> None:
    assert leader.decide(None, identity="a", expired=False) == "create"
    assert leader.decide(record("a"), identity="a", expired=False) == "renew"
    assert leader.decide(record("b"), identity="a", expired=False) == "wait"
    assert leader.decide(record("b"), identity="a", expired=True) == "take"
    # Released: no holder, taken at once.
    assert leader.decide(record(""), identity="a", expired=False) == "take"


def test_expiry_runs_on_the_local_clock_from_the_last_change_seen() -> None:
    first = leader.observe(None, record("b", renew="t1"), now=100.0)
    assert first is not None and first.since == 100.0
    # Unchanged record: the clock keeps running from the first sight, whatever the timestamps say.
    same = leader.observe(first, record("b", renew="t1", rv="8"), now=110.0)
    assert same is first
    assert not leader.expired(same, record("b"), now=114.9)
    assert leader.expired(same, record("b"), now=115.0)
    # A renewal (new renewTime) restarts it.
    renewed = leader.observe(same, record("b", renew="t2"), now=112.0)
    assert renewed is not None and renewed.since == 112.0
    assert not leader.expired(renewed, record("b", renew="t2"), now=115.0)
    assert leader.observe(renewed, None, now=120.0) is None


def test_fencing_after_the_renew_deadline() -> None:
    assert not leader.fenced(None, renew_deadline=10, now=1000)
    assert not leader.fenced(100.0, renew_deadline=10, now=109.9)
    assert leader.fenced(100.0, renew_deadline=10, now=110.0)


def test_lease_spec_moves_acquire_time_and_transitions_only_on_a_new_holder() -> None:
    stamp = "2026-01-02T03:04:05.678901Z"
    assert leader.micro_time(NOW) == stamp
    created = leader.lease_spec(None, identity="a", lease_duration=15, now=NOW)
    assert created == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }
    renewed = leader.lease_spec(record("a", transitions=3), identity="a", lease_duration=15, now=NOW)
    assert (renewed["acquireTime"], renewed["renewTime"], renewed["leaseTransitions"]) == ("t0", stamp, 3)
    taken = leader.lease_spec(record("b", transitions=3), identity="a", lease_duration=15, now=NOW)
    assert (taken["acquireTime"], taken["leaseTransitions"]) == (stamp, 4)
    released = leader.released_spec(record("a", transitions=3), now=NOW)
    assert released["holderIdentity"] == "" and released["leaseTransitions"] == 3


def test_config_problems() -> None:
    assert leader.Config(name="l", namespace="ns", identity="a").problems() == []
    bad = leader.Config(name="l", namespace="", identity="a", lease_duration=5, renew_deadline=5, retry_period=6)
    assert len(bad.problems()) == 3


class FakeLeases:
    """One Lease with the API server's rules: create is 409 when it exists, a PUT whose
    resourceVersion is not the stored one is 409, every write bumps the version."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.down = False
        self.lock = threading.Lock()

    def _stored(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(dict(obj))
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def get_sync(self, api_version: str, kind: str, namespace: str, name: str, *, timeout: float = 30) -> Any:
        if self.down:
            raise k8s.ApiError(0, "API server unreachable")
        return copy.deepcopy(self.lease)

    def create_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        with self.lock:
            if self.lease is not None:
                raise k8s.ApiError(409, "already exists")
            return self._stored(obj)

    def replace_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]:
        with self.lock:
            assert self.lease is not None
            if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise k8s.ApiError(409, "the object has been modified")
            return self._stored(obj)

    @property
    def holder(self) -> str:
        return str(((self.lease or {}).get("spec") or {}).get("holderIdentity", ""))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def electors(api: FakeLeases, clock: Clock) -> tuple[leader.Elector, leader.Elector]:
    def one(identity: str) -> leader.Elector:
        cfg = leader.Config(name="floe", namespace="ops", identity=identity)
        return leader.Elector(cfg, api, clock=clock, wall=lambda: NOW + timedelta(seconds=clock.now))

    return one("a"), one("b")


def test_one_leads_the_other_takes_over_only_after_the_lease_duration() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = electors(api, clock)
    assert a.try_acquire_or_renew() and api.holder == "a"
    assert not b.try_acquire_or_renew()
    # a renews: b's clock restarts at every renewal it sees.
    for _ in range(10):
        clock.now += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    # a stops renewing (killed): b waits the lease duration from the last change it saw.
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    clock.now += 0.2
    assert b.try_acquire_or_renew() and api.holder == "b"
    assert api.lease is not None and api.lease["spec"]["leaseTransitions"] == 1
    # a comes back: it sees b holding, it is no leader.
    assert not a.try_acquire_or_renew()


def test_a_stale_write_loses_the_race() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = electors(api, clock)
    assert a.try_acquire_or_renew()
    clock.now += 20  # expired for b, which reads it ...
    stale = api.get_sync("", "", "", "")
    assert a.try_acquire_or_renew()  # ... while a renews in between
    body = leader.lease_manifest(
        b.config,
        leader.lease_spec(leader.record_of(stale), identity="b", lease_duration=15, now=NOW),
        resource_version=stale["metadata"]["resourceVersion"],
    )
    with pytest.raises(k8s.ApiError) as lost:
        api.replace_sync(body)
    assert lost.value.status == 409 and api.holder == "a"


def test_release_hands_over_at_once() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = electors(api, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert api.holder == ""
    assert b.try_acquire_or_renew() and api.holder == "b"
    # Releasing what it no longer holds writes nothing.
    version = api.version
    a.release()
    assert api.version == version


def test_a_leader_that_cannot_renew_is_fenced_before_a_standby_may_take_over() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = electors(api, clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    api.down = True
    clock.now += 10
    assert not a.try_acquire_or_renew()
    assert leader.fenced(a._renewed, renew_deadline=a.config.renew_deadline, now=clock.now)
    api.down = False
    assert not b.try_acquire_or_renew(), "the standby must not take it before the lease duration"
    clock.now += 5
    assert b.try_acquire_or_renew()


def test_hold_reports_a_lost_lease() -> None:
    api = FakeLeases()
    cfg = leader.Config(
        name="floe", namespace="ops", identity="a", lease_duration=3, renew_deadline=2, retry_period=0.05
    )
    a = leader.Elector(cfg, api)
    assert a.acquire(threading.Event())
    lost: list[str] = []
    done = threading.Event()
    a.hold(lambda reason: (lost.append(reason), done.set()))
    api.down = True
    assert done.wait(5), "the watchdog did not fence"
    assert "renew deadline" in lost[0]
    a.release()


def test_identity_is_the_pod_name() -> None:
    assert main.leader_identity({"POD_NAME": "floe-abc", "POD_ID": "x"}) == "floe-abc"
    assert main.leader_identity({"FLOE_LEADER_IDENTITY": "me", "POD_NAME": "floe-abc"}) == "me"
    assert main.leader_identity({}).endswith(f"-{__import__('os').getpid()}")


def test_lease_flags_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOE_LEADER_ELECTION", "true")
    monkeypatch.setenv("POD_NAMESPACE", "floe-system")
    monkeypatch.setenv("FLOE_LEASE_NAME", "floe")
    monkeypatch.setenv("FLOE_LEASE_DURATION_SECONDS", "20")
    args = main.parse_args([])
    cfg = main.lease_config(args)
    assert args.leader_election
    assert (cfg.name, cfg.namespace, cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (
        "floe",
        "floe-system",
        20.0,
        10.0,
        2.0,
    )


def test_a_standby_answers_the_liveness_probe_and_frees_the_port_for_kopf() -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with main.standby_health(port), urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        assert answer.status == 200
    with socket.socket() as s:  # Kopf binds it next
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))


def test_leader_election_and_peering_exclude_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main, "_return_freed_memory", lambda: None)
    with pytest.raises(SystemExit, match="exclude each other"):
        main.main(["--leader-election", "--peering", "--lease-namespace", "ops"])
    with pytest.raises(SystemExit, match="namespace"):
        main.main(["--leader-election", "--lease-namespace", ""])
