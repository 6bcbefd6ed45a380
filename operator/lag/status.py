"""What status.lag and status.autoscaling say, and when a tick writes them.

A lag that only moved is written at most every `status_seconds`, and an unchanged one is
never rewritten: `updateTime` is when the values shown were measured, not a heartbeat. A status
heartbeat would cost one write per app every few minutes for nothing a user acts on (Kubernetes
moved node heartbeats out of Node status into Leases for the same reason); whether the operator
is alive is its `/healthz`, its leader Lease and the `up` series its alerts watch. A decision to
scale, a change of staleness or Burrow status, lag appearing or clearing, or a new hold reason
is written at once. A merge patch keeps keys it does not mention, so what no longer applies is
cleared with explicit nulls.

`records` is the app's whole lag, its repartition topics' included (`scrape.AppLag.total`); an
app that re-keys also gets `repartitionRecords`, the share of it in those topics, and `topics`
names each topic, so one can tell where the backlog is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from floe_operator import conditions, model
from floe_operator.lag import decide, scrape


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lag_status(result: scrape.AppLag, now: float, *, written: Mapping[str, Any]) -> dict[str, Any]:
    """status.lag of a scrape; a stale one keeps the values last `written` and says why."""
    if result.stale:
        previous = dict(written.get("lag") or {})
        previous.update({"stale": True, "error": (result.error or "")[:300]})
        return previous
    out: dict[str, Any] = {
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
    if result.has_repartition:
        out["repartitionRecords"] = result.repartition_total
    return out


def clear_gone(status_lag: dict[str, Any], app: model.StreamingApp, result: scrape.AppLag) -> None:
    """Null out of a fresh status.lag the error, the repartition share and the topics the live
    status has but this scrape has not."""
    live_lag = app.status.get("lag") or {}
    if result.stale:
        return
    for key in ("error", "repartitionRecords"):
        if key in live_lag:
            status_lag.setdefault(key, None)
    for topic in live_lag.get("topics") or {}:
        status_lag["topics"].setdefault(topic, None)


def autoscaling_status(mode: str, decision: decide.Decision, *, last_scale_at: float | None) -> dict[str, Any]:
    """status.autoscaling of a native decision."""
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
    if last_scale_at is not None:
        out["lastScaleTime"] = iso(last_scale_at)
    return out


def _comparable(s: Mapping[str, Any]) -> Any:
    lag_part = {k: v for k, v in (s.get("lag") or {}).items() if k != "updateTime" and v is not None}
    if isinstance(lag_part.get("topics"), dict):
        lag_part["topics"] = {t: v for t, v in lag_part["topics"].items() if v is not None}
    auto = {k: v for k, v in (s.get("autoscaling") or {}).items() if k not in ("inputs", "message")}
    return lag_part, auto


def due(
    status: Mapping[str, Any],
    *,
    written: Mapping[str, Any],
    written_at: float,
    now: float,
    status_seconds: float,
    urgent: bool,
) -> bool:
    """Whether `status` is to be written now, given what was `written` last and when."""
    if _comparable(status) == _comparable(written):
        return False
    if urgent or now - written_at >= status_seconds:
        return True
    old_lag, new_lag = written.get("lag") or {}, status.get("lag") or {}
    flipped = any(old_lag.get(k) != new_lag.get(k) for k in ("stale", "status")) or (
        bool(old_lag.get("records")) != bool(new_lag.get("records"))
    )
    old_auto, new_auto = written.get("autoscaling") or {}, status.get("autoscaling") or {}
    return flipped or old_auto.get("reason") != new_auto.get("reason")


def stopped_conditions(app: model.StreamingApp, result: scrape.AppLag, now: float) -> list[dict[str, Any]] | None:
    """status.conditions with PartitionsStopped as the scrape found the app's partitions
    (`conditions.partitions_stopped`); None when it stays as it is, or the scrape is stale."""
    if result.stale:
        return None
    return conditions.partitions_stopped(
        app.status.get("conditions") or [],
        [(s.topic, s.partition, s.offset, s.error) for s in result.stopped],
        generation=app.generation,
        now=iso(now),
    )
