"""The tests' pod waits read why a pod cannot run out of the pod object, and give up once the
cluster has said so for long enough (floe_stack.podblock), in the tests' waits and the demo's."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.waiting import PodWatch, wait_for, why_blocked

SCHEDULER = ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
             "1 No preemption victims found for incoming pod.")


def _pod(name: str = "p", *, phase: str = "Pending", conditions: list[dict[str, Any]] | None = None,
         containers: list[dict[str, Any]] | None = None, deleting: bool = False,
         init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T14:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    if init is not None:
        status["initContainerStatuses"] = init
    return {"metadata": meta, "status": status}


def _unschedulable(name: str = "p") -> dict[str, Any]:
    return _pod(name, conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": SCHEDULER}])


def _waiting(reason: str, message: str = "", **extra: Any) -> dict[str, Any]:
    return {"name": "app", "state": {"waiting": {"reason": reason, "message": message}}, "restartCount": 0, **extra}


def test_an_unschedulable_pod_gives_the_schedulers_message() -> None:
    assert why_blocked(_unschedulable()) == ("Unschedulable", SCHEDULER)


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull",
                                    "CreateContainerConfigError"])
def test_a_container_that_cannot_start_gives_the_kubelets_reason(reason: str) -> None:
    pod = _pod(conditions=[{"type": "PodScheduled", "status": "True"}],
               containers=[_waiting(reason, 'secret "creds" not found')])
    assert why_blocked(pod) == (reason, 'container app: secret "creds" not found')


def test_a_crash_loop_names_the_last_exit() -> None:
    crashed = _waiting("CrashLoopBackOff", "back-off 40s restarting failed container=app",
                       lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    pod = _pod(phase="Running", containers=[crashed])
    assert why_blocked(pod) == ("CrashLoopBackOff", "container app: back-off 40s restarting failed container=app "
                                                    "(last exit code 137, OOMKilled)")


def test_an_init_container_counts_too() -> None:
    assert why_blocked(_pod(init=[_waiting("ErrImageNeverPull")], containers=[]))[0] == "ErrImageNeverPull"  # type: ignore[index]


@pytest.mark.parametrize("pod", [
    _pod(),  # just created, not yet looked at by the scheduler
    _pod(conditions=[{"type": "PodScheduled", "status": "True"}], containers=[_waiting("ContainerCreating")]),
    _pod(phase="Running", containers=[{"name": "app", "state": {"running": {}}, "restartCount": 2}]),
    _pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]),
    {**_unschedulable(), "metadata": {"name": "p", "deletionTimestamp": "2026-11-27T14:00:00Z"}},
    _pod(phase="Failed", containers=[_waiting("CrashLoopBackOff")]),
], ids=["new", "creating", "running-after-restarts", "gated", "deleting", "finished"])
def test_pods_on_their_way_are_not_blocked(pod: dict[str, Any]) -> None:
    assert why_blocked(pod) is None


def test_a_pod_is_given_up_only_after_it_stayed_blocked_for_the_grace() -> None:
    watch = PodWatch(blocked_seconds=30, tolerate=())
    assert watch.check([_unschedulable()], now=100) is None
    assert watch.check([_unschedulable()], now=129) is None
    gave_up = watch.check([_unschedulable()], now=130)
    assert gave_up == f"pod ns/p is Unschedulable for 30 s; the cluster says: {SCHEDULER}"


def test_a_pod_that_recovers_or_changes_reason_starts_its_grace_again() -> None:
    watch = PodWatch(blocked_seconds=30, tolerate=())
    crashing = _pod(phase="Running", containers=[_waiting("CrashLoopBackOff")])
    assert watch.check([crashing], now=0) is None
    assert watch.check([_pod(phase="Running", containers=[{"name": "app", "state": {"running": {}}}])], now=20) is None
    assert watch.check([crashing], now=40) is None  # blocked again, from 40
    assert watch.check([_unschedulable()], now=65) is None  # another reason, from 65
    assert watch.check([_unschedulable()], now=94) is None
    assert watch.check([_unschedulable()], now=95) is not None


def test_tolerated_reasons_never_give_up() -> None:
    watch = PodWatch(blocked_seconds=1, tolerate={"CrashLoopBackOff"})
    crashing = _pod(phase="Running", containers=[_waiting("CrashLoopBackOff")])
    assert watch.check([crashing], now=0) is None
    assert watch.check([crashing], now=600) is None


def test_wait_for_fails_with_the_clusters_reason_long_before_its_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_for(lambda: None, timeout=30, what="the pod Ready", every=0.01, pods=lambda: [_unschedulable()],
                 blocked_seconds=0.2)
    assert time.monotonic() - t0 < 5
    assert "the pod Ready" in str(failed.value) and "Insufficient cpu" in str(failed.value)


def test_wait_for_without_pods_still_times_out_with_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for nothing; last value: 0"):
        wait_for(lambda: 0, timeout=0.05, what="nothing", every=0.01)


def test_the_demos_wait_on_pods_stops_at_a_blocked_pod_with_the_clusters_reason(monkeypatch: Any) -> None:
    from floe_stack import demo, podblock

    monkeypatch.setattr(podblock, "BLOCKED_SECONDS", 0.0)
    started = time.monotonic()
    expected = r"^3 Ready pods of app cannot happen: pod ns/p is Unschedulable .*Insufficient cpu"
    with pytest.raises(demo.DemoError, match=expected):
        demo._wait(lambda: False, what="3 Ready pods of app", timeout=60, pods=lambda: [_unschedulable()])
    assert time.monotonic() - started < 5
