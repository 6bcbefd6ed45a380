"""The replica's series carry the StreamingApp's name as `app`, the label value of the operator's
series, so that the two join on (namespace, app); the operator renders that name into floe.yaml."""

from __future__ import annotations

import copy

from floe_jobs import config, health
from floe_operator import model, render
from prometheus_client import REGISTRY

from ..operator.conftest import load_case


def test_a_named_app_id_is_exported_as_the_apps_name() -> None:
    health.name_app("team-a-word-count-21f6351aed", "word-count")
    health.OWNED.labels("team-a-word-count-21f6351aed").set(3)
    assert REGISTRY.get_sample_value("floe_job_owned_partitions", {"app": "word-count"}) == 3
    assert REGISTRY.get_sample_value("floe_job_owned_partitions", {"app": "team-a-word-count-21f6351aed"}) is None
    health.COMMITTED.labels("team-a-word-count-21f6351aed", "lines", "0").set(42)
    assert REGISTRY.get_sample_value(
        "floe_job_committed_offset", {"app": "word-count", "topic": "lines", "partition": "0"}
    ) == 42


def test_an_app_id_never_named_is_exported_as_itself() -> None:
    health.LAST_BATCH.labels("local-run-only").set(1.0)
    assert REGISTRY.get_sample_value("floe_job_last_success_timestamp_seconds", {"app": "local-run-only"}) == 1.0


def test_the_replica_exports_no_namespace_label_the_scrape_adds_it() -> None:
    names = {m.name: m for m in REGISTRY.collect()}
    for family in names.values():
        if family.name.startswith("floe_job_"):
            assert all("namespace" not in s.labels for s in family.samples), family.name


def test_the_operator_renders_the_apps_name_and_the_runtime_reads_it() -> None:
    app = model.StreamingApp.from_body(copy.deepcopy(load_case("minimal")))
    rendered = render.job_config(app)
    assert rendered["app_name"] == app.name != app.app_id
    cfg = config.FloeConfig.model_validate(rendered)
    assert cfg.metrics_app == app.name


def test_without_app_name_the_label_is_the_app_id() -> None:
    app = model.StreamingApp.from_body(copy.deepcopy(load_case("minimal")))
    rendered = {k: v for k, v in render.job_config(app).items() if k != "app_name"}
    assert config.FloeConfig.model_validate(rendered).metrics_app == app.app_id
