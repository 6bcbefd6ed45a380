"""Configuration: file + environment, validation messages that name the key and the accepted values."""

from __future__ import annotations

from pathlib import Path

import pytest
from floe_jobs import config

from .appenv import WORD_COUNT_ENV

BASE_ENV = WORD_COUNT_ENV


def test_env_only() -> None:
    cfg = config.load(environ=BASE_ENV)
    assert cfg.app_id == "word-count"
    assert cfg.kafka.topics == ["lines"]
    assert cfg.group_id == "word-count"
    assert cfg.kafka.group_protocol == "auto"
    assert cfg.kafka.leave_group_on_close is True
    assert cfg.repartition_topic("words") == "word-count-words-repartition"
    assert cfg.dlq_topic == "word-count-dlq"


def test_file_then_env_overrides(tmp_path: Path) -> None:
    f = tmp_path / "floe.yaml"
    f.write_text(
        """
app_id: orders
kafka:
  bootstrap_servers: k:9092
  topics: [a, b]
  output_topics: [out]
  group_protocol: classic
  session_timeout_ms: 6000
  heartbeat_interval_ms: 1500
  leave_group_on_close: false
cassandra: {hosts: [c1, c2], port: 9142, keyspace: ks, local_datacenter: dc1}
stores:
  - {name: word-count, type: partitioned, ttl_seconds: 60, table_options: {gc_grace_seconds: 3600}}
spark: {master: "local[2]", conf: {spark.sql.shuffle.partitions: "2"}}
shutdown: {drain_timeout_seconds: 10}
metrics: {port: 9500}
job: {entrypoint: "pkg.mod:fn", args: ["--x", "1"]}
"""
    )
    cfg = config.load(path=f, environ={"FLOE_KAFKA_TOPICS": "c", "FLOE_SPARK_CONF": '{"a": "b"}'})
    assert cfg.kafka.topics == ["c"]
    assert cfg.kafka.session_timeout_ms == 6000
    assert cfg.kafka.leave_group_on_close is False
    assert cfg.cassandra.hosts == ["c1", "c2"]
    assert cfg.stores[0].ttl_seconds == 60
    assert cfg.spark.conf == {"a": "b"}
    assert cfg.job.args == ["--x", "1"]


def test_config_env_var_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("app_id: from-file\n")
    cfg = config.load(environ={**BASE_ENV, "FLOE_CONFIG": str(f), "FLOE_APP_ID": ""})
    assert cfg.app_id == "from-file"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"FLOE_KAFKA_STARTING_OFFSETS": "middle"},
            ["kafka.starting_offsets (FLOE_KAFKA_STARTING_OFFSETS)", "'earliest' or 'latest'"],
        ),
        ({"FLOE_KAFKA_GROUP_PROTOCOL": "eager"}, ["kafka.group_protocol", "'consumer', 'classic' or 'auto'"]),
        ({"FLOE_APP_ID": "Word_Count"}, ["app_id (FLOE_APP_ID)", "DNS label"]),
        ({"FLOE_KAFKA_MAX_RECORDS_PER_BATCH": "0"}, ["kafka.max_records_per_batch", "greater than or equal to 1"]),
        ({"FLOE_CASSANDRA_PORT": "http"}, ["cassandra.port (FLOE_CASSANDRA_PORT)"]),
        ({"FLOE_KAFKA_LEAVE_GROUP_ON_CLOSE": "perhaps"}, ["kafka.leave_group_on_close"]),
        (
            {"FLOE_STORES": '[{"name": "s", "type": "window"}]'},
            ["stores.0.type", "'partitioned'", "'versioned-global'"],
        ),
        ({"FLOE_STORES": "[not json"}, ["FLOE_STORES", "not valid JSON"]),
        ({"FLOE_KAFKA_TOPICS": "bad topic!"}, ["kafka.topics"]),
        ({"FLOE_CASSANDRA_TLS": "maybe"}, ["cassandra.tls (FLOE_CASSANDRA_TLS)"]),
        ({"FLOE_CASSANDRA_CONSISTENCY": "MOST"}, ["FLOE_CASSANDRA_CONSISTENCY", "unknown consistency level 'MOST'"]),
        ({"FLOE_CASSANDRA_CONSISTENCY": "ANY"}, ["FLOE_CASSANDRA_CONSISTENCY", "ANY is not a level of both"]),
        (
            {"FLOE_CASSANDRA_SERIAL_CONSISTENCY": "QUORUM"},
            ["FLOE_CASSANDRA_SERIAL_CONSISTENCY", "QUORUM is not a serial level"],
        ),
        (
            {"FLOE_KAFKA_EXTRA": '{"isolation.level": "read_uncommitted"}'},
            ["kafka.extra (FLOE_KAFKA_EXTRA)", "spec.kafka.properties.isolation.level is owned by Floe"],
        ),
        ({"FLOE_CASSANDRA_DDL_TIMEOUT": "-1"}, ["cassandra.ddl_timeout (FLOE_CASSANDRA_DDL_TIMEOUT)"]),
        ({"FLOE_CASSANDRA_PROTOCOL_VERSION": "v5"}, ["cassandra.protocol_version"]),
        ({"FLOE_CASSANDRA_HOSTS": " , "}, ["FLOE_CASSANDRA_HOSTS", "at least one host"]),
        ({"FLOE_CASSANDRA_USERNAME": "u"}, ["FLOE_CASSANDRA_USERNAME, FLOE_CASSANDRA_PASSWORD) go together"]),
    ],
)
def test_invalid_values_name_key_and_accepted(env: dict[str, str], expected: list[str]) -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(environ={**BASE_ENV, **env})
    for fragment in expected:
        assert fragment in str(err.value)


