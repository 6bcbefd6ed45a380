"""Fixtures for the secured end-to-end tests: the stack's SASL_SSL and SSL Kafka listeners, the
secured Cassandra node (started here on first use, stopped when the session ends if it was
started here), the local CA and users, and a namespace for the app's Secrets in the local API
server."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import pem
from floe_operator import appids, local, model
from floe_stack import cassandra, component, localrun, procs
from floe_stack import tls as stack_tls
from floe_stack.layout import Layout

from tests import leftovers

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Tls:
    """The local CA, a client certificate it signed, and the stack's users' passwords."""

    ca: str
    client_cert: str
    client_key: str
    passwords: dict[str, str]


@pytest.fixture(scope="session")
def tls(stack_env: dict[str, str]) -> Tls:
    d = Path(stack_env["FLOE_STACK_TLS_DIR"])
    return Tls(
        ca=(d / "ca.crt").read_text(),
        client_cert=(d / "client.crt").read_text(),
        client_key=(d / "client.key").read_text(),
        passwords=json.loads((d / "users.json").read_text()),
    )


@pytest.fixture(scope="session")
def secured_cassandra_port(stack_env: dict[str, str]) -> Iterator[int]:
    """The secured node's CQL port (TLS, password authentication), started for this session."""
    layout = Layout.discover(ROOT)
    book = component.PortBook.load(layout)
    node = cassandra.SecuredCassandra(layout, book)
    book.save()
    started = node.up()
    yield node.port
    if started:
        procs.stop(layout, node.name)


@pytest.fixture
def secured_session(secured_cassandra_port: int, tls: Tls) -> Iterator[Any]:
    from floe_jobs.stores import CassandraConfig, connect

    session = connect(
        CassandraConfig(
            hosts=("127.0.0.1",),
            port=secured_cassandra_port,
            username="floe",
            password=tls.passwords["floe"],
            tls_ca_pem=tls.ca,
        )
    )
    yield session
    session.cluster.shutdown()


@pytest.fixture
def namespace(kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A namespace of the local API server for the app's Secrets; KUBECONFIG names that server,
    as it would in the shell of a user of `floe run` (which reads the Secrets through it)."""
    from kubernetes import client, config

    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    core = client.CoreV1Api()
    name = leftovers.prefix(f"floe-sec-{uuid.uuid4().hex[:6]}")  # its apps' topics start with it
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def create_secret(namespace: str, name: str, data: dict[str, str]) -> None:
    from kubernetes import client

    client.CoreV1Api().create_namespaced_secret(
        namespace, {"metadata": {"name": name}, "type": "Opaque", "stringData": data}
    )


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
        """`auth`: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN over SASL_SSL; mTLS (a PKCS#8 RSA key),
        mTLS-pkcs1 or mTLS-ec-sec1 (the client key in that form) over SSL."""
        self.namespace = namespace
        self.name = localrun.unique("wc")
        self.app_id = appids.new_id(namespace, self.name)
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
        if auth.startswith("mTLS"):
            bootstrap = stack_env["FLOE_KAFKA_SSL_BOOTSTRAP"]
            security = {
                "protocol": "SSL",
                "tls": {"caSecretRef": {"name": "kafka-ca"}, "clientCertSecretRef": {"name": "kafka-client"}},
            }
            if auth != "mTLS":
                form = auth.removeprefix("mTLS-")
                cert, key = stack_tls.client(Path(stack_env["FLOE_STACK_TLS_DIR"]), tmp / "tls", name=form, form=form)
            else:
                cert, key = tls.client_cert, tls.client_key
            self.client_key = key
            self.secrets = {"kafka-client": {"tls.crt": cert, "tls.key": key}}
        else:
            self.client_key = tls.client_key
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
        keys = [self.tls.client_key, self.client_key, pem.pkcs8(self.client_key)]  # as given and as clients get it
        return [*out, *(key.split("PRIVATE KEY-----")[1].strip()[:64] for key in keys)]  # the keys' bodies

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
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
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


def replace_secret(namespace: str, name: str, data: dict[str, str]) -> None:
    from kubernetes import client

    client.CoreV1Api().replace_namespaced_secret(
        name, namespace, {"metadata": {"name": name}, "type": "Opaque", "stringData": data}
    )


def wait_exit(app: SecuredApp, timeout: float = 120) -> tuple[int, str]:
    """The replica's exit code and what it logged since it started."""
    assert app.proc is not None
    code = app.proc.wait(timeout=timeout)
    with open(app.log, "rb") as f:
        f.seek(app.log_offset)
        return code, f.read().decode(errors="replace")


def stranger_ca(directory: Path) -> str:
    """A CA that signed nothing the stack serves (`ca.crt`, `ca.key` made in `directory`): its
    PEM, and the directory to sign client certificates with (`floe_stack.tls.client`)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(directory / "ca.key"),
                    "-out", str(directory / "ca.crt"), "-days", "1", "-subj", "/CN=other-ca"],
                   check=True, capture_output=True)
    return (directory / "ca.crt").read_text()
