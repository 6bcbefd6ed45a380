"""The one typed configuration of a Floe job process: the contract between operator and runtime.

The operator renders this model and nothing else for a replica (`floe_operator.render`):
the ConfigMap file that `floe-job --config` (or the `FLOE_CONFIG` environment variable)
points at, and the environment variables of the pod — credentials and key material from
Kubernetes Secrets (`secretKeyRef`), the pod's own name, namespace and IP (`fieldRef`). Every
setting is declared once, below, with its environment variable (`setting(env=...)`); the
renderer names its variables through `env_name`, and a unit test renders every golden case and
loads it here, so a variable on one side only fails the build.

Every key can also be set, or overridden, by its environment variable. Environment wins over
the file, so a pod can patch a single setting without re-rendering the file. Secrets
(`secret=True`) are accepted from the environment only: the operator never writes them into a
ConfigMap, and `load` refuses them in a file.

Lists in environment variables are comma-separated; `spark.conf` and `job.args` take JSON
(`FLOE_SPARK_CONF='{"spark.sql.shuffle.partitions": "4"}'`, `FLOE_JOB_ARGS='["--x", "1"]'`),
and `stores` takes a JSON list of `{name, type, ttl_seconds, table_options}` objects.

Validation happens once, at start: a bad value stops the process with a message naming the
key, its environment variable and the accepted values (`ConfigError`), never a secret's value.

This is a pydantic model with its own small loader rather than pydantic-settings: the
variable names are flat (`FLOE_CASSANDRA_LOCAL_DC` for `cassandra.local_datacenter`), which
pydantic-settings reads for nested models only through a delimiter (`FLOE_CASSANDRA__…`),
and renaming every variable would break every deployed pod template.
"""

from __future__ import annotations

import json
import logging
import os
import re
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from floe_jobs import kafkaprops, pem
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from floe_jobs.kafkasec import KafkaSecurity
    from floe_jobs.stores.config import CassandraConfig

