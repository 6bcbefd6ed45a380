"""The operator, in-process against the real API server, the secured Kafka listeners and the
secured Cassandra node, on apps whose Secrets hold bad input: each app goes Degraded with a
stable reason whose message names the setting and the Secret key to change; an app whose
Cassandra password stops working after it was provisioned is caught too; and no secret value
shows in the operator's log, its Events or the apps' status."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf.testing
import pytest
from floe_operator import handlers
from floe_stack import localrun
from floe_stack import tls as stack_tls

from ..operator.kube import Kubectl, condition
from ..waiting import wait_for
from .conftest import Tls, create_secret, replace_secret, stranger_ca

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]


@pytest.fixture
def kube(kubectl: str, kubeconfig: str) -> Kubectl:
    k = Kubectl(kubectl, kubeconfig)
    crd = Path(__file__).resolve().parents[3] / "crds" / "streamingapp.yaml"
    k.run("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    k.run("wait", "--for=condition=Established", "--timeout=60s", "crd/streamingapps.streaming.floe.dev")
    return k


@pytest.fixture
def operator(kube: Kubectl, namespace: str) -> Iterator[kopf.testing.KopfRunner]:
    started = threading.Event()
    registry = handlers.build_registry(handlers.Options(resync_seconds=2.0, started=started))
    runner = kopf.testing.KopfRunner(["run", "--standalone", "--namespace", namespace], registry=registry, timeout=60)
    with runner:
        assert started.wait(timeout=30), "the operator did not start"
        yield runner
        kube.run("delete", "streamingapp", "--all", "-n", namespace, "--wait=true", "--timeout=90s", timeout=120)
    assert runner.exception is None, runner.exception


def manifest(
    name: str, namespace: str, *, stack_env: dict[str, str], port: int, topic: str, mtls: bool = False
) -> dict[str, Any]:
    if mtls:
        bootstrap = stack_env["FLOE_KAFKA_SSL_BOOTSTRAP"]
        security: dict[str, Any] = {
            "protocol": "SSL",
            "tls": {"caSecretRef": {"name": f"{name}-kafka-ca"}, "clientCertSecretRef": {"name": f"{name}-client"}},
        }
    else:
        bootstrap = stack_env["FLOE_KAFKA_SASL_SSL_BOOTSTRAP"]
        security = {
            "protocol": "SASL_SSL",
            "tls": {"caSecretRef": {"name": f"{name}-kafka-ca"}},
            "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"name": f"{name}-kafka-user"}},
        }
    return {
        "apiVersion": "streaming.floe.dev/v1alpha1",
        "kind": "StreamingApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "registry.example.com/floe/word-count:1.0.0",
            "job": {"entrypoint": "wordcount.app:transform"},
            "kafka": {"bootstrapServers": bootstrap, "topics": [topic], "security": security},
            "state": {
                "cassandra": {
                    "hosts": ["127.0.0.1"],
                    "port": port,
                    "keyspace": f"floe_opbad_{name.replace('-', '_')}",
                    "credentialsSecretRef": {"name": f"{name}-cassandra-user"},
                    "tls": {"enabled": True, "caSecretRef": {"name": f"{name}-cassandra-ca"}},
                },
                "stores": [{"name": f"{name}-counts"}],
            },
        },
    }


def good_secrets(name: str, tls: Tls) -> dict[str, dict[str, str]]:
    return {
        f"{name}-kafka-user": {"username": "floe", "password": tls.passwords["floe"]},
        f"{name}-client": {"tls.crt": tls.client_cert, "tls.key": tls.client_key},
        f"{name}-kafka-ca": {"ca.crt": tls.ca},
        f"{name}-cassandra-user": {"username": "floe", "password": tls.passwords["floe"]},
        f"{name}-cassandra-ca": {"ca.crt": tls.ca},
    }


def degraded(kube: Kubectl, name: str, namespace: str, reason: str, *, timeout: float = 90) -> str:
    """The Degraded message once the app is Degraded for `reason`."""
    obj = wait_for(
        lambda: (o := kube.get("streamingapp", name, namespace)) and condition(o, "Degraded").get("reason") == reason
        and o,
        what=f"Degraded {reason} on {name}",
        timeout=timeout,
    )
    assert condition(obj, "Degraded")["status"] == "True"
    assert kube.get("deployment", name, namespace) is None  # nothing rolls out on bad input
    return str(condition(obj, "Degraded")["message"])


def test_bad_input_degrades_each_app_with_a_reason_naming_the_secret_key(
    kube: Kubectl,
    namespace: str,
    operator: Any,
    stack_env: dict[str, str],
    tls: Tls,
    secured_cassandra_port: int,
    secured_session: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = localrun.unique("op-bad")
    localrun.create_topic(stack_env["FLOE_KAFKA_BOOTSTRAP"], topic, 2)
    tls_dir = Path(stack_env["FLOE_STACK_TLS_DIR"])
    other_ca = stranger_ca(tmp_path / "other")
    expired_cert, expired_key = stack_tls.client(tls_dir, tmp_path / "expired", expired=True)
    stranger_cert, stranger_key = stack_tls.client(tmp_path / "other", tmp_path / "stranger")
    bad: dict[str, tuple[dict[str, dict[str, str]], bool]] = {
        "kafka-password": ({"kafka-user": {"username": "floe", "password": "wrong-kafka-5e1f"}}, False),
        "kafka-ca": ({"kafka-ca": {"ca.crt": other_ca}}, False),
        "kafka-expired": ({"client": {"tls.crt": expired_cert, "tls.key": expired_key}}, True),
        # a client certificate the brokers do not trust: refused in the handshake, with an alert
        "kafka-stranger": ({"client": {"tls.crt": stranger_cert, "tls.key": stranger_key}}, True),
        "cass-password": ({"cassandra-user": {"username": "floe", "password": "wrong-cass-9a2b"}}, False),
        "cass-expired": ({"cassandra-ca": {"ca.crt": stack_tls.expired_ca(tls_dir, tmp_path / "ca")}}, False),
        "cass-ca": ({"cassandra-ca": {"ca.crt": other_ca}}, False),
        "missing-key": ({"kafka-user": {"username": "floe"}}, False),
    }
    for name, (override, mtls) in bad.items():
        secrets = {**good_secrets(name, tls), **{f"{name}-{k}": v for k, v in override.items()}}
        for secret, data in secrets.items():
            create_secret(namespace, secret, data)
        kube.apply(manifest(name, namespace, stack_env=stack_env, port=secured_cassandra_port, topic=topic, mtls=mtls))

    try:
        message = degraded(kube, "kafka-password", namespace, "KafkaCredentialsRejected")
        assert "invalid credentials" in message
        assert "(FLOE_KAFKA_SASL_PASSWORD from Secret kafka-password-kafka-user key password)" in message

        message = degraded(kube, "kafka-ca", namespace, "KafkaTLSFailed")
        assert "certificate verify failed" in message
        assert "(FLOE_KAFKA_SSL_CA_PEM from Secret kafka-ca-kafka-ca key ca.crt)" in message

        message = degraded(kube, "kafka-expired", namespace, "KafkaTLSFailed")
        assert "FLOE_KAFKA_SSL_CERT_PEM from Secret kafka-expired-client key tls.crt" in message
        assert "expired" in message

        message = degraded(kube, "kafka-stranger", namespace, "KafkaTLSFailed")
        assert "SSL alert" in message and "the brokers must trust the client certificate" in message
        assert "FLOE_KAFKA_SSL_CERT_PEM from Secret kafka-stranger-client key tls.crt" in message

        message = degraded(kube, "cass-password", namespace, "CassandraCredentialsRejected")
        assert "(FLOE_CASSANDRA_USERNAME from Secret cass-password-cassandra-user key username" in message
        assert "FLOE_CASSANDRA_PASSWORD from Secret cass-password-cassandra-user key password" in message

        message = degraded(kube, "cass-expired", namespace, "CassandraTLSFailed")
        assert "CN=floe-local-tls-ca expired on" in message
        assert "(FLOE_CASSANDRA_TLS_CA_PEM from Secret cass-expired-cassandra-ca key ca.crt" in message

        message = degraded(kube, "cass-ca", namespace, "CassandraTLSFailed")
        assert "certificate verify failed" in message
        assert "(FLOE_CASSANDRA_TLS_CA_PEM from Secret cass-ca-cassandra-ca key ca.crt" in message

        message = degraded(kube, "missing-key", namespace, "SecretKeyNotFound")
        assert message == (
            "Secret missing-key-kafka-user has no key password (read into FLOE_KAFKA_SASL_PASSWORD); add it or fix "
            "the key in the spec reference"
        )

        # fixed, the app is provisioned and rolls out; a password that stops working afterwards
        # (the Secret changed, the tables exist) degrades it again
        good = good_secrets("cass-password", tls)["cass-password-cassandra-user"]
        replace_secret(namespace, "cass-password-cassandra-user", good)
        wait_for(lambda: kube.get("deployment", "cass-password", namespace), what="the Deployment after the fix")
        replace_secret(namespace, "cass-password-cassandra-user", {"username": "floe", "password": "wrong-again-1c"})
        obj = wait_for(
            lambda: (o := kube.get("streamingapp", "cass-password", namespace))
            and condition(o, "Degraded").get("reason") == "CassandraCredentialsRejected" and o,
            what="Degraded again after the password changed",
        )
        assert "FLOE_CASSANDRA_PASSWORD from Secret cass-password-cassandra-user key password" in str(
            condition(obj, "Degraded")["message"]
        )

        # no secret value in the operator's log, its Events or any app's status
        keys = [tls.client_key, expired_key, stranger_key]
        values = ["wrong-kafka-5e1f", "wrong-cass-9a2b", "wrong-again-1c", tls.passwords["floe"],
                  *(key.split("-----")[2].strip()[:64] for key in keys)]
        events = kube.run("get", "events", "-n", namespace, "-o", "yaml").stdout
        apps = kube.run("get", "streamingapps", "-n", namespace, "-o", "yaml").stdout
        assert "KafkaTLSFailed" in events and "CassandraCredentialsRejected" in events, "the Events were looked at"
        assert f"app={namespace}/cass-password" in caplog.text, "the operator's log was looked at"
        for value in values:
            assert value not in caplog.text, "a secret in the operator's log"
            assert value not in events, "a secret in an Event"
            assert value not in apps, "a secret in a StreamingApp"
    finally:
        for name in bad:
            localrun.drop_keyspace(secured_session, f"floe_opbad_{name.replace('-', '_')}")
