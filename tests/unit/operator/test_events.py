"""The Event the operator posts about a StreamingApp (a pure builder)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from floe_operator import k8s

APP = {
    "apiVersion": "streaming.floe.dev/v1alpha1",
    "kind": "StreamingApp",
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1", "resourceVersion": "7"},
}
NOW = datetime(2026, 5, 4, 3, 2, 1, 500, tzinfo=UTC)


def test_event_names_the_app_and_says_who_posted_it() -> None:
    event = k8s.event_manifest(
        APP, "Warning", "CassandraUnavailable", "connect failed", now=NOW, instance="floe-operator-7d9f"
    )
    assert event["metadata"] == {"generateName": "orders.", "namespace": "shop"}
    assert event["involvedObject"] == {
        "apiVersion": "streaming.floe.dev/v1alpha1",
        "kind": "StreamingApp",
        "name": "orders",
        "namespace": "shop",
        "uid": "u-1",
    }
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "CassandraUnavailable", "connect failed")
    assert event["source"] == {"component": "floe-operator"} and event["reportingComponent"] == "floe-operator"
    assert event["reportingInstance"] == "floe-operator-7d9f"
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-05-04T03:02:01Z"
    assert event["eventTime"] == "2026-05-04T03:02:01.000500Z"
    assert event["count"] == 1


def test_times_are_utc_whatever_the_clock_zone() -> None:
    local = NOW.astimezone(timezone(timedelta(hours=5)))
    assert k8s.event_manifest(APP, "Normal", "Ready", "", now=local)["lastTimestamp"] == "2026-05-04T03:02:01Z"


def test_long_messages_are_cut_to_what_the_api_server_keeps() -> None:
    event = k8s.event_manifest(APP, "Normal", "Scaled", "x" * 5000, now=NOW)
    assert len(event["message"]) == k8s.EVENT_MESSAGE_LIMIT and event["message"].endswith("...")
    short = k8s.event_manifest(APP, "Normal", "Scaled", "y" * k8s.EVENT_MESSAGE_LIMIT, now=NOW)
    assert short["message"] == "y" * k8s.EVENT_MESSAGE_LIMIT
