"""The lag loop's bookkeeping with its I/O replaced by recorders: when status is written, when the
scale subresource is called, which events go out, how modes differ. The real sources and API
server are exercised in tests/integration/lag."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from floe_operator import handlers, k8s, loops
from floe_operator.lag import loop as lag_loop
from floe_operator.lag import metrics as lag_metrics
from floe_operator.lag import scale as lag_scale
from floe_operator.lag import scrape as lag_scrape
from prometheus_client import CollectorRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scraper:
    """Hands the loop prepared results: end offsets grow by `rate`/s, committed by `consumed`/s."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.stale = False
        self.end = 0
        self.committed = 0

    def scrape(self, refs: Sequence[lag_scrape.AppRef]) -> lag_scrape.Scrape:
        apps = []
        for ref in refs:
            if self.stale:
                apps.append(lag_scrape.AppLag(ref.namespace, ref.name, self.clock(), stale=True, error="Kafka down"))
                continue
            part = lag_scrape.PartitionLag(
                topic="in",
                partition=0,
                end=self.end,
                committed=self.committed,
                source="cassandra",
                lag=self.end - self.committed,
                lag_seconds=0.0,
                exact=True,
                status="OK",
            )
            apps.append(
                lag_scrape.AppLag(
                    ref.namespace, ref.name, self.clock(), (part,), end_total=self.end, committed_total=self.committed
                )
            )
        errors = (("kafka", "down"),) if self.stale else ()
        return lag_scrape.Scrape(at=self.clock(), duration=0.0, apps=tuple(apps), errors=errors)


