"""The replica's series carry the StreamingApp's name as `app`, the label value of the operator's
series, so that the two join on (namespace, app); the operator renders that name into floe.yaml."""

from __future__ import annotations

import copy

from floe_jobs import api, config, stagepass
from floe_jobs.replica import ReplicaContext
from floe_operator import model, render
from prometheus_client import REGISTRY

from ..operator.conftest import load_case

ENV = {
    "FLOE_APP_ID": "team-a-word-count-21f6351aed",
    "FLOE_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
    "FLOE_KAFKA_TOPICS": "lines",
    "FLOE_CASSANDRA_KEYSPACE": "floe",
    "FLOE_JOB_ENTRYPOINT": "examples/word-count/word_count.py",
}


def _committed(environ: dict[str, str]) -> None:
    """A committed batch's metrics, as the batch loop writes them, for a replica of `environ`."""
    job = api.Job()
    job.stages.append(api.Stage(name="count", fn=lambda batch: None, source=None))
    ctx = ReplicaContext.of(config.load(environ=environ), job, member_name="replica-0")
    stagepass._committed(ctx, job.stages[0], [], {("lines", 0): 42}, size=3, out=1, dlq=0, replay=False,
                         clock=api.BatchClock())


def test_a_named_app_id_is_exported_as_the_apps_name() -> None:
    _committed({**ENV, "FLOE_APP_NAME": "word-count"})
    assert REGISTRY.get_sample_value(
        "floe_job_committed_offset", {"app": "word-count", "topic": "lines", "partition": "0"}
    ) == 42
    assert REGISTRY.get_sample_value("floe_job_last_success_timestamp_seconds", {"app": "word-count"}) is not None
    assert REGISTRY.get_sample_value(
        "floe_job_committed_offset", {"app": "team-a-word-count-21f6351aed", "topic": "lines", "partition": "0"}
    ) is None


def test_an_app_id_never_named_is_exported_as_itself() -> None:
    _committed({**ENV, "FLOE_APP_ID": "local-run-only"})
    assert REGISTRY.get_sample_value("floe_job_last_success_timestamp_seconds", {"app": "local-run-only"}) is not None


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
