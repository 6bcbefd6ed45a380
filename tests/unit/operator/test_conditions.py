"""Conditions follow the API conventions: computed from facts, transition time kept unless status flips."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from floe_operator import conditions, model, podfaults, reconcile

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
        "Reconciling": ("True", "Creating"),
        "Stalled": ("False", "AsExpected"),
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


# --- kstatus: Reconciling and Stalled derived from Ready, Progressing and Degraded -----------

# Every fault reason the reconciler reports (conditions) and every pod fault (podfaults).
STALLING_FAULTS = (
    conditions.SECRET_NOT_FOUND,
    conditions.SECRET_KEY_NOT_FOUND,
    conditions.SECRET_UNREADABLE,
    conditions.PROVISIONING_FAILED,
    conditions.TOPIC_NOT_FOUND,
    conditions.APPLY_FAILED,
    conditions.INVALID_SPEC,
    conditions.STORE_IN_USE,
    conditions.APP_ID_CONFLICT,
    conditions.KAFKA_CREDENTIALS_REJECTED,
    conditions.CASSANDRA_CREDENTIALS_REJECTED,
    conditions.SPARK_RBAC_MISSING,
    conditions.KAFKA_TLS_FAILED,
    conditions.CASSANDRA_TLS_FAILED,
    conditions.INVALID_POD_TEMPLATE,
)
STALLING_POD_FAULTS = (podfaults.IMAGE_UNAVAILABLE, podfaults.CRASH_LOOPING, podfaults.PODS_REJECTED)
TRANSIENT = (conditions.KAFKA_UNAVAILABLE, conditions.CASSANDRA_UNAVAILABLE)


def _kstatus(status: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str]]:
    by_type = _by_type(status)
    return by_type["Reconciling"], by_type["Stalled"]


def test_transient_faults_are_the_listed_ones() -> None:
    assert conditions.UNSCHEDULABLE == podfaults.UNSCHEDULABLE
    assert {*TRANSIENT, podfaults.UNSCHEDULABLE, conditions.EXECUTORS_UNSCHEDULABLE} == conditions.TRANSIENT_FAULTS


@pytest.mark.parametrize("reason", STALLING_FAULTS)
def test_a_fault_that_needs_a_change_stalls(reason: str) -> None:
    observed = conditions.Observed(fault=conditions.Fault(reason, "fix it"))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Degraded"] == ("True", reason)
    assert _kstatus(status) == (("False", "Stalled"), ("True", reason))
    assert conditions.find(status["conditions"], "Stalled")["message"] == "fix it"  # type: ignore[index]


@pytest.mark.parametrize("reason", STALLING_FAULTS)
def test_a_fault_on_a_rolled_out_app_stalls_it_although_ready(reason: str) -> None:
    observed = conditions.Observed(deployment=_deployment(), fault=conditions.Fault(reason, "fix it"))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Ready"] == ("True", "AllReplicasReady")
    assert _kstatus(status) == (("False", "Stalled"), ("True", reason))


@pytest.mark.parametrize("reason", STALLING_POD_FAULTS)
def test_pods_that_cannot_run_stall_the_app(reason: str) -> None:
    observed = conditions.Observed(
        deployment=_deployment(updated=3, available=1, ready=1), pods_fault=conditions.Fault(reason, "see the pod")
    )
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Ready"] == ("False", reason)
    assert _kstatus(status) == (("False", "Stalled"), ("True", reason))


@pytest.mark.parametrize("reason", TRANSIENT)
def test_an_outage_is_retried_not_stalled(reason: str) -> None:
    status = conditions.status_for(_app(), conditions.Observed(fault=conditions.Fault(reason, "down")), now=T0)
    assert _by_type(status)["Degraded"] == ("True", reason)
    assert _kstatus(status) == (("True", reason), ("False", reason))


def test_pods_waiting_for_a_node_are_retried_not_stalled() -> None:
    observed = conditions.Observed(
        deployment=_deployment(available=1, ready=1), pods_fault=conditions.Fault(podfaults.UNSCHEDULABLE, "no node")
    )
    status = conditions.status_for(_app(), observed, now=T0)
    assert _kstatus(status) == (("True", podfaults.UNSCHEDULABLE), ("False", podfaults.UNSCHEDULABLE))


def test_executors_waiting_for_a_node_are_retried_not_stalled() -> None:
    observed = conditions.Observed(deployment=_deployment(), executors_unschedulable="executor waits")
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Degraded"] == ("True", conditions.EXECUTORS_UNSCHEDULABLE)
    assert _kstatus(status) == (
        ("True", conditions.EXECUTORS_UNSCHEDULABLE),
        ("False", conditions.EXECUTORS_UNSCHEDULABLE),
    )


def test_a_rollout_past_its_deadline_stalls() -> None:
    observed = conditions.Observed(deployment=_deployment(updated=1, available=2, deadline=True))
    status = conditions.status_for(_app(), observed, now=T0)
    assert _by_type(status)["Progressing"] == ("False", "ProgressDeadlineExceeded")
    assert _kstatus(status) == (("False", "Stalled"), ("True", "ProgressDeadlineExceeded"))


@pytest.mark.parametrize(
    ("deployment", "ready_reason"),
    [
        (None, "Creating"),
        (_deployment(updated=1, available=3), "RollingOut"),
        (_deployment(observed=False), "RollingOut"),
        (_deployment(available=2, ready=2), "ReplicasNotReady"),
    ],
)
def test_an_app_on_its_way_is_reconciling(deployment: dict[str, Any] | None, ready_reason: str) -> None:
    status = conditions.status_for(_app(), conditions.Observed(deployment=deployment), now=T0)
    assert _by_type(status)["Ready"] == ("False", ready_reason)
    reconciling, stalled = _kstatus(status)
    assert reconciling[0] == "True" and reconciling[1] in ("Creating", "RollingOut", "ReplicasNotReady")
    assert stalled == ("False", "AsExpected")


@pytest.mark.parametrize(
    ("spec", "ready_reason"),
    [({}, "AllReplicasReady"), ({"replicas": 0}, "ScaledToZero"), ({"suspend": True}, "Suspended")],
)
def test_a_ready_app_is_neither_reconciling_nor_stalled(spec: dict[str, Any], ready_reason: str) -> None:
    body = load_case("minimal")
    body["spec"].update({"replicas": 3, **spec})
    app = model.StreamingApp.from_body(body)
    desired = app.spec.running_replicas
    deployment = _deployment(replicas=desired, updated=desired, available=desired, ready=desired)
    deployment["spec"]["replicas"] = desired
    status = conditions.status_for(app, conditions.Observed(deployment=deployment), now=T0)
    assert _by_type(status)["Ready"] == ("True", ready_reason)
    assert _kstatus(status) == (("False", ready_reason), ("False", "AsExpected"))
    assert status["observedGeneration"] == app.generation


def test_a_changed_spec_under_the_pause_annotation_is_reconciling() -> None:
    body = load_case("minimal")
    body["spec"]["replicas"] = 3
    body["metadata"]["generation"] = 5
    body["metadata"].setdefault("annotations", {})[model.RECONCILE_ANNOTATION] = model.RECONCILE_PAUSED
    body["status"] = {"observedGeneration": 4}
    app = model.StreamingApp.from_body(body)
    status = conditions.status_for(app, conditions.Observed(deployment=_deployment()), now=T0)
    assert status["observedGeneration"] == 4
    assert _kstatus(status) == (("True", conditions.RECONCILE_PAUSED), ("False", "AsExpected"))


def test_reconciling_and_stalled_are_never_both_true() -> None:
    states = [None, "True", "False", "Unknown"]
    reasons = [conditions.SECRET_NOT_FOUND, conditions.KAFKA_UNAVAILABLE]
    for ready in states:
        for progressing in states:
            for degraded in states:
                for reason in reasons:
                    conds = [
                        {"type": t, "status": s, "reason": reason}
                        for t, s in (("Ready", ready), ("Progressing", progressing), ("Degraded", degraded))
                        if s is not None
                    ]
                    (reconciling, *_), (stalled, *_) = conditions.kstatus(conds)
                    assert (reconciling, stalled) != ("True", "True"), conds
                    converged = ready == "True" and progressing != "True" and degraded != "True"
                    assert (reconciling == "False" and stalled == "False") == converged, conds


def test_a_spec_the_operator_cannot_read_stalls_the_app() -> None:
    body = load_case("minimal")
    body["spec"]["replicas"] = "many"
    with pytest.raises(pydantic.ValidationError) as caught:
        model.StreamingApp.from_body(body)
    outcome = reconcile._invalid(body, caught.value)
    conds = outcome.status_patch["conditions"]
    assert {c["type"]: (c["status"], c["reason"]) for c in conds if c["type"] in ("Reconciling", "Stalled")} == {
        "Reconciling": ("False", "Stalled"),
        "Stalled": ("True", "InvalidSpec"),
    }
    assert outcome.status_patch["observedGeneration"] == body["metadata"].get("generation", 1)
