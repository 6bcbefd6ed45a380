"""Security settings: validated at start without echoing a secret, and mapped alike onto every
kind of Kafka client (librdkafka for the driver's clients, Java for Spark's source and sink)."""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import config, kafkaio
from floe_jobs.kafkasec import KafkaSecurity

from tests.material import CERT as PEM
from tests.material import KEY

BASE = {
    "FLOE_APP_ID": "app",
    "FLOE_KAFKA_BOOTSTRAP_SERVERS": "b:9094",
    "FLOE_KAFKA_TOPICS": "in",
    "FLOE_CASSANDRA_KEYSPACE": "ks",
    "FLOE_JOB_ENTRYPOINT": "m:f",
}


def load(**env: str) -> config.FloeConfig:
    return config.load(environ={**BASE, **env})


def sasl(**env: str) -> dict[str, str]:
    return {
        "FLOE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "FLOE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "FLOE_KAFKA_SASL_USERNAME": "app",
        "FLOE_KAFKA_SASL_PASSWORD": 'pa"ss\\word',
        "FLOE_KAFKA_SSL_CA_PEM": PEM,
        **env,
    }


def test_sasl_ssl_reaches_librdkafka_and_java_clients_alike() -> None:
    cfg = load(**sasl())
    driver = kafkaio.client_settings(cfg)
    assert driver["security.protocol"] == "SASL_SSL"
    assert driver["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (driver["sasl.username"], driver["sasl.password"]) == ("app", 'pa"ss\\word')
    assert driver["ssl.ca.pem"] == PEM
    assert driver["ssl.endpoint.identification.algorithm"] == "https"
    spark = kafkaio.spark_sink_options(cfg)
    assert spark["kafka.bootstrap.servers"] == "b:9094"
    assert spark["kafka.security.protocol"] == "SASL_SSL"
    assert spark["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="pa\\"ss\\\\word";'
    )
    assert (spark["kafka.ssl.truststore.type"], spark["kafka.ssl.truststore.certificates"]) == ("PEM", PEM)
    assert "kafka.ssl.keystore.key" not in spark


def test_mtls_hands_the_client_certificate_to_both_kinds_of_client() -> None:
    cfg = load(FLOE_KAFKA_SECURITY_PROTOCOL="SSL", FLOE_KAFKA_SSL_CA_PEM=PEM, FLOE_KAFKA_SSL_CERT_PEM=PEM,
               FLOE_KAFKA_SSL_KEY_PEM=KEY, FLOE_KAFKA_SSL_VERIFY_HOSTNAME="false")
    driver = kafkaio.client_settings(cfg)
    assert (driver["ssl.certificate.pem"], driver["ssl.key.pem"]) == (PEM, KEY)
    assert driver["ssl.endpoint.identification.algorithm"] == "none"
    assert "sasl.username" not in driver
    spark = kafkaio.spark_source_options(cfg)
    assert spark["kafka.ssl.keystore.type"] == "PEM"
    assert (spark["kafka.ssl.keystore.certificate.chain"], spark["kafka.ssl.keystore.key"]) == (PEM, KEY)
    assert spark["kafka.ssl.endpoint.identification.algorithm"] == ""


def test_plain_mechanism_uses_the_plain_login_module() -> None:
    java = KafkaSecurity("SASL_SSL", "PLAIN", "u", "p").java()
    assert java["kafka.sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"FLOE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, ["FLOE_KAFKA_SASL_MECHANISM", "FLOE_KAFKA_SASL_PASSWORD"]),
        (sasl(FLOE_KAFKA_SSL_CA_PEM="not a pem hunter2"), ["kafka.ssl_ca_pem is not PEM text"]),
        ({"FLOE_KAFKA_SASL_USERNAME": "u", "FLOE_KAFKA_SASL_PASSWORD": "hunter2"}, ["use SASL_SSL"]),
        ({"FLOE_KAFKA_SECURITY_PROTOCOL": "SSL", "FLOE_KAFKA_SSL_CERT_PEM": PEM}, ["FLOE_KAFKA_SSL_KEY_PEM"]),
        ({"FLOE_CASSANDRA_USERNAME": "u"}, ["FLOE_CASSANDRA_PASSWORD"]),
        ({"FLOE_CASSANDRA_TLS_CA_PEM": "hunter2"}, ["cassandra.tls_ca_pem is not PEM text"]),
    ],
)
def test_incomplete_security_is_refused_naming_the_setting_not_the_value(env: dict[str, str], names: list[str]) -> None:
    with pytest.raises(config.ConfigError) as info:
        load(**env)
    for name in names:
        assert name in str(info.value)
    assert "hunter2" not in str(info.value)


def test_secrets_stay_out_of_repr_and_the_environment_after_loading() -> None:
    cfg = load(**sasl(FLOE_CASSANDRA_USERNAME="c", FLOE_CASSANDRA_PASSWORD="cass-secret"))
    assert "pa\"ss" not in repr(cfg) and "cass-secret" not in repr(cfg)
    environ: dict[str, Any] = {**BASE, **sasl(), "FLOE_CASSANDRA_PASSWORD": "x", "OTHER": "y"}
    removed = config.scrub_secrets(environ)
    assert removed == ["FLOE_CASSANDRA_PASSWORD", "FLOE_KAFKA_SASL_PASSWORD"]
    assert "FLOE_KAFKA_SASL_USERNAME" in environ and "OTHER" in environ


def test_cassandra_connection_carries_auth_and_tls() -> None:
    cfg = load(FLOE_CASSANDRA_USERNAME="c", FLOE_CASSANDRA_PASSWORD="pw", FLOE_CASSANDRA_TLS_CA_PEM=PEM)
    conn = cfg.cassandra.connection()
    assert (conn.username, conn.password, conn.tls, conn.tls_ca_pem, conn.tls_verify_hostname) == (
        "c", "pw", True, PEM, True
    )
    assert "pw" not in repr(conn)


def test_spark_source_reads_committed_records_and_the_sink_is_not_told_an_isolation() -> None:
    """Spark's Kafka source reads read_committed, as the driver's reader (the Java consumer's
    default is read_uncommitted); the producer settings of the sink get no consumer setting."""
    cfg = load()
    assert kafkaio.spark_source_options(cfg)["kafka.isolation.level"] == "read_committed"
    assert "kafka.isolation.level" not in kafkaio.spark_sink_options(cfg)
