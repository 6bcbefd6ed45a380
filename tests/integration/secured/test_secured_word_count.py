"""Word count against secured Kafka and Cassandra, through the operator's rendering.

The app is a StreamingApp manifest whose credentials and certificates live in real Secrets of
the local API server; its replica is started exactly as `floe run` starts one (the rendered
ConfigMap and pod environment, Secret references read from the API server). Kafka is the
stack's SASL_SSL listener (SCRAM or PLAIN users, the local CA) or its SSL listener that requires
a client certificate (mTLS); Cassandra is the secured node (PasswordAuthenticator, client TLS
with hostname verification). Counts must be exact in the store and the output topic; the
operator's lag reader reads the same secured cluster; the password and the client key appear
in no ConfigMap, no log line of the replica and no process's command line; bad credentials stop
the replica at start with a message naming the setting, never its value.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import localrun
from floe_operator import cassandra, kafka, lag, local, model

from .conftest import Tls, create_secret

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.k8s]

ENTRYPOINT = str(localrun.ROOT / "examples/word-count/word_count.py")
# Spark's Kafka source reads every batch and its sink writes every batch's output, so the Java
# clients (JAAS, PEM trust and key stores) are exercised, not only librdkafka's
SPARK_PATHS = {
    "FLOE_KAFKA_SPARK_READ_MIN_RECORDS": "0",
    "FLOE_KAFKA_SPARK_SINK_MIN_RECORDS": "0",
    "FLOE_SPARK_DRIVER_BATCH_MAX_RECORDS": "0",
}


class SecuredApp:
    """One app under test: topics on the broker, a manifest, its Secrets, its replica."""

    def __init__(
        self, *, namespace: str, stack_env: dict[str, str], tls: Tls, cassandra_port: int, tmp: Path, auth: str
    ) -> None:
        self.namespace = namespace
        self.name = localrun.unique("wc")
        self.app_id = f"{namespace}-{self.name}"
        self.plain_bootstrap = stack_env["FLOE_KAFKA_BOOTSTRAP"]
        self.jars = stack_env["FLOE_SPARK_JARS"]
        self.tls = tls
        self.tmp = tmp
        self.topic = f"{self.app_id}-lines"
        self.output = f"{self.app_id}-output"
        self.keyspace = "floe_sec_" + self.name.split("-")[1]
        localrun.create_topic(self.plain_bootstrap, self.topic, 4)
        localrun.create_topic(self.plain_bootstrap, self.output, 4)
        security: dict[str, Any]
        if auth == "mTLS":
            bootstrap = stack_env["FLOE_KAFKA_SSL_BOOTSTRAP"]
            security = {
                "protocol": "SSL",
                "tls": {"caSecretRef": {"name": "kafka-ca"}, "clientCertSecretRef": {"name": "kafka-client"}},
            }
            self.secrets = {"kafka-client": {"tls.crt": tls.client_cert, "tls.key": tls.client_key}}
        else:
            bootstrap = stack_env["FLOE_KAFKA_SASL_SSL_BOOTSTRAP"]
            user = "floeplain" if auth == "PLAIN" else "floe"
            security = {
                "protocol": "SASL_SSL",
                "tls": {"caSecretRef": {"name": "kafka-ca"}},
                "sasl": {"mechanism": auth, "credentialsSecretRef": {"name": "kafka-user"}},
            }
            self.secrets = {"kafka-user": {"username": user, "password": tls.passwords[user]}}
        self.secrets["kafka-ca"] = {"ca.crt": tls.ca}
        self.secrets["cassandra-user"] = {"username": "floe", "password": tls.passwords["floe"]}
        self.secrets["cassandra-ca"] = {"ca.crt": tls.ca}
        self.body: dict[str, Any] = {
            "apiVersion": model.API_VERSION,
            "kind": model.KIND,
            "metadata": {"name": self.name, "namespace": namespace, "uid": "0"},
            "spec": {
                "image": "floe-job:local",
                "job": {"entrypoint": ENTRYPOINT},
                "replicas": 1,
                "kafka": {
                    "bootstrapServers": bootstrap,
                    "topics": [self.topic],
                    "outputTopics": [self.output],
                    "consumerGroup": self.app_id,
                    "startingOffsets": "earliest",
                    "maxRecordsPerBatch": 2000,
                    "security": security,
                },
                "state": {
                    "cassandra": {
                        "hosts": ["127.0.0.1"],
                        "port": cassandra_port,
                        "keyspace": self.keyspace,
                        "credentialsSecretRef": {"name": "cassandra-user"},
                        "tls": {"enabled": True, "caSecretRef": {"name": "cassandra-ca"}},
                    },
                    "stores": [{"name": "word-count", "type": "partitioned"}],
                },
                "spark": {
                    "master": "local[2]",
                    "conf": {"spark.sql.shuffle.partitions": "2"},
                    "driver": {"memory": "768m"},
                },
                "env": [],
            },
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / f"{self.name}.log"

    @property
    def secret_values(self) -> list[str]:
        """What must never show: passwords and the client key."""
        out = [v for data in self.secrets.values() for k, v in data.items() if k in ("password", "tls.key")]
        return [*out, self.tls.client_key.split("-----")[2].strip()[:64]]  # the key's body

    def create_secrets(self, **override: dict[str, str]) -> None:
        for name, data in {**self.secrets, **override}.items():
            create_secret(self.namespace, name, data)

    def rendered(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return local.rendered(self.body)

    def start(self, **env: str) -> None:
        """The replica, started as `floe run` starts one: the rendered Deployment's container
        with its ConfigMap written locally and its Secret references read from the API server."""
        self.body["spec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
        deployment, cm = self.rendered()
        mounts = local.materialize_config_maps(deployment["spec"]["template"], {cm["metadata"]["name"]: cm}, self.tmp)
        base = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
        base["FLOE_SPARK_JARS"] = self.jars  # what the job image carries
        (spec,) = local.local_processes(
            deployment,
            mounts=mounts,
            replicas=1,
            read_secret=local.api_secret_reader(),
            base_env=base,
            scratch=self.tmp / "scratch",
        )
        self.metrics_port = int(spec.env["FLOE_METRICS_PORT"])
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                spec.argv, env=spec.env, cwd=str(localrun.ROOT), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            return self.proc.wait()

    def as_localrun(self) -> localrun.App:
        """The fields `localrun`'s progress helpers read (topics are read over the plain listener)."""
        return localrun.App(
            app_id=self.app_id, bootstrap=self.plain_bootstrap, cassandra_hosts=["127.0.0.1"], cassandra_port=0,
            keyspace=self.keyspace, topics=[self.topic], output_topics=[self.output], entrypoint=ENTRYPOINT,
            stores=[], spark_jars=[], workdir=self.tmp,
        )


