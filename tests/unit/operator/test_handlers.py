"""Pure parts of the Kopf wiring."""

from __future__ import annotations

import copy
import inspect

import kopf
from floe_operator import handlers

from .conftest import load_case


def test_lean_diff_base_has_kopfs_essence_without_copying_status() -> None:
    body = load_case("full")
    body["metadata"].update(
        labels={"team": "a"},
        annotations={"note": "kept", "streaming.floe.dev/last-handled-configuration": "{}"},
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        resourceVersion="42",
    )
    body["status"] = {"conditions": [{"type": "Ready", "status": "True"}], "replicas": 3}
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix="streaming.floe.dev", key="last-handled-configuration")
    lean = handlers.LeanDiffBaseStorage(prefix="streaming.floe.dev", key="last-handled-configuration")
    before = copy.deepcopy(body)
    essence = lean.build(body=kopf.Body(body))
    assert essence == kopfs.build(body=kopf.Body(body))
    assert "status" not in essence and essence["metadata"]["labels"] == {"team": "a"}
    assert body == before  # the body itself is never changed


def test_watch_fed_handlers_run_on_the_event_loop() -> None:
    """Index and event handlers share memory with the reconciles and the lag loop; Kopf runs a
    plain function in a worker thread, so each must be a coroutine."""
    from floe_operator.lag import loop as lag_loop

    registry = kopf.OperatorRegistry()
    handlers.register(registry, handlers.Options())
    lag_loop.register(registry, lag_loop.Options())
    fed = [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]
    assert {h.id for h in fed} >= {"apps_idx", "deployment_changed", "pod_changed"}
    assert [h.id for h in fed if not inspect.iscoroutinefunction(h.fn)] == []


def test_in_cluster_login_uses_the_kubernetes_service_address_not_cluster_dns() -> None:
    info = kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="t", ca_path="/ca.crt")
    got = handlers.in_cluster_server(info, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert got.server == "https://10.96.0.1:443"
    assert (got.token, got.ca_path) == ("t", "/ca.crt")
    assert handlers.in_cluster_server(info, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
                                      ).server == "https://[fd00::1]:443"
    assert handlers.in_cluster_server(info, {}) is info


def test_executor_pods_are_indexed_by_the_app_they_serve_and_reach_the_reconcile() -> None:
    import asyncio

    from floe_operator import podfaults, reconcile, render

    registry = kopf.OperatorRegistry()
    handlers.register(registry, handlers.Options())
    index = next(h for h in registry._indexing.get_all_handlers() if h.id == "executorpod_idx")
    assert dict(index.labels or {}) == {render.EXECUTOR_OF: kopf.PRESENT, "spark-role": "executor"}
    body = kopf.Body({"metadata": {"name": "wc-exec-1", "namespace": "ns"}, "status": {}})
    got = asyncio.run(index.fn(namespace="ns", labels={render.EXECUTOR_OF: "wc"}, body=body))
    assert got == {("ns", "wc"): podfaults.summary(body)}

    indexes = {"executorpod_idx": {("ns", "wc"): [got[("ns", "wc")]]}}
    children = handlers._children("ns", "wc", indexes)
    assert children[reconcile.EXECUTOR_POD] == [podfaults.summary(body)] and children["Pod"] == []
