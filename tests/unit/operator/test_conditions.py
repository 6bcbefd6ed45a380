"""Conditions follow the API conventions: computed from facts, transition time kept unless status flips."""

from __future__ import annotations

from typing import Any

from floe_operator import conditions, model

from .conftest import load_case

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def _app(**status: Any) -> model.StreamingApp:
    body = load_case("minimal")
    body["spec"]["replicas"] = 3
    body["status"] = status
    return model.StreamingApp.from_body(body)


def _deployment(
    *,
    replicas: int = 3,
    updated: int = 3,
    available: int = 3,
    ready: int = 3,
    observed: bool = True,
    deadline: bool = False,
) -> dict[str, Any]:
    conds = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}] if deadline else []
    return {
        "metadata": {"generation": 4},
        "spec": {"replicas": 3},
        "status": {
            "observedGeneration": 4 if observed else 3,
            "replicas": replicas,
            "updatedReplicas": updated,
            "availableReplicas": available,
            "readyReplicas": ready,
            "conditions": conds,
        },
    }


def _by_type(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_first_pass_sets_every_condition() -> None:
    status = conditions.status_for(_app(), conditions.Observed(), now=T0)
    assert _by_type(status) == {
        "Ready": ("False", "Creating"),
        "Progressing": ("True", "Creating"),
        "Degraded": ("False", "AsExpected"),
        "StateProvisioned": ("Unknown", "Pending"),
        "ReplicasWithinPartitions": ("Unknown", "PartitionsUnknown"),
    }
    assert status["observedGeneration"] == 1
    assert status["labelSelector"] == "streaming.floe.dev/app=word-count"


def test_complete_rollout_is_ready() -> None:
    observed = conditions.Observed(
        deployment=_deployment(), provisioned_keyspace="ks", provisioned_hash="h", partitions=6
    )
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Ready"] == ("True", "AllReplicasReady")
    assert _by_type(status)["Progressing"] == ("False", "RolloutComplete")
    assert _by_type(status)["StateProvisioned"] == ("True", "Provisioned")
    assert _by_type(status)["ReplicasWithinPartitions"] == ("True", "AsExpected")
    assert (status["replicas"], status["availableReplicas"], status["partitions"]) == (3, 3, 6)


def test_rollout_in_progress_and_not_ready() -> None:
    observed = conditions.Observed(deployment=_deployment(replicas=4, updated=1, available=3))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Ready"] == ("False", "RollingOut")
    assert _by_type(status)["Progressing"] == ("True", "RollingOut")


def test_replicas_not_ready_after_rollout() -> None:
    observed = conditions.Observed(deployment=_deployment(available=1, ready=1))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Ready"] == ("False", "ReplicasNotReady")


def test_progress_deadline_is_degraded() -> None:
    observed = conditions.Observed(deployment=_deployment(updated=1, available=0, deadline=True))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Degraded"] == ("True", "ProgressDeadlineExceeded")
    assert _by_type(status)["Progressing"] == ("False", "ProgressDeadlineExceeded")


def test_fault_before_first_rollout() -> None:
    fault = conditions.Fault(conditions.CASSANDRA_UNAVAILABLE, "cannot connect")
    status = conditions.status_for(_app(), conditions.Observed(fault=fault), now=T0)
    assert _by_type(status)["Degraded"] == ("True", "CassandraUnavailable")
    assert _by_type(status)["StateProvisioned"] == ("False", "CassandraUnavailable")
    assert _by_type(status)["Ready"] == ("False", "CassandraUnavailable")
    assert _by_type(status)["Progressing"] == ("False", "CassandraUnavailable")


def test_replicas_beyond_partitions() -> None:
    status = conditions.status_for(_app(), conditions.Observed(deployment=_deployment(), partitions=2), now=T0)
    cond = next(c for c in status["conditions"] if c["type"] == "ReplicasWithinPartitions")
    assert (cond["status"], cond["reason"]) == ("False", "ReplicasExceedPartitions")
    assert "at least 1 replica(s) own no input partition" in cond["message"]


def test_scaled_to_zero_is_ready() -> None:
    body = load_case("scaled-to-zero")
    app = model.StreamingApp.from_body(body)
    dep = {"metadata": {"generation": 1}, "spec": {"replicas": 0}, "status": {"observedGeneration": 1}}
    status = conditions.status_for(app, conditions.Observed(deployment=dep), now=T0)
    assert _by_type(status)["Ready"] == ("True", "ScaledToZero")


def test_transition_time_moves_only_on_flip() -> None:
    first = conditions.status_for(_app(), conditions.Observed(deployment=_deployment(available=1)), now=T0)
    again = conditions.status_for(_app(**first), conditions.Observed(deployment=_deployment(available=2)), now=T1)
    ready = next(c for c in again["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == T0  # still False, message changed
    assert "2 of 3" in ready["message"]
    flipped = conditions.status_for(_app(**again), conditions.Observed(deployment=_deployment()), now=T1)
    ready = next(c for c in flipped["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", T1)


def test_unchanged_facts_give_an_empty_patch() -> None:
    observed = conditions.Observed(
        deployment=_deployment(), provisioned_keyspace="ks", provisioned_hash="h", partitions=6
    )
    first = conditions.status_for(_app(), observed, now=T0)
    second = conditions.status_for(_app(**first), observed, now=T1)
    assert conditions.status_patch(first, second) == {}


def test_foreign_conditions_are_kept() -> None:
    foreign = {
        "type": "AutoscalerActive",
        "status": "True",
        "reason": "Scaling",
        "message": "",
        "lastTransitionTime": T0,
    }
    status = conditions.status_for(_app(conditions=[foreign]), conditions.Observed(), now=T1)
    assert foreign in status["conditions"]


def test_events_on_transitions() -> None:
    before = conditions.status_for(_app(), conditions.Observed(), now=T0)["conditions"]
    fault = conditions.Fault(conditions.SECRET_NOT_FOUND, "Secret x not found")
    after = conditions.status_for(_app(conditions=before), conditions.Observed(fault=fault), now=T1)["conditions"]
    events = conditions.transitions(before, after)
    assert conditions.Event("Warning", "SecretNotFound", "Secret x not found") in events
    assert conditions.transitions(after, after) == []
    ready = conditions.status_for(
        _app(conditions=after), conditions.Observed(deployment=_deployment(), partitions=1), now=T1
    )["conditions"]
    reasons = {(e.type, e.reason) for e in conditions.transitions(after, ready)}
    assert ("Normal", "Ready") in reasons
    assert ("Warning", "ReplicasExceedPartitions") in reasons


STOP = ("orders", 2, 40, "SparkRuntimeException: [USER_RAISED_EXCEPTION] cannot split line POISON")


def test_partitions_stopped_names_topic_partition_offset_and_error() -> None:
    conds = conditions.partitions_stopped([], [STOP], generation=3, now="2026-01-01T00:00:00Z")
    assert conds is not None
    (cond,) = conds
    assert (cond["type"], cond["status"], cond["reason"]) == ("PartitionsStopped", "True", "PoisonRecord")
    assert "topic orders partition 2 stopped at offset 40: SparkRuntimeException" in cond["message"]
    assert "spec.offsetReset" in cond["message"]
    # unchanged: nothing to write
    assert conditions.partitions_stopped(conds, [STOP], generation=3, now="2026-01-01T00:01:00Z") is None


def test_partitions_stopped_appears_only_once_a_partition_stopped_and_clears_to_false() -> None:
    ready = [{"type": "Ready", "status": "True", "reason": "AllReplicasReady", "message": "", "lastTransitionTime": T0}]
    assert conditions.partitions_stopped(ready, [], generation=1, now="2026-01-01T00:00:00Z") is None
    stopped = conditions.partitions_stopped(ready, [STOP], generation=1, now="2026-01-01T00:00:00Z")
    assert stopped is not None and [c["type"] for c in stopped] == ["Ready", "PartitionsStopped"]
    cleared = conditions.partitions_stopped(stopped, [], generation=1, now="2026-01-01T00:05:00Z")
    assert cleared is not None
    cond = conditions.find(cleared, "PartitionsStopped")
    assert cond is not None
    assert (cond["status"], cond["reason"]) == ("False", "NoneStopped")
    assert cond["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert conditions.find(cleared, "Ready") == ready[0]


def test_the_reconcile_keeps_the_partitions_stopped_condition_the_lag_loop_wrote() -> None:
    stopped = conditions.partitions_stopped([], [STOP], generation=1, now=T0)
    assert stopped is not None
    status = conditions.status_for(_app(conditions=stopped), conditions.Observed(), now=T0)
    assert conditions.find(status["conditions"], "PartitionsStopped") == stopped[0]
