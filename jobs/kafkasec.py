"""How to reach a secured Kafka cluster, as settings of both kinds of client Floe opens.

The runtime opens librdkafka clients (the membership consumer, the range reader, the
producer, the admin client) and Java clients (Spark's Kafka source and sink, through their
`kafka.`-prefixed options); the operator opens librdkafka clients for its topic checks and lag
reads. All of them are configured from this one shape, so a security setting reaches every
client or none.

Secret values (the SASL password inside the JAAS line, the client key) are only ever handed to
clients in memory: never written to a file, a Spark configuration (whose values `spark-submit`
puts on the JVM's command line) or a log line. The option names given to Spark are matched by
`REDACTED_OPTIONS`, which `floe_jobs.sparkio` adds to Spark's option redaction, so a plan that
prints its options shows them as redacted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# Spark's own `spark.redaction.regex` ((?i)secret|password|token) already catches the JAAS line
# by its value (it holds `password=`); the client key's option and value match neither.
REDACTED_OPTIONS = r"(?i)url|jaas|keystore\.key|password|secret|token"


def _jaas_quote(value: str) -> str:
    """A JAAS string literal: backslashes and double quotes escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaSecurity:
    """Protocol, SASL credentials and TLS material of one cluster (PEM text, not files)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    verify_hostname: bool = True

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def librdkafka(self) -> dict[str, Any]:
        """Settings of a confluent-kafka client (consumer, producer, admin)."""
        conf: dict[str, Any] = {"security.protocol": self.protocol}
        if self.sasl:
            conf["sasl.mechanism"] = self.sasl_mechanism or "PLAIN"
            conf["sasl.username"] = self.username or ""
            conf["sasl.password"] = self.password or ""
        if self.tls:
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else "none"
            if self.ca_pem:
                conf["ssl.ca.pem"] = self.ca_pem
            if self.cert_pem and self.key_pem:
                conf["ssl.certificate.pem"] = self.cert_pem
                conf["ssl.key.pem"] = self.key_pem
        return conf

    def java(self, prefix: str = "kafka.") -> dict[str, str]:
        """Settings of a Java Kafka client, as Spark's Kafka source and sink take them (`prefix`).

        TLS material goes in as PEM text (`ssl.truststore.type=PEM`, `ssl.keystore.type=PEM`),
        which the Java client reads from memory; its key must be PKCS#8 (`BEGIN PRIVATE KEY`).
        """
        conf: dict[str, str] = {"security.protocol": self.protocol}
        if self.sasl:
            mechanism = self.sasl_mechanism or "PLAIN"
            conf["sasl.mechanism"] = mechanism
            conf["sasl.jaas.config"] = (
                f"{JAAS_MODULES[mechanism]} required username={_jaas_quote(self.username or '')} "
                f"password={_jaas_quote(self.password or '')};"
            )
        if self.tls:
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.verify_hostname else ""
            if self.ca_pem:
                conf["ssl.truststore.type"] = "PEM"
                conf["ssl.truststore.certificates"] = self.ca_pem
            if self.cert_pem and self.key_pem:
                conf["ssl.keystore.type"] = "PEM"
                conf["ssl.keystore.certificate.chain"] = self.cert_pem
                conf["ssl.keystore.key"] = self.key_pem
        return {f"{prefix}{key}": value for key, value in conf.items()}
