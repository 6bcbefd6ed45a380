"""Time-lag interpolation, Burrow-style statuses and the exported series, on hand-made histories."""

from __future__ import annotations

import math

import pytest
from floe_operator.lag import decide
from floe_operator.lag import metrics as lag_metrics
from floe_operator.lag import scrape as lag_scrape
from prometheus_client import CollectorRegistry, generate_latest


def ring_of(points: list[tuple[int, float]], size: int = lag_scrape.RING_POINTS) -> lag_scrape.OffsetRing:
    ring = lag_scrape.OffsetRing(size)
    for offset, at in points:
        ring.add(offset, at)
    return ring


def test_interpolates_between_the_points_around_the_committed_offset() -> None:
    ring = ring_of([(100, 100.0), (200, 110.0), (300, 120.0)])
    seconds, exact = lag_scrape.time_lag(ring, committed=150, end=300, now=120.0)
    assert (seconds, exact) == (pytest.approx(15.0), True)
    seconds, _ = lag_scrape.time_lag(ring, committed=250, end=300, now=125.0)
    assert seconds == pytest.approx(10.0)


def test_caught_up_and_idle_is_zero_never_nan() -> None:
    ring = ring_of([(500, 10.0)])
    for now in (10.0, 1e6):
        seconds, exact = lag_scrape.time_lag(ring, committed=500, end=500, now=now)
        assert seconds == 0.0 and exact and not math.isnan(seconds)
    # No point at all (first scrape of an empty partition): still a number.
    assert lag_scrape.time_lag(lag_scrape.OffsetRing(), committed=0, end=0, now=5.0) == (0.0, True)
    assert lag_scrape.time_lag(lag_scrape.OffsetRing(), committed=0, end=10, now=5.0) == (0.0, False)


def test_quiet_topic_with_lag_grows_with_wall_time() -> None:
    # The producer stopped at 1000; the app is stuck at 900. Time lag keeps growing, not NaN and not 0.
    ring = ring_of([(800, 0.0), (1000, 10.0)])
    for now in (20.0, 500.0):
        ring.add(1000, now)  # unchanged end offsets add nothing
        seconds, exact = lag_scrape.time_lag(ring, committed=900, end=1000, now=now)
        assert seconds == pytest.approx(now - 5.0) and exact
    assert len(ring) == 2


def test_committed_older_than_the_ring_is_extrapolated_and_flagged() -> None:
    ring = ring_of([(1000, 100.0), (2000, 110.0)])
    seconds, exact = lag_scrape.time_lag(ring, committed=500, end=2000, now=110.0)
    assert seconds == pytest.approx(15.0) and not exact
    # One point only: the point's age is a lower bound.
    seconds, exact = lag_scrape.time_lag(ring_of([(1000, 100.0)]), committed=500, end=1000, now=130.0)
    assert seconds == pytest.approx(30.0) and not exact


def test_ring_is_bounded_and_resets_when_offsets_go_back() -> None:
    ring = ring_of([(i * 10, float(i)) for i in range(100)], size=8)
    assert len(ring) == 8 and ring.points()[0] == (920, 92.0)
    ring.add(5, 200.0)
    assert ring.points() == [(5, 200.0)]


def test_a_consumer_far_behind_keeps_the_points_that_date_its_committed_offset() -> None:
    # A surge of 10,000 records/s for 4 s, then 100/s for 16 s, while the consumer stays at 5,000:
    # more points than the ring holds arrive after the record it waits on.
    state = lag_scrape.PartitionState(ring=lag_scrape.OffsetRing(8))
    rows: list[tuple[float, int, int, float | None]] = [(float(t), 10_000 * t, 5_000, None) for t in range(5)]
    rows += [(float(t), 40_000 + 100 * (t - 4), 5_000, None) for t in range(5, 21)]
    observe(state, rows, window=120.0)
    assert len(state.ring) == 8
    seconds, exact = lag_scrape.time_lag(state.ring, committed=5_000, end=41_600, now=20.0)
    assert (seconds, exact) == (pytest.approx(19.5), True)  # record 5,000 arrived at 0.5 s