def test_cassandra_settings_reach_the_one_connection_shape() -> None:
    """What the store library opens sessions with is built from the typed configuration alone:
    every connection setting a pod can set arrives, and the rest keep the library's defaults."""
    cfg = config.load(
        environ={
            **BASE_ENV,
            "FLOE_CASSANDRA_HOSTS": "10.0.0.1, 10.0.0.2",
            "FLOE_CASSANDRA_PORT": "19042",
            "FLOE_CASSANDRA_LOCAL_DC": "dc1",
            "FLOE_CASSANDRA_USERNAME": "floe",
            "FLOE_CASSANDRA_PASSWORD": "s3cr3t-pw",
            "FLOE_CASSANDRA_TLS_VERIFY_HOSTNAME": "false",
            "FLOE_CASSANDRA_CONSISTENCY": "quorum",
            "FLOE_CASSANDRA_SERIAL_CONSISTENCY": "SERIAL",
            "FLOE_CASSANDRA_DDL_CONSISTENCY": "QUORUM",
            "FLOE_CASSANDRA_REQUEST_TIMEOUT": "2.5",
            "FLOE_CASSANDRA_DDL_TIMEOUT": "90",
            "FLOE_CASSANDRA_CONNECT_TIMEOUT": "3",
            "FLOE_CASSANDRA_PROTOCOL_VERSION": "4",
        }
    )
    conn = cfg.cassandra.connection()
    assert (conn.hosts, conn.port, conn.local_datacenter) == (("10.0.0.1", "10.0.0.2"), 19042, "dc1")
    assert (conn.username, conn.password, conn.tls, conn.tls_verify_hostname) == ("floe", "s3cr3t-pw", False, False)
    assert (conn.consistency, conn.serial_consistency, conn.ddl_consistency) == ("quorum", "SERIAL", "QUORUM")
    assert (conn.request_timeout, conn.ddl_timeout, conn.connect_timeout) == (2.5, 90.0, 3.0)
    assert conn.protocol_version == 4
    assert "s3cr3t-pw" not in repr(conn)
    from floe_jobs.stores.config import CassandraConfig

    defaults = CassandraConfig(hosts=("127.0.0.1",))
    assert config.load(environ=BASE_ENV).cassandra.connection() == defaults


def test_missing_keys_are_named() -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(environ={"FLOE_APP_ID": "x"})
    text = str(err.value)
    assert "kafka (FLOE_KAFKA_" not in text or "is required" in text
    assert "cassandra" in text and "job" in text and "is required" in text


def test_heartbeat_must_fit_session() -> None:
    with pytest.raises(config.ConfigError, match="a third of session_timeout_ms"):
        config.load(
            environ={**BASE_ENV, "FLOE_KAFKA_SESSION_TIMEOUT_MS": "6000", "FLOE_KAFKA_HEARTBEAT_INTERVAL_MS": "3000"}
        )


def test_unknown_file_key_rejected(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("kafka: {bootstrap: x}\n")
    with pytest.raises(config.ConfigError, match=r"kafka\.bootstrap: is not a known key"):
        config.load(path=f, environ=BASE_ENV)


@pytest.mark.parametrize("setting", ["spark.redaction.regex", "spark.sql.redaction.options.regex"])
def test_spark_conf_cannot_turn_off_the_redaction(setting: str) -> None:
    """The JAAS line carries the SASL password as a Spark Kafka option: a conf that replaced the
    redaction patterns would let Spark log it, so the replica refuses to start instead."""
    with pytest.raises(config.ConfigError) as err:
        config.load(environ={**BASE_ENV, "FLOE_SPARK_CONF": f'{{"{setting}": "nothing", "spark.x": "1"}}'})
    assert "spark.conf (FLOE_SPARK_CONF)" in str(err.value)
    assert f"{setting} may not be set" in str(err.value)
    assert config.load(environ={**BASE_ENV, "FLOE_SPARK_CONF": '{"spark.x": "1"}'}).spark.conf == {"spark.x": "1"}


def test_file_problems_name_undeclared_keys_and_secrets() -> None:
    raw = {
        "app_id": "a",
        "cassandra": {"hosts": ["h"], "read_timeout": 5, "password": "pw"},
        "stores": [{"name": "s", "kind": "partitioned"}],
        "spark": {"conf": {"spark.any.setting": "1"}},
    }
    assert config.file_problems(raw) == [
        "cassandra.read_timeout: is not a known key",
        "stores.0.kind: is not a known key",
        "cassandra.password (FLOE_CASSANDRA_PASSWORD): comes from the environment only",
    ]
    assert "pw" not in " ".join(config.file_problems(raw))


def test_describe_lists_every_env_var() -> None:
    text = config.describe()
    for _, (env, _kind) in config.ENV_KEYS.items():
        assert env in text


def test_cli_exits_2_on_invalid_config(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from floe_jobs import cli

    # the CLI reads the process environment: leave out the FLOE_ variables of whatever runs the
    # tests (make exports FLOE_CACHE and FLOE_ROOT), which the runtime refuses as not its own
    for name in [n for n in os.environ if n.startswith("FLOE_")]:
        monkeypatch.delenv(name)
    for k, v in {**BASE_ENV, "FLOE_KAFKA_STARTING_OFFSETS": "sometime"}.items():
        monkeypatch.setenv(k, v)
    assert cli.main([]) == 2
    assert "kafka.starting_offsets" in capsys.readouterr().err
