"""App ids on the real API server: `ptn-a/orders` and `ptn/a-orders`, which the old
`<namespace>-<name>` id gave one id (one set of offsets rows and internal topics), run under
two; and two apps an older operator already ran under one id are not both served: the younger
is Degraded AppIdConflict, naming both, with nothing applied."""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from floe_operator import appids, render

from ..waiting import wait_for
from .conftest import app_manifest, running_operator
from .kube import Kubectl, condition

pytestmark = [pytest.mark.k8s, pytest.mark.cassandra, pytest.mark.kafka]


@contextlib.contextmanager
def confusable_namespaces(kube: Kubectl) -> Iterator[tuple[str, str]]:
    """Namespaces `<p>-a` and `<p>` (unique per run): apps `<p>-a/orders` and `<p>/a-orders`
    both had the legacy id `<p>-a-orders`."""
    base = f"ptn{uuid.uuid4().hex[:6]}"
    made = (f"{base}-a", base)
    for ns in made:
        kube.run("create", "namespace", ns)
    try:
        yield made
    finally:
        for ns in made:
            kube.run("delete", "namespace", ns, "--wait=false", check=False)


def _args(spec_args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec_args.items() if k != "namespace"}


def _rendered_id(kube: Kubectl, name: str, namespace: str) -> str | None:
    cm = kube.get("configmap", f"{name}-config", namespace)
    if cm is None:
        return None
    return str(yaml.safe_load(cm["data"][render.CONFIG_FILE])["app_id"])


def _ready(kube: Kubectl, name: str, namespace: str) -> dict[str, Any] | None:
    obj = kube.get("streamingapp", name, namespace)
    return obj if condition(obj, "Ready").get("status") == "True" else None


def test_apps_the_legacy_id_confused_run_under_distinct_ids(kube: Kubectl, spec_args: dict[str, Any]) -> None:
    with confusable_namespaces(kube) as (first_ns, second_ns):
        legacy = f"{second_ns}-a-orders"
        apps = [("orders", first_ns), ("a-orders", second_ns)]
        with running_operator(kube, first_ns, also=[second_ns], resync_seconds=2.0):
            for name, ns in apps:
                # no pods: their image is not built here, a fault of its own
                kube.apply(app_manifest(name, ns, **_args(spec_args), replicas=0))
            rendered = [
                wait_for(functools.partial(_rendered_id, kube, name, ns), what=f"the ConfigMap of {ns}/{name}")
                for name, ns in apps
            ]
            assert rendered[0] != rendered[1], f"both apps render app_id {rendered[0]} (legacy {legacy})"
            assert rendered == [appids.new_id(ns, name) for name, ns in apps]
            bodies = [wait_for(functools.partial(_ready, kube, n, ns), what=f"{ns}/{n} Ready") for n, ns in apps]
            assert [b["status"]["appId"] for b in bodies] == rendered
            for body in bodies:
                assert condition(body, "Degraded")["status"] == "False"
            # Spark's app name follows the id (the driver's name in logs and metrics)
            for (name, ns), app_id in zip(apps, rendered, strict=True):
                cm = kube.get("configmap", f"{name}-config", ns) or {}
                conf = yaml.safe_load(cm["data"][render.CONFIG_FILE])
                assert conf["spark"]["conf"]["spark.app.name"] == app_id


def test_the_younger_of_two_apps_an_older_operator_ran_under_one_id_is_refused(
    kube: Kubectl, spec_args: dict[str, Any]
) -> None:
    with confusable_namespaces(kube) as (first_ns, second_ns):
        legacy = f"{second_ns}-a-orders"
        elder, younger = ("orders", first_ns), ("a-orders", second_ns)
        # As an older operator left them: created one after the other, status without appId.
        for name, ns in (elder, younger):
            kube.apply(app_manifest(name, ns, **_args(spec_args), replicas=0))
            kube.run(
                "patch", "streamingapp", name, "-n", ns, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"observedGeneration": 1}}),
            )
            time.sleep(1.1)  # creationTimestamp has whole seconds
        with running_operator(kube, first_ns, also=[second_ns], resync_seconds=2.0):
            refused = wait_for(
                lambda: (o := kube.get("streamingapp", younger[0], younger[1]))
                and condition(o, "Degraded").get("reason") == "AppIdConflict"
                and o,
                what="the younger app Degraded AppIdConflict",
            )
            degraded = condition(refused, "Degraded")
            assert degraded["status"] == "True"
            assert f"StreamingApp {second_ns}/a-orders has app id {legacy}" in degraded["message"]
            assert f"StreamingApp {first_ns}/orders (created earlier)" in degraded["message"]
            assert refused["status"]["appId"] == legacy
            served = wait_for(functools.partial(_ready, kube, *elder), what="the elder app Ready")
            assert served["status"]["appId"] == legacy  # it keeps the id its offsets rows carry
            assert _rendered_id(kube, *elder) == legacy
            # nothing of the younger is applied, pass after pass
            time.sleep(5)
            assert kube.get("configmap", "a-orders-config", second_ns) is None
            assert kube.get("deployment", "a-orders", second_ns) is None
            still = kube.get("streamingapp", younger[0], younger[1])
            assert condition(still, "Degraded").get("reason") == "AppIdConflict"
