"""Leader election through a `coordination.k8s.io/v1` Lease, so that of several operator
replicas exactly one reconciles and scales while the others stand by.

The rules are client-go's `leaderelection`:

- A replica takes the Lease when it is free (no holder: released) or expired. Expiry is judged
  on this replica's own monotonic clock: the Lease counts as expired `leaseDurationSeconds`
  after this replica last saw its holder or renew time change, never by comparing the Lease's
  timestamps with the local wall clock, so clock skew between nodes cannot hand it over early.
- The leader renews every `retry_period`; every write is a PUT carrying the resourceVersion it
  read, so of two replicas racing for the Lease one gets 409 Conflict and stays a standby.
- Fencing: a leader that has not renewed for `renew_deadline` (shorter than the lease
  duration) gives up at once, before any standby may take over. The operator then exits
  (`main`), since stopping every in-flight write of Kopf's handlers and the lag loop any other
  way is not something Kopf offers; Kubernetes restarts the container, which comes back as a
  standby. The same happens when the leader sees another holder in the Lease.
- On a clean stop the leader releases the Lease (empty holder), so a standby takes it at its
  next try instead of waiting for it to expire.

Decisions are pure functions (`decide`, `observe`, `expired`, `fenced`, `lease_spec`);
`Elector` is the one class that reads and writes the Lease, through `k8s.Cluster`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from floe_operator import k8s
from prometheus_client import Gauge

log = logging.getLogger(__name__)

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"

IS_LEADER = Gauge("floe_operator_leader", "1 while this operator replica holds the leader Lease, else 0")

Decision = Literal["create", "take", "renew", "wait"]


@dataclass(frozen=True)
class Config:
    """Where the Lease is and how long its terms are (seconds), as in client-go."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these terms (client-go refuses the same)."""
        found = []
        if not self.name or not self.namespace or not self.identity:
            found.append("the Lease needs a name, a namespace and a holder identity")
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            found.append("lease duration, renew deadline and retry period must be positive")
        if self.lease_duration <= self.renew_deadline:
            found.append("the lease duration must be longer than the renew deadline")
        if self.renew_deadline <= self.retry_period:
            found.append("the renew deadline must be longer than the retry period")
        return found


@dataclass(frozen=True)
class Record:
    """What a Lease says about its holder."""

    holder: str
    lease_duration: float
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str


@dataclass(frozen=True)
class Observed:
    """The last version of the holder's record this replica saw, and when (its monotonic clock)."""

    holder: str
    renew_time: str | None
    since: float


def record_of(lease: Mapping[str, Any] | None) -> Record | None:
    """The holder record of a Lease as the API returns it; None when there is no Lease."""
    if lease is None:
        return None
    spec = lease.get("spec") or {}
    return Record(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration=float(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
    )


def observe(previous: Observed | None, record: Record | None, *, now: float) -> Observed | None:
    """This replica's view after reading `record` at `now`: the clock restarts only when the
    holder or its renew time changed since the last read."""
    if record is None:
        return None
    if previous is not None and (previous.holder, previous.renew_time) == (record.holder, record.renew_time):
        return previous
    return Observed(holder=record.holder, renew_time=record.renew_time, since=now)


def expired(observed: Observed | None, record: Record | None, *, now: float) -> bool:
    """Whether the holder has had its lease duration, on this replica's clock, to renew and has not."""
    if observed is None or record is None:
        return True
    return now >= observed.since + record.lease_duration


def decide(record: Record | None, *, identity: str, expired: bool) -> Decision:
    """What a replica does with the Lease as read: create it, take it, renew it, or wait.

    A holder equal to `identity` is this replica (its pod name): a container restarted in the
    same pod renews at once, since the process that held it before is gone."""
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if not record.holder or expired:
        return "take"
    return "wait"


def fenced(last_renewed: float | None, *, renew_deadline: float, now: float) -> bool:
    """Whether a leader that last renewed at `last_renewed` must stop writing: past the renew
    deadline, a standby may take the Lease soon (at the lease duration)."""
    return last_renewed is not None and now - last_renewed >= renew_deadline


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(record: Record | None, *, identity: str, lease_duration: float, now: datetime) -> dict[str, Any]:
    """The Lease's spec when `identity` takes or renews it: acquireTime and the transition count
    move only when the holder changes."""
    stamp = micro_time(now)
    keeps = record is not None and record.holder == identity
    transitions = record.transitions if record is not None else 0
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(lease_duration)),
        "acquireTime": (record.acquire_time if keeps and record is not None else None) or stamp,
        "renewTime": stamp,
        "leaseTransitions": transitions if keeps or record is None else transitions + 1,
    }


def released_spec(record: Record, *, now: datetime) -> dict[str, Any]:
    """The Lease's spec when its holder lets it go: no holder, so the next standby takes it now."""
    stamp = micro_time(now)
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": record.transitions,
    }


def lease_manifest(config: Config, spec: Mapping[str, Any], *, resource_version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": config.name, "namespace": config.namespace}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": dict(spec)}


class LeaseApi(Protocol):
    """The calls `Elector` makes (`k8s.Cluster` has them)."""

    def get_sync(
        self, api_version: str, kind: str, namespace: str, name: str, *, timeout: float = 30
    ) -> dict[str, Any] | None: ...

    def create_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]: ...

    def replace_sync(self, obj: Mapping[str, Any], *, timeout: float = 30) -> dict[str, Any]: ...


