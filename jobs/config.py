"""The one typed configuration of a Floe job process.

The operator renders these keys into the ConfigMap file that `floe-job --config` (or the
`FLOE_CONFIG` environment variable) points at; every key can also be set, or overridden, by
the environment variable documented next to it. Environment wins over the file, so a pod can
patch a single setting without re-rendering the file.

Lists in environment variables are comma-separated; `spark.conf` and `job.args` take JSON
(`FLOE_SPARK_CONF='{"spark.sql.shuffle.partitions": "4"}'`, `FLOE_JOB_ARGS='["--x", "1"]'`),
and `stores` takes a JSON list of `{name, type, ttl_seconds, table_options}` objects.

Validation happens once, at start: a bad value stops the process with a message naming the
key, its environment variable and the accepted values (`ConfigError`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

StoreType = Literal["partitioned", "global", "versioned-partitioned", "versioned-global"]
GroupProtocol = Literal["consumer", "classic", "auto"]
StartingOffsets = Literal["earliest", "latest"]

_APP_ID = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class ConfigError(ValueError):
    """A configuration value is missing or invalid; the message says which and what is accepted."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(_Model):
    bootstrap_servers: str = Field(description="FLOE_KAFKA_BOOTSTRAP_SERVERS: host:port[,host:port…]")
    topics: list[str] = Field(description="FLOE_KAFKA_TOPICS: input topics, comma-separated")
    output_topics: list[str] = Field(
        default_factory=list,
        description="FLOE_KAFKA_OUTPUT_TOPICS: output topics; the first one is the default for emitted rows",
    )
    group_id: str | None = Field(default=None, description="FLOE_KAFKA_GROUP_ID: consumer group; default: the app id")
    starting_offsets: StartingOffsets = Field(
        default="earliest",
        description="FLOE_KAFKA_STARTING_OFFSETS: where a partition without a stored offset starts",
    )
    max_records_per_batch: int = Field(
        default=50_000, ge=1, description="FLOE_KAFKA_MAX_RECORDS_PER_BATCH: cap of one micro-batch, all partitions"
    )
    spark_read_min_records: int = Field(
        default=200_000,
        ge=0,
        description="FLOE_KAFKA_SPARK_READ_MIN_RECORDS: a batch of an input topic planned with at least this many "
        "records is read with Spark's Kafka source (when its connector is on spark.jars), a smaller one by the "
        "driver's consumer; 0: every such batch with Spark's source (repartition topics are read by the driver). "
        "The default is above the default batch cap: in local mode the driver's consumer is faster; "
        "lower it when executors run elsewhere (spark.master) or batches are larger",
    )
    spark_sink_min_records: int = Field(
        default=100_000,
        ge=0,
        description="FLOE_KAFKA_SPARK_SINK_MIN_RECORDS: what a batch of more input records than this emits is "
        "written by Spark's Kafka sink, from its plan (when its connector is on spark.jars); a smaller batch's "
        "rows are collected and produced by the driver's producer. 0: every batch through Spark's sink",
    )
    max_bytes_per_batch: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="FLOE_KAFKA_MAX_BYTES_PER_BATCH: cap of one micro-batch in bytes "
        "(estimated from the record sizes seen)",
    )
    session_timeout_ms: int | None = Field(
        default=None,
        ge=1000,
        description="FLOE_KAFKA_SESSION_TIMEOUT_MS: a consumer setting under the classic protocol; under KIP-848 "
        "set on the group at start (consumer.session.timeout.ms); default: the broker's (45 s)",
    )
    heartbeat_interval_ms: int | None = Field(
        default=None,
        ge=100,
        description="FLOE_KAFKA_HEARTBEAT_INTERVAL_MS: a consumer setting under the classic protocol; under KIP-848 "
        "set on the group at start (consumer.heartbeat.interval.ms)",
    )
    leave_group_on_close: bool = Field(
        default=True,
        description="FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE: leave the group at once on shutdown; "
        "off = the partitions wait for the session timeout",
    )
    group_protocol: GroupProtocol = Field(
        default="auto",
        description="FLOE_KAFKA_GROUP_PROTOCOL: consumer (KIP-848), classic (cooperative-sticky) "
        "or auto (consumer when the brokers support it)",
    )
    poll_interval_ms: int = Field(
        default=200, ge=10, le=10_000, description="FLOE_KAFKA_POLL_INTERVAL_MS: idle wait between empty batches"
    )
    idempotent_output: bool = Field(
        default=True, description="FLOE_KAFKA_IDEMPOTENT_OUTPUT: enable.idempotence and acks=all on every producer"
    )
    instance_id: str | None = Field(
        default=None,
        description="FLOE_KAFKA_INSTANCE_ID: static member id (group.instance.id); default: none",
    )
    extra: dict[str, str] = Field(
        default_factory=dict,
        description="FLOE_KAFKA_EXTRA: JSON object of extra librdkafka settings (security.protocol, sasl.*)",
    )

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