def test_a_full_ring_thins_where_interpolation_dates_best() -> None:
    ring = lag_scrape.OffsetRing(4)
    for offset, at in [(0, 0.0), (100, 1.0), (200, 2.0), (1_200, 3.0)]:
        ring.add(offset, at, keep_from=50)
    ring.add(2_200, 4.0, keep_from=50)
    # (100, 1.0) lies on the line from (0, 0.0) to (200, 2.0); the rate change at 200 is kept.
    assert ring.points() == [(0, 0.0), (200, 2.0), (1_200, 3.0), (2_200, 4.0)]


def test_a_full_ring_of_a_consumer_that_caught_up_drops_its_oldest_point() -> None:
    ring = lag_scrape.OffsetRing(4)
    for offset, at in [(0, 0.0), (100, 1.0), (200, 2.0), (1_200, 3.0)]:
        ring.add(offset, at, keep_from=offset)
    ring.add(2_200, 4.0, keep_from=150)  # past the second oldest point: the oldest dates nothing
    assert ring.points() == [(100, 1.0), (200, 2.0), (1_200, 3.0), (2_200, 4.0)]


def observe(state: lag_scrape.PartitionState, rows: list[tuple[float, int, int, float | None]], window: float) -> None:
    for at, end, committed, committed_at in rows:
        state.observe(at=at, end=end, committed=committed, committed_at=committed_at, window=window)


def test_status_ok_warn_stall_stop() -> None:
    window = 100.0
    # OK: lag goes up and down
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000 + t * 10, 900 + t * 10 - (t % 20), t) for t in range(0, 200, 10)], window)
    assert lag_scrape.partition_status(s, now=190, window=window, has_commit_time=True) == "OK"
    # WARN: lag grew at every observation, commits keep moving
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000 + t * 20, 900 + t * 10, t) for t in range(0, 200, 10)], window)
    assert lag_scrape.partition_status(s, now=190, window=window, has_commit_time=True) == "WARN"
    # STALL: commits keep being written, the offset does not move
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000 + t, 900, t) for t in range(0, 200, 10)], window)
    assert lag_scrape.partition_status(s, now=190, window=window, has_commit_time=True) == "STALL"
    # STOP: nothing committed for longer than the window
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000, 900, 0.0) for t in range(0, 200, 10)], window)
    assert lag_scrape.partition_status(s, now=190, window=window, has_commit_time=True) == "STOP"
    # ... but caught up is always OK, and a young partition is not judged yet
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000, 1000, 0.0) for t in range(0, 200, 10)], window)
    assert lag_scrape.partition_status(s, now=190, window=window, has_commit_time=True) == "OK"
    s = lag_scrape.PartitionState()
    observe(s, [(t, 1000, 900, 0.0) for t in range(0, 50, 10)], window)
    assert lag_scrape.partition_status(s, now=40, window=window, has_commit_time=True) == "OK"
    assert len(s.window) <= lag_scrape.WINDOW_OBSERVATIONS


