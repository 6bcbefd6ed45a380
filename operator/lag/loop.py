"""The lag loop: one scrape of every app per interval, then metrics, status and native scaling.

Kopf timers run per object; lag is measured for all apps together (one offsets request per
broker per interval), so the loop is a single task started with the operator. It reads the
apps from the reconciler's apps index (`model.APPS_INDEX`), and their Secrets through the
reads the reconcile already made (`k8s.Cluster.recent_secret_data`). Each tick:

1. resolves every app to what a scrape needs (Secrets read within the last minute),
2. runs one `scrape.Scraper.scrape` in a worker thread,
3. updates the Prometheus series (`metrics`),
4. for apps in Native mode, lets `scale.Actuator` sample, decide and write the replicas,
5. writes status.lag and status.autoscaling when `status.due` says so.

HPA and KEDA modes get the metrics and status.lag; the scaling is theirs.

Nothing transient ends the loop or loses an app: the loop is restarted with backoff if it
ever fails (even before its first tick, e.g. while the API server still answers 429
"storage is (re)initializing"), failed ticks are retried with backoff, and an app whose
Secrets cannot be read keeps the last values read, or is reported stale until they can be.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
import pydantic
from floe_operator import cassandra, k8s, kafka, loops, model
from floe_operator.lag import metrics, scale, scrape, status

log = logging.getLogger(__name__)

SECRET_TTL = 60.0

AppKey = tuple[str, str]


@dataclass(frozen=True)
class Options:
    """How often and over which windows lag is measured (flags and environment in main)."""

    interval_seconds: float = 5.0
    status_window_seconds: float = 120.0
    rate_seconds: float = 60.0
    status_seconds: float = 30.0
    api_concurrency: int = 8


@dataclass
class AppMemory(scale.ScaleMemory):
    """What the loop remembers of one app between ticks (bounded): the actuator's memory, the
    status last written, and which app it was (a new app of the same name starts afresh)."""

    uid: str = ""
    written: dict[str, Any] = field(default_factory=dict)
    written_at: float = 0.0


class LagLoop:
    """The exporter and native autoscaler of every app in `apps` (by (namespace, name), read each tick)."""

    def __init__(
        self,
        *,
        cluster: k8s.Cluster,
        scraper: scrape.Scraper,
        metrics: metrics.LagMetrics,
        options: Options = Options(),
        emit: scale.EventSink | None = None,
        apps: Mapping[AppKey, Mapping[str, Any]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.scraper = scraper
        self.metrics = metrics
        self.options = options
        self.clock = scraper.clock
        self.apps: Mapping[AppKey, Mapping[str, Any]] = apps if apps is not None else {}
        self.memory: dict[AppKey, AppMemory] = {}
        self.actuator = scale.Actuator(
            cluster=cluster,
            metrics=metrics,
            emit=emit or cluster.post_event,
            interval_seconds=options.interval_seconds,
            rate_seconds=options.rate_seconds,
        )

    # --- what to scrape ------------------------------------------------------------------

    async def _refs(self) -> tuple[list[scrape.AppRef], dict[AppKey, model.StreamingApp], dict[AppKey, str]]:
        """What to scrape, the parsed apps, and the apps whose Secrets could not be read yet (key → why).

        An app whose Secrets cannot be read is kept (reported stale) rather than left out:
        leaving it out would drop its series, its status and its autoscaling history. An app
        being deleted is left out.
        """
        refs: list[scrape.AppRef] = []
        parsed: dict[AppKey, model.StreamingApp] = {}
        unresolved: dict[AppKey, str] = {}
        for key, body in list(self.apps.items()):
            if (body.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                app = model.StreamingApp.from_body(body)
            except (pydantic.ValidationError, KeyError):
                continue  # the reconcile reports the invalid spec
            secrets: dict[str, dict[str, str]] = {}
            try:
                for name in model.referenced_secrets(app.spec):
                    data = await self.cluster.recent_secret_data(app.namespace, name, max_age=SECRET_TTL)
                    if data is not None:
                        secrets[name] = data
            except k8s.ApiError as exc:
                log.warning("Reading Secrets failed app=%s/%s error=%s", app.namespace, app.name, exc)
                unresolved[key] = f"reading Secrets failed: {exc}"
                parsed[key] = app
                continue
            try:
                refs.append(scrape.app_ref(app, secrets))
            except cassandra.CredentialsRejected as exc:
                unresolved[key] = str(exc)  # a Secret lost a key since the reconcile checked it
            parsed[key] = app
        return refs, parsed, unresolved

    # --- one tick --------------------------------------------------------------------------

    async def tick(self) -> scrape.Scrape:
        refs, apps, unresolved = await self._refs()
        result = await asyncio.to_thread(self.scraper.scrape, refs)
        if unresolved:
            stale = tuple(
                scrape.AppLag(ns, app, result.at, stale=True, error=why) for (ns, app), why in unresolved.items()
            )
            errors = tuple(("kubernetes", why) for why in unresolved.values())
            result = dataclasses.replace(result, apps=result.apps + stale, errors=result.errors + errors)
        self.metrics.update(result)
        self.metrics.record_apps(apps.values())
        for source, message in result.errors:
            log.warning("Lag scrape failed source=%s error=%s", source, message)
        slots = asyncio.Semaphore(self.options.api_concurrency)

        async def one(app: model.StreamingApp, app_lag: scrape.AppLag) -> None:
            async with slots:
                try:
                    await self._app(app, app_lag, result.at)
                except k8s.ApiError as exc:
                    if exc.status != 404:
                        log.warning("Writing lag status failed app=%s/%s error=%s", app.namespace, app.name, exc)

        # Apps are independent: their status writes and scale calls go out together (bounded).
        await asyncio.gather(*(one(apps[r.key], r) for r in result.apps if r.key in apps))
        for key in list(self.memory):
            if key not in apps:
                del self.memory[key]
        return result

    def _memory(self, key: AppKey, app: model.StreamingApp) -> AppMemory:
        mem = self.memory.get(key)
        if mem is None or mem.uid != app.uid:
            mem = self.memory[key] = AppMemory(uid=app.uid)
        if not mem.restored:
            mem.restore(app)
        return mem

    async def _app(self, app: model.StreamingApp, result: scrape.AppLag, now: float) -> None:
        mem = self._memory(result.key, app)
        new: dict[str, Any] = {"lag": status.lag_status(result, now, written=mem.written)}
        status.clear_gone(new["lag"], app, result)
        auto = app.spec.autoscaling
        urgent = False
        if auto is not None and auto.mode == "Native":
            decision = await self.actuator.native(
                app, auto, result, now=now, mem=mem, body=self.apps.get(result.key) or {}
            )
            new["autoscaling"] = status.autoscaling_status(auto.mode, decision, last_scale_at=mem.last_scale_at)
            urgent = decision.action != "Hold"
        elif auto is not None:
            new["autoscaling"] = {"mode": auto.mode}
        if status.due(
            new,
            written=mem.written,
            written_at=mem.written_at,
            now=now,
            status_seconds=self.options.status_seconds,
            urgent=urgent,
        ):
            await self.cluster.patch_status(app.namespace, app.name, new)
            mem.written = new
            mem.written_at = now
        stopped = status.stopped_conditions(app, result, now)
        if stopped is not None:
            # the whole list (a merge patch replaces lists): the reconcile keeps this type as it finds it
            await self.cluster.patch_status(app.namespace, app.name, {"conditions": stopped})
            log.warning(
                "Partitions stopped app=%s/%s stopped=%s",
                app.namespace,
                app.name,
                [(s.topic, s.partition, s.offset) for s in result.stopped],
            )

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


def session_source(provisioner: cassandra.Provisioner) -> scrape.SessionFor:
    """Sessions from the provisioner, so lag reads share the one connection pool per cluster."""

    def session_for(target: cassandra.Target) -> Any:
        return provisioner.session(target)

    return session_for


_process_metrics: metrics.LagMetrics | None = None


def process_metrics() -> metrics.LagMetrics:
    """The series on the process registry, created once (an operator restarted in-process reuses them)."""
    global _process_metrics
    if _process_metrics is None:
        _process_metrics = metrics.LagMetrics()
    return _process_metrics


def build_loop(
    deps: Any,
    options: Options,
    *,
    apps: Mapping[AppKey, Mapping[str, Any]] | None = None,
    lag_metrics: metrics.LagMetrics | None = None,
) -> LagLoop:
    """A loop on the operator's shared clients (`reconcile.Deps`) over `apps`."""
    inspector: kafka.Inspector = deps.kafka
    scraper = scrape.Scraper(
        kafka_offsets=scrape.KafkaOffsets(),
        cassandra_offsets=scrape.CassandraOffsets(session_source(deps.provisioner)),
        partitions_of=inspector.partitions_sync,
        window_seconds=options.status_window_seconds,
        rate_seconds=options.rate_seconds,
    )
    return LagLoop(
        cluster=deps.cluster,
        scraper=scraper,
        metrics=lag_metrics or process_metrics(),
        options=options,
        apps=apps,
    )