class CassandraSettings(_Model):
    hosts: list[str] = Field(default_factory=lambda: ["127.0.0.1"], description="FLOE_CASSANDRA_HOSTS: contact points")
    port: int = Field(default=9042, ge=1, le=65535, description="FLOE_CASSANDRA_PORT")
    local_datacenter: str | None = Field(
        default=None, description="FLOE_CASSANDRA_LOCAL_DC: data centre for DC-aware routing"
    )
    keyspace: str = Field(description="FLOE_CASSANDRA_KEYSPACE: keyspace of the stores and the offsets table")
    username: str | None = Field(default=None, description="FLOE_CASSANDRA_USERNAME (never logged)")
    password: str | None = Field(default=None, repr=False, description="FLOE_CASSANDRA_PASSWORD (never logged)")

    @field_validator("keyspace")
    @classmethod
    def _keyspace_name(cls, value: str) -> str:
        if not re.match(r"^[a-zA-Z][a-zA-Z0-9_]{0,47}$", value):
            raise ValueError("a Cassandra keyspace name: a letter then up to 47 of [a-zA-Z0-9_]")
        return value

    @field_validator("hosts")
    @classmethod
    def _hosts_nonempty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one contact point is required")
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


class SparkSettings(_Model):
    master: str = Field(default="local[*]", description="FLOE_SPARK_MASTER")
    conf: dict[str, str] = Field(default_factory=dict, description="FLOE_SPARK_CONF: JSON object of Spark settings")
    jars: list[str] = Field(
        default_factory=list, description="FLOE_SPARK_JARS: Kafka connector jars (comma-separated), added to spark.jars"
    )
    driver_batch_max_records: int | None = Field(
        default=None,
        ge=0,
        description="FLOE_SPARK_DRIVER_BATCH_MAX_RECORDS: in a batch of at most this many input records, rekey and "
        "aggregate group their rows in the driver instead of running Spark's shuffles (same result, a fraction "
        "of the time for small batches); 0: always in Spark. Default: 50,000 with a local master (Spark's tasks "
        "run on the driver's cores anyway), 10,000 with executors elsewhere (they share a large batch's work)",
    )

    @property
    def driver_batch_limit(self) -> int:
        """`driver_batch_max_records`, or its default for this master."""
        if self.driver_batch_max_records is not None:
            return self.driver_batch_max_records
        return 50_000 if self.master.startswith("local") else 10_000


class StateSettings(_Model):
    cache_max_keys: int = Field(
        default=500_000,
        ge=0,
        description="FLOE_STATE_CACHE_MAX_KEYS: state rows a replica keeps of the partitions it owns, so that "
        "aggregate, latest and dedup read each key from Cassandra once per assignment (partitioned stores "
        "without TTL and with a str, bytes, int, long or float value); about 180 bytes per short key; 0: off",
    )


class ShutdownSettings(_Model):
    drain_timeout_seconds: float = Field(
        default=25.0,
        gt=0,
        description="FLOE_SHUTDOWN_DRAIN_TIMEOUT_SECONDS: time to finish the running batch after SIGTERM; "
        "keep it below the pod's terminationGracePeriodSeconds",
    )


class MetricsSettings(_Model):
    port: int = Field(default=9400, ge=0, le=65535, description="FLOE_METRICS_PORT: /healthz /readyz /metrics; 0 = off")
    query_port: int = Field(
        default=9401,
        ge=0,
        le=65535,
        description="FLOE_METRICS_QUERY_PORT: the store query endpoint of stores the job exposes; 0 = off",
    )
    stall_seconds: float = Field(
        default=300.0, gt=0, description="FLOE_METRICS_STALL_SECONDS: /healthz fails when the loop is stuck this long"
    )


class JobSettings(_Model):
    entrypoint: str = Field(
        description="FLOE_JOB_ENTRYPOINT: `package.module:attribute` or a path to a .py file[:attribute]"
    )
    args: list[str] = Field(default_factory=list, description="FLOE_JOB_ARGS: JSON list handed to the job as job.args")


class FloeConfig(_Model):
    app_id: str = Field(description="FLOE_APP_ID: the StreamingApp name; group id, topic and table prefix")
    kafka: KafkaSettings
    cassandra: CassandraSettings
    stores: list[StoreSettings] = Field(default_factory=list, description="FLOE_STORES: JSON list")
    spark: SparkSettings = SparkSettings()
    state: StateSettings = StateSettings()
    shutdown: ShutdownSettings = ShutdownSettings()
    metrics: MetricsSettings = MetricsSettings()
    job: JobSettings

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


