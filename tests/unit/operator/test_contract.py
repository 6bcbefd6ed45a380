"""The contract between operator and runtime (design contract 6), checked on every golden case.

Each case is rendered as the operator renders it (the ConfigMap file and the container's
environment), the Secret and field references are given stand-in values the way the kubelet
would resolve them, and the result is loaded through the runtime's own loader
(`floe_jobs.config.load`). Every variable the operator renders must be a setting the runtime
reads and must arrive in that setting; every key of the file must arrive; every setting the
operator is responsible for (credentials, key material, the pod's identity) must be rendered by
some case. A name on one side only fails here. The operator's own Kafka and Cassandra clients
of the app, and KEDA's TriggerAuthentication, read the same Secret references as the pods, and
connect with the settings a replica loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_jobs import config, pem
from floe_operator import cassandra, kafka, model, render
from floe_operator.lag import scalers
from pydantic import SecretStr

from tests import material

from .conftest import CASES, load_case

NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))
Render = Callable[[model.StreamingApp], render.Process]

# Settings that reach a replica only through the pod's environment: the operator must render each.
FROM_ENVIRONMENT_ONLY = set(config.SECRET_KEYS) | {("pod", "name"), ("pod", "namespace"), ("pod", "ip")}


def stand_in(variable: str, ref: Mapping[str, Any]) -> str:
    """What a reference holds: unique per Secret key (or pod field), and a certificate or a key
    where the variable reads one (a username may hold any text)."""
    if "secretKeyRef" in ref:
        key = ref["secretKeyRef"]
        body = f"secret {key['name']}/{key['key']}"
    else:
        body = f"field {ref['fieldRef']['fieldPath']} for {variable}"
    material_of = material.KEY if variable.endswith("KEY_PEM") else material.CERT if variable.endswith("_PEM") else ""
    return material.tagged(material_of, body)


class Kubelet:
    """The Secrets of an app as the kubelet reads them for the pod's environment: the value of
    each Secret key is made up on first reference and the same for every variable set from it,
    and the operator's clients read the same Secrets (`secrets`: Secret name → key → value)."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, str]] = {}

    def value(self, variable: str, ref: Mapping[str, Any]) -> str:
        if "secretKeyRef" not in ref:
            return stand_in(variable, ref)
        key = ref["secretKeyRef"]
        return self.secrets.setdefault(key["name"], {}).setdefault(key["key"], stand_in(variable, ref))


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


def pod_environment(app: model.StreamingApp, tmp: Path, *, process: Render = render.process) -> dict[str, Any]:
    """The FLOE_ variables of the app's container as the kubelet sets them, with the ConfigMap's
    file written where FLOE_CONFIG points."""
    config_file = tmp / render.CONFIG_FILE
    config_file.write_text(render.config_map(app)["data"][render.CONFIG_FILE])
    proc = process(app, config_path=str(config_file))  # type: ignore[call-arg]
    return {item["name"]: item for item in proc["env"] if item["name"].startswith("FLOE_")}


def resolved(items: Mapping[str, Any], kubelet: Kubelet) -> dict[str, str]:
    """The variables' values: as rendered, or read from the Secret or field they reference."""
    return {
        name: str(item["value"]) if "value" in item else kubelet.value(name, item["valueFrom"])
        for name, item in items.items()
    }


def violations(
    app: model.StreamingApp, tmp: Path, *, process: Render = render.process, kubelet: Kubelet | None = None
) -> list[str]:
    """What breaks the contract for one app (empty: nothing)."""
    found: list[str] = []
    kubelet = kubelet or Kubelet()
    items = pod_environment(app, tmp, process=process)
    env = resolved(items, kubelet)
    expected = {name: arrives_as(name, env[name]) for name, item in items.items() if "valueFrom" in item}
    known = {env_name: path for path, (env_name, _) in config.ENV_KEYS.items()}
    for name in env:
        if name not in (config.CONFIG_ENV, config.ENV_NAMES_ENV) and name not in known:
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


KafkaTargetOf = Callable[[model.StreamingApp, Mapping[str, Mapping[str, str]]], kafka.Target]
CassandraTargetOf = Callable[[model.StreamingApp, Mapping[str, Mapping[str, str]]], cassandra.Target]


