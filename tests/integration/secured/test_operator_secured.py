"""The operator's own clients against the secured listeners and node, from an app's spec and the
decoded data of its Secrets: its topic check over SASL_SSL and mTLS, its provisioning over
TLS with password authentication, and the reasons it reports when they are refused."""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs.stores import schema
from floe_operator import cassandra, kafka, model
from floe_stack import localrun

from .conftest import Tls

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra]


def app_of(*, bootstrap: str, security: dict[str, Any], cassandra_port: int, keyspace: str, topic: str) -> Any:
    return model.StreamingApp.from_body(
        {
            "metadata": {"name": "secured", "namespace": "it", "uid": "u"},
            "spec": {
                "image": "i",
                "job": {"entrypoint": "m:f"},
                "kafka": {"bootstrapServers": bootstrap, "topics": [topic], "security": security},
                "state": {
                    "cassandra": {
                        "hosts": ["127.0.0.1"],
                        "port": cassandra_port,
                        "keyspace": keyspace,
                        "credentialsSecretRef": {"name": "cass"},
                        "tls": {"enabled": True, "caSecretRef": {"name": "ca"}},
                    },
                    "stores": [{"name": "counts"}],
                },
            },
        }
    )


SASL = {
    "protocol": "SASL_SSL",
    "tls": {"caSecretRef": {"name": "ca"}},
    "sasl": {"mechanism": "SCRAM-SHA-256", "credentialsSecretRef": {"name": "kafka"}},
}
MTLS = {"protocol": "SSL", "tls": {"caSecretRef": {"name": "ca"}, "clientCertSecretRef": {"name": "client"}}}


@pytest.fixture
def topic(stack_env: dict[str, str]) -> str:
    name = localrun.unique("op-sec")
    localrun.create_topic(stack_env["FLOE_KAFKA_BOOTSTRAP"], name, 3)
    return name


def secrets_of(tls: Tls, **override: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        "kafka": {"username": "floe", "password": tls.passwords["floe"]},
        "client": {"tls.crt": tls.client_cert, "tls.key": tls.client_key},
        "cass": {"username": "floe", "password": tls.passwords["floe"]},
        "ca": {"ca.crt": tls.ca},
        **override,
    }


@pytest.mark.parametrize(
    ("security", "listener"), [(SASL, "FLOE_KAFKA_SASL_SSL_BOOTSTRAP"), (MTLS, "FLOE_KAFKA_SSL_BOOTSTRAP")]
)
def test_topic_check_over_secured_listeners(
    security: dict[str, Any], listener: str, stack_env: dict[str, str], tls: Tls, topic: str
) -> None:
    app = app_of(bootstrap=stack_env[listener], security=security, cassandra_port=1, keyspace="k", topic=topic)
    inspector = kafka.Inspector(ttl=0.0, timeout=10.0)
    assert inspector.partitions_sync(kafka.target_of(app, secrets_of(tls)), [topic]) == {topic: 3}


def test_topic_check_with_a_wrong_password_is_rejected_by_name(stack_env: dict[str, str], tls: Tls, topic: str) -> None:
    app = app_of(
        bootstrap=stack_env["FLOE_KAFKA_SASL_SSL_BOOTSTRAP"], security=SASL, cassandra_port=1, keyspace="k", topic=topic
    )
    secrets = secrets_of(tls, kafka={"username": "floe", "password": "wrong-9d8e"})
    inspector = kafka.Inspector(ttl=0.0, timeout=5.0)
    with pytest.raises(kafka.CredentialsRejected) as info:
        for _ in range(3):  # the first answer may come before the authentication's
            try:
                inspector.partitions_sync(kafka.target_of(app, secrets), [topic])
            except kafka.CredentialsRejected:
                raise
            except kafka.KafkaUnavailable:
                continue
    assert "kafka.sasl_password" in str(info.value) and "credentialsSecretRef" in str(info.value)
    assert "wrong-9d8e" not in str(info.value)


def test_provisioning_over_tls_with_password_authentication(
    stack_env: dict[str, str], tls: Tls, secured_cassandra_port: int, secured_session: Any
) -> None:
    keyspace = f"floe_opsec_{localrun.unique('k').split('-')[1]}"
    app = app_of(bootstrap="b:1", security=SASL, cassandra_port=secured_cassandra_port, keyspace=keyspace, topic="t")
    provisioner = cassandra.Provisioner(connect_timeout=5.0)
    try:
        provisioner.provision_sync(cassandra.target_of(app, secrets_of(tls)), app)
        tables = schema.columns_of(secured_session, keyspace, [schema.table_name("counts")])
        assert schema.table_name("counts") in tables

        wrong = secrets_of(tls, cass={"username": "floe", "password": "wrong-c0ffee"})
        with pytest.raises(cassandra.CredentialsRejected) as info:
            provisioner.provision_sync(cassandra.target_of(app, wrong), app)
        assert "cassandra.password" in str(info.value) and "wrong-c0ffee" not in str(info.value)
    finally:
        provisioner.close()
        localrun.drop_keyspace(secured_session, keyspace)
