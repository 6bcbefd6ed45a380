"""Pure parts of `kubectl floe`: the patch bodies its verbs send, and what `status` shows.

Every write is a JSON merge patch of the StreamingApp's spec, never of a child: the operator owns
the children and would put back anything else on its next pass (contract 4), while the spec is
what it renders them from. So `suspend`/`resume` set spec.suspend (the operator scales the
Deployment to 0 and back), `restart` sets spec.restartNonce (the operator puts it on the pod
template, which rolls every pod; `kubectl rollout restart` on the Deployment would be undone, as
its annotation is not one Floe renders) and `reset-offsets` sets spec.offsetReset, with each
field it does not use set to null so that what a previous reset had (a timestamp, topics) is not
merged into the new one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

RESET_TARGETS = ("earliest", "latest", "timestamp", "offsets")
_OFFSET = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249}):(?P<partition>\d+)=(?P<offset>\d+)$")
_RESET_ID = re.compile(r"^[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?$")


# status.replicas' counts, in the order status shows them (deployment: the Deployment's spec.replicas)
REPLICA_COUNTS = ("desired", "deployment", "current", "ready", "updated", "available")


class UsageError(ValueError):
    """The command line asks for something the verb cannot do; the message names the flag."""


def now_stamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


# -- patch bodies ----------------------------------------------------------------------------


def suspend_patch(suspend: bool) -> dict[str, Any]:
    return {"spec": {"suspend": suspend}}


def restart_patch(nonce: str) -> dict[str, Any]:
    if not nonce or len(nonce) > 128:
        raise UsageError("--nonce must be 1-128 characters (spec.restartNonce)")
    return {"spec": {"restartNonce": nonce}}


def parse_offset(text: str) -> dict[str, Any]:
    """`topic:partition=offset` as an item of spec.offsetReset.offsets."""
    m = _OFFSET.match(text)
    if not m:
        raise UsageError(f"--offset {text!r}: expected TOPIC:PARTITION=OFFSET, e.g. orders:3=1200")
    return {"topic": m["topic"], "partition": int(m["partition"]), "offset": int(m["offset"])}


def offset_reset_patch(
    *,
    reset_id: str,
    to: str,
    timestamp: str | None = None,
    topics: Sequence[str] = (),
    offsets: Sequence[str] = (),
) -> dict[str, Any]:
    """spec.offsetReset for these flags, checked as the CRD checks it, so a wrong combination is
    refused here, naming the flag, before anything is sent."""
    if to not in RESET_TARGETS:
        raise UsageError(f"--to {to!r}: one of {', '.join(RESET_TARGETS)}")
    if not _RESET_ID.match(reset_id) or len(reset_id) > 63:
        raise UsageError(f"--id {reset_id!r}: 1-63 of [A-Za-z0-9.-_], starting and ending alphanumeric")
    if (to == "timestamp") != (timestamp is not None):
        raise UsageError("--timestamp is required with --to timestamp and not allowed otherwise")
    if timestamp is not None:
        try:
            datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"--timestamp {timestamp!r}: an RFC 3339 time, e.g. 2025-03-01T12:00:00Z") from None
    if (to == "offsets") != bool(offsets):
        raise UsageError("--offset is required with --to offsets and not allowed otherwise")
    if to == "offsets" and topics:
        raise UsageError("--topic does not go with --to offsets: each --offset names its topic")
    return {
        "spec": {
            "offsetReset": {
                "id": reset_id,
                "to": to,
                "timestamp": timestamp,
                "topics": list(topics) or None,
                "offsets": [parse_offset(o) for o in offsets] or None,
            }
        }
    }


def snapshot_source(snapshot: Mapping[str, Any], app: str) -> tuple[str, dict[str, Any] | None]:
    """(location, volume) of a StreamingAppSnapshot, refused unless it is of `app` and succeeded."""
    name = (snapshot.get("metadata") or {}).get("name", "")
    spec, phase = snapshot.get("spec") or {}, (snapshot.get("status") or {}).get("phase")
    if spec.get("app") != app:
        raise UsageError(f"--snapshot {name}: it is a snapshot of {spec.get('app')!r}, not of {app!r}")
    if phase != "Succeeded":
        raise UsageError(f"--snapshot {name}: its phase is {phase or 'not set yet'}, not Succeeded")
    volume = spec.get("volume")
    return str(spec.get("location", "")), ({"claimName": volume["claimName"],
                                            "mountPath": volume.get("mountPath", "/snapshots")} if volume else None)


def state_restore_patch(*, restore_id: str, location: str, claim: str | None = None,
                        mount_path: str = "/snapshots", volume: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """spec.stateRestore for these flags, checked as the CRD checks it, naming the flag."""
    if not _RESET_ID.match(restore_id) or len(restore_id) > 63:
        raise UsageError(f"--id {restore_id!r}: 1-63 of [A-Za-z0-9.-_], starting and ending alphanumeric")
    if volume is None and claim is not None:
        volume = {"claimName": claim, "mountPath": mount_path}
    if location.startswith("file://"):
        if volume is None:
            raise UsageError("--claim is required with a file:// --location: the PersistentVolumeClaim it lies on")
        if not location.startswith(f"file://{volume['mountPath'].rstrip('/')}/"):
            raise UsageError(f"--location {location}: must lie below the claim's mount path {volume['mountPath']}")
    elif volume is not None:
        raise UsageError("--claim is for file:// locations only")
    return {"spec": {"stateRestore": {"id": restore_id, "location": location, "volume": volume}}}


# -- status ----------------------------------------------------------------------------------


def _pod_row(pod: Mapping[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return {
        "name": pod["metadata"]["name"],
        "phase": (pod.get("status") or {}).get("phase", ""),
        "ready": bool(statuses) and all(c.get("ready") for c in statuses),
        "restarts": sum(int(c.get("restartCount") or 0) for c in statuses),
        "deleting": "deletionTimestamp" in pod["metadata"],
    }


def status_view(
    app: Mapping[str, Any],
    *,
    deployment: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    partitions: Sequence[Mapping[str, Any]] | None,
    partitions_from: str | None,
    partitions_error: str | None,
) -> dict[str, Any]:
    """Everything `status` shows, as one JSON-ready mapping (what `-o json` prints)."""
    meta, spec, status = app["metadata"], app.get("spec") or {}, app.get("status") or {}
    dep_spec = (deployment or {}).get("spec") or {}
    return {
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
        "appId": status.get("appId"),
        "generation": meta.get("generation"),
        "observedGeneration": status.get("observedGeneration"),
        "suspended": bool(spec.get("suspend")),
        "replicas": {
            "desired": spec.get("replicas"),
            "deployment": dep_spec.get("replicas") if deployment is not None else None,
            "current": status.get("replicas"),
            "ready": status.get("readyReplicas"),
            "updated": status.get("updatedReplicas"),
            "available": status.get("availableReplicas"),
        },
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
        "lag": status.get("lag"),
        "offsetReset": status.get("offsetReset"),
        "pods": [_pod_row(p) for p in pods],
        "partitions": list(partitions or []),
        "partitionsFrom": partitions_from,
        "partitionsError": partitions_error,
    }


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, as kubectl prints them; None shows as '-'."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def one_line(text: Any, limit: int = 100) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_status(view: Mapping[str, Any]) -> str:
    """The human form of `status_view`."""
    r = view["replicas"]
    lag = view.get("lag") or {}
    counts = ", ".join(f"{k} {_dash(r[k])}" for k in REPLICA_COUNTS)
    lines = [
        f"StreamingApp {view['namespace']}/{view['name']}  app id {_dash(view['appId'])}  "
        f"generation {_dash(view['generation'])} (observed {_dash(view['observedGeneration'])})",
        f"Suspended:  {'yes' if view['suspended'] else 'no'}",
        f"Replicas:   {counts}",
    ]
    if lag:
        stale = " (stale)" if lag.get("stale") else ""
        lines.append(
            f"Lag:        {_dash(lag.get('records'))} records, {_dash(lag.get('seconds'))} s"
            f"{stale} at {_dash(lag.get('updateTime'))}"
        )
    reset = view.get("offsetReset")
    if reset:
        why = f" ({reset['reason']})" if reset.get("reason") else ""
        lines.append(f"Reset:      {reset.get('id')} to {reset.get('to')}: {reset.get('phase')}{why}")
    lines += ["", table(("CONDITION", "STATUS", "REASON", "MESSAGE"),
                        ((c["type"], c["status"], c["reason"], one_line(c["message"])) for c in view["conditions"]))]
    if view["pods"]:
        lines += ["", table(("POD", "PHASE", "READY", "RESTARTS"),
                            ((p["name"], p["phase"] + (" (deleting)" if p["deleting"] else ""),
                              "yes" if p["ready"] else "no", p["restarts"]) for p in view["pods"]))]
    lines.append("")
    if view["partitions"]:
        lines.append(f"Partitions (offsets rows, read in {view['partitionsFrom']}):")
        lines.append(
            table(
                ("TOPIC", "PARTITION", "STAGE", "OWNER", "NEXT OFFSET", "END OFFSET", "LAG", "LAST COMMIT", "NOTE"),
                (
                    (p["topic"], p["partition"], p.get("stage"), p.get("owner") or None, p["next_offset"],
                     p.get("end_offset"), p.get("lag"), p.get("committed_at"), _note(p))
                    for p in view["partitions"]
                ),
            )
        )
    elif view["partitionsError"]:
        lines.append(f"Partitions: not shown: {view['partitionsError']}")
    else:
        lines.append("Partitions: no offsets rows yet (nothing committed)")
    return "\n".join(lines)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _note(row: Mapping[str, Any]) -> str | None:
    if row.get("stopped_at") is not None:
        return f"stopped at {row['stopped_at']}: {one_line(row.get('stopped_error'), 60)}"
    if row.get("held_until"):
        return f"held by a snapshot until {row['held_until']}"
    return "batch in flight" if row.get("in_flight") else None


def exec_pod(pods: Iterable[Mapping[str, Any]], container: str) -> str | None:
    """The pod to read the offsets rows in: a Running one whose app container is ready (else any
    Running one), not being deleted; None when there is none (a suspended app has no pod)."""
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and "deletionTimestamp" not in p["metadata"]]

    def ready(p: Mapping[str, Any]) -> bool:
        return any(c.get("name") == container and c.get("ready")
                   for c in (p.get("status") or {}).get("containerStatuses") or [])

    running.sort(key=lambda p: (not ready(p), p["metadata"]["name"]))
    return str(running[0]["metadata"]["name"]) if running else None