class Cluster:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.scales: list[int] = []
        self.secret_error: k8s.ApiError | None = None
        self.events: list[tuple[str, str, str]] = []
        self._secrets_read: dict[tuple[str, str], Any] = {}

    async def post_event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    async def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any]:
        self.patches.append(dict(status))
        return {}

    async def scale(self, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        self.scales.append(replicas)
        return {}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if self.secret_error is not None:
            raise self.secret_error
        return {"data": {"password": base64.b64encode(b"p").decode()}, "metadata": {"resourceVersion": "1"}}

    # Secret reads as the operator makes them, on top of `get`: remembered, and reused by the loop.
    secret = k8s.Cluster.secret
    secret_data = k8s.Cluster.secret_data
    recent_secret_data = k8s.Cluster.recent_secret_data


def body(mode: str = "Native", replicas: int = 4, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
        "spec": {
            "image": "i",
            "job": {"entrypoint": "m:f"},
            "replicas": replicas,
            "kafka": {"bootstrapServers": "k:9092", "topics": ["in"]},
            "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}},
            "autoscaling": {"mode": mode, "maxReplicas": 8, "stabilizationWindowSeconds": 60},
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas, **status},
    }


def make(mode: str = "Native", **kw: Any) -> tuple[lag_loop.LagLoop, Clock, Scraper, Cluster, list[Any]]:
    clock = Clock()
    scraper = Scraper(clock)
    cluster = Cluster()
    loop = lag_loop.LagLoop(
        cluster=cluster,  # type: ignore[arg-type]
        scraper=scraper,  # type: ignore[arg-type]
        metrics=lag_metrics.LagMetrics(CollectorRegistry()),
        options=lag_loop.Options(interval_seconds=10, status_seconds=30),
    )
    track(loop, body(mode, **kw))
    return loop, clock, scraper, cluster, cluster.events


def track(loop: lag_loop.LagLoop, app: dict[str, Any]) -> None:
    """What the apps index would hold once the watch delivered `app`."""
    loop.apps[(app["metadata"]["namespace"], app["metadata"]["name"])] = app  # type: ignore[index]


def tick(loop: lag_loop.LagLoop, clock: Clock, seconds: float = 10) -> None:
    clock.now += seconds
    asyncio.run(loop.tick())


def test_status_is_written_on_change_and_throttled_otherwise() -> None:
    loop, clock, scraper, cluster, _ = make(replicas=1)
    tick(loop, clock)
    assert cluster.patches[0]["lag"]["records"] == 0
    assert cluster.patches[0]["autoscaling"]["reason"] == "CollectingMetrics"
    tick(loop, clock)  # a new reason is written at once
    assert len(cluster.patches) == 2 and cluster.patches[1]["autoscaling"]["reason"] == "WithinTarget"
    tick(loop, clock)
    assert len(cluster.patches) == 2  # nothing changed
    for _ in range(40):  # 400 s: no heartbeat rewrites an unchanged status
        tick(loop, clock)
    assert len(cluster.patches) == 2, "an unchanged status is never rewritten, however long ago it was written"
    scraper.end = 50  # lag appears: from zero to non-zero is written at once
    tick(loop, clock)
    assert len(cluster.patches) == 3 and cluster.patches[-1]["lag"]["records"] == 50
    scraper.end = 60  # lag only moved: wait for status_seconds
    tick(loop, clock)
    assert len(cluster.patches) == 3
    tick(loop, clock, 25)
    assert len(cluster.patches) == 4 and cluster.patches[-1]["lag"]["records"] == 60
    scraper.stale = True  # staleness flips are written at once, with the last values kept
    tick(loop, clock)
    last = cluster.patches[-1]
    assert last["lag"]["stale"] is True and last["lag"]["records"] == 60
    assert last["autoscaling"]["reason"] == "MetricsStale"


def test_native_decision_scales_once_and_posts_an_event_with_inputs() -> None:
    loop, clock, _, cluster, events = make(replicas=5)  # 5 replicas > 1 partition
    tick(loop, clock)
    assert cluster.scales == [1]
    assert events[0][:2] == ("Normal", "ReplicasExceedPartitions") and "partitions=1" in events[0][2]
    auto = cluster.patches[-1]["autoscaling"]
    assert (auto["action"], auto["desiredReplicas"]) == ("ScaleDown", 1) and "lastScaleTime" in auto
    # The watch has not shown the new count yet: no second scale from the stale body.
    tick(loop, clock)
    assert cluster.scales == [1]


def _ready(status: str, reason: str) -> list[dict[str, str]]:
    return [{"type": "Ready", "status": status, "reason": reason, "message": "m"}]


def test_an_app_a_failed_restore_holds_at_zero_is_not_scaled_and_one_running_again_is() -> None:
    # 5 replicas over 1 partition: a decision would scale down to 1
    held = {"stateRestore": {"id": "r1", "phase": "Failed"}, "conditions": _ready("False", "RestoreFailed")}
    loop, clock, _, cluster, _ = make(replicas=5, **held)
    tick(loop, clock)
    assert cluster.scales == [], "a failed restore holds the app at zero, and its replicas were changed"
    assert cluster.patches[-1]["autoscaling"]["reason"] == "Restoring"
    # the failure came before anything was deleted: the app runs again, and is scaled again
    track(loop, body(replicas=5, stateRestore={"id": "r1", "phase": "Failed"}, conditions=_ready("True", "Ready")))
    tick(loop, clock)
    assert cluster.scales == [1]


def test_hpa_mode_gets_lag_but_no_decision() -> None:
    loop, clock, _, cluster, events = make(mode="HPA", replicas=10)
    tick(loop, clock)
    assert cluster.scales == [] and events == []
    assert cluster.patches[-1]["autoscaling"] == {"mode": "HPA"}


def test_capacity_and_last_scale_survive_a_restart() -> None:
    loop, clock, _, _, _ = make()
    track(loop, body(replicas=1, autoscaling={"capacityPerReplica": 123.0, "lastScaleTime": "2026-01-01T00:00:00Z"}))
    tick(loop, clock)
    mem = loop.memory[("ns", "a")]
    assert mem.capacity == 123.0 and mem.last_scale_at == 1767225600.0


def test_rollout_in_progress() -> None:
    from floe_operator import model

    app = model.StreamingApp.from_body(body())
    assert not lag_scale.rollout_in_progress(app, 4)
    assert lag_scale.rollout_in_progress(app, 5)
    progressing = body(conditions=[{"type": "Progressing", "status": "True"}])
    assert lag_scale.rollout_in_progress(model.StreamingApp.from_body(progressing), 4)


def stale_gauge(loop: lag_loop.LagLoop) -> float | None:
    for family in loop.metrics.families():
        for sample in family.samples if family.name == "floe_lag_metrics_stale" else ():
            if sample.labels == {"namespace": "ns", "app": "a"}:
                return sample.value
    return None


def test_an_app_whose_secrets_cannot_be_read_is_kept_stale_until_they_can(monkeypatch: pytest.MonkeyPatch) -> None:
    loop, clock, scraper, cluster, _ = make(mode="HPA")
    with_secret = body("HPA")
    with_secret["spec"]["env"] = [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]
    track(loop, with_secret)
    cluster.secret_error = k8s.ApiError(429, "storage is (re)initializing")
    tick(loop, clock)
    assert stale_gauge(loop) == 1 and ("ns", "a") in loop.memory
    assert (
        cluster.patches[-1]["lag"]["stale"] is True
        and "storage is (re)initializing" in cluster.patches[-1]["lag"]["error"]
    )

    cluster.secret_error = None
    scraper.end = 7
    tick(loop, clock)
    assert stale_gauge(loop) == 0 and cluster.patches[-1]["lag"]["records"] == 7

    # Once read, a Secret outlives a failing API server: the app keeps being measured.
    monkeypatch.setattr(lag_loop, "SECRET_TTL", 0.0)
    cluster.secret_error = k8s.ApiError(0, "API server unreachable")
    tick(loop, clock)
    assert stale_gauge(loop) == 0


def test_backoff_doubles_from_the_interval_up_to_a_cap() -> None:
    assert [loops.backoff_seconds(n, base=5) for n in range(7)] == [5, 5, 10, 20, 40, 60, 60]
    assert loops.backoff_seconds(3, base=90) == 90  # never shorter than the interval itself


def test_the_loop_is_started_again_after_any_failure_with_backoff() -> None:
    attempts: list[int] = []
    waits: list[float] = []

    async def start() -> None:
        attempts.append(len(attempts))
        if len(attempts) <= 3:
            raise k8s.ApiError(429, "storage is (re)initializing")
        raise asyncio.CancelledError  # the operator stops

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(loops.keep_running(start, what="Lag loop", base=5, sleep=sleep))
    assert len(attempts) == 4 and waits == [5, 10, 20]


def test_kopf_retries_back_off_from_5_seconds_to_5_minutes() -> None:
    assert [handlers.backoff(r) for r in range(8)] == [5, 10, 20, 40, 80, 160, 300, 300]


def test_the_loop_reads_one_body_per_app_from_the_apps_index() -> None:
    index = {("ns", "a"): [{"metadata": {"name": "a"}}], ("ns", "gone"): []}
    apps = lag_loop.IndexedApps(index)
    assert dict(apps.items()) == {("ns", "a"): {"metadata": {"name": "a"}}}
    assert apps.get(("ns", "a")) == {"metadata": {"name": "a"}} and apps.get(("ns", "gone")) is None
    assert apps.get(("ns", "never")) is None and len(apps) == 1


def test_an_app_recreated_under_the_same_name_starts_afresh() -> None:
    loop, clock, _, _, _ = make()
    tick(loop, clock)
    loop.memory[("ns", "a")].capacity = 5.0
    recreated = body()
    recreated["metadata"]["uid"] = "u-2"
    track(loop, recreated)
    tick(loop, clock)
    assert loop.memory[("ns", "a")].uid == "u-2" and loop.memory[("ns", "a")].capacity != 5.0


def test_a_cassandra_secret_missing_a_key_marks_only_its_app_stale() -> None:
    """The reconcile checks an app's Secrets before it connects; the lag loop reads them on its
    own, and a credentials Secret that lost its username since must not end the tick for every
    app: only that app is stale, with the reference to fix."""
    loop, clock, scraper, cluster, _ = make(mode="HPA")
    broken = body("HPA")
    broken["metadata"]["name"] = "b"
    broken["spec"]["state"]["cassandra"]["credentialsSecretRef"] = {"name": "cass"}  # holds only a password
    track(loop, broken)
    scraper.end = 3
    tick(loop, clock)
    stale = {
        sample.labels["app"]: sample.value
        for family in loop.metrics.families()
        if family.name == "floe_lag_metrics_stale"
        for sample in family.samples
    }
    assert stale == {"a": 0, "b": 1}
    (error,) = [p["lag"]["error"] for p in cluster.patches if p["lag"].get("stale")]
    assert "spec.state.cassandra.credentialsSecretRef" in error and "go together" in error