@pytest.fixture
def make_app(
    namespace: str,
    stack_env: dict[str, str],
    tls: Tls,
    secured_cassandra_port: int,
    tmp_path: Path,
    secured_session: Any,
) -> Iterator[Any]:
    made: list[SecuredApp] = []

    def make(auth: str) -> SecuredApp:
        app = SecuredApp(
            namespace=namespace, stack_env=stack_env, tls=tls, cassandra_port=secured_cassandra_port, tmp=tmp_path,
            auth=auth,
        )
        made.append(app)
        return app

    yield make
    for app in made:
        app.stop()
        localrun.drop_keyspace(secured_session, app.keyspace)


def command_lines() -> list[str]:
    """Every process's command line, as `ps` shows them."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out


def children_environments(pid: int) -> list[str]:
    """The environments of the processes `pid` started (Spark's JVM)."""
    out = []
    for child in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(Path(f"/proc/{child}/environ").read_bytes().decode(errors="replace"))
        except (OSError, ValueError):
            continue
    return out


@pytest.mark.parametrize(("auth", "paths"), [("SCRAM-SHA-512", "spark"), ("PLAIN", "driver"), ("mTLS", "spark")])
def test_word_count_exact_over_secured_kafka_and_cassandra(
    auth: str, paths: str, make_app: Any, secured_session: Any
) -> None:
    app: SecuredApp = make_app(auth)
    app.create_secrets()
    lines = localrun.word_lines(1200, seed=len(auth))
    localrun.produce(app.plain_bootstrap, app.topic, lines[:600])
    app.start(**(SPARK_PATHS if paths == "spark" else {}))
    assert app.proc is not None
    time.sleep(5)
    localrun.produce(app.plain_bootstrap, app.topic, lines[600:])
    seen_commands: list[str] = []
    deadline = time.monotonic() + 300
    while not localrun.caught_up(secured_session, app.as_localrun(), [app.topic, f"{app.app_id}-words-repartition"]):
        assert app.proc.poll() is None, f"replica exited with {app.proc.returncode}; see {app.log}"
        assert time.monotonic() < deadline, f"not caught up within 300 s; see {app.log}"
        seen_commands.extend(command_lines())
        time.sleep(2)
    jvm_environments = children_environments(app.proc.pid)

    want = dict(localrun.word_truth(lines))
    got = localrun.read_store(secured_session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    assert localrun.counters_equal(got, want) is None, localrun.counters_equal(got, want)
    emitted = localrun.last_values(localrun.read_topic(app.plain_bootstrap, app.output))
    assert localrun.counters_equal({k: int(v) for k, v in emitted.items()}, want) is None

    # the operator's lag reader, with the same Secrets resolved, reads the secured cluster: no lag
    secrets = {name: dict(data) for name, data in app.secrets.items()}
    ref = lag.app_ref(model.StreamingApp.from_body(app.body), secrets)
    provisioner = cassandra.Provisioner(connect_timeout=5.0)
    try:
        scraper = lag.Scraper(
            kafka_offsets=lag.KafkaOffsets(timeout=5.0),
            cassandra_offsets=lag.CassandraOffsets(provisioner._session),
            partitions_of=kafka.Inspector(ttl=0.0, timeout=5.0).partitions_sync,
        )
        (measured,) = scraper.scrape([ref]).apps
    finally:
        provisioner.close()
    assert not measured.stale, measured.error
    assert measured.end_total == sum(localrun.end_offsets(app.plain_bootstrap, app.topic).values()) == len(lines)
    assert measured.total == 0

    assert app.stop() == 0
    log = app.log.read_text(errors="replace")
    assert "Committed stage=" in log
    assert any("floe-job" in cmd for cmd in seen_commands), "the replica's command line was looked at"
    _, cm = app.rendered()
    for secret in app.secret_values:
        assert secret not in str(cm), "a secret in the ConfigMap"
        assert secret not in log, f"a secret in the replica's log {app.log}"
        assert not any(secret in cmd for cmd in seen_commands), "a secret on a command line"
        assert jvm_environments and not any(secret in env for env in jvm_environments), "a secret in Spark's JVM"


def wait_exit(app: SecuredApp, timeout: float = 120) -> tuple[int, str]:
    assert app.proc is not None
    code = app.proc.wait(timeout=timeout)
    return code, app.log.read_text(errors="replace")


def test_a_wrong_kafka_password_stops_the_replica_at_start(make_app: Any) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-256")
    app.create_secrets(**{"kafka-user": {"username": "floe", "password": "not-the-password-7f3a"}})
    started = time.monotonic()
    app.start()
    code, log = wait_exit(app)
    assert code == 2, log
    assert time.monotonic() - started < 90
    assert "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD)" in log
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in log
    assert "not-the-password-7f3a" not in log


def test_an_unknown_ca_stops_the_replica_at_start(make_app: Any, tmp_path: Path) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    key, cert = tmp_path / "other.key", tmp_path / "other.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=other-ca"], check=True, capture_output=True)
    app.create_secrets(**{"kafka-ca": {"ca.crt": cert.read_text()}})
    app.start()
    code, log = wait_exit(app)
    assert code == 2, log
    assert "certificate verify failed" in log
    assert "kafka.ssl_ca_pem (FLOE_KAFKA_SSL_CA_PEM)" in log


def test_a_wrong_cassandra_password_stops_the_replica_at_start(make_app: Any) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    app.create_secrets(**{"cassandra-user": {"username": "floe", "password": "not-the-password-c4d1"}})
    app.start()
    code, log = wait_exit(app)
    assert code == 2, log
    assert "refused the credentials of cassandra.username 'floe'" in log
    assert "FLOE_CASSANDRA_PASSWORD" in log
    assert "not-the-password-c4d1" not in log