# key path → (environment variable, kind); kind says how the string is parsed.
ENV_KEYS: dict[tuple[str, ...], tuple[str, str]] = {
    ("app_id",): ("FLOE_APP_ID", "str"),
    ("kafka", "bootstrap_servers"): ("FLOE_KAFKA_BOOTSTRAP_SERVERS", "str"),
    ("kafka", "topics"): ("FLOE_KAFKA_TOPICS", "list"),
    ("kafka", "output_topics"): ("FLOE_KAFKA_OUTPUT_TOPICS", "list"),
    ("kafka", "group_id"): ("FLOE_KAFKA_GROUP_ID", "str"),
    ("kafka", "starting_offsets"): ("FLOE_KAFKA_STARTING_OFFSETS", "str"),
    ("kafka", "max_records_per_batch"): ("FLOE_KAFKA_MAX_RECORDS_PER_BATCH", "str"),
    ("kafka", "max_bytes_per_batch"): ("FLOE_KAFKA_MAX_BYTES_PER_BATCH", "str"),
    ("kafka", "spark_read_min_records"): ("FLOE_KAFKA_SPARK_READ_MIN_RECORDS", "str"),
    ("kafka", "spark_sink_min_records"): ("FLOE_KAFKA_SPARK_SINK_MIN_RECORDS", "str"),
    ("kafka", "session_timeout_ms"): ("FLOE_KAFKA_SESSION_TIMEOUT_MS", "str"),
    ("kafka", "heartbeat_interval_ms"): ("FLOE_KAFKA_HEARTBEAT_INTERVAL_MS", "str"),
    ("kafka", "leave_group_on_close"): ("FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE", "str"),
    ("kafka", "group_protocol"): ("FLOE_KAFKA_GROUP_PROTOCOL", "str"),
    ("kafka", "poll_interval_ms"): ("FLOE_KAFKA_POLL_INTERVAL_MS", "str"),
    ("kafka", "idempotent_output"): ("FLOE_KAFKA_IDEMPOTENT_OUTPUT", "str"),
    ("kafka", "instance_id"): ("FLOE_KAFKA_INSTANCE_ID", "str"),
    ("kafka", "extra"): ("FLOE_KAFKA_EXTRA", "json"),
    ("cassandra", "hosts"): ("FLOE_CASSANDRA_HOSTS", "list"),
    ("cassandra", "port"): ("FLOE_CASSANDRA_PORT", "str"),
    ("cassandra", "local_datacenter"): ("FLOE_CASSANDRA_LOCAL_DC", "str"),
    ("cassandra", "keyspace"): ("FLOE_CASSANDRA_KEYSPACE", "str"),
    ("cassandra", "username"): ("FLOE_CASSANDRA_USERNAME", "str"),
    ("cassandra", "password"): ("FLOE_CASSANDRA_PASSWORD", "str"),
    ("stores",): ("FLOE_STORES", "json"),
    ("spark", "master"): ("FLOE_SPARK_MASTER", "str"),
    ("spark", "conf"): ("FLOE_SPARK_CONF", "json"),
    ("spark", "jars"): ("FLOE_SPARK_JARS", "list"),
    ("spark", "driver_batch_max_records"): ("FLOE_SPARK_DRIVER_BATCH_MAX_RECORDS", "str"),
    ("state", "cache_max_keys"): ("FLOE_STATE_CACHE_MAX_KEYS", "str"),
    ("shutdown", "drain_timeout_seconds"): ("FLOE_SHUTDOWN_DRAIN_TIMEOUT_SECONDS", "str"),
    ("metrics", "port"): ("FLOE_METRICS_PORT", "str"),
    ("metrics", "stall_seconds"): ("FLOE_METRICS_STALL_SECONDS", "str"),
    ("metrics", "query_port"): ("FLOE_METRICS_QUERY_PORT", "str"),
    ("job", "entrypoint"): ("FLOE_JOB_ENTRYPOINT", "str"),
    ("job", "args"): ("FLOE_JOB_ARGS", "json"),
}

_LITERAL_HINTS = {
    ("kafka", "starting_offsets"): "earliest | latest",
    ("kafka", "group_protocol"): "consumer | classic | auto",
    ("stores", "type"): "partitioned | global | versioned-partitioned | versioned-global",
}


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


def load(*, path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> FloeConfig:
    """Read the YAML file (if any), overlay the `FLOE_*` environment, validate."""
    env = os.environ if environ is None else environ
    path = path or env.get("FLOE_CONFIG") or None
    raw: dict[str, Any] = {}
    if path:
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
        raw = loaded
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
