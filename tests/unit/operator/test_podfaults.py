"""Why an app's pods do not run: from pod and Deployment bodies to one condition reason."""

from __future__ import annotations

from typing import Any

from floe_operator import conditions, model, podfaults


def pod(name: str = "wc-1", *, created: str = "2026-11-26T00:00:00Z", waiting: str | None = None,
        message: str = "", restarts: int = 0, last: tuple[int, str] | None = None, unschedulable: str | None = None,
        deleting: bool = False, said: str = "") -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": last[0], "reason": last[1]} if last else {}
    if said:
        terminated["message"] = said
    status: dict[str, Any] = {"containerStatuses": [{
        "name": "app", "image": "localhost/floe/job:1", "restartCount": restarts,
        "state": {"waiting": {"reason": waiting, "message": message}} if waiting else {"running": {}},
        "lastState": {"terminated": terminated} if last else {},
    }]}
    if unschedulable is not None:
        status = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": unschedulable}]}
    meta: dict[str, Any] = {"name": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    return {"metadata": meta, "status": status}


def fault_of(*pods: dict[str, Any]) -> conditions.Fault | None:
    return podfaults.fault([podfaults.summary(p) for p in pods], image="localhost/floe/job:1")


def test_healthy_pods_give_no_fault() -> None:
    assert fault_of(pod(), pod("wc-2", restarts=3, last=(137, "Error"))) is None


def test_an_image_that_cannot_be_pulled_names_the_image_and_the_fields_to_fix() -> None:
    got = fault_of(pod(), pod("wc-2", waiting="ErrImageNeverPull",
                              message='Container image "localhost/floe/job:1" is not present'))
    assert got is not None and got.reason == podfaults.IMAGE_UNAVAILABLE
    assert "localhost/floe/job:1" in got.message and "ErrImageNeverPull" in got.message
    assert "spec.image" in got.message and "wc-2" in got.message


def test_within_a_pod_the_image_comes_first_and_across_pods_the_newest_pod_speaks() -> None:
    both = pod("a", waiting="ImagePullBackOff")
    both["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    got = fault_of(both)
    assert got is not None and got.reason == podfaults.IMAGE_UNAVAILABLE
    # A rollout that fixed the image: the old pod still cannot pull it, the new one cannot be placed.
    got = fault_of(pod("old", waiting="ErrImageNeverPull", created="2026-11-26T00:00:00Z"),
                   pod("new", unschedulable="0/1 nodes: Insufficient cpu", created="2026-11-26T00:01:00Z"),
                   pod("newest-healthy", created="2026-11-26T00:02:00Z"))
    assert got is not None and got.reason == podfaults.UNSCHEDULABLE and "Pod new " in got.message


def test_an_unschedulable_pod_carries_the_schedulers_words() -> None:
    got = fault_of(pod("a", unschedulable="0/1 nodes are available: 1 Insufficient cpu."))
    assert got is not None and got.reason == podfaults.UNSCHEDULABLE
    assert "Insufficient cpu" in got.message and "spec.resources.requests" in got.message


def test_an_oom_crash_loop_points_at_the_memory_limit() -> None:
    got = fault_of(pod(waiting="CrashLoopBackOff", restarts=5, last=(137, "OOMKilled")))
    assert got is not None and got.reason == podfaults.CRASH_LOOPING
    assert "5 restarts" in got.message and "OOMKilled" in got.message and "limits.memory" in got.message
    other = fault_of(pod(waiting="CrashLoopBackOff", restarts=2, last=(1, "Error")))
    assert other is not None and "kubectl logs --previous wc-1" in other.message


def test_a_crash_loop_quotes_what_the_runtime_said_when_it_stopped() -> None:
    said = ("floe-job: invalid configuration:\n  kafka.output_guarantee: not known to this runtime; the "
            "configuration was rendered for config schema 2 (a newer Floe operator) and this image's runtime, "
            "floe 0.1.0, reads config schema 1") + " x" * 400
    got = fault_of(pod(waiting="CrashLoopBackOff", restarts=3, last=(2, "Error"), said=said))
    assert got is not None and got.reason == podfaults.CRASH_LOOPING
    assert "last exit code 2 (Error): floe-job: invalid configuration" in got.message
    assert "config schema 2" in got.message and "reads config schema 1" in got.message
    assert len(got.message) < podfaults.LAST_MESSAGE_LIMIT + 200
    assert "kubectl logs --previous wc-1" in got.message


def test_pods_being_deleted_do_not_count() -> None:
    assert fault_of(pod(waiting="ErrImagePull", deleting=True)) is None


def test_marks_change_only_with_what_the_status_reads() -> None:
    healthy = podfaults.mark(pod())
    assert healthy == podfaults.mark(pod(message="ignored"))
    assert not podfaults.troubled(healthy) and not podfaults.troubled(None)
    assert podfaults.troubled(podfaults.mark(pod(waiting="ErrImageNeverPull")))
    assert podfaults.troubled(podfaults.mark(pod(unschedulable="no")))
    assert not podfaults.troubled(podfaults.mark(pod(waiting="ErrImageNeverPull", deleting=True)))


def test_a_deployment_whose_pods_admission_refuses_is_rejected() -> None:
    dep = {"metadata": {"name": "wc"}, "status": {"conditions": [
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": 'pods "wc-1" is forbidden: violates PodSecurity "restricted:latest"'}]}}
    got = podfaults.rejected(dep)
    assert got is not None and got.reason == podfaults.PODS_REJECTED and "PodSecurity" in got.message
    assert podfaults.rejected({"status": {"conditions": [{"type": "Available", "status": "True"}]}}) is None
    assert podfaults.rejected(None) is None


def test_a_pod_fault_makes_the_app_degraded_and_not_ready_but_not_blocked() -> None:
    body = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingApp",
            "metadata": {"name": "wc", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": {"image": "localhost/floe/job:1", "job": {"entrypoint": "a.py"}, "replicas": 1,
                     "kafka": {"bootstrapServers": "k:9092", "topics": ["t"]},
                     "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}, "stores": []}}}
    app = model.StreamingApp.from_body(body)
    dep = {"metadata": {"generation": 1}, "spec": {"replicas": 1},
           "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}}
    fault = fault_of(pod(waiting="ErrImageNeverPull"))
    status = conditions.status_for(app, conditions.Observed(deployment=dep, pods_fault=fault), now="t")
    by_type = {c["type"]: c for c in status["conditions"]}
    assert by_type["Degraded"]["status"] == "True" and by_type["Degraded"]["reason"] == podfaults.IMAGE_UNAVAILABLE
    assert by_type["Ready"]["status"] == "False" and by_type["Ready"]["reason"] == podfaults.IMAGE_UNAVAILABLE
    assert by_type["Progressing"]["reason"] == conditions.ROLLING_OUT


def test_restarts_reach_the_status_and_only_status_changes_ask_for_a_reconcile() -> None:
    pods = [podfaults.summary(pod("a", restarts=2, last=(137, "Error"))), podfaults.summary(pod("b", restarts=1)),
            podfaults.summary(pod("c", restarts=5, deleting=True))]
    assert podfaults.restarts(pods) == 3
    new, restarted = podfaults.mark(pod()), podfaults.mark(pod(restarts=1, last=(137, "Error")))
    assert not podfaults.changes_status(None, new)  # a new healthy pod
    assert not podfaults.changes_status(new, new)
    assert podfaults.changes_status(new, restarted)
    assert podfaults.changes_status(restarted, None)  # its restarts leave the sum
    assert not podfaults.changes_status(new, None)
    assert podfaults.changes_status(None, podfaults.mark(pod(waiting="ErrImagePull")))


def executor(name: str, *, unschedulable: str | None = None, deleting: bool = False) -> dict[str, Any]:
    body = pod(name, unschedulable=unschedulable, deleting=deleting)
    body["spec"] = {"containers": [{"name": "spark-kubernetes-executor",
                                    "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}}}]}
    return body


def k8s_app() -> model.StreamingApp:
    return model.StreamingApp.from_body({
        "apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingApp",
        "metadata": {"name": "wc", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"image": "localhost/floe/job:1", "job": {"entrypoint": "a.py"}, "replicas": 1,
                 "kafka": {"bootstrapServers": "k:9092", "topics": ["t"]},
                 "state": {"cassandra": {"hosts": ["c"], "keyspace": "ks"}, "stores": []},
                 "spark": {"master": "k8s://https://kubernetes.default.svc"}}})


def test_executors_waiting_for_a_node_name_their_requests_and_the_schedulers_words() -> None:
    summaries = [podfaults.summary(p) for p in (
        executor("wc-exec-1"),
        executor("wc-exec-2", unschedulable="0/1 nodes are available: 1 Insufficient cpu."),
        executor("wc-exec-3", unschedulable="gone", deleting=True),
    )]
    got = podfaults.unschedulable_executors(k8s_app(), summaries)
    assert got is not None and got.startswith("1 of 3 executor pod(s) cannot be scheduled")
    assert "cpu 1, memory 1408Mi" in got and "Insufficient cpu" in got and "wc-exec-2" in got
    assert "spec.spark.executor" in got


def test_executors_that_run_or_are_going_away_give_no_reason() -> None:
    app = k8s_app()
    assert podfaults.unschedulable_executors(app, []) is None
    running_or_leaving = [executor("a"), executor("b", unschedulable="no node", deleting=True)]
    assert podfaults.unschedulable_executors(app, [podfaults.summary(p) for p in running_or_leaving]) is None
