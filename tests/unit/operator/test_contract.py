"""The contract between operator and runtime (design contract 6), checked on every golden case.

Each case is rendered as the operator renders it (the ConfigMap file and the container's
environment), the Secret and field references are given stand-in values the way the kubelet
would resolve them, and the result is loaded through the runtime's own loader
(`floe_jobs.config.load`). Every variable the operator renders must be a setting the runtime
reads and must arrive in that setting; every key of the file must arrive; every setting the
operator is responsible for (credentials, key material, the pod's identity) must be rendered by
some case. A name on one side only fails here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_jobs import config, pem
from floe_operator import model, render
from pydantic import SecretStr

from tests import material

from .conftest import CASES, load_case

NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))
Render = Callable[[model.StreamingApp], render.Process]

# Settings that reach a replica only through the pod's environment: the operator must render each.
FROM_ENVIRONMENT_ONLY = set(config.SECRET_KEYS) | {("pod", "name"), ("pod", "namespace"), ("pod", "ip")}


def stand_in(name: str, ref: Mapping[str, Any]) -> str:
    """What the kubelet would put in a variable: unique per reference, and a certificate or a key
    where the setting reads one (a username may hold any text)."""
    if "secretKeyRef" in ref:
        key = ref["secretKeyRef"]
        body = f"secret {key['name']}/{key['key']} for {name}"
    else:
        body = f"field {ref['fieldRef']['fieldPath']} for {name}"
    material_of = material.KEY if name.endswith("KEY_PEM") else material.CERT if name.endswith("_PEM") else ""
    return material.tagged(material_of, body)


def arrives_as(name: str, value: str) -> str:
    """What a setting holds for a variable's value: a key rewrapped as PKCS#8, the rest as given."""
    return pem.pkcs8(value) if name.endswith("KEY_PEM") else value


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and path not in {("spark", "conf"), ("kafka", "extra")}:
        for key, child in value.items():
            yield from leaves(child, (*path, key))
    else:
        yield path, value


def at(cfg: Any, path: tuple[str, ...]) -> Any:
    node = cfg
    for part in path:
        node = getattr(node, part)
    if isinstance(node, SecretStr):
        return node.get_secret_value()
    if isinstance(node, list) and node and hasattr(node[0], "model_dump"):
        return [item.model_dump(mode="json") for item in node]
    return node


def violations(app: model.StreamingApp, tmp: Path, *, process: Render = render.process) -> list[str]:
    """What breaks the contract for one app (empty: nothing)."""
    found: list[str] = []
    config_file = tmp / render.CONFIG_FILE
    config_file.write_text(render.config_map(app)["data"][render.CONFIG_FILE])
    proc = process(app, config_path=str(config_file))  # type: ignore[call-arg]
    env: dict[str, str] = {}
    expected: dict[str, str] = {}
    for item in proc["env"]:
        name = item["name"]
        if not name.startswith("FLOE_"):
            continue  # the user's own variables (spec.env)
        if "value" in item:
            env[name] = str(item["value"])
        else:
            env[name] = stand_in(name, item["valueFrom"])
            expected[name] = arrives_as(name, env[name])
    known = {env_name: path for path, (env_name, _) in config.ENV_KEYS.items()}
    for name in env:
        if name != config.CONFIG_ENV and name not in known:
            found.append(f"{name} is rendered but the runtime has no such setting")
    if found:
        return found
    try:
        cfg = config.load(environ=env)
    except config.ConfigError as exc:
        return [f"the runtime refuses what the operator rendered: {exc}"]
    for name, value in expected.items():
        got = at(cfg, known[name])
        if got != value:
            found.append(f"{name} is rendered but {'.'.join(known[name])} does not receive it (got {got!r})")
    for path, value in leaves(render.job_config(app)):
        got = at(cfg, path)
        if got != value:
            found.append(f"{'.'.join(path)}: rendered {value!r}, the runtime loaded {got!r}")
    return found


@pytest.mark.parametrize("name", NAMES)
def test_runtime_loads_what_the_operator_renders(name: str, tmp_path: Path) -> None:
    app = model.StreamingApp.from_body(load_case(name))
    assert violations(app, tmp_path) == []


def test_every_environment_only_setting_is_rendered_by_some_case() -> None:
    rendered: set[str] = set()
    for name in NAMES:
        app = model.StreamingApp.from_body(load_case(name))
        rendered.update(item["name"] for item in render.process(app)["env"])
    missing = sorted(config.env_name(*p) for p in FROM_ENVIRONMENT_ONLY if config.env_name(*p) not in rendered)
    assert missing == [], f"settings the runtime reads that no case renders: {missing}"


def test_a_variable_on_the_operator_side_only_fails(tmp_path: Path) -> None:
    app = model.StreamingApp.from_body(load_case("full"))

    def drifted(app: model.StreamingApp, *, config_path: str = render.CONFIG_PATH) -> render.Process:
        proc = render.process(app, config_path=config_path)
        token = {"name": "FLOE_KAFKA_SASL_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}}
        env = [*proc["env"], token]
        return {**proc, "env": env}

    assert violations(app, tmp_path, process=drifted) == [
        "FLOE_KAFKA_SASL_TOKEN is rendered but the runtime has no such setting"
    ]


def test_a_file_key_on_the_operator_side_only_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = model.StreamingApp.from_body(load_case("minimal"))
    original = render.job_config

    def drifted(app: model.StreamingApp) -> dict[str, Any]:
        out = original(app)
        return {**out, "cassandra": {**out["cassandra"], "read_timeout": 5}}

    monkeypatch.setattr(render, "job_config", drifted)
    (problem,) = violations(app, tmp_path)
    assert "cassandra.read_timeout" in problem and "is not a known key" in problem


def test_a_secret_is_refused_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "floe.yaml"
    body = yaml.safe_load(render.config_map(model.StreamingApp.from_body(load_case("minimal")))["data"]["floe.yaml"])
    body["kafka"]["sasl_password"] = "hunter2"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(config.ConfigError) as info:
        config.load(path=path, environ={})
    assert "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD)" in str(info.value)
    assert "hunter2" not in str(info.value)
