"""The typed model agrees with the CRD: same fields, same defaults; and the job config it
renders is accepted by the runtime's own configuration loader."""

from __future__ import annotations

from typing import Any

from floe_jobs import config
from floe_operator import model, render
from pydantic import BaseModel

from . import crdtools
from .conftest import CASES, load_case

NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))


def _model_fields(cls: type[BaseModel]) -> dict[str, Any]:
    return {info.alias or name: info for name, info in cls.model_fields.items()}


def _walk(schema: dict[str, Any], cls: type[BaseModel], path: str, problems: list[str]) -> None:
    fields = _model_fields(cls)
    props = schema.get("properties", {})
    for name in props:
        if name not in fields:
            problems.append(f"{path}.{name} is in the CRD but not in {cls.__name__}")
    for name in fields:
        if name not in props:
            problems.append(f"{path}.{name} is in {cls.__name__} but not in the CRD")
    for name, sub in props.items():
        info = fields.get(name)
        if info is None:
            continue
        annotation = info.annotation
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        nested = next((a for a in inner if issubclass(a, BaseModel)), None)
        if nested is not None and sub.get("type") == "object" and "properties" in sub:
            _walk(sub, nested, f"{path}.{name}", problems)
        elif sub.get("type") == "array" and "properties" in sub.get("items", {}):
            item_cls = getattr(annotation, "__args__", (None,))[0]
            if isinstance(item_cls, type) and issubclass(item_cls, BaseModel):
                _walk(sub["items"], item_cls, f"{path}.{name}[]", problems)


def test_model_fields_match_crd() -> None:
    problems: list[str] = []
    _walk(crdtools.schema()["properties"]["spec"], model.AppSpec, "spec", problems)
    assert problems == []


def test_model_defaults_match_crd_defaults(minimal_body: dict[str, Any]) -> None:
    # The minimal case defaulted by the CRD must equal the model's own defaults.
    raw = {k: v for k, v in minimal_body["spec"].items()}
    from_crd = model.AppSpec.model_validate(raw)
    required_only = {k: raw[k] for k in ("image", "job", "kafka", "state")}
    required_only["kafka"] = {k: raw["kafka"][k] for k in ("bootstrapServers", "topics")}
    required_only["state"] = {"cassandra": {k: raw["state"]["cassandra"][k] for k in ("hosts", "keyspace")}}
    from_model = model.AppSpec.model_validate(required_only)
    assert from_crd.model_dump() == from_model.model_dump()


def test_app_id_is_a_dns_label_even_for_long_names() -> None:
    body = load_case("minimal")
    body["metadata"]["namespace"] = "n" * 63
    body["metadata"]["name"] = "a" * 52
    app = model.StreamingApp.from_body(body)
    assert len(app.app_id) <= 63
    assert app.app_id != model.StreamingApp.from_body(load_case("minimal")).app_id


def test_referenced_secrets_cover_every_secret_ref() -> None:
    app = model.StreamingApp.from_body(load_case("full"))
    refs = model.referenced_secrets(app.spec)
    assert refs == {
        "kafka-user": ["user", "pass"],
        "kafka-ca": ["ca.crt"],
        "cassandra-app": ["username", "password"],
        "cassandra-ca": ["ca.pem"],
    }
    env_refs = model.referenced_secrets(model.StreamingApp.from_body(load_case("env-and-overrides")).spec)
    assert env_refs == {"dedup-db": ["password"]}


def test_state_cache_bound_reaches_the_runtime() -> None:
    """spec.state.cacheMaxKeys when set, else the runtime's own default."""
    # that the runtime loads it as rendered: test_contract
    assert render.job_config(model.StreamingApp.from_body(load_case("full")))["state"] == {"cache_max_keys": 200_000}
    unset = config.from_dict(render.job_config(model.StreamingApp.from_body(load_case("minimal"))))
    assert unset.state.cache_max_keys == config.StateSettings().cache_max_keys


def test_cassandra_tuning_is_what_the_spec_sets_under_the_runtimes_names() -> None:
    cass = model.CassandraSpec.model_validate(
        {"hosts": ["c"], "keyspace": "k", "serialConsistency": "SERIAL", "requestTimeoutSeconds": 2.5}
    )
    assert cass.tuning() == {"serial_consistency": "SERIAL", "request_timeout": 2.5}
    assert model.CassandraSpec.model_validate({"hosts": ["c"], "keyspace": "k"}).tuning() == {}