def client_mismatches(
    app: model.StreamingApp,
    tmp: Path,
    *,
    kafka_target: KafkaTargetOf = kafka.target_of,
    cassandra_target: CassandraTargetOf = cassandra.target_of,
) -> list[str]:
    """Where the operator's own clients of the app's clusters would connect otherwise than its
    replicas: the operator reads the app's Secret references itself (`kafka.target_of`,
    `cassandra.target_of`) besides rendering them into the pod, and checks, provisions and reads
    lag with what it reads."""
    kubelet = Kubelet()
    cfg = config.load(environ=resolved(pod_environment(app, tmp), kubelet))
    found: list[str] = []
    target = kafka_target(app, kubelet.secrets)
    security = target.security
    if security.key_pem is not None:
        # the runtime hands every client the key as PKCS#8; librdkafka reads any wrapping
        security = dataclasses.replace(security, key_pem=pem.pkcs8(security.key_pem))
    if (target.bootstrap_servers, security) != (cfg.kafka.bootstrap_servers, cfg.kafka.security):
        found.append(f"Kafka: the operator connects with {target!r}, a replica with {cfg.kafka.security!r}")
    connection, replica = cassandra_target(app, kubelet.secrets).connection, cfg.cassandra.connection()
    if connection != replica:
        found.append(f"Cassandra: the operator connects with {connection!r}, a replica with {replica!r}")
    return found


@pytest.mark.parametrize("name", NAMES)
def test_the_operator_connects_as_its_replicas_do(name: str, tmp_path: Path) -> None:
    app = model.StreamingApp.from_body(load_case(name))
    assert client_mismatches(app, tmp_path) == []


def test_an_operator_client_reading_a_secret_otherwise_fails(tmp_path: Path) -> None:
    app = model.StreamingApp.from_body(load_case("full"))

    def without_ca(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> cassandra.Target:
        return cassandra.Target(dataclasses.replace(cassandra.target_of(app, secrets).connection, tls_ca_pem=None))

    def other_password(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> kafka.Target:
        target = kafka.target_of(app, secrets)
        return dataclasses.replace(target, security=dataclasses.replace(target.security, password="other"))

    (problem,) = client_mismatches(app, tmp_path, cassandra_target=without_ca)
    assert problem.startswith("Cassandra: the operator connects with")
    (problem,) = client_mismatches(app, tmp_path, kafka_target=other_password)
    assert problem.startswith("Kafka: the operator connects with")


# KEDA's Kafka scaler parameters and the settings a replica reads the same Secret keys into.
KEDA_PARAMETERS = {
    "username": ("kafka", "sasl_username"),
    "password": ("kafka", "sasl_password"),
    "ca": ("kafka", "ssl_ca_pem"),
    "cert": ("kafka", "ssl_cert_pem"),
    "key": ("kafka", "ssl_key_pem"),
}


@pytest.mark.parametrize("name", NAMES)
def test_keda_reads_the_secret_keys_the_replicas_read(name: str, tmp_path: Path) -> None:
    """The TriggerAuthentication (`lag.scalers`) names the app's Kafka Secrets a fourth time."""
    app = model.StreamingApp.from_body(load_case(name))
    items = pod_environment(app, tmp_path)
    pods = {}
    for parameter, path in KEDA_PARAMETERS.items():
        item = items.get(config.env_name(*path))
        if item is not None:
            ref = item["valueFrom"]["secretKeyRef"]
            pods[parameter] = (ref["name"], ref["key"])
    refs = scalers.trigger_authentication(app)["spec"]["secretTargetRef"]
    keda = {r["parameter"]: (r["name"], r["key"]) for r in refs}
    assert keda == pods


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


def test_a_file_key_the_runtime_dropped_fails_at_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the golden cases: every ConfigMap the operator renders has its keys checked against
    the runtime's model, so a setting dropped on the runtime's side stops the render."""
    app = model.StreamingApp.from_body(load_case("minimal"))
    monkeypatch.delitem(config.CassandraSettings.model_fields, "local_datacenter")
    with pytest.raises(config.ConfigError) as info:
        render.config_map(app)
    assert "cassandra.local_datacenter: is not a known key" in str(info.value)


def test_a_secret_is_refused_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "floe.yaml"
    body = yaml.safe_load(render.config_map(model.StreamingApp.from_body(load_case("minimal")))["data"]["floe.yaml"])
    body["kafka"]["sasl_password"] = "hunter2"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(config.ConfigError) as info:
        config.load(path=path, environ={})
    assert "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD)" in str(info.value)
    assert "hunter2" not in str(info.value)
