"""spec.kafka.properties (the runtime's kafka.extra): the deny-list, what each client takes, the
runtime's checks at start, and the CRD's CEL rules generated from the same list."""

from __future__ import annotations

import pytest
import yaml
from floe_jobs import config, kafkaio, kafkaprops
from floe_stack import crdrules

BASE = {
    "FLOE_APP_ID": "app",
    "FLOE_KAFKA_BOOTSTRAP_SERVERS": "b:9092",
    "FLOE_KAFKA_TOPICS": "in",
    "FLOE_CASSANDRA_KEYSPACE": "ks",
    "FLOE_JOB_ENTRYPOINT": "m:f",
}
PROPS = {
    "fetch.max.bytes": "52428800",
    "compression.type": "zstd",
    "socket.keepalive.enable": "true",
    "client.rack": "eu-west-1a",
    "client.id": "team-a",
    "statistics.interval.ms": "0",
}


def load(props: dict[str, str]) -> config.FloeConfig:
    import json

    return config.load(environ={**BASE, "FLOE_KAFKA_EXTRA": json.dumps(props)})


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("group.id", "spec.kafka.properties.group.id is owned by Floe: set spec.kafka.consumerGroup"),
        ("GROUP.ID", "spec.kafka.properties.GROUP.ID is owned by Floe: set spec.kafka.consumerGroup"),
        ("session.timeout.ms", "set spec.shutdown.sessionTimeoutMs"),
        ("enable.idempotence", "idempotent with acks=all"),
        ("auto.offset.reset", "set spec.kafka.startingOffsets"),
        ("security.protocol", "set spec.kafka.security.protocol"),
        ("sasl.oauthbearer.client.secret", "spec.kafka.properties.sasl.oauthbearer.client.secret may not be set"),
        ("ssl.keystore.location", "set spec.kafka.security.tls"),
        ("ssl_key", "set spec.kafka.security.tls"),
        ("enable.ssl.certificate.verification", "(verifyHostname)"),
        ("ssl.key.password", "credentials and TLS material come only from Secrets"),
        ("some.client.password", "credentials and TLS material come only from Secrets"),
        ("sasl.kerberos.keytab", "set spec.kafka.security.sasl"),
        ("ssl.engine.location", "set spec.kafka.security.tls"),
        ("error_cb", "client callbacks are Floe's"),
    ],
)
def test_denied_keys_are_named_with_what_to_use_instead(key: str, expected: str) -> None:
    reason = kafkaprops.refusal(key)
    assert reason is not None and expected in reason
    assert f"spec.kafka.properties.{key} " in reason


@pytest.mark.parametrize("key", [*sorted(PROPS), "linger.ms", "debug", "topic.metadata.refresh.interval.ms"])
def test_client_properties_floe_leaves_to_the_app_pass(key: str) -> None:
    assert kafkaprops.refusal(key) is None


def test_each_client_takes_the_properties_of_its_role() -> None:
    assert kafkaprops.for_client(PROPS, "consumer") == {
        "fetch.max.bytes": "52428800",
        "socket.keepalive.enable": "true",
        "client.rack": "eu-west-1a",
        "statistics.interval.ms": "0",
    }
    assert kafkaprops.for_client(PROPS, "producer") == {
        "compression.type": "zstd",
        "socket.keepalive.enable": "true",
        "statistics.interval.ms": "0",
    }
    assert kafkaprops.for_client(PROPS, "admin") == {"socket.keepalive.enable": "true", "statistics.interval.ms": "0"}
    assert kafkaprops.for_client(PROPS, "operator") == {"socket.keepalive.enable": "true"}
    assert kafkaprops.client_id(PROPS, "app-0-reader") == "team-a-app-0-reader"
    assert kafkaprops.client_id({}, "app-0-reader") == "app-0-reader"


def test_runtime_clients_merge_properties_over_floes_tuning_and_under_what_floe_owns() -> None:
    cfg = load(PROPS)
    producer = kafkaio.with_properties(
        {**kafkaio.client_settings(cfg), "client.id": "app-0-sink", "compression.type": "lz4", "acks": "all"},
        cfg,
        "producer",
    )
    assert producer["compression.type"] == "zstd"  # the app's choice over Floe's default
    assert producer["client.id"] == "team-a-app-0-sink"
    assert producer["acks"] == "all"
    assert "fetch.max.bytes" not in producer and "client.rack" not in producer
    source = kafkaio.spark_source_options(cfg)
    assert (source["kafka.fetch.max.bytes"], source["kafka.client.rack"]) == ("52428800", "eu-west-1a")
    assert source["kafka.isolation.level"] == "read_committed"
    assert "kafka.compression.type" not in source
    sink = kafkaio.spark_sink_options(cfg)
    assert (sink["kafka.compression.type"], sink["kafka.acks"]) == ("zstd", "all")


def test_the_runtime_refuses_a_denied_key_naming_it_and_its_variable() -> None:
    with pytest.raises(config.ConfigError) as err:
        load({"compression.type": "zstd", "enable.auto.commit": "true", "sasl.username": "u"})
    text = str(err.value)
    assert "kafka.extra (FLOE_KAFKA_EXTRA)" in text
    assert "spec.kafka.properties.enable.auto.commit is owned by Floe: offsets are committed" in text
    assert "spec.kafka.properties.sasl.username may not be set: set spec.kafka.security.sasl" in text


def test_the_runtime_refuses_a_key_librdkafka_does_not_know_naming_it() -> None:
    with pytest.raises(config.ConfigError) as err:
        load({"fetch.max.bytes": "52428800", "fetch.max.bites": "1", "compression.type": "zip"})
    text = str(err.value)
    assert "kafka.extra (FLOE_KAFKA_EXTRA): spec.kafka.properties.fetch.max.bites: librdkafka refused it" in text
    assert 'No such configuration property: "fetch.max.bites"' in text
    assert "spec.kafka.properties.compression.type: librdkafka refused it" in text
    assert "spec.kafka.properties.fetch.max.bytes" not in text


def test_known_properties_load() -> None:
    assert load(PROPS).kafka.extra == PROPS


def test_the_crd_rules_are_generated_from_the_deny_list() -> None:
    text = crdrules.CRD.read_text()
    assert crdrules.rewrite(text) == text, "crds/streamingapp.yaml is stale: run python -m floe_stack.crdrules"
    crd = yaml.safe_load(text)
    kafka = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["kafka"]
    rules = kafka["properties"]["properties"]["x-kubernetes-validations"]
    assert rules[1:] == kafkaprops.cel_rules()
    assert all(key in rules[1]["rule"] for key in kafkaprops.DENIED)
