"""A new app's first pass, as the real API server stored it: the query token Secret its pods read
at start is stored before its Deployment, although the pass creates it without reading it first
and alongside the Kafka and Cassandra checks (docs/operator.md, "What one reconcile does").

The order is read from the revisions the API server gave each object when it was created, as the
ADDED events of a watch replay them (one etcd here, so revisions of different kinds compare)."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]

APPS = 4


def _created(list_call: Any, namespace: str, since: str, names: set[str]) -> dict[str, int]:
    """Name → revision at creation of the objects among `names` created after `since`."""
    found: dict[str, int] = {}
    watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    for event in watch.stream(list_call, namespace, resource_version=since, timeout_seconds=10):  # type: ignore[no-untyped-call]
        meta = event["object"].metadata
        if event["type"] == "ADDED" and meta.name in names:
            found.setdefault(meta.name, int(meta.resource_version))
        if len(found) == len(names):
            watch.stop()  # type: ignore[no-untyped-call]
    return found


def test_new_apps_query_token_secrets_are_stored_before_their_deployments(
    kube: Kubectl, kubeconfig: str, spec_args: dict[str, Any], operator: object
) -> None:
    client = kubernetes.config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    core, apps_api = kubernetes.client.CoreV1Api(client), kubernetes.client.AppsV1Api(client)
    namespace = spec_args["namespace"]
    listed = apps_api.list_namespaced_deployment(namespace).metadata
    assert listed is not None
    since = str(listed.resource_version)
    names = [f"first-pass-{i}" for i in range(APPS)]
    for name in names:
        body = app_manifest(name, **spec_args)
        body["spec"]["replicas"] = 0
        body["spec"]["state"]["stores"] = []  # no table of its own: the apps share the offsets table
        kube.apply(body)
    def rolled_out() -> bool:
        return all(kube.get("deployment", name, namespace) is not None for name in names)

    wait_for(rolled_out, what="the apps' Deployments")
    deployments = _created(apps_api.list_namespaced_deployment, namespace, since, set(names))
    secrets = _created(core.list_namespaced_secret, namespace, since, {f"{n}-query" for n in names})
    assert set(deployments) == set(names)
    for name in names:
        assert secrets[f"{name}-query"] < deployments[name], (name, secrets, deployments)