def test_metrics_follow_scrapes_and_drop_gone_series() -> None:
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    part = lag_scrape.PartitionLag(
        topic="in",
        partition=3,
        end=500,
        committed=400,
        source="cassandra",
        lag=100,
        lag_seconds=12.5,
        exact=True,
        status="WARN",
    )
    app = lag_scrape.AppLag(
        "ns", "a", 1000.0, (part,), end_total=500, committed_total=400, input_rate=5.0, consumption_rate=4.0
    )
    metrics.update(lag_scrape.Scrape(at=1000.0, duration=0.01, apps=(app,), errors=()))
    labels = {"namespace": "ns", "app": "a", "topic": "in", "partition": "3"}
    get = registry.get_sample_value
    assert get("floe_consumergroup_lag", labels) == 100
    assert get("floe_consumergroup_lag_seconds", labels) == 12.5
    assert get("floe_consumergroup_group_offset", labels) == 400
    assert get("floe_partition_latest_offset", labels) == 500
    assert get("floe_consumergroup_partition_status", {**labels, "status": "WARN"}) == 1
    assert get("floe_consumergroup_partition_status", {**labels, "status": "OK"}) == 0
    assert get("floe_consumergroup_sum_lag", {"namespace": "ns", "app": "a"}) == 100
    assert get("floe_consumergroup_input_records_per_second", {"namespace": "ns", "app": "a"}) == 5.0
    assert get("floe_consumergroup_consumption_records_per_second", {"namespace": "ns", "app": "a"}) == 4.0
    assert get("floe_app_partitions_stopped", {"namespace": "ns", "app": "a"}) == 0
    assert get("floe_lag_last_success_timestamp_seconds") == 1000.0

    # A failed scrape: values kept, stale flagged, error counted, last success unchanged.
    stale = lag_scrape.AppLag("ns", "a", 1010.0, stale=True, error="Kafka down")
    metrics.update(lag_scrape.Scrape(at=1010.0, duration=5.0, apps=(stale,), errors=(("kafka", "down"),)))
    assert get("floe_consumergroup_lag", labels) == 100
    assert get("floe_lag_metrics_stale", {"namespace": "ns", "app": "a"}) == 1
    assert get("floe_lag_scrape_errors_total", {"source": "kafka"}) == 1
    assert get("floe_lag_last_success_timestamp_seconds") == 1000.0

    decision = decide.Decision(replicas=3, action="ScaleUp", reason="LagGrowing", message="")
    metrics.record_decision("ns", "a", decision)
    assert get("floe_autoscaler_desired_replicas", {"namespace": "ns", "app": "a"}) == 3
    text = generate_latest(registry).decode()
    assert "# HELP floe_consumergroup_lag Records not yet processed" in text
    assert 'floe_consumergroup_lag{app="a",namespace="ns",partition="3",topic="in"} 100.0' in text

    # The app is gone: its series go too.
    metrics.update(lag_scrape.Scrape(at=1020.0, duration=0.01, apps=(), errors=()))
    assert get("floe_consumergroup_lag", labels) is None
    assert get("floe_consumergroup_sum_lag", {"namespace": "ns", "app": "a"}) is None
    assert get("floe_lag_metrics_stale", {"namespace": "ns", "app": "a"}) is None
    assert get("floe_autoscaler_desired_replicas", {"namespace": "ns", "app": "a"}) is None


def test_a_moving_group_coordinator_is_told_from_other_kafka_failures() -> None:
    """A coordinator being elected or loading is asked again within the read's timeout; any
    other failure marks the app stale at once."""
    from confluent_kafka import KafkaError, KafkaException

    moving = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
    for code in moving:
        assert lag_scrape.coordinator_moving(KafkaException(KafkaError(code)))
    for code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.GROUP_AUTHORIZATION_FAILED):
        assert not lag_scrape.coordinator_moving(KafkaException(KafkaError(code)))
    assert not lag_scrape.coordinator_moving(KafkaException("no KafkaError inside"))


def test_app_conditions_and_replicas_are_series_for_alerts() -> None:
    from floe_operator import model

    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    body = {
        "metadata": {"name": "a", "namespace": "ns", "uid": "u"},
        "spec": {
            "image": "floe-job:dev",
            "job": {"entrypoint": "job.py"},
            "kafka": {"bootstrapServers": "k:9092", "topics": ["in"]},
            "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}},
        },
        "status": {
            "replicas": 3,
            "readyReplicas": 1,
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "Degraded", "status": "True"},
                {"type": "StateProvisioned", "status": "True"},
            ],
        },
    }
    metrics.record_apps([model.StreamingApp.from_body(body)])
    get = registry.get_sample_value
    app = {"namespace": "ns", "app": "a"}
    assert get("floe_app_condition", {**app, "condition": "Degraded"}) == 1
    assert get("floe_app_condition", {**app, "condition": "Ready"}) == 0
    assert get("floe_app_condition", {**app, "condition": "StateProvisioned"}) is None  # not watched
    assert get("floe_app_replicas", app) == 3
    assert get("floe_app_ready_replicas", app) == 1
    metrics.record_apps([])
    assert get("floe_app_condition", {**app, "condition": "Degraded"}) is None


def test_partitions_a_poison_record_stopped_are_counted_per_app() -> None:
    registry = CollectorRegistry()
    metrics = lag_metrics.LagMetrics(registry)
    stopped = (
        lag_scrape.StoppedPartition("in", 0, 41, "ValueError: bad"),
        lag_scrape.StoppedPartition("app-words-repartition", 2, 7, "ValueError: bad"),
    )
    app = lag_scrape.AppLag("ns", "a", 1000.0, stopped=stopped)
    metrics.update(lag_scrape.Scrape(at=1000.0, duration=0.01, apps=(app,), errors=()))
    assert registry.get_sample_value("floe_app_partitions_stopped", {"namespace": "ns", "app": "a"}) == 2