StoreType = Literal["partitioned", "global", "versioned-partitioned", "versioned-global"]
"""The kinds of store; the one definition the store library and the operator's model share."""
GroupProtocol = Literal["consumer", "classic", "auto"]
StartingOffsets = Literal["earliest", "latest"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
EnvKind = Literal["str", "list", "json"]
ErrorPolicy = Literal["stop", "deadLetter"]
"""What a poison record does (`spec.errors` of a StreamingApp, `job.errors` here)."""

CONFIG_ENV = "FLOE_CONFIG"
"""The variable naming the config file: read by `load` itself, not a setting."""

CONFIG_SCHEMA = 1
"""The schema of the configuration this runtime reads. The operator writes the schema it
rendered (`config_schema`), and each key it starts rendering raises this by one
(docs/releasing.md, "Version skew"). A runtime given a newer schema leaves out the keys that the
file lists as `optional_keys` (settings it can run without: `dispensable` ones) and refuses any
other key it does not declare with both schemas named: an app whose spec asks for what its image
cannot do stops at start with that reason, instead of running without it."""

ENV_NAMES_ENV = "FLOE_ENV_NAMES"
"""The FLOE_* variables the operator set on the replica's container, comma-separated (itself
among them). FLOE_ names are reserved: the CRD refuses them in spec.env, but an envFrom
ConfigMap or Secret can still carry any (`FLOE_KAFKA_EXTRA` would rewrite the Kafka client's TLS
settings). Where this variable is set, `load` refuses every FLOE_ variable it does not list. A
pod's explicit env wins over its envFrom, so an envFrom source cannot replace the list."""

IMAGE_ENV = ("FLOE_SPARK_JARS",)
"""FLOE_ variables Floe's job image sets itself (images/job.Dockerfile: where the Kafka connector
jars are), which the operator therefore lists too. The image is the author's choice anyway."""

RUNTIME_ENV = (CONFIG_ENV, ENV_NAMES_ENV, "FLOE_LOCAL_RUN", "FLOE_LOG_LEVEL")
"""FLOE_ variables that are not settings: the config file, the list above, and the local run's
marker and the log level, which the CLI reads."""

TEST_HOOK_PREFIX = "FLOE_TEST_"
"""Variables that test jobs read (tests/faultjob.py); outside a pod (no ENV_NAMES_ENV) they pass
the check for unknown names, in a pod they are as foreign as any other."""

_APP_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def setting(
    *args: Any,
    env: str,
    description: str = "",
    secret: bool = False,
    kind: EnvKind | None = None,
    dispensable: bool = False,
    **kwargs: Any,
) -> Any:
    """A field with its environment variable; `secret` keeps it out of files, repr and logs.

    `kind` says how the variable's text is parsed (derived from the type when left out: lists
    comma-separated, mappings and lists of objects as JSON). `dispensable`: a runtime that
    predates the setting may run without it (it changes a label or a log line, never what is
    computed, read or written); the operator lists such keys as `optional_keys`.
    """
    extra: dict[str, Any] = {"env": env, "secret": secret}
    if kind is not None:
        extra["kind"] = kind
    if dispensable:
        extra["dispensable"] = True
    if secret:
        kwargs.setdefault("repr", False)
    return Field(*args, description=f"{env}: {description}" if description else env, json_schema_extra=extra, **kwargs)


def _pem(value: str | None, what: str) -> str | None:
    # says which setting without echoing the value (it may be a key)
    if value is not None and "-----BEGIN " not in value:
        raise ValueError(f"{what} is not PEM text (no -----BEGIN line)")
    return value


def _certificate(value: str | None, what: str, *, ca: bool) -> str | None:
    """PEM text holding a certificate that is in date today (`floe_jobs.pem`)."""
    if _pem(value, what) is None or value is None:
        return value
    problem = pem.problem(value, kind="ca" if ca else "certificate")
    if problem is not None:
        raise ValueError(problem)
    return value


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message says which and what is accepted."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Model):
    bootstrap_servers: str = setting(env="FLOE_KAFKA_BOOTSTRAP_SERVERS", description="host:port[,host:port…]")
    topics: list[str] = setting(env="FLOE_KAFKA_TOPICS", description="input topics, comma-separated")
    output_topics: list[str] = setting(
        default_factory=list,
        env="FLOE_KAFKA_OUTPUT_TOPICS",
        description="output topics; the first one is the default for emitted rows",
    )
    group_id: str | None = setting(
        default=None, env="FLOE_KAFKA_GROUP_ID", description="consumer group; default: the app id"
    )
    starting_offsets: StartingOffsets = setting(
        default="earliest",
        env="FLOE_KAFKA_STARTING_OFFSETS",
        description="where a partition without a stored offset starts",
    )
    max_records_per_batch: int = setting(
        default=50_000,
        ge=1,
        env="FLOE_KAFKA_MAX_RECORDS_PER_BATCH",
        description="cap of one micro-batch, all partitions",
    )
    repartition_rows_per_record: int = setting(
        # 4 before Floe's crossings kept their tables out of local relations whatever Spark's
        # Arrow threshold (`floe_jobs.localdf`): under its 48 MiB default a larger counting batch
        # filled a 768 MiB driver heap at 1M words. Out of them, 8 runs within it and writes each
        # key fewer times (docs/runtime.md, "Throughput against Structured Streaming").
        default=8,
        ge=1,
        env="FLOE_KAFKA_REPARTITION_ROWS_PER_RECORD",
        description="a stage fed by a repartition topic reads up to this many re-keyed rows per record "
        "of the batch cap (max_records_per_batch): an input record re-keys into several rows (a line into "
        "its words), and a batch that holds more of them writes each key's state once for more of its rows",
    )
    spark_read_min_records: int = setting(
        default=200_000,
        ge=0,
        env="FLOE_KAFKA_SPARK_READ_MIN_RECORDS",
        description="a batch of an input topic planned with at least this many "
        "records is read with Spark's Kafka source (when its connector is on spark.jars), a smaller one by the "
        "driver's consumer; 0: every such batch with Spark's source (repartition topics are read by the driver). "
        "The default is above the default batch cap: in local mode the driver's consumer is faster; "
        "lower it when executors run elsewhere (spark.master) or batches are larger",
    )
    spark_sink_min_records: int = setting(
        default=100_000,
        ge=0,
        env="FLOE_KAFKA_SPARK_SINK_MIN_RECORDS",
        description="what a batch of more input records than this emits is "
        "written by Spark's Kafka sink, from its plan (when its connector is on spark.jars); a smaller batch's "
        "rows are collected and produced by the driver's producer. 0: every batch through Spark's sink",
    )
    max_bytes_per_batch: int = setting(
        default=64 * 1024 * 1024,
        ge=1024,
        env="FLOE_KAFKA_MAX_BYTES_PER_BATCH",
        description="cap of one micro-batch in bytes (estimated from the record sizes seen)",
    )
    session_timeout_ms: int | None = setting(
        default=None,
        ge=1000,
        env="FLOE_KAFKA_SESSION_TIMEOUT_MS",
        description="a consumer setting under the classic protocol; under KIP-848 "
        "set on the group at start (consumer.session.timeout.ms); default: the broker's (45 s)",
    )
    heartbeat_interval_ms: int | None = setting(
        default=None,
        ge=100,
        env="FLOE_KAFKA_HEARTBEAT_INTERVAL_MS",
        description="a consumer setting under the classic protocol; under KIP-848 "
        "set on the group at start (consumer.heartbeat.interval.ms)",
    )
    leave_group_on_close: bool = setting(
        default=True,
        env="FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE",
        description="leave the group at once on shutdown; off = the partitions wait for the session timeout",
    )
    group_protocol: GroupProtocol = setting(
        default="auto",
        env="FLOE_KAFKA_GROUP_PROTOCOL",
        description="consumer (KIP-848), classic (cooperative-sticky) or auto (consumer when the brokers support it)",
    )
    poll_interval_ms: int = setting(
        default=200, ge=10, le=10_000, env="FLOE_KAFKA_POLL_INTERVAL_MS", description="idle wait between empty batches"
    )
    linger_ms: int = setting(
        default=200,
        ge=0,
        le=10_000,
        env="FLOE_KAFKA_LINGER_MS",
        description=(
            "wait after a pass that read a trickle (fewer records than a hundredth of max_records_per_batch, a "
            "re-keyed run counting as its rows) so that records gather for the next one; 0: passes back to back"
        ),
    )
    idempotent_output: bool = setting(
        default=True,
        env="FLOE_KAFKA_IDEMPOTENT_OUTPUT",
        description="enable.idempotence and acks=all on every producer",
    )
    instance_id: str | None = setting(
        default=None,
        env="FLOE_KAFKA_INSTANCE_ID",
        description="static member id (group.instance.id); default: none",
    )
    extra: dict[str, str] = setting(
        default_factory=dict,
        env="FLOE_KAFKA_EXTRA",
        description="JSON object of librdkafka client properties (the StreamingApp's spec.kafka.properties), "
        "each given to the clients it applies to (floe_jobs.kafkaprops); never a key Floe owns or a security "
        "setting: credentials come from Secrets, below",
    )
    security_protocol: SecurityProtocol = setting(
        default="PLAINTEXT",
        env="FLOE_KAFKA_SECURITY_PROTOCOL",
        description="PLAINTEXT, SSL (TLS, with a client certificate for mTLS), SASL_PLAINTEXT or SASL_SSL",
    )
    sasl_mechanism: SaslMechanism | None = setting(
        default=None, env="FLOE_KAFKA_SASL_MECHANISM", description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
    )
    sasl_username: str | None = setting(
        default=None, env="FLOE_KAFKA_SASL_USERNAME", secret=True, description="SASL user, from a Secret"
    )
    sasl_password: SecretStr | None = setting(
        default=None, env="FLOE_KAFKA_SASL_PASSWORD", secret=True, description="SASL password, from a Secret"
    )
    ssl_ca_pem: str | None = setting(
        default=None,
        env="FLOE_KAFKA_SSL_CA_PEM",
        secret=True,
        description="PEM of the CA that signed the brokers' certificates; default: the system's CAs",
    )
    ssl_cert_pem: str | None = setting(
        default=None, env="FLOE_KAFKA_SSL_CERT_PEM", secret=True, description="PEM client certificate (mTLS)"
    )
    ssl_key_pem: SecretStr | None = setting(
        default=None,
        env="FLOE_KAFKA_SSL_KEY_PEM",
        secret=True,
        description="PEM key of the client certificate: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), unencrypted; "
        "handed to every client as PKCS#8",
    )
    ssl_verify_hostname: bool = setting(
        default=True,
        env="FLOE_KAFKA_SSL_VERIFY_HOSTNAME",
        description="check that a broker's certificate names the host connected to; off still checks the CA",
    )

    @field_validator("ssl_ca_pem", "ssl_cert_pem")
    @classmethod
    def _pem_text(cls, value: str | None, info: Any) -> str | None:
        return _certificate(value, f"kafka.{info.field_name}", ca=info.field_name == "ssl_ca_pem")

    @field_validator("ssl_key_pem")
    @classmethod
    def _pem_key(cls, value: SecretStr | None) -> SecretStr | None:
        if _pem(value.get_secret_value() if value is not None else None, "kafka.ssl_key_pem") is None:
            return value
        assert value is not None
        try:
            # the Java client (Spark's Kafka source and sink) reads PKCS#8 only
            return SecretStr(pem.pkcs8(value.get_secret_value()))
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _security_complete(self) -> KafkaSettings:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            missing = [
                f"kafka.{name} ({env_name('kafka', name)})"
                for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"security_protocol {self.security_protocol} needs {', '.join(missing)}")
        elif self.sasl_username is not None or self.sasl_password is not None:
            raise ValueError(
                f"SASL credentials are set but security_protocol is {self.security_protocol}: "
                "use SASL_SSL (or SASL_PLAINTEXT)"
            )
        if (self.ssl_cert_pem is None) != (self.ssl_key_pem is None):
            raise ValueError(
                "kafka.ssl_cert_pem (FLOE_KAFKA_SSL_CERT_PEM) and kafka.ssl_key_pem (FLOE_KAFKA_SSL_KEY_PEM) "
                "go together"
            )
        tls = self.security_protocol in ("SSL", "SASL_SSL")
        if not tls and (self.ssl_ca_pem or self.ssl_cert_pem):
            raise ValueError(
                f"TLS material is set but security_protocol is {self.security_protocol}: use SSL or SASL_SSL"
            )
        return self

    @property
    def security(self) -> KafkaSecurity:
        """The security settings as the one shape every Kafka client is configured from."""
        from floe_jobs.kafkasec import KafkaSecurity

        return KafkaSecurity(
            protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            username=self.sasl_username,
            password=self.sasl_password.get_secret_value() if self.sasl_password else None,
            ca_pem=self.ssl_ca_pem,
            cert_pem=self.ssl_cert_pem,
            key_pem=self.ssl_key_pem.get_secret_value() if self.ssl_key_pem else None,
            verify_hostname=self.ssl_verify_hostname,
        )

    @field_validator("extra")
    @classmethod
    def _properties_allowed(cls, value: dict[str, str]) -> dict[str, str]:
        # the same list the CRD's CEL rules are generated from (floe_jobs.kafkaprops): what Floe's
        # guarantees rest on (isolation, idempotence, the group) and every security setting
        refused = kafkaprops.refusals(value)
        if refused:
            raise ValueError("; ".join(refused))
        return value

    @field_validator("topics")
    @classmethod
    def _topics_nonempty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one input topic is required")
        return value

    @field_validator("topics", "output_topics")
    @classmethod
    def _topic_names(cls, value: list[str]) -> list[str]:
        for topic in value:
            if not _TOPIC.match(topic):
                raise ValueError(f"{topic!r} is not a Kafka topic name (1-249 of [a-zA-Z0-9._-])")
        return value

    @model_validator(mode="after")
    def _heartbeat_below_session(self) -> KafkaSettings:
        if (
            self.session_timeout_ms
            and self.heartbeat_interval_ms
            and self.heartbeat_interval_ms * 3 > self.session_timeout_ms
        ):
            raise ValueError(
                "heartbeat_interval_ms must be at most a third of session_timeout_ms "
                f"(got {self.heartbeat_interval_ms} and {self.session_timeout_ms})"
            )
        return self


_CONNECTION_TUNING = (
    "consistency",
    "serial_consistency",
    "ddl_consistency",
    "request_timeout",
    "ddl_timeout",
    "connect_timeout",
    "protocol_version",
)
"""Settings of `CassandraSettings` handed to the store library only when set."""


class CassandraSettings(_Model):
    hosts: list[str] = setting(
        default_factory=lambda: ["127.0.0.1"], env="FLOE_CASSANDRA_HOSTS", description="contact points"
    )
    port: int = setting(default=9042, ge=1, le=65535, env="FLOE_CASSANDRA_PORT", description="native protocol port")
    local_datacenter: str | None = setting(
        default=None, env="FLOE_CASSANDRA_LOCAL_DC", description="data centre for DC-aware routing"
    )
    keyspace: str = setting(env="FLOE_CASSANDRA_KEYSPACE", description="keyspace of the stores and the offsets table")
    username: str | None = setting(
        default=None,
        env="FLOE_CASSANDRA_USERNAME",
        secret=True,
        description="PasswordAuthenticator user, from a Secret",
    )
    password: SecretStr | None = setting(
        default=None, env="FLOE_CASSANDRA_PASSWORD", secret=True, description="its password, from a Secret"
    )
    tls: bool = setting(
        default=False, env="FLOE_CASSANDRA_TLS", description="client encryption; on by itself when a CA is given"
    )
    tls_ca_pem: str | None = setting(
        default=None,
        env="FLOE_CASSANDRA_TLS_CA_PEM",
        secret=True,
        description="PEM of the CA that signed the nodes' certificates; default: the system's CAs",
    )
    tls_verify_hostname: bool = setting(
        default=True,
        env="FLOE_CASSANDRA_TLS_VERIFY_HOSTNAME",
        description="check that a node's certificate names the address connected to; off still checks the CA",
    )

    consistency: str | None = setting(
        default=None,
        env="FLOE_CASSANDRA_CONSISTENCY",
        description="consistency level of reads and writes; default: LOCAL_QUORUM",
    )
    serial_consistency: str | None = setting(
        default=None,
        env="FLOE_CASSANDRA_SERIAL_CONSISTENCY",
        description="serial consistency of the conditional writes (offsets, fenced state); default: LOCAL_SERIAL",
    )
    ddl_consistency: str | None = setting(
        default=None,
        env="FLOE_CASSANDRA_DDL_CONSISTENCY",
        description="consistency of schema changes (tables made at start); default: ALL",
    )
    request_timeout: float | None = setting(
        default=None, gt=0, env="FLOE_CASSANDRA_REQUEST_TIMEOUT", description="seconds per request; default: 10"
    )
    ddl_timeout: float | None = setting(
        default=None,
        gt=0,
        env="FLOE_CASSANDRA_DDL_TIMEOUT",
        description="seconds per schema change and its agreement; default: 60",
    )
    connect_timeout: float | None = setting(
        default=None, gt=0, env="FLOE_CASSANDRA_CONNECT_TIMEOUT", description="seconds to connect; default: 10"
    )
    protocol_version: int | None = setting(
        default=None,
        ge=1,
        env="FLOE_CASSANDRA_PROTOCOL_VERSION",
        description="native protocol version (5 for Cassandra 4 and 5, 4 for ScyllaDB); default: negotiated",
    )

    @field_validator("tls_ca_pem")
    @classmethod
    def _ca_pem(cls, value: str | None) -> str | None:
        return _certificate(value, "cassandra.tls_ca_pem", ca=True)

    @model_validator(mode="after")
    def _connection_valid(self) -> CassandraSettings:
        # the store library's checks (credentials together, consistency names, …), made once, there
        from floe_jobs.stores.errors import StoreConfigError

        try:
            self.connection()
        except StoreConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def connection(self, **overrides: Any) -> CassandraConfig:
        """The session settings of the store library (`floe_jobs.stores.config`): the one
        connection shape every Cassandra session, the runtime's and the operator's, is opened
        from. Settings left unset keep the library's defaults."""
        from floe_jobs.stores.config import CassandraConfig

        tuning = {name: getattr(self, name) for name in _CONNECTION_TUNING if getattr(self, name) is not None}
        return CassandraConfig(
            hosts=tuple(self.hosts),
            port=self.port,
            local_datacenter=self.local_datacenter,
            username=self.username,
            password=self.password.get_secret_value() if self.password else None,
            tls=self.tls,
            tls_ca_pem=self.tls_ca_pem,
            tls_verify_hostname=self.tls_verify_hostname,
            **{**tuning, **overrides},
        )

    @field_validator("keyspace")
    @classmethod
    def _keyspace_name(cls, value: str) -> str:
        if not re.match(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}$", value):
            raise ValueError("a Cassandra keyspace name: a letter then up to 47 of [a-zA-Z0-9_]")
        return value


class StoreSettings(_Model):
    name: str
    type: StoreType = "partitioned"
    ttl_seconds: int | None = Field(default=None, ge=1)
    table_options: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _store_name(cls, value: str) -> str:
        if not re.match(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,47}$", value):
            raise ValueError(f"{value!r} is not a store name (1-48 of [a-zA-Z0-9._-], starting alphanumeric)")
        return value


REDACTION_SETTINGS = ("spark.redaction.regex", "spark.sql.redaction.options.regex")
"""Spark settings that `spark.conf` may not set: the redaction that keeps the Kafka credentials
(the JAAS line, the client key) out of Spark's logged configuration, plans and UI."""

SPARK_KUBERNETES_TUNING = (
    "spark.kubernetes.allocation.batch.delay",
    "spark.kubernetes.allocation.batch.size",
    "spark.kubernetes.allocation.driver.readinessTimeout",
    "spark.kubernetes.allocation.executor.timeout",
    "spark.kubernetes.allocation.maxPendingPods",
    "spark.kubernetes.dynamicAllocation.deleteGracePeriod",
    "spark.kubernetes.executor.apiPollingInterval",
    "spark.kubernetes.executor.checkAllContainers",
    "spark.kubernetes.executor.enablePollingWithResourceVersion",
    "spark.kubernetes.executor.eventProcessingInterval",
    "spark.kubernetes.executor.limit.cores",
    "spark.kubernetes.executor.missingPodDetectDelta",
    "spark.kubernetes.executor.request.cores",
    "spark.kubernetes.memoryOverheadFactor",
)
"""The `spark.kubernetes.*` settings an app's spark.conf may set: an allow-list (the CRD's CEL
rule holds the same list; a unit test compares them). Each only paces the executors' allocation
and their watch, or sizes their CPU and memory overhead; none changes what an executor pod is
(volumes, templates, service accounts, namespace, credentials, node selection, tolerations,
image, labels, annotations, scheduler) or whom the driver acts as. Everything else under
`spark.kubernetes.` is refused: Spark adds such keys release after release, and a new one is
refused until someone has read what it does."""

SPARK_KUBERNETES_FLOE = (
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.container.image",
    "spark.kubernetes.container.image.pullPolicy",
    "spark.kubernetes.driver.ownPersistentVolumeClaim",
    "spark.kubernetes.driver.reusePersistentVolumeClaim",
    "spark.kubernetes.driver.service.deleteOnTermination",
    "spark.kubernetes.executor.podTemplateContainerName",
    "spark.kubernetes.executor.podTemplateFile",
    "spark.kubernetes.namespace",
)
"""The `spark.kubernetes.*` settings the operator renders from the spec (`floe_operator.render`):
refused in a StreamingApp's spark.conf, accepted by the runtime only in the rendered config."""

JAVA_OPTION_SETTINGS = (
    "spark.driver.defaultJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.defaultJavaOptions",
    "spark.executor.extraJavaOptions",
)
"""JVM options, in which a `-Dspark.…` system property would set any Spark setting behind the
checks on the keys (Spark reads `spark.*` system properties into its configuration)."""

SPARK_WIRE_SECURITY = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
"""What every app under a `k8s://` master runs with, and `spark.conf` may not change: the driver
and its executors authenticate each other with a secret Spark generates per application (on
Kubernetes it reaches the executors in their pods' environment) and encrypt their RPC and block
transfers (AES), since tasks carry the Cassandra password and the Kafka JAAS line. No key under
`spark.authenticate` or `spark.network.crypto.` may be set by an app; the rendered
configuration (`rendered`) may hold exactly these values."""

_WIRE_PREFIXES = ("spark.authenticate", "spark.network.crypto.")

# Spark splits the options as a shell would and drops the quotes: -D"spark.x" is -Dspark.x.
_SPARK_PROPERTY = re.compile(r"-Dspark\.")


def spark_conf_problems(conf: Mapping[str, str], *, rendered: bool) -> list[str]:
    """Why `conf` sets what an app author must not: a `spark.kubernetes.*` key off the allow-list
    (with `rendered`, the operator's own keys are accepted too), or a `-Dspark.*` JVM option.
    The runtime checks the rendered config; the operator checks an app's spec.spark.conf."""
    allowed = set(SPARK_KUBERNETES_TUNING) | (set(SPARK_KUBERNETES_FLOE) if rendered else set())
    out = [
        f"{key} may not be set: it changes the executor pods' shape or identity, or Floe sets it; the "
        f"spark.kubernetes.* settings allowed are {', '.join(SPARK_KUBERNETES_TUNING)}"
        for key in sorted(conf)
        if key.startswith("spark.kubernetes.") and key not in allowed
    ]
    out.extend(
        f"{key} may not be set: Floe authenticates and encrypts the traffic between a k8s:// app's "
        "driver and executors itself (spark.authenticate and spark.network.crypto.enabled are true)"
        for key in sorted(conf)
        if key.startswith(_WIRE_PREFIXES) and not (rendered and SPARK_WIRE_SECURITY.get(key) == conf[key])
    )
    for key in JAVA_OPTION_SETTINGS:
        text = conf.get(key, "")
        if _SPARK_PROPERTY.search(text.replace('"', "").replace("'", "").replace("\\", "")):
            out.append(f"{key} may not hold -Dspark.* system properties: set Spark settings as keys of spark.conf")
    return out


class SparkSettings(_Model):
    master: str = setting(default="local[*]", env="FLOE_SPARK_MASTER", description="Spark master URL")
    conf: dict[str, str] = setting(
        default_factory=dict,
        env="FLOE_SPARK_CONF",
        description="JSON object of Spark settings; not the redaction settings (spark.redaction.regex, "
        "spark.sql.redaction.options.regex)",
    )
    jars: list[str] = setting(
        default_factory=list,
        env="FLOE_SPARK_JARS",
        description="Kafka connector jars (comma-separated), added to spark.jars",
    )
    class_archive: str = setting(
        default="",
        env="FLOE_SPARK_CLASS_ARCHIVE",
        description="the driver JVM's class archive (`floe-job class-archive FILE` writes one): the JVM maps the "
        "classes a replica loads instead of loading them from the jars, about a quarter of its start-up CPU; a missing "
        "or stale file is warned about. Default: the job image's, /opt/floe/spark-classes.jsa, where it exists",
    )
    driver_batch_max_records: int | None = setting(
        default=None,
        ge=0,
        env="FLOE_SPARK_DRIVER_BATCH_MAX_RECORDS",
        description="in a batch of at most this many input records, rekey and "
        "aggregate group their rows in the driver instead of running Spark's shuffles (same result, a fraction "
        "of the time for small batches); 0: always in Spark. Default: 50,000 with a local master (Spark's tasks "
        "run on the driver's cores anyway), 10,000 with executors elsewhere (they share a large batch's work)",
    )

    @field_validator("conf")
    @classmethod
    def _redaction_kept(cls, value: dict[str, str]) -> dict[str, str]:
        overridden = [name for name in REDACTION_SETTINGS if name in value]
        if overridden:
            raise ValueError(
                f"{' and '.join(overridden)} may not be set: Spark's redaction keeps the Kafka credentials (the "
                "JAAS line with the SASL password, the client key) out of its logged configuration, plans and UI; "
                "Floe sets spark.sql.redaction.options.regex itself and keeps Spark's spark.redaction.regex"
            )
        problems = spark_conf_problems(value, rendered=True)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @property
    def driver_batch_limit(self) -> int:
        """`driver_batch_max_records`, or its default for this master."""
        if self.driver_batch_max_records is not None:
            return self.driver_batch_max_records
        return 50_000 if self.master.startswith("local") else 10_000


class StateSettings(_Model):
    cache_max_keys: int = setting(
        default=500_000,
        ge=0,
        env="FLOE_STATE_CACHE_MAX_KEYS",
        description="state rows a replica keeps of the partitions it owns, so that "
        "aggregate, latest and dedup read each key from Cassandra once per assignment (partitioned stores "
        "with a str, bytes, int, long or float value; with a TTL, a row written is kept until shortly before "
        "it expires); about 180 bytes per short key; 0: off",
    )


class ShutdownSettings(_Model):
    drain_timeout_seconds: float = setting(
        default=25.0,
        gt=0,
        env="FLOE_SHUTDOWN_DRAIN_TIMEOUT_SECONDS",
        description="time to finish the running batch after SIGTERM; "
        "keep it below the pod's terminationGracePeriodSeconds",
    )


class MetricsSettings(_Model):
    port: int = setting(
        default=9400, ge=0, le=65535, env="FLOE_METRICS_PORT", description="/healthz /readyz /metrics; 0 = off"
    )
    query_port: int = setting(
        default=9401,
        ge=0,
        le=65535,
        env="FLOE_METRICS_QUERY_PORT",
        description="the store query endpoint of stores the job exposes; 0 = off",
    )
    query_token: SecretStr | None = setting(
        default=None,
        env="FLOE_METRICS_QUERY_TOKEN",
        description="bearer token the store query endpoint requires (the operator mounts it from the Secret "
        "<app>-query); without one, and query_auth token, the endpoint refuses every request",
    )
    query_auth: Literal["token", "none"] = setting(
        default="token",
        env="FLOE_METRICS_QUERY_AUTH",
        description="token: the query endpoint answers only requests bearing query_token; none: anyone who "
        "reaches the port (`floe run` local runs)",
    )
    stall_seconds: float = setting(
        default=300.0,
        gt=0,
        env="FLOE_METRICS_STALL_SECONDS",
        description="/healthz fails when the loop is stuck this long",
    )


class LoggingSettings(_Model):
    format: Literal["text", "json"] = setting(
        default="text",
        env="FLOE_LOGGING_FORMAT",
        description="text: one readable line per record; json: one JSON object per line (time, level, logger, "
        "message, app, pod, exc_info; see floe_jobs.logformat)",
    )


class JobSettings(_Model):
    entrypoint: str = setting(
        env="FLOE_JOB_ENTRYPOINT", description="`package.module:attribute` or a path to a .py file[:attribute]"
    )
    args: list[str] = setting(
        default_factory=list, env="FLOE_JOB_ARGS", kind="json", description="JSON list handed to the job as job.args"
    )
    errors: ErrorPolicy = setting(
        default="stop",
        env="FLOE_JOB_ERRORS",
        description="a record its stage keeps failing on (found by narrowing the failing batch): stop: its "
        "partition stops just before it, named in the offsets row (stopped_at, stopped_error) and the app's "
        "condition, the other partitions go on; deadLetter: it goes to <app-id>-dlq and processing goes on",
    )


class PodSettings(_Model):
    """Who this replica is, from the pod's own fields (`fieldRef`); empty outside a pod."""

    name: str | None = setting(
        default=None, env="FLOE_POD_NAME", description="member name in logs and the group; default: the hostname"
    )
    namespace: str | None = setting(default=None, env="FLOE_POD_NAMESPACE", description="named in the start log line")
    ip: str | None = setting(
        default=None,
        env="FLOE_POD_IP",
        description="the address executors reach the driver at (spark.driver.host) under a k8s:// master",
    )


class SecretRef(_Model):
    """The Secret a variable is set from (`secretKeyRef`): its name and key, never its value."""

    name: str
    key: str


class FloeConfig(_Model):
    config_schema: int = setting(
        default=CONFIG_SCHEMA,
        ge=1,
        env="FLOE_CONFIG_SCHEMA",
        description="the configuration schema the file was rendered for (CONFIG_SCHEMA of the operator's release)",
    )
    optional_keys: list[str] = setting(
        default_factory=list,
        env="FLOE_OPTIONAL_KEYS",
        description="keys of the file that a runtime of an older schema may leave out (dotted paths)",
    )
    app_id: str = setting(env="FLOE_APP_ID", description="the StreamingApp name; group id, topic and table prefix")
    app_name: str | None = setting(
        default=None,
        min_length=1,
        env="FLOE_APP_NAME",
        dispensable=True,
        description="the StreamingApp's name: the `app` label of the replica's series, as the operator's series "
        "have it (the scrape adds `namespace`); default: app_id",
    )
    kafka: KafkaSettings
    cassandra: CassandraSettings
    stores: list[StoreSettings] = setting(default_factory=list, env="FLOE_STORES", description="JSON list")
    spark: SparkSettings = SparkSettings()
    state: StateSettings = StateSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    metrics: MetricsSettings = MetricsSettings()
    logging: LoggingSettings = LoggingSettings()
    job: JobSettings
    pod: PodSettings = PodSettings()
    secret_refs: dict[str, SecretRef] = setting(
        default_factory=dict,
        env="FLOE_SECRET_REFS",
        description="JSON object: each variable the pod sets from a Secret → {name, key} of that Secret (names "
        "only), so that an error names the Secret key to fix; a variable listed here but not set stops the start",
    )

    @property
    def metrics_app(self) -> str:
        """The `app` label of the replica's series."""
        return self.app_name or self.app_id

    @field_validator("app_id")
    @classmethod
    def _app_id(cls, value: str) -> str:
        if not _APP_ID.match(value):
            raise ValueError("a DNS label: 1-63 of [a-z0-9-], starting and ending alphanumeric")
        return value

    @model_validator(mode="after")
    def _unique_stores(self) -> FloeConfig:
        names = [s.name for s in self.stores]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stores: duplicate store names {dupes}")
        return self

    @property
    def group_id(self) -> str:
        return self.kafka.group_id or self.app_id

    @property
    def dlq_topic(self) -> str:
        return f"{self.app_id}-dlq"

    def repartition_topic(self, name: str) -> str:
        return f"{self.app_id}-{name}-repartition"

    def sourced(self, text: str) -> str:
        """`text` with each variable set from a Secret named with its Secret and key."""
        return sourced(text, self.secret_refs)


_VARIABLE = re.compile(r"\b(FLOE_[A-Z0-9_]+)\b")


def sourced(text: str, refs: Mapping[str, SecretRef]) -> str:
    """`text` (an error message) with every variable that `refs` says comes from a Secret followed
    by that Secret's name and key: `FLOE_KAFKA_SASL_PASSWORD from Secret kafka-user key password`."""

    def named(match: re.Match[str]) -> str:
        ref = refs.get(match.group(1))
        return match.group(0) if ref is None else f"{match.group(1)} from Secret {ref.name} key {ref.key}"

    return _VARIABLE.sub(named, text) if refs else text


def _fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(key path, field info) of every setting, descending into nested models."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, (*prefix, name))
        else:
            yield (*prefix, name), info


def _kind(info: Any) -> EnvKind:
    extra = info.json_schema_extra or {}
    if "kind" in extra:
        return typing.cast(EnvKind, extra["kind"])
    origin = typing.get_origin(info.annotation)
    if origin is dict:
        return "json"
    if origin is list:
        (item,) = typing.get_args(info.annotation)
        return "json" if isinstance(item, type) and issubclass(item, BaseModel) else "list"
    return "str"


def _env_table() -> tuple[dict[tuple[str, ...], tuple[str, EnvKind]], frozenset[tuple[str, ...]]]:
    keys: dict[tuple[str, ...], tuple[str, EnvKind]] = {}
    secret: set[tuple[str, ...]] = set()
    for path, info in _fields(FloeConfig):
        extra = info.json_schema_extra
        if not isinstance(extra, dict) or "env" not in extra:
            raise TypeError(f"setting {'.'.join(path)} has no environment variable: declare it with setting(env=...)")
        keys[path] = (str(extra["env"]), _kind(info))
        if extra.get("secret"):
            secret.add(path)
    return keys, frozenset(secret)


ENV_KEYS, SECRET_KEYS = _env_table()
"""Key path → (environment variable, how its text is parsed), and the key paths of secrets:
derived from the model, so a setting exists with its variable or not at all."""

DISPENSABLE_KEYS = tuple(
    path
    for path, info in _fields(FloeConfig)
    if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("dispensable")
)
"""Key paths of the `dispensable` settings, in the model's order, derived once as the above."""

_ENV_OF = {path: env for path, (env, _) in ENV_KEYS.items()}


def env_name(*path: str) -> str:
    """The environment variable of a setting (`env_name("kafka", "sasl_password")`); what the
    operator's renderer names its variables with, so both sides spell them alike."""
    try:
        return _ENV_OF[path]
    except KeyError:
        raise KeyError(f"no setting {'.'.join(path)} in floe_jobs.config") from None


def secret_env_names() -> frozenset[str]:
    """Variables whose values are secrets: never logged, never in a file, scrubbed after loading."""
    return frozenset(_ENV_OF[p] for p in SECRET_KEYS if _ENV_OF[p].endswith(("PASSWORD", "KEY_PEM")))


def _env_var_for(loc: tuple[str | int, ...]) -> str | None:
    for length in range(len(loc), 0, -1):
        key = tuple(str(p) for p in loc[:length])
        if key in ENV_KEYS:
            return ENV_KEYS[key][0]
    return None


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "<root>"
        env = _env_var_for(loc)
        where = f"{dotted} ({env})" if env else dotted
        msg = err["msg"]
        if err["type"] == "literal_error":
            msg = f"got {err.get('input')!r}; accepted values: {err['ctx']['expected']}"
        elif err["type"] == "missing":
            msg = "is required"
        elif err["type"] == "extra_forbidden":
            msg = "is not a known key"
        lines.append(f"{where}: {msg}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _parse_env_value(name: str, raw: str, kind: str) -> Any:
    if kind == "list":
        return [item.strip() for item in raw.split(",") if item.strip()]
    if kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"invalid configuration:\n  {name}: not valid JSON ({exc.msg})") from exc
    return raw


def _set_path(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = target
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[path[-1]] = value


def _get_path(source: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = source
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def scrub_secrets(environ: os._Environ[str] | dict[str, str]) -> list[str]:
    """Remove the secret variables from `environ` once the configuration holds them, so the
    processes the replica starts (Spark's JVM, its Python workers) never inherit a password or
    a private key. Returns the names removed."""
    removed = [name for name in sorted(secret_env_names()) if environ.pop(name, None) is not None]
    return removed


def _secrets_in(raw: Mapping[str, Any]) -> list[tuple[str, ...]]:
    return [p for p in sorted(SECRET_KEYS) if _get_path(raw, p) is not None]


def _undeclared(model: type[BaseModel], raw: Mapping[str, Any], prefix: tuple[str, ...]) -> Iterator[str]:
    for key, value in raw.items():
        info = model.model_fields.get(key)
        path = (*prefix, str(key))
        if info is None:
            yield ".".join(path)
            continue
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(value, Mapping):
            yield from _undeclared(annotation, value, path)
        elif typing.get_origin(annotation) is list and isinstance(value, list):
            (item_type,) = typing.get_args(annotation)
            if isinstance(item_type, type) and issubclass(item_type, BaseModel):
                for index, item in enumerate(value):
                    if isinstance(item, Mapping):
                        yield from _undeclared(item_type, item, (*path, str(index)))


def file_problems(raw: Mapping[str, Any]) -> list[str]:
    """What a config file may not hold, found from its keys alone: a key no setting declares, and
    a secret (environment only). The operator checks each file it renders with this, so that a
    key renamed or dropped on one side fails where it is rendered, not in a replica."""
    unknown = [f"{key}: is not a known key" for key in _undeclared(FloeConfig, raw, ())]
    secrets = [f"{'.'.join(p)} ({_ENV_OF[p]}): comes from the environment only" for p in _secrets_in(raw)]
    return unknown + secrets


def optional_keys(rendered: Mapping[str, Any]) -> list[str]:
    """The keys of `rendered` that are `dispensable` settings: what the operator lists as
    `optional_keys`, so that a runtime older than one of them leaves it out."""
    return [".".join(path) for path in DISPENSABLE_KEYS if _get_path(rendered, path) is not None]


def runtime_version() -> str:
    """This runtime's release (the installed `floe` distribution's version)."""
    from importlib import metadata

    try:
        return metadata.version("floe")
    except metadata.PackageNotFoundError:
        return "unknown"


def skew(rendered: int) -> str:
    """Why a key of a file of schema `rendered` is unknown here, and what to change."""
    return (
        f"the configuration was rendered for config schema {rendered} (a newer Floe operator) and this image's "
        f"runtime, floe {runtime_version()}, reads config schema {CONFIG_SCHEMA}: run the app on an image whose "
        f"runtime reads schema {rendered} (spec.image), or unset the StreamingApp fields behind these keys"
    )


def _rendered_schema(raw: Mapping[str, Any]) -> int:
    schema = raw.get("config_schema", CONFIG_SCHEMA)
    return schema if isinstance(schema, int) and not isinstance(schema, bool) else CONFIG_SCHEMA


def _without_optional(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` of a newer schema without the unknown keys it lists as optional; ConfigError naming
    both schemas for any other unknown key. A file of this schema or an older one is returned as
    it is: an unknown key there is a typo, which validation reports."""
    rendered = _rendered_schema(raw)
    if rendered <= CONFIG_SCHEMA:
        return raw
    listed = raw.get("optional_keys")
    optional = {str(k) for k in listed} if isinstance(listed, list) else set()
    unknown = list(_undeclared(FloeConfig, raw, ()))
    required = [key for key in unknown if re.sub(r"\.\d+(?=\.|$)", "", key) not in optional]
    if required:
        named = ", ".join(required)
        raise ConfigError(f"invalid configuration:\n  {named}: not known to this runtime; {skew(rendered)}")
    for key in unknown:
        *parents, last = key.split(".")
        node: Any = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.get(part)
        node.pop(last, None)
    if unknown:
        logging.getLogger("floe_jobs").warning(
            "Left out optional keys=%s of config schema %d (this runtime reads %d)", unknown, rendered, CONFIG_SCHEMA
        )
    return raw


def _secret_refs(env: Mapping[str, str]) -> dict[str, SecretRef]:
    """FLOE_SECRET_REFS as far as it can be read (validation reports what it cannot)."""
    try:
        raw = json.loads(env.get(env_name("secret_refs")) or "{}")
        return {name: SecretRef.model_validate(ref) for name, ref in raw.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def _unset_secrets(env: Mapping[str, str], refs: Mapping[str, SecretRef]) -> str | None:
    """What to fix when a variable the operator set from a Secret arrived empty: the kubelet
    leaves an optional reference's variable out when the Secret or its key is missing."""
    paths = {name: path for path, (name, _) in ENV_KEYS.items()}
    lines = [
        f"{'.'.join(paths[name])} ({name}): not set: the Secret {ref.name} or its key {ref.key} is missing, or the "
        "value is empty; add it, or fix the reference in the StreamingApp"
        for name, ref in sorted(refs.items())
        if name in paths and not env.get(name)
    ]
    return "invalid configuration:\n  " + "\n  ".join(lines) if lines else None


def foreign_variables(env: Mapping[str, str]) -> list[str]:
    """The FLOE_ variables of `env` that the runtime must not take, each with why: one the
    operator did not set (not in ENV_NAMES_ENV, where that is set), and one no setting declares
    (a typo would otherwise be ignored and its setting silently keep its default)."""
    known = set(_ENV_OF.values()) | set(RUNTIME_ENV)
    listed = env.get(ENV_NAMES_ENV)
    owned = None if listed is None else {name.strip() for name in listed.split(",") if name.strip()}
    out = []
    for name in sorted(n for n in env if n.startswith("FLOE_")):
        if owned is not None and name not in owned:
            out.append(
                f"{name}: set, but not by the operator ({ENV_NAMES_ENV} lists what it set): FLOE_ variables are "
                "reserved; remove it from the ConfigMap or Secret that the pod's envFrom reads, and set the "
                "matching StreamingApp field instead"
            )
        elif name not in known and not name.startswith(TEST_HOOK_PREFIX):
            out.append(f"{name}: no setting has this variable (a typo?); `floe-job --help-config` lists them")
    return out


def own_variable(env: dict[str, str], name: str, value: str) -> None:
    """Set `name` in `env` as its owner does (the CLI for --entrypoint, a local run for its
    ports): listed in ENV_NAMES_ENV too when that is set, so `load` takes it."""
    env[name] = value
    listed = env.get(ENV_NAMES_ENV)
    if listed is not None and name not in listed.split(","):
        env[ENV_NAMES_ENV] = ",".join(sorted({*listed.split(","), name} - {""}))


def load(*, path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> FloeConfig:
    """Check the FLOE_ names of the environment (`foreign_variables`), read the YAML file (if
    any), overlay the `FLOE_*` environment, validate, and have librdkafka check the Kafka client
    properties (`floe_jobs.kafkaprops.problems`: an unknown key fails here, named, not as a
    traceback from the first client). Errors name the Secret and key of each variable set from
    one (FLOE_SECRET_REFS)."""
    env = os.environ if environ is None else environ
    path = path or env.get(CONFIG_ENV) or None
    foreign = foreign_variables(env)
    if foreign:
        raise ConfigError("invalid environment:\n  " + "\n  ".join(foreign) + _skew_of_file(path))
    refs = _secret_refs(env)
    try:
        unset = _unset_secrets(env, refs)
        if unset is not None:
            raise ConfigError(unset)
        cfg = _load(raw=_read_file(path) if path else {}, env=env)
        refused = kafkaprops.problems(cfg.kafka.extra)
        if refused:
            where = f"kafka.extra ({env_name('kafka', 'extra')})"
            raise ConfigError("invalid configuration:\n  " + "\n  ".join(f"{where}: {p}" for p in refused))
        return cfg
    except ConfigError as exc:
        raise ConfigError(sourced(str(exc), refs)) from None


def _skew_of_file(path: str | os.PathLike[str] | None) -> str:
    """The version skew behind unknown variables, when the file (if readable) is of a newer schema:
    a newer operator sets the variables of the settings it renders."""
    try:
        rendered = _rendered_schema(_read_file(path)) if path else CONFIG_SCHEMA
    except ConfigError:
        return ""
    return f"\n  ({skew(rendered)})" if rendered > CONFIG_SCHEMA else ""


def _read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config file's mapping, refused if it holds a secret."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"invalid configuration: cannot read config file {path}: {exc.strerror}") from exc
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid configuration: {path} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"invalid configuration: {path} must hold a mapping at the top level")
    in_file = _secrets_in(loaded)
    if in_file:
        named = ", ".join(f"{'.'.join(p)} ({_ENV_OF[p]})" for p in in_file)
        raise ConfigError(
            f"invalid configuration: {path} holds {named}: credentials and key material come from Kubernetes "
            "Secrets through their environment variables, never from a file"
        )
    return loaded


def _load(*, raw: dict[str, Any], env: Mapping[str, str]) -> FloeConfig:
    raw = _without_optional(raw)
    for key_path, (name, kind) in ENV_KEYS.items():
        value = env.get(name)
        if value is not None and value != "":
            _set_path(raw, key_path, _parse_env_value(name, value, kind))
    return from_dict(raw)


def from_dict(raw: Mapping[str, Any]) -> FloeConfig:
    """Validate an already-assembled mapping (what the operator renders)."""
    try:
        return FloeConfig.model_validate(dict(raw))
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from None


def describe() -> str:
    """Every key with its environment variable, for `floe-job --help-config` and the docs."""
    rows = [f"{'.'.join(path):40} {env}" for path, (env, _) in ENV_KEYS.items()]
    return "\n".join(rows)
