"""The operator's clients of an app's cluster take only the app's Kafka client properties about
reaching the brokers (`floe_jobs.kafkaprops`, role "operator"), never its client.id."""

from __future__ import annotations

import copy

from floe_operator import kafka, model

from .conftest import load_case


def test_the_operators_clients_take_only_the_connection_properties() -> None:
    body = load_case("minimal")
    plain = kafka.target_of(model.StreamingApp.from_body(body), {})
    tuned = copy.deepcopy(body)
    tuned["spec"]["kafka"]["properties"] = {
        "socket.keepalive.enable": "true",
        "broker.address.family": "v4",
        "fetch.max.bytes": "52428800",
        "compression.type": "zstd",
        "client.id": "team-a",
    }
    conf = kafka.target_of(model.StreamingApp.from_body(tuned), {}).client_config()
    assert conf == {**plain.client_config(), "socket.keepalive.enable": "true", "broker.address.family": "v4"}


def test_apps_without_connection_properties_share_one_target() -> None:
    body = load_case("minimal")
    tuned = copy.deepcopy(body)
    tuned["spec"]["kafka"]["properties"] = {"fetch.max.bytes": "52428800", "client.id": "team-a"}
    apps = [model.StreamingApp.from_body(b) for b in (body, tuned)]
    assert kafka.target_of(apps[0], {}) == kafka.target_of(apps[1], {})
