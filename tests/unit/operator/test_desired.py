"""`desired`: one list of every child, and what each fact of the cluster changes in it."""

from __future__ import annotations

import dataclasses

from floe_operator import desired, model, render
from floe_operator.lag import scalers

from .conftest import load_case

NONE_KNOWN = desired.Facts(service_monitor_crd=False, keda_crd=False, partitions=None)


def _app(name: str) -> model.StreamingApp:
    return model.StreamingApp.from_body(load_case(name))


def _kinds(objs: list[render.Manifest]) -> list[str]:
    return [o["kind"] for o in objs]


def test_the_apps_own_children_then_its_autoscalers() -> None:
    app = _app("autoscaling-hpa")
    objs = desired.desired(app, NONE_KNOWN)
    assert objs == render.children(app) + scalers.children(app, keda_available=False)
    assert _kinds(objs)[-2:] == ["Deployment", "HorizontalPodAutoscaler"]


def test_a_service_monitor_only_with_its_crd() -> None:
    app = _app("full")
    assert "ServiceMonitor" not in _kinds(desired.desired(app, NONE_KNOWN))
    with_crd = dataclasses.replace(NONE_KNOWN, service_monitor_crd=True)
    assert "ServiceMonitor" in _kinds(desired.desired(app, with_crd))


def test_keda_children_only_with_its_crd() -> None:
    app = _app("autoscaling-keda")
    assert not {"ScaledObject", "TriggerAuthentication"} & set(_kinds(desired.desired(app, NONE_KNOWN)))
    with_crd = dataclasses.replace(NONE_KNOWN, keda_crd=True)
    assert _kinds(desired.desired(app, with_crd))[-2:] == ["TriggerAuthentication", "ScaledObject"]


def test_partitions_cap_the_hpa() -> None:
    app = _app("autoscaling-hpa")

    def top(facts: desired.Facts) -> int:
        (hpa,) = (o for o in desired.desired(app, facts) if o["kind"] == "HorizontalPodAutoscaler")
        return int(hpa["spec"]["maxReplicas"])

    assert top(NONE_KNOWN) == 12
    assert top(dataclasses.replace(NONE_KNOWN, partitions=4)) == 4


def test_a_secrets_new_version_rolls_the_pods() -> None:
    app = _app("sasl-plaintext")

    def template(versions: dict[str, str]) -> dict[str, str]:
        facts = dataclasses.replace(NONE_KNOWN, secret_versions=versions)
        (dep,) = (o for o in desired.desired(app, facts) if o["kind"] == "Deployment")
        return dict(dep["spec"]["template"]["metadata"].get("annotations") or {})

    assert render.SECRETS_HASH not in template({})
    assert template({"rollup-kafka": "1"})[render.SECRETS_HASH] != template({"rollup-kafka": "2"})[render.SECRETS_HASH]
