"""spec.offsetReset: a declared, one-shot move of the app's committed input offsets.

The offsets a replica starts from are the rows Floe owns in Cassandra (`floe_jobs.offsets`),
so that is what a reset rewrites, with conditional writes that keep the fence consistent (the
next claim sees the new position). It runs once per `spec.offsetReset.id`, only while nothing
can read or write those rows: the app suspended (spec.suspend), no pod of it left (terminating
ones included), and no member in its Kafka consumer group (a replica run outside Kubernetes,
e.g. by `floe run`). Until then it waits, and says why in the OffsetReset condition; the
reconcile tries again on every pass. Once done, status.offsetReset records the id, where each
partition was and where it is now, and the id is never run again.

Only the input topics (spec.kafka.topics) move, for every stage that reads them: each stage
keeps its own position per partition, and every stage's row of a partition moves (status names
each by stage). A partition no stage has a row for gets one position that every stage reading the
topic takes over when it next runs. A stage that reads a repartition topic keeps its own
positions, and drops records of a source position it has already applied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from floe_operator import cassandra, conditions, k8s, kafka, model, render

log = logging.getLogger(__name__)

FIELD = "spec.offsetReset"
OWNER = "floe-operator/offset-reset"

# Phases of status.offsetReset and reasons of the OffsetReset condition.
DONE = "Done"
WAITING = "Waiting"
FAILED = "Failed"
OFFSETS_RESET = "OffsetsReset"
NOT_SUSPENDED = "AppNotSuspended"
REPLICAS_RUNNING = "ReplicasRunning"
GROUP_ACTIVE = "ConsumerGroupActive"
INVALID = "InvalidOffsetReset"
OFFSETS_CHANGED = "OffsetsChanged"


@dataclass(frozen=True)
class Result:
    """What a pass did about spec.offsetReset: status.offsetReset and the OffsetReset condition."""

    phase: str
    reason: str
    message: str
    record: dict[str, Any]

    @property
    def done(self) -> bool:
        return self.phase == DONE


def pending(app: model.StreamingApp) -> model.OffsetResetSpec | None:
    """The reset the spec asks for and status does not record as done, or None."""
    spec = app.spec.offset_reset
    if spec is None:
        return None
    previous = app.status.get("offsetReset") or {}
    if previous.get("id") == spec.id and previous.get("phase") == DONE:
        return None
    return spec


def _refuse(spec: model.OffsetResetSpec, phase: str, reason: str, message: str) -> Result:
    return Result(phase, reason, message, {"id": spec.id, "phase": phase, "to": spec.to, "reason": reason})


def _topics(app: model.StreamingApp, spec: model.OffsetResetSpec) -> list[str]:
    if spec.to == "offsets":
        return sorted({o.topic for o in spec.offsets})
    return sorted(spec.topics or app.spec.kafka.topics)


def positions(
    app: model.StreamingApp,
    spec: model.OffsetResetSpec,
    marks: Mapping[tuple[str, int], tuple[int, int]],
    at_time: Mapping[tuple[str, int], int] | None = None,
) -> dict[tuple[str, int], int] | str:
    """Where each partition goes, from the log's watermarks (and, for `timestamp`, the offsets
    Kafka found for the time); a message naming the field when the spec cannot be honoured."""
    unknown = sorted(set(_topics(app, spec)) - set(app.spec.kafka.topics))
    if unknown:
        return f"{FIELD}.topics: {', '.join(unknown)} not among spec.kafka.topics"
    if spec.to == "earliest":
        return {tp: low for tp, (low, _) in marks.items()}
    if spec.to == "latest":
        return {tp: high for tp, (_, high) in marks.items()}
    if spec.to == "timestamp":
        return dict(at_time or {})
    chosen: dict[tuple[str, int], int] = {}
    for i, o in enumerate(spec.offsets):
        where = f"{FIELD}.offsets[{i}]"
        bounds = marks.get((o.topic, o.partition))
        if bounds is None:
            return f"{where}.partition: topic {o.topic} has no partition {o.partition}"
        low, high = bounds
        if not low <= o.offset <= high:
            return f"{where}.offset: {o.offset} is outside the log of {o.topic}/{o.partition} ({low} to {high})"
        chosen[(o.topic, o.partition)] = o.offset
    return chosen


def timestamp_ms(spec: model.OffsetResetSpec) -> int:
    assert spec.timestamp is not None
    return int(datetime.fromisoformat(spec.timestamp).timestamp() * 1000)


async def run(
    app: model.StreamingApp,
    *,
    cluster: k8s.Cluster,
    provisioner: cassandra.Provisioner,
    inspector: kafka.Inspector,
    secrets: Mapping[str, Mapping[str, str]],
    now: str,
) -> Result | None:
    """Run the pending reset if nothing can touch the offsets now; None when none is pending."""
    spec = pending(app)
    if spec is None:
        return None
    target = kafka.target_of(app, secrets)
    try:
        waiting = await _waiting(app, spec, cluster=cluster, inspector=inspector, target=target)
        if waiting is not None:
            return waiting
        topics = _topics(app, spec)
        marks = await asyncio.to_thread(inspector.watermarks_sync, target, topics)
        at_time = None
        if spec.to == "timestamp":
            at_time = await asyncio.to_thread(inspector.offsets_at_sync, target, topics, timestamp_ms(spec))
    except kafka.KafkaUnavailable as exc:
        return _refuse(spec, FAILED, conditions.KAFKA_UNAVAILABLE, f"{FIELD} (id {spec.id}): {exc}; retrying")
    chosen = positions(app, spec, marks, at_time)
    if isinstance(chosen, str):
        return _refuse(spec, FAILED, INVALID, chosen)
    try:
        moved = await provisioner.reset_offsets(
            cassandra.target_of(app, secrets), app, chosen, owner=f"{OWNER}/{spec.id}"
        )
    except cassandra.CassandraUnavailable as exc:
        return _refuse(spec, FAILED, conditions.CASSANDRA_UNAVAILABLE, f"{FIELD} (id {spec.id}): {exc}; retrying")
    if moved is None:
        return _refuse(
            spec, FAILED, OFFSETS_CHANGED, f"{FIELD} (id {spec.id}): offsets changed while being reset; retrying"
        )
    try:
        await asyncio.to_thread(inspector.commit_group_sync, target, app.consumer_group, chosen)
    except kafka.KafkaUnavailable as exc:
        # The runtime reads its positions from Cassandra; the group only mirrors them for tools.
        log.warning("Setting the group's offsets failed app=%s/%s error=%s", app.namespace, app.name, exc)
    return _done(app, spec, moved, now=now)


async def _waiting(
    app: model.StreamingApp,
    spec: model.OffsetResetSpec,
    *,
    cluster: k8s.Cluster,
    inspector: kafka.Inspector,
    target: kafka.Target,
) -> Result | None:
    """Why the reset must wait, if anything could still move the offsets: the app not
    suspended, its pods still there, or members in its consumer group (a replica running
    outside Kubernetes). Raises KafkaUnavailable when the group cannot be described."""
    if not app.spec.suspend:
        return _refuse(
            spec,
            WAITING,
            NOT_SUSPENDED,
            f"{FIELD} (id {spec.id}) waits for spec.suspend: true; offsets move only while no replica runs",
        )
    running = await _running(app, cluster=cluster, inspector=inspector, target=target)
    if running is None:
        return None
    reason, what = running
    return _refuse(spec, WAITING, reason, f"{FIELD} (id {spec.id}) waits for {what}")


async def _running(
    app: model.StreamingApp, *, cluster: k8s.Cluster, inspector: kafka.Inspector, target: kafka.Target
) -> tuple[str, str] | None:
    """(reason, what) while something of the app could still read or write its offsets rows: a
    pod of it (terminating ones included) or a member of its consumer group."""
    pods = await cluster.pod_names(app.namespace, render.label_selector(app))
    if pods:
        return REPLICAS_RUNNING, f"the app's pods to stop: {', '.join(pods[:5])}"
    members = await asyncio.to_thread(inspector.group_members_sync, target, app.consumer_group)
    if members:
        return GROUP_ACTIVE, (
            f"consumer group {app.consumer_group} to lose its {members} member(s), a replica running "
            "outside Kubernetes (floe run?); stop it"
        )
    return None


async def still_running(
    app: model.StreamingApp, *, cluster: k8s.Cluster, inspector: kafka.Inspector, target: kafka.Target
) -> str | None:
    """What of the app still runs (None: nothing can touch its offsets rows), for a restore in
    place. Raises KafkaUnavailable when the group cannot be described."""
    running = await _running(app, cluster=cluster, inspector=inspector, target=target)
    return None if running is None else running[1]


def _done(app: model.StreamingApp, spec: model.OffsetResetSpec, moved: list[Any], *, now: str) -> Result:
    """The Done result of a reset that moved `moved`: its message and the status record."""
    partitions = [
        {"topic": m.topic, "partition": m.partition}
        | ({"stage": m.stage} if m.stage is not None else {})
        | {"from": m.before, "to": m.after}
        | ({"abandonedBatch": m.abandoned} if m.abandoned is not None else {})
        for m in moved
    ]
    what = spec.to if spec.to != "timestamp" else f"timestamp {spec.timestamp}"
    names = ", ".join(_topics(app, spec))
    count = len({(m.topic, m.partition) for m in moved})
    message = f"Moved {count} partition(s) of {names} to {what} ({FIELD} id {spec.id})"
    log.info("Reset offsets app=%s/%s id=%s to=%s partitions=%d", app.namespace, app.name, spec.id, spec.to, count)
    record = {"id": spec.id, "phase": DONE, "to": spec.to, "time": now, "partitions": partitions}
    if spec.timestamp is not None:
        record["timestamp"] = spec.timestamp
    return Result(DONE, OFFSETS_RESET, message, record)


def put_status(app: model.StreamingApp, status: dict[str, Any], result: Result, *, now: str) -> None:
    """Write `result` into a status computed by `conditions.status_for`."""
    status["offsetReset"] = result.record
    status["conditions"] = conditions.set_condition(
        status["conditions"],
        type_=conditions.OFFSET_RESET,
        status="True" if result.done else "False",
        reason=result.reason,
        message=result.message,
        generation=app.generation,
        now=now,
    )


def event(result: Result) -> conditions.Event:
    return conditions.Event("Normal" if result.done else "Warning", result.reason, result.message)
