"""Spark shows the Kafka options that carry secrets redacted, and never holds them as settings.

The JAAS line (with the SASL password) and the client key are options of Spark's Kafka source
and sink, never Spark settings, which `spark-submit` puts on the JVM's command line. Where Spark
shows a plan's options (the sink's command, the SQL tab, the event log) it passes them through
its option redaction, asked here of the real session the runtime builds.
"""

from __future__ import annotations

from typing import Any

import pytest
from floe_jobs import config, kafkaio
from pydantic import SecretStr

pytestmark = [pytest.mark.spark]

PASSWORD = "jaas-password-5b1e"
KEY = "-----BEGIN PRIVATE KEY-----\nkey-body-9c2f\n-----END PRIVATE KEY-----\n"
CERT = "-----BEGIN CERTIFICATE-----\ncert-body\n-----END CERTIFICATE-----\n"


def redacted(spark: Any, options: dict[str, str]) -> dict[str, str]:
    """Spark's own redaction of a plan's options (`SQLConf.redactOptions`)."""
    jvm = spark._jvm
    pairs = jvm.java.util.ArrayList()
    for key, value in options.items():
        pairs.add(jvm.scala.Tuple2(key, value))
    convert = jvm.scala.jdk.javaapi.CollectionConverters
    shown = spark._jsparkSession.sessionState().conf().redactOptions(convert.asScala(pairs).toSeq())
    return {pair._1(): pair._2() for pair in convert.asJava(shown)}


def test_the_jaas_line_and_the_client_key_are_redacted(spark: Any, job_config: config.FloeConfig) -> None:
    kafka = job_config.kafka.model_copy(
        update={
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "app",
            "sasl_password": SecretStr(PASSWORD),
            "ssl_ca_pem": CERT,
            "ssl_cert_pem": CERT,
            "ssl_key_pem": SecretStr(KEY),
        }
    )
    options = kafkaio.spark_sink_options(job_config.model_copy(update={"kafka": kafka}))
    assert PASSWORD in options["kafka.sasl.jaas.config"] and options["kafka.ssl.keystore.key"] == KEY
    shown = redacted(spark, options)
    assert shown["kafka.sasl.jaas.config"] == "*********(redacted)"
    assert shown["kafka.ssl.keystore.key"] == "*********(redacted)"
    assert shown["kafka.bootstrap.servers"] == job_config.kafka.bootstrap_servers  # the rest stays readable
    assert PASSWORD not in str(shown) and "key-body-9c2f" not in str(shown)
    settings = dict(spark.sparkContext.getConf().getAll())
    assert not any(PASSWORD in value or "key-body" in value for value in settings.values())
