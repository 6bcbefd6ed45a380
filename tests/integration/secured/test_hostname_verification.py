"""A server certificate that does not name the address connected to is refused while hostname
verification is on: by every Cassandra session (the store library's one `connect`, which the
runtime opens and the operator's provisioner wraps) and by every Kafka client (the librdkafka
settings of `floe_jobs.kafkasec`, which the runtime's and the operator's clients take, and the
Java client of Spark's Kafka source, which takes its `java()` settings). With
verification off the same server, through the same path, is accepted: the refusal is the
name's, not the CA's.

The stack's server certificate names 127.0.0.1 and localhost. The tests reach the real secured
Cassandra node and the real SASL_SSL listener through 127.0.0.2, by a forwarder that copies the
bytes both ways, so the TLS handshake is the server's own, end to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from floe_jobs import config, kafkaaccess, kafkaio, kafkasec, planning
from floe_jobs.stores import CassandraConfig, StoreConfigError, connect
from floe_operator import cassandra
from floe_stack import localrun

from .conftest import Tls

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra]

UNNAMED = "127.0.0.2"
"""A loopback address the server certificate does not name."""


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def forwarded(port: int) -> Iterator[int]:
    """A port on `UNNAMED` whose connections are copied to 127.0.0.1:`port`, byte for byte."""
    listener = socket.create_server((UNNAMED, 0))
    opened: list[socket.socket] = [listener]

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", port))
            opened.extend((client, upstream))
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def cassandra_config(tls: Tls, port: int, *, verify: bool) -> CassandraConfig:
    return CassandraConfig(
        hosts=(UNNAMED,),
        port=port,
        username="floe",
        password=tls.passwords["floe"],
        tls_ca_pem=tls.ca,
        tls_verify_hostname=verify,
        connect_timeout=5.0,
    )


def test_cassandra_refuses_a_node_certificate_for_another_address(secured_cassandra_port: int, tls: Tls) -> None:
    with forwarded(secured_cassandra_port) as port:
        with pytest.raises(StoreConfigError) as info:
            connect(cassandra_config(tls, port, verify=True))
        assert "TLS handshake failed" in str(info.value) and "mismatch" in str(info.value), info.value
        assert "FLOE_CASSANDRA_TLS_VERIFY_HOSTNAME" in str(info.value)

        provisioner = cassandra.Provisioner(connect_timeout=5.0)
        with pytest.raises(cassandra.CredentialsRejected) as rejected:
            asyncio.run(provisioner.check(cassandra.Target(cassandra_config(tls, port, verify=True))))
        assert rejected.value.tls, rejected.value

        session = connect(cassandra_config(tls, port, verify=False))
        try:
            assert session.execute("SELECT release_version FROM system.local").one()
        finally:
            session.cluster.shutdown()


def kafka_security(tls: Tls, *, verify: bool) -> kafkasec.KafkaSecurity:
    return kafkasec.KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        username="floe",
        password=tls.passwords["floe"],
        ca_pem=tls.ca,
        verify_hostname=verify,
    )


def admin_of(bootstrap: str, security: kafkasec.KafkaSecurity) -> tuple[Any, kafkaaccess.ErrorWatch]:
    from confluent_kafka.admin import AdminClient

    watch = kafkaaccess.ErrorWatch()
    return AdminClient({"bootstrap.servers": bootstrap, **security.librdkafka()}, error_cb=watch), watch


def test_kafka_refuses_a_broker_certificate_for_another_address(stack_env: dict[str, str], tls: Tls) -> None:
    listener_port = int(stack_env["FLOE_KAFKA_SASL_SSL_BOOTSTRAP"].rsplit(":", 1)[1])
    with forwarded(listener_port) as port:
        bootstrap = f"{UNNAMED}:{port}"
        security = kafka_security(tls, verify=True)
        admin, watch = admin_of(bootstrap, security)
        with pytest.raises(kafkaaccess.SecurityError) as info:
            kafkaaccess.check_access(admin, watch, security, bootstrap=bootstrap, timeout=30.0)
        assert kafkaaccess.tls_refused(watch.refused), watch.refused
        assert "kafka.ssl_ca_pem (FLOE_KAFKA_SSL_CA_PEM)" in str(info.value)

        unchecked = dataclasses.replace(security, verify_hostname=False)
        admin, watch = admin_of(bootstrap, unchecked)
        assert admin.list_topics(timeout=20).brokers
        assert watch.refused is None


def secured_reader_config(tls: Tls, bootstrap: str, topic: str, *, verify: bool) -> config.FloeConfig:
    return config.load(
        environ={
            "FLOE_APP_ID": localrun.unique("it"),
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "FLOE_KAFKA_TOPICS": topic,
            "FLOE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FLOE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FLOE_KAFKA_SASL_USERNAME": "floe",
            "FLOE_KAFKA_SASL_PASSWORD": tls.passwords["floe"],
            "FLOE_KAFKA_SSL_CA_PEM": tls.ca,
            "FLOE_KAFKA_SSL_VERIFY_HOSTNAME": str(verify).lower(),
            "FLOE_CASSANDRA_KEYSPACE": "unused",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
        }
    )


@pytest.mark.spark
def test_sparks_kafka_source_refuses_a_broker_certificate_for_another_address(
    stack_env: dict[str, str], tls: Tls, spark: Any
) -> None:
    topic = localrun.unique("hostname")
    localrun.create_topic(stack_env["FLOE_KAFKA_BOOTSTRAP"], topic, 1)
    localrun.produce(stack_env["FLOE_KAFKA_BOOTSTRAP"], topic, [f"line {i}" for i in range(5)])
    plans = [planning.PartitionPlan(topic, 0, 1, 0, 5, replay=False)]
    listener_port = int(stack_env["FLOE_KAFKA_SASL_SSL_BOOTSTRAP"].rsplit(":", 1)[1])
    with forwarded(listener_port) as port:
        bootstrap = f"{UNNAMED}:{port}"
        checked = secured_reader_config(tls, bootstrap, topic, verify=True)
        with pytest.raises(Exception) as info:
            kafkaio.read_with_spark(spark, checked, plans).collect()
        assert "No subject alternative names matching IP address 127.0.0.2" in str(info.value), info.value

        unchecked = secured_reader_config(tls, bootstrap, topic, verify=False)
        assert kafkaio.read_with_spark(spark, unchecked, plans).count() == 5
