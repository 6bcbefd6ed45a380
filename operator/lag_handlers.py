"""The lag loop: one scrape of every app per interval, then metrics, status and native scaling.

Kopf timers run per object; lag is measured for all apps together (one offsets request per
broker per interval), so the loop is a single task started with the operator and fed by a
watch handler that keeps the latest body of every StreamingApp. Each tick:

1. resolves every app to what a scrape needs (Secrets cached for a minute),
2. runs one `lag.Scraper.scrape` in a worker thread,
3. updates the Prometheus series,
4. for apps in Native mode, appends a sample and asks `autoscale.decide`; a change of
   replicas is written through the scale subresource, logged and posted as an event with
   its inputs,
5. writes status.lag and status.autoscaling when they changed (at most every
   `status_seconds` for a lag that only moved, at once for a decision or a change of
   staleness).

HPA and KEDA modes get the metrics and status.lag; the scaling is theirs.

Nothing transient ends the loop or loses an app: the loop is restarted with backoff if it
ever fails (even before its first tick, e.g. while the API server still answers 429
"storage is (re)initializing"), failed ticks are retried with backoff, and an app whose
Secrets cannot be read keeps the last values read, or is reported stale until they can be.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
import pydantic
from floe_operator import autoscale, cassandra, conditions, k8s, kafka, lag, lag_metrics, loops, model

log = logging.getLogger(__name__)

SECRET_TTL = 60.0
MAX_SAMPLES = 9000  # a 24 h stabilization window at a 10 s interval

EventSink = Callable[[Mapping[str, Any], str, str, str], Awaitable[None]]


@dataclass(frozen=True)
class Options:
    """How often and over which windows lag is measured (flags and environment in main)."""

    interval_seconds: float = 10.0
    status_window_seconds: float = 120.0
    rate_seconds: float = 60.0
    status_seconds: float = 30.0
    api_concurrency: int = 8


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class AppMemory:
    """What the loop remembers of one app between ticks (bounded)."""

    samples: deque[autoscale.Sample] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    last_scale_at: float | None = None
    capacity: float | None = None
    last_reason: str | None = None
    pending: tuple[int, float] | None = None  # replicas written, when; until the watch shows them
    written: dict[str, Any] = field(default_factory=dict)
    written_at: float = 0.0
    restored: bool = False


def rollout_in_progress(app: model.StreamingApp, replicas: int) -> bool:
    """The Deployment is still converging: Progressing, or fewer pods running or ready than asked for."""
    status = app.status
    progressing = conditions.find(status.get("conditions") or [], conditions.PROGRESSING)
    if progressing is not None and progressing.get("status") == "True":
        return True
    for key in ("replicas", "readyReplicas", "updatedReplicas"):
        if key in status and int(status[key]) != replicas:
            return True
    return False


def running_replicas(app: model.StreamingApp) -> int:
    return int(app.status.get("readyReplicas", app.spec.replicas))


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


class LagLoop:
    """The exporter and native autoscaler of every tracked app."""

    def __init__(
        self,
        *,
        cluster: k8s.Cluster,
        scraper: lag.Scraper,
        metrics: lag_metrics.LagMetrics,
        options: Options = Options(),
        emit: EventSink | None = None,
    ) -> None:
        self.cluster = cluster
        self.scraper = scraper
        self.metrics = metrics
        self.options = options
        self.emit = emit or cluster.post_event
        self.clock = scraper.clock
        self.apps: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.memory: dict[tuple[str, str], AppMemory] = {}
        self._secrets: dict[tuple[str, str], tuple[float, dict[str, str] | None]] = {}

    # --- what to scrape ------------------------------------------------------------------

    def track(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if meta.get("deletionTimestamp"):
            self.forget(*key)
        else:
            self.apps[key] = body

    def forget(self, namespace: str, name: str) -> None:
        self.apps.pop((namespace, name), None)
        self.memory.pop((namespace, name), None)

    async def _secret(self, namespace: str, name: str) -> dict[str, str] | None:
        cached = self._secrets.get((namespace, name))
        if cached is not None and time.monotonic() - cached[0] < SECRET_TTL:
            return cached[1]
        try:
            data = await self.cluster.secret_data(namespace, name)
        except k8s.ApiError as exc:
            if cached is None:
                raise
            # A Secret read before stays good while the API server is briefly unavailable.
            log.warning("Reading Secret %s/%s failed; using the last read error=%s", namespace, name, exc)
            return cached[1]
        self._secrets[(namespace, name)] = (time.monotonic(), data)
        return data

    async def _refs(
        self,
    ) -> tuple[list[lag.AppRef], dict[tuple[str, str], model.StreamingApp], dict[tuple[str, str], str]]:
        """What to scrape, the parsed apps, and the apps whose Secrets could not be read yet (key → why).

        An app whose Secrets cannot be read is kept (reported stale) rather than left out:
        leaving it out would drop its series, its status and its autoscaling history.
        """
        refs: list[lag.AppRef] = []
        parsed: dict[tuple[str, str], model.StreamingApp] = {}
        unresolved: dict[tuple[str, str], str] = {}
        for key, body in list(self.apps.items()):
            try:
                app = model.StreamingApp.from_body(body)
            except (pydantic.ValidationError, KeyError):
                continue  # the reconcile reports the invalid spec
            secrets: dict[str, dict[str, str]] = {}
            try:
                for name in model.referenced_secrets(app.spec):
                    data = await self._secret(app.namespace, name)
                    if data is not None:
                        secrets[name] = data
            except k8s.ApiError as exc:
                log.warning("Reading Secrets failed app=%s/%s error=%s", app.namespace, app.name, exc)
                unresolved[key] = f"reading Secrets failed: {exc}"
                parsed[key] = app
                continue
            refs.append(lag.app_ref(app, secrets))
            parsed[key] = app
        return refs, parsed, unresolved

    # --- one tick --------------------------------------------------------------------------

    async def tick(self) -> lag.Scrape:
        refs, apps, unresolved = await self._refs()
        scrape = await asyncio.to_thread(self.scraper.scrape, refs)
        if unresolved:
            stale = tuple(
                lag.AppLag(ns, app, scrape.at, stale=True, error=why) for (ns, app), why in unresolved.items()
            )
            errors = tuple(("kubernetes", why) for why in unresolved.values())
            scrape = dataclasses.replace(scrape, apps=scrape.apps + stale, errors=scrape.errors + errors)
        self.metrics.update(scrape)
        self.metrics.record_apps(apps.values())
        for source, message in scrape.errors:
            log.warning("Lag scrape failed source=%s error=%s", source, message)
        slots = asyncio.Semaphore(self.options.api_concurrency)

        async def one(app: model.StreamingApp, result: lag.AppLag) -> None:
            async with slots:
                try:
                    await self._app(app, result, scrape.at)
                except k8s.ApiError as exc:
                    if exc.status != 404:
                        log.warning("Writing lag status failed app=%s/%s error=%s", app.namespace, app.name, exc)

        # Apps are independent: their status writes and scale calls go out together (bounded).
        await asyncio.gather(*(one(apps[r.key], r) for r in scrape.apps if r.key in apps))
        for key in list(self.memory):
            if key not in apps:
                del self.memory[key]
        return scrape

    async def _app(self, app: model.StreamingApp, result: lag.AppLag, now: float) -> None:
        mem = self.memory.setdefault(result.key, AppMemory())
        if not mem.restored:
            self._restore(mem, app)
        status: dict[str, Any] = {"lag": self._lag_status(result, now, mem)}
        # A merge patch keeps keys it does not mention: clear what no longer applies.
        live_lag = app.status.get("lag") or {}
        if not result.stale:
            if "error" in live_lag:
                status["lag"]["error"] = None
            for topic in live_lag.get("topics") or {}:
                status["lag"]["topics"].setdefault(topic, None)
        auto = app.spec.autoscaling
        decision: autoscale.Decision | None = None
        if auto is not None and auto.mode == "Native":
            decision = await self._native(app, auto, result, now, mem)
            status["autoscaling"] = self._autoscaling_status(auto.mode, decision, mem, now)
        elif auto is not None:
            status["autoscaling"] = {"mode": auto.mode}
        await self._write_status(app, status, mem, now, urgent=decision is not None and decision.action != "Hold")

    def _restore(self, mem: AppMemory, app: model.StreamingApp) -> None:
        """Carry capacity and the last scale time across operator restarts."""
        mem.restored = True
        previous = app.status.get("autoscaling") or {}
        capacity = previous.get("capacityPerReplica")
        if isinstance(capacity, int | float) and capacity > 0:
            mem.capacity = float(capacity)
        mem.last_scale_at = _parse_time(previous.get("lastScaleTime"))

    def _lag_status(self, result: lag.AppLag, now: float, mem: AppMemory) -> dict[str, Any]:
        if result.stale:
            previous = dict(mem.written.get("lag") or {})
            previous.update({"stale": True, "error": (result.error or "")[:300]})
            return previous
        return {
            "records": result.total,
            "seconds": math.ceil(result.max_seconds),
            "maxRecords": result.max_lag,
            "status": result.worst_status(),
            "topics": {
                t: {"records": v["records"], "seconds": math.ceil(float(v["seconds"]))}
                for t, v in sorted(result.per_topic().items())
            },
            "stale": False,
            "updateTime": iso(now),
        }

    async def _native(
        self, app: model.StreamingApp, auto: model.AutoscalingSpec, result: lag.AppLag, now: float, mem: AppMemory
    ) -> autoscale.Decision:
        policy = autoscale.Policy.from_spec(auto, rate_seconds=self.options.rate_seconds)
        replicas = app.spec.replicas
        if mem.pending is not None:
            if mem.pending[0] == replicas or now - mem.pending[1] > 6 * self.options.interval_seconds:
                mem.pending = None
            else:
                replicas = mem.pending[0]
        if not result.stale:
            mem.samples.append(
                autoscale.Sample(
                    at=now, replicas=running_replicas(app), end=result.end_total, committed=result.committed_total
                )
            )
        keep = policy.stabilization_seconds + policy.rate_seconds + 3 * self.options.interval_seconds
        while mem.samples and mem.samples[0].at < now - keep:
            mem.samples.popleft()
        ctx = autoscale.Context(
            now=now,
            replicas=replicas,
            partitions=len(result.partitions) if not result.stale else int(app.status.get("partitions") or 0),
            stale=result.stale,
            rollout=rollout_in_progress(app, replicas),
            last_scale_at=mem.last_scale_at,
            capacity=mem.capacity,
            suspended=app.spec.suspend,
        )
        decision = autoscale.decide(list(mem.samples), policy, ctx)
        mem.capacity = decision.capacity
        self.metrics.record_decision(app.namespace, app.name, decision)
        inputs = " ".join(f"{k}={v}" for k, v in decision.inputs.items())
        if decision.action != "Hold":
            await self.cluster.scale(app.namespace, app.name, decision.replicas)
            mem.pending = (decision.replicas, now)
            mem.last_scale_at = now
            log.info(
                "Scaled app=%s/%s from=%d to=%d reason=%s %s",
                app.namespace,
                app.name,
                replicas,
                decision.replicas,
                decision.reason,
                inputs,
            )
            await self.emit(
                self.apps.get(result.key) or {},
                "Normal",
                decision.reason,
                f"Scaled from {replicas} to {decision.replicas}: {decision.message} ({inputs})",
            )
        else:
            log.debug("Held app=%s/%s reason=%s %s", app.namespace, app.name, decision.reason, inputs)
            if decision.reason != mem.last_reason and decision.reason in (
                autoscale.METRICS_STALE,
                autoscale.AT_LIMIT,
                autoscale.NO_PROGRESS,
            ):
                await self.emit(
                    self.apps.get(result.key) or {},
                    "Warning",
                    decision.reason,
                    f"Holding {replicas} replicas: {decision.message} ({inputs})",
                )
        mem.last_reason = decision.reason
        return decision

    def _autoscaling_status(
        self, mode: str, decision: autoscale.Decision, mem: AppMemory, now: float
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": mode,
            "desiredReplicas": decision.replicas,
            "action": decision.action,
            "reason": decision.reason,
            "message": decision.message,
            "inputs": {k: v for k, v in decision.inputs.items() if v is not None},
        }
        if decision.capacity is not None:
            out["capacityPerReplica"] = round(decision.capacity, 3)
        if mem.last_scale_at is not None:
            out["lastScaleTime"] = iso(mem.last_scale_at)
        return out

    async def _write_status(
        self, app: model.StreamingApp, status: dict[str, Any], mem: AppMemory, now: float, *, urgent: bool
    ) -> None:
        def comparable(s: Mapping[str, Any]) -> Any:
            lag_part = {k: v for k, v in (s.get("lag") or {}).items() if k != "updateTime" and v is not None}
            if isinstance(lag_part.get("topics"), dict):
                lag_part["topics"] = {t: v for t, v in lag_part["topics"].items() if v is not None}
            auto = {k: v for k, v in (s.get("autoscaling") or {}).items() if k not in ("inputs", "message")}
            return lag_part, auto

        if comparable(status) == comparable(mem.written):
            if now - mem.written_at < 10 * self.options.status_seconds:
                return
        elif not urgent and now - mem.written_at < self.options.status_seconds:
            old_lag, new_lag = mem.written.get("lag") or {}, status["lag"]
            flipped = any(old_lag.get(k) != new_lag.get(k) for k in ("stale", "status")) or (
                bool(old_lag.get("records")) != bool(new_lag.get("records"))
            )
            old_auto, new_auto = mem.written.get("autoscaling") or {}, status.get("autoscaling") or {}
            if not flipped and old_auto.get("reason") == new_auto.get("reason"):
                return
        await self.cluster.patch_status(app.namespace, app.name, status)
        mem.written = status
        mem.written_at = now

    async def run(self) -> None:
        """Tick forever, every `interval_seconds`; after failed ticks, wait longer (backoff) and try again."""
        failures = 0
        while True:
            started = self.clock()
            try:
                await self.tick()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                log.exception("Lag tick failed failures=%d", failures)
            wait = loops.backoff_seconds(failures, base=self.options.interval_seconds)
            await asyncio.sleep(max(0.0, wait - (self.clock() - started)))


def session_source(provisioner: cassandra.Provisioner) -> lag.SessionFor:
    """Sessions from the provisioner, so lag reads share the one connection pool per cluster."""

    def session_for(target: cassandra.Target) -> Any:
        return provisioner.session(target)

    return session_for


_process_metrics: lag_metrics.LagMetrics | None = None


def process_metrics() -> lag_metrics.LagMetrics:
    """The series on the process registry, created once (an operator restarted in-process reuses them)."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = lag_metrics.LagMetrics()
    return _process_metrics