class IndexedApps(Mapping[AppKey, Mapping[str, Any]]):
    """The apps index (a Kopf index: a store of bodies per key) read as one body per key."""

    def __init__(self, index: Mapping[AppKey, Any]) -> None:
        self._index = index

    def __getitem__(self, key: AppKey) -> Mapping[str, Any]:
        for body in self._index[key]:
            return body  # type: ignore[no-any-return]
        raise KeyError(key)

    def __iter__(self) -> Any:
        return iter(model.indexed_bodies(self._index))

    def __len__(self) -> int:
        return len(model.indexed_bodies(self._index))

    def items(self) -> Any:
        return model.indexed_bodies(self._index).items()


def register(registry: kopf.OperatorRegistry, options: Options) -> kopf.OperatorRegistry:
    """Put the lag loop on `registry`, next to `handlers.register`, whose apps index it reads."""

    @kopf.on.startup(registry=registry, id="lag_start")
    async def lag_start(memo: kopf.Memo, **kwargs: Any) -> None:
        index = kwargs.get(model.APPS_INDEX)
        if index is None:
            raise kopf.PermanentError(f"The lag loop reads the apps index {model.APPS_INDEX}: register the handlers")
        built: list[LagLoop] = []  # one loop, whose memory outlives a restart of its task

        async def start() -> None:
            while getattr(memo, "deps", None) is None:
                await asyncio.sleep(0.1)
            if not built:
                built.append(build_loop(memo.deps, options, apps=IndexedApps(index)))
            log.info("Started lag loop interval_seconds=%s", options.interval_seconds)
            await built[0].run()

        memo.lag_task = asyncio.create_task(
            loops.keep_running(start, what="Lag loop", base=options.interval_seconds), name="floe-lag-loop"
        )

    @kopf.on.cleanup(registry=registry, id="lag_stop")
    async def lag_stop(memo: kopf.Memo, **_: Any) -> None:
        await loops.stop(getattr(memo, "lag_task", None))

    return registry