class Elector:
    """Takes, holds and releases the Lease for this replica. Runs in threads of its own, so a
    busy event loop (a burst of reconciles) never delays a renewal."""

    def __init__(
        self,
        config: Config,
        api: LeaseApi,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self._api = api
        self._clock = clock
        self._wall = wall
        self._observed: Observed | None = None
        self._renewed: float | None = None  # when the last successful write was started
        self._last_holder: str | None = None
        self._told_forbidden = False
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Calls never outlast the renew deadline, so the deadline check is never behind a hung call.
        self._timeout = max(0.5, config.renew_deadline / 2)

    @property
    def leading(self) -> bool:
        return self._renewed is not None

    def try_acquire_or_renew(self) -> bool:
        """One read and, if the rules allow, one write of the Lease; True when this replica holds it."""
        cfg = self.config
        started = self._clock()
        try:
            lease = self._api.get_sync(API_VERSION, KIND, cfg.namespace, cfg.name, timeout=self._timeout)
        except k8s.ApiError as exc:
            log.warning("Reading the Lease failed lease=%s/%s error=%s", cfg.namespace, cfg.name, exc)
            return False
        record = record_of(lease)
        self._observed = observe(self._observed, record, now=started)
        decision = decide(record, identity=cfg.identity, expired=expired(self._observed, record, now=self._clock()))
        if decision == "wait":
            assert record is not None
            if record.holder != self._last_holder and self._renewed is None:
                log.info("Standing by lease=%s/%s holder=%s", cfg.namespace, cfg.name, record.holder)
            self._last_holder = record.holder
            return False
        spec = lease_spec(record, identity=cfg.identity, lease_duration=cfg.lease_duration, now=self._wall())
        try:
            if decision == "create":
                self._api.create_sync(lease_manifest(cfg, spec), timeout=self._timeout)
            else:
                assert record is not None
                body = lease_manifest(cfg, spec, resource_version=record.resource_version)
                self._api.replace_sync(body, timeout=self._timeout)
        except k8s.ApiError as exc:
            self._write_failed(decision, exc)
            return False
        if decision != "renew" or self._renewed is None:
            log.info("Became leader lease=%s/%s identity=%s", cfg.namespace, cfg.name, cfg.identity)
        self._renewed = started
        self._last_holder = cfg.identity
        return True

    def _write_failed(self, decision: Decision, exc: k8s.ApiError) -> None:
        cfg = self.config
        if exc.status == 403 and decision == "create":
            if not self._told_forbidden:
                log.warning(
                    "The Lease does not exist and this operator may not create it; waiting for it "
                    "(the Helm chart creates it) lease=%s/%s error=%s",
                    cfg.namespace,
                    cfg.name,
                    exc,
                )
                self._told_forbidden = True
        elif exc.status == 409:
            log.info("Lost a race for the Lease lease=%s/%s action=%s", cfg.namespace, cfg.name, decision)
        else:
            log.warning(
                "Writing the Lease failed lease=%s/%s action=%s error=%s", cfg.namespace, cfg.name, decision, exc
            )

    def acquire(self, stop: threading.Event) -> bool:
        """Try every retry period until this replica leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                IS_LEADER.set(1)
                return True
            stop.wait(self.config.retry_period)
        return False

    def hold(self, on_lost: Callable[[str], None]) -> None:
        """Keep renewing in a background thread; a watchdog thread calls `on_lost(reason)` once the
        renew deadline passes without a renewal, or the Lease names another holder."""

        def renew() -> None:
            while not self._stop.wait(self.config.retry_period):
                self.try_acquire_or_renew()
                if self._last_holder not in (None, self.config.identity):
                    on_lost(f"the Lease is held by {self._last_holder}")
                    return

        def watch() -> None:
            step = min(0.5, self.config.retry_period / 2)
            while not self._stop.wait(step):
                if fenced(self._renewed, renew_deadline=self.config.renew_deadline, now=self._clock()):
                    on_lost(f"no renewal for {self.config.renew_deadline:g} s (the renew deadline)")
                    return

        for target, name in ((renew, "floe-lease-renew"), (watch, "floe-lease-watchdog")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def release(self) -> None:
        """Stop renewing and hand the Lease back (empty holder) if this replica still holds it."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self._timeout * 2 + self.config.retry_period)
        IS_LEADER.set(0)
        if self._renewed is None:
            return
        self._renewed = None
        cfg = self.config
        try:
            record = record_of(self._api.get_sync(API_VERSION, KIND, cfg.namespace, cfg.name, timeout=self._timeout))
            if record is None or record.holder != cfg.identity:
                return
            spec = released_spec(record, now=self._wall())
            self._api.replace_sync(
                lease_manifest(cfg, spec, resource_version=record.resource_version), timeout=self._timeout
            )
        except k8s.ApiError as exc:
            log.warning("Releasing the Lease failed lease=%s/%s error=%s", cfg.namespace, cfg.name, exc)
            return
        log.info("Released the Lease lease=%s/%s identity=%s", cfg.namespace, cfg.name, cfg.identity)