def build_loop(deps: Any, options: Options, *, metrics: lag_metrics.LagMetrics | None = None) -> LagLoop:
    """A loop on the operator's shared clients (`reconcile.Deps`)."""
    inspector: kafka.Inspector = deps.kafka
    scraper = lag.Scraper(
        kafka_offsets=lag.KafkaOffsets(),
        cassandra_offsets=lag.CassandraOffsets(session_source(deps.provisioner)),
        partitions_of=inspector.partitions_sync,
        window_seconds=options.status_window_seconds,
        rate_seconds=options.rate_seconds,
    )
    return LagLoop(cluster=deps.cluster, scraper=scraper, metrics=metrics or process_metrics(), options=options)


# Metadata the loop never reads, often most of a body's size (kubectl apply keeps a copy of the
# spec in an annotation). Copying whole bodies on every watch event of every app took a
# twentieth of the operator's busy time in a burst of 200 new apps.
UNTRACKED_METADATA = ("managedFields", "annotations")


def tracked(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of what the loop keeps of an app's body (Kopf's body is a live view)."""
    snapshot = copy.deepcopy({k: body[k] for k in ("apiVersion", "kind", "spec", "status") if k in body})
    meta = body.get("metadata") or {}
    snapshot["metadata"] = copy.deepcopy({k: v for k, v in meta.items() if k not in UNTRACKED_METADATA})
    return snapshot


@dataclass
class _Book:
    """Bodies seen by the watch before the loop exists, and the loop once it does."""

    bodies: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    loop: LagLoop | None = None
    task: asyncio.Task[None] | None = None


def register(registry: kopf.OperatorRegistry, options: Options) -> kopf.OperatorRegistry:
    """Put the lag loop on `registry` (next to `handlers.register`)."""
    group, version, plural = model.GROUP, model.VERSION, model.PLURAL

    @kopf.on.startup(registry=registry, id="lag_start")
    async def lag_start(memo: kopf.Memo, **_: Any) -> None:
        book = _Book()
        memo.lag_book = book

        async def start() -> None:
            while getattr(memo, "deps", None) is None:
                await asyncio.sleep(0.1)
            if book.loop is None:
                book.loop = build_loop(memo.deps, options)
            for body in book.bodies.values():
                book.loop.track(body)
            log.info("Started lag loop interval_seconds=%s", options.interval_seconds)
            await book.loop.run()

        book.task = asyncio.create_task(
            loops.keep_running(start, what="Lag loop", base=options.interval_seconds), name="floe-lag-loop"
        )

    @kopf.on.cleanup(registry=registry, id="lag_stop")
    async def lag_stop(memo: kopf.Memo, **_: Any) -> None:
        book: _Book | None = getattr(memo, "lag_book", None)
        if book is not None and book.task is not None:
            book.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await book.task

    @kopf.on.event(group, version, plural, registry=registry, id="lag_track")
    async def lag_track(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        # a coroutine, so it runs on the event loop with the lag loop that reads the book
        # (Kopf runs a plain function in a worker thread)
        book: _Book | None = getattr(memo, "lag_book", None)
        if book is None:
            return
        snapshot = tracked(body)
        meta = snapshot["metadata"]
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if type == "DELETED":
            book.bodies.pop(key, None)
            if book.loop is not None:
                book.loop.forget(*key)
            return
        book.bodies[key] = snapshot
        if book.loop is not None:
            book.loop.track(snapshot)

    return registry
