"""Automatic rollback: a generation whose pods fail runs the last Ready generation's spec again.

Pure. With `spec.rollout.autoRollback`, every pass that finds the current generation Ready
records it and its spec in `status.lastReady`. When a later generation fails — its newest pods
crash-loop, cannot pull their image or are refused by admission, or its rollout passes the
Deployment's progress deadline — the reconciler renders the app's children from the recorded
spec instead (`effective`), so the Deployment goes back to the pods that worked, and
`status.rolledBack` says which generation failed and why. The spec itself is left as declared:
a GitOps tool keeps seeing what it applied, and the next change of the spec (a new generation)
is tried as usual. This is what the Flink operator does with its last stable spec.

Kept from the current spec: `replicas` and `suspend`. Scaling (the autoscaler writes replicas)
and suspending are not versions to undo: a generation that only changed them is never rolled
back, and one that only changed them after a rollback stays rolled back (`status.rolledBack`
keeps a digest of the failed spec without them), so a scale step never retries a failed spec.

Not rolled back: state and offsets. A version that crashes at start commits nothing; one that
committed batches before it failed keeps them (docs/operator.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from floe_operator import conditions, model, podfaults

LAST_READY = "lastReady"
ROLLED_BACK = "rolledBack"
# Fields of the current spec a rolled-back app keeps (see the module's docstring).
KEPT = ("replicas", "suspend")
# Pod faults that mean the new generation's pods do not run; Unschedulable is left to the
# progress deadline, since a node may be added.
FAILURES = frozenset({podfaults.CRASH_LOOPING, podfaults.IMAGE_UNAVAILABLE, podfaults.PODS_REJECTED})


@dataclass(frozen=True)
class RolledBack:
    """The current generation failed: `to_generation`'s spec runs instead."""

    generation: int
    to_generation: int
    reason: str
    message: str
    time: str
    # the failed spec without KEPT (`digest`): a later generation with the same one stays rolled back
    spec_digest: str

    def record(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "toGeneration": self.to_generation,
            "reason": self.reason,
            "message": self.message,
            "time": self.time,
            "specDigest": self.spec_digest,
        }


def spec_record(spec: model.AppSpec) -> str:
    """A spec as `status.lastReady.spec` holds it: compact JSON text (camelCase, defaults filled
    in, keys sorted). Text, not an object: a status write is a merge patch, which would merge a
    new spec into the old one (a field the new one lacks would stay) and drop its null fields."""
    return _text(_dumped(spec))


def _dumped(spec: model.AppSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True)


def _text(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _spec_of(record: Any) -> dict[str, Any] | None:
    """The spec a `status.lastReady.spec` holds; None when it is not one (hand-edited status)."""
    try:
        spec = json.loads(record) if isinstance(record, str) else None
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def _versioned(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in KEPT}


def digest(spec: Mapping[str, Any]) -> str:
    """A short digest of a spec (as `_dumped`) without the fields a rollback keeps."""
    return hashlib.sha256(_text(_versioned(spec)).encode()).hexdigest()[:16]


def effective(
    app: model.StreamingApp,
    *,
    deployment: Mapping[str, Any] | None,
    pods_fault: conditions.Fault | None,
    now: str,
) -> tuple[model.StreamingApp, RolledBack | None]:
    """The app whose spec this pass renders, and the rollback when it is not the declared one.

    Rolled back: its spec, but for replicas and suspend, is one rolled back before
    (status.rolledBack's digest), or it fails now (`failure`) while a different spec was Ready
    before it."""
    if not app.spec.rollout.auto_rollback:
        return app, None
    last = last_ready(app)
    if last is None:
        return app, None
    last_generation, last_spec = last
    current = _dumped(app.spec)
    if last_generation == app.generation or _versioned(last_spec) == _versioned(current):
        return app, None
    before = app.status.get(ROLLED_BACK) or {}
    if before.get("specDigest") == digest(current):
        said = [str(before.get(k)) for k in ("reason", "message", "time", "specDigest")]
        rolled = RolledBack(int(before.get("generation") or app.generation), last_generation, *said)
    else:
        failed = failure(deployment, pods_fault)
        if failed is None:
            return app, None
        rolled = RolledBack(
            app.generation,
            last_generation,
            failed.reason,
            f"Generation {app.generation} failed ({failed.message}); the pods run generation "
            f"{last_generation}'s spec again (spec.rollout.autoRollback). Fix the spec: the next change is tried",
            now,
            digest(current),
        )
    return last_ready_app(app, last_spec), rolled


def last_ready(app: model.StreamingApp) -> tuple[int, dict[str, Any]] | None:
    """The generation recorded in status.lastReady and its spec (as `_dumped`), or None."""
    last = app.status.get(LAST_READY) or {}
    spec, generation = _spec_of(last.get("spec")), last.get("generation")
    if spec is None or not isinstance(generation, int):
        return None
    return generation, spec


def last_ready_app(app: model.StreamingApp, last_spec: Mapping[str, Any]) -> model.StreamingApp:
    """`app` running `last_spec` (a recorded Ready spec), with the current spec's KEPT fields."""
    current = _dumped(app.spec)
    spec = model.AppSpec.model_validate({**last_spec, **{k: current[k] for k in KEPT}})
    return app.model_copy(update={"spec": spec})


def records_last_ready(spec: model.AppSpec) -> bool:
    """Whether status.lastReady is kept: for a rollback to go back to, or for a snapshot before an
    upgrade to hold the running spec while it is taken (`snapshotschedule.upgrade_pending`)."""
    return spec.rollout.auto_rollback or spec.rollout.upgrade_mode == "snapshot"


def failure(deployment: Mapping[str, Any] | None, pods_fault: conditions.Fault | None) -> conditions.Fault | None:
    """Why the Deployment's current rollout failed, or None while it has not (or completed)."""
    if deployment is None:
        return None
    rollout = conditions.rollout_of(deployment)
    if rollout.complete:
        return None
    if pods_fault is not None and pods_fault.reason in FAILURES:
        return pods_fault
    if rollout.deadline_exceeded:
        said = "the rollout made no progress within spec.rollout.progressDeadlineSeconds"
        return conditions.Fault(conditions.PROGRESS_DEADLINE_EXCEEDED, said)
    return None


def status_fields(app: model.StreamingApp, rolled: RolledBack | None, status: Mapping[str, Any]) -> dict[str, Any]:
    """status.lastReady and status.rolledBack after this pass. `app` is the declared app, `status`
    the status just computed: the generation is recorded once its Ready condition is True for
    it, not while it is rolled back."""
    fields: dict[str, Any] = {ROLLED_BACK: rolled.record() if rolled is not None else None}
    if not records_last_ready(app.spec):
        fields[LAST_READY] = None
        return fields
    fields[LAST_READY] = app.status.get(LAST_READY)
    ready = conditions.find(status.get("conditions") or [], conditions.READY) or {}
    if rolled is None and ready.get("status") == "True" and ready.get("observedGeneration") == app.generation:
        fields[LAST_READY] = {"generation": app.generation, "spec": spec_record(app.spec)}
    return fields
