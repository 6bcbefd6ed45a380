"""Fixtures for the secured end-to-end tests: the stack's SASL_SSL and SSL Kafka listeners, the
secured Cassandra node (started here on first use, stopped when the session ends if it was
started here), the local CA and users, and a namespace for the app's Secrets in the local API
server."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from floe_stack import cassandra, component, procs
from floe_stack.layout import Layout

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
    name = f"floe-sec-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def create_secret(namespace: str, name: str, data: dict[str, str]) -> None:
    from kubernetes import client

    client.CoreV1Api().create_namespaced_secret(
        namespace, {"metadata": {"name": name}, "type": "Opaque", "stringData": data}
    )
