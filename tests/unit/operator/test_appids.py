"""App ids: a new app's cannot equal another's, an existing app keeps the one it runs under, and
two apps that would share one are found (the elder named)."""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import config
from floe_operator import appids, model, render

from .conftest import load_case


def _app(namespace: str, name: str, status: dict[str, Any] | None = None) -> model.StreamingApp:
    body = load_case("minimal")
    body["metadata"].update(namespace=namespace, name=name)
    body["status"] = status or {}
    return model.StreamingApp.from_body(body)


def _body(namespace: str, name: str, *, uid: str, created: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "creationTimestamp": created},
        "status": status or {},
    }


def test_the_two_apps_the_legacy_id_confused_get_different_ids() -> None:
    a, b = _app("ptn-a", "orders"), _app("ptn", "a-orders")
    assert appids.legacy_id("ptn-a", "orders") == appids.legacy_id("ptn", "a-orders") == "ptn-a-orders"
    assert a.app_id != b.app_id
    # readable, then a digest of namespace/name
    assert a.app_id.startswith("ptn-a-orders-") and b.app_id.startswith("ptn-a-orders-")
    assert a.app_id == appids.new_id("ptn-a", "orders")
    # and so are what the runtime derives from them: offsets rows, dead-letter and repartition topics
    ca, cb = (config.FloeConfig.model_validate(render.job_config(x)) for x in (a, b))
    assert ca.app_id != cb.app_id and ca.dlq_topic != cb.dlq_topic
    assert ca.repartition_topic("words") != cb.repartition_topic("words")


@pytest.mark.parametrize(
    ("namespace", "name"),
    [("a", "b"), ("n" * 63, "a" * 52), ("x" * 40, "y-" * 20 + "z"), ("team-a", "a" * 52), ("ns-", "-x")],
)
def test_a_new_id_is_a_dns_label_the_runtime_accepts(namespace: str, name: str) -> None:
    app_id = appids.new_id(namespace, name)
    assert appids.valid(app_id) and len(app_id) <= 63
    config.FloeConfig.model_validate(render.job_config(_app(namespace, name)))  # raises if refused


def test_long_names_that_share_the_readable_part_still_differ() -> None:
    first, second = appids.new_id("n" * 63, "a" * 51 + "b"), appids.new_id("n" * 63, "a" * 51 + "c")
    assert first[:52] == second[:52] and first != second


def test_a_new_id_never_equals_a_cut_legacy_id() -> None:
    # a cut legacy id ends in 8 hex, a new one in 10: they differ in the length of the last segment
    legacy = appids.legacy_id("n" * 63, "a" * 52)
    assert len(legacy.rsplit("-", 1)[1]) == 8
    assert len(appids.new_id("n" * 63, "a" * 52).rsplit("-", 1)[1]) == 10


def test_an_app_an_older_operator_reconciled_keeps_its_legacy_id() -> None:
    # observedGeneration without appId: reconciled before ids were recorded
    assert _app("ptn-a", "orders", {"observedGeneration": 4}).app_id == "ptn-a-orders"
    # a recorded id is kept whatever it is
    assert _app("ptn-a", "orders", {"observedGeneration": 4, "appId": "ptn-a-orders"}).app_id == "ptn-a-orders"
    recorded = appids.new_id("ptn-a", "orders")
    assert _app("ptn-a", "orders", {"observedGeneration": 4, "appId": recorded}).app_id == recorded
    # a new app: no status yet
    assert _app("ptn-a", "orders").app_id == recorded
    # a recorded value the runtime would refuse is not taken
    assert _app("ptn-a", "orders", {"appId": "Not_A_Label"}).app_id == recorded


def test_the_id_a_configmap_names_is_what_the_replicas_run_under() -> None:
    app = _app("ptn-a", "orders", {"observedGeneration": 2})
    cm = render.config_map(app)
    assert appids.running_id(cm, render.CONFIG_FILE) == "ptn-a-orders"
    assert appids.running_id(None, render.CONFIG_FILE) is None
    assert appids.running_id({"data": {render.CONFIG_FILE: "app_id: [1\n"}}, render.CONFIG_FILE) is None
    assert appids.running_id({"data": {render.CONFIG_FILE: "app_id: Bad_Id\n"}}, render.CONFIG_FILE) is None
    # it stands only while status records no id
    assert app.model_copy(update={"running_id": "elsewhere"}).app_id == "elsewhere"
    pinned = _app("ptn-a", "orders", {"appId": "ptn-a-orders"}).model_copy(update={"running_id": "elsewhere"})
    assert pinned.app_id == "ptn-a-orders"


def test_the_younger_of_two_apps_with_one_id_is_the_one_in_conflict() -> None:
    elder = _body("ptn-a", "orders", uid="1", created="2026-01-01T00:00:00Z", status={"observedGeneration": 1})
    younger = _body("ptn", "a-orders", uid="2", created="2026-01-02T00:00:00Z", status={"observedGeneration": 1})
    others = [elder, younger]
    assert appids.conflict("ptn-a-orders", younger["metadata"], others) == ("ptn-a", "orders")
    assert appids.conflict("ptn-a-orders", elder["metadata"], others) is None
    # either finds the other sharing its id (what the finalizer keeps)
    assert appids.sharers("ptn-a-orders", "1", others) == [("ptn", "a-orders")]
    assert appids.sharers("ptn-a-orders", "2", others) == [("ptn-a", "orders")]
    # created in the same second: namespace/name decides, the same way for both
    tie = _body("ptn", "a-orders", uid="2", created="2026-01-01T00:00:00Z", status={"observedGeneration": 1})
    assert appids.conflict("ptn-a-orders", tie["metadata"], [elder, tie]) is None
    assert appids.conflict("ptn-a-orders", elder["metadata"], [elder, tie]) == ("ptn", "a-orders")


def test_new_apps_of_the_confused_names_are_not_in_conflict() -> None:
    first = _body("ptn-a", "orders", uid="1", created="2026-01-01T00:00:00Z")
    second = _body("ptn", "a-orders", uid="2", created="2026-01-02T00:00:00Z")
    assert appids.conflict(appids.new_id("ptn", "a-orders"), second["metadata"], [first, second]) is None


def test_a_name_made_to_equal_an_elder_apps_id_is_caught() -> None:
    elder_id = appids.new_id("shop", "orders")
    elder = _body("shop", "orders", uid="1", created="2026-01-01T00:00:00Z", status={"appId": elder_id})
    # a legacy app whose <namespace>-<name> spells the elder's new id
    namespace, name = "shop", elder_id.removeprefix("shop-")
    crafted = _body(namespace, name, uid="2", created="2026-01-02T00:00:00Z", status={"observedGeneration": 1})
    assert appids.conflict(elder_id, crafted["metadata"], [elder, crafted]) == ("shop", "orders")
    # Kafka takes '.' and '_' for one another in topic names; ids are compared the same way
    assert appids.folded("a_b") == appids.folded("a.b") != appids.folded("a-b")
