"""Bad input on the secured clusters, through the operator's rendering and real Secrets: a wrong
password (Kafka SASL, Cassandra), an unknown CA, an expired certificate (Kafka client
certificate, Cassandra CA), a missing Secret key and an encrypted client key.

Each stops the replica at start, before Spark starts, with exit code 2 and a message naming the
setting and the Secret and key to fix, never the value; a refusal is not taken for an outage to
wait out. What an earlier good run committed stays as it was, and the run after the fix
resumes from it exactly.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import offsets
from floe_stack import localrun
from floe_stack import tls as stack_tls

from tests import counting

from .conftest import SecuredApp, replace_secret, stranger_ca, wait_exit

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.k8s]


def stopped_at_start(app: SecuredApp, *, within: float = 90) -> str:
    """The log of a replica that exited with 2 (invalid configuration or refused) in time."""
    started = time.monotonic()
    app.start()
    code, log = wait_exit(app)
    assert code == 2, log
    assert time.monotonic() - started < within, "a refusal was waited on like an outage"
    assert "Waiting for dependency" not in log and "SparkContext" not in log
    return log


def test_a_wrong_kafka_password_stops_the_replica_at_start(make_app: Any) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-256")
    app.create_secrets(**{"kafka-user": {"username": "floe", "password": "not-the-password-7f3a"}})
    log = stopped_at_start(app)
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in log
    assert "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD from Secret kafka-user key password)" in log
    assert "not-the-password-7f3a" not in log


def test_an_unknown_ca_stops_the_replica_at_start(make_app: Any, tmp_path: Path) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    app.create_secrets(**{"kafka-ca": {"ca.crt": stranger_ca(tmp_path)}})
    log = stopped_at_start(app)
    assert "certificate verify failed" in log
    assert "kafka.ssl_ca_pem (FLOE_KAFKA_SSL_CA_PEM from Secret kafka-ca key ca.crt)" in log


def test_an_unknown_cassandra_ca_stops_the_replica_at_start(make_app: Any, tmp_path: Path) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    app.create_secrets(**{"cassandra-ca": {"ca.crt": stranger_ca(tmp_path)}})
    log = stopped_at_start(app)
    assert "TLS handshake failed" in log and "CERTIFICATE_VERIFY_FAILED" in log
    assert "cassandra.tls_ca_pem (FLOE_CASSANDRA_TLS_CA_PEM from Secret cassandra-ca key ca.crt" in log


def test_a_wrong_cassandra_password_stops_the_replica_at_start(make_app: Any) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    app.create_secrets(**{"cassandra-user": {"username": "floe", "password": "not-the-password-c4d1"}})
    log = stopped_at_start(app)
    assert "refused the credentials of cassandra.username 'floe'" in log
    assert "FLOE_CASSANDRA_PASSWORD from Secret cassandra-user key password" in log
    assert "not-the-password-c4d1" not in log


def test_an_expired_client_certificate_stops_the_replica_at_start(
    make_app: Any, stack_env: dict[str, str], tmp_path: Path
) -> None:
    app: SecuredApp = make_app("mTLS")
    cert, key = stack_tls.client(Path(stack_env["FLOE_STACK_TLS_DIR"]), tmp_path, expired=True)
    app.create_secrets(**{"kafka-client": {"tls.crt": cert, "tls.key": key}})
    log = stopped_at_start(app)
    assert "kafka.ssl_cert_pem (FLOE_KAFKA_SSL_CERT_PEM from Secret kafka-client key tls.crt)" in log
    assert "certificate CN=floe expired on" in log and "renew it" in log
    assert key.split("-----")[2].strip()[:64] not in log


def test_an_expired_cassandra_ca_stops_the_replica_at_start(
    make_app: Any, stack_env: dict[str, str], tmp_path: Path
) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-512")
    expired = stack_tls.expired_ca(Path(stack_env["FLOE_STACK_TLS_DIR"]), tmp_path)
    app.create_secrets(**{"cassandra-ca": {"ca.crt": expired}})
    log = stopped_at_start(app)
    assert "cassandra.tls_ca_pem (FLOE_CASSANDRA_TLS_CA_PEM from Secret cassandra-ca key ca.crt)" in log
    assert "CN=floe-local-tls-ca expired on" in log


def test_a_missing_secret_key_stops_the_replica_at_start(make_app: Any) -> None:
    app: SecuredApp = make_app("SCRAM-SHA-256")
    app.create_secrets(**{"kafka-user": {"username": "floe"}})  # no password key
    log = stopped_at_start(app)
    assert (
        "kafka.sasl_password (FLOE_KAFKA_SASL_PASSWORD from Secret kafka-user key password): not set: the Secret "
        "kafka-user or its key password is missing"
    ) in log


def test_an_encrypted_client_key_stops_the_replica_at_start(
    make_app: Any, stack_env: dict[str, str], tmp_path: Path
) -> None:
    app: SecuredApp = make_app("mTLS")
    cert, key = stack_tls.client(Path(stack_env["FLOE_STACK_TLS_DIR"]), tmp_path)
    encrypted = subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-128-cbc", "-passout", "pass:k3y-pass"],
                               input=key, capture_output=True, text=True, check=True).stdout
    app.create_secrets(**{"kafka-client": {"tls.crt": cert, "tls.key": encrypted}})
    log = stopped_at_start(app)
    assert "kafka.ssl_key_pem (FLOE_KAFKA_SSL_KEY_PEM from Secret kafka-client key tls.key)" in log
    assert "the key is encrypted" in log and "openssl pkcs8 -topk8 -nocrypt" in log
    assert "k3y-pass" not in log


def committed(session: Any, app: SecuredApp) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The app's offsets rows (next offset, sequences, owner) and its store's content."""
    rows = offsets.progress(session, keyspace=app.keyspace, app_id=app.app_id)
    store = localrun.read_store(session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    return rows, store


@pytest.mark.spark
def test_bad_input_after_a_good_run_loses_nothing_committed(
    make_app: Any, secured_session: Any, stack_env: dict[str, str], tmp_path: Path
) -> None:
    """Each kind of bad input in turn (a wrong password, an unknown CA, an expired certificate, a
    missing Secret key, for Kafka and Cassandra) while input waits: the replica stops before it
    applies or commits anything, and the run after the fix counts every line once."""
    app: SecuredApp = make_app("SCRAM-SHA-256")
    app.create_secrets()
    topics = [app.topic, f"{app.app_id}-words-repartition"]
    lines = localrun.word_lines(900, seed=22)
    localrun.produce(app.plain_bootstrap, app.topic, lines[:600])
    app.start()
    localrun.wait_caught_up(secured_session, app.as_localrun(), topics, timeout=300)
    assert app.stop() == 0
    before = committed(secured_session, app)
    assert before[0] and before[1]

    # more input waits while the credentials are wrong: nothing of it may be applied or committed
    localrun.produce(app.plain_bootstrap, app.topic, lines[600:])
    good = dict(app.secrets)
    stranger = stranger_ca(tmp_path / "stranger")
    expired = stack_tls.expired_ca(Path(stack_env["FLOE_STACK_TLS_DIR"]), tmp_path / "expired")
    kafka_ca = "FLOE_KAFKA_SSL_CA_PEM from Secret kafka-ca key ca.crt"
    cassandra_ca = "FLOE_CASSANDRA_TLS_CA_PEM from Secret cassandra-ca key ca.crt"
    cassandra_password = "FLOE_CASSANDRA_PASSWORD from Secret cassandra-user key password"
    for name, data, named in [
        ("kafka-user", {"username": "floe", "password": "wrong-0b1e"}, "FLOE_KAFKA_SASL_PASSWORD from Secret"),
        ("cassandra-user", {"username": "floe", "password": "wrong-77aa"}, cassandra_password),
        ("cassandra-user", {"username": "floe"}, cassandra_password),
        ("kafka-ca", {"ca.crt": stranger}, kafka_ca),
        ("cassandra-ca", {"ca.crt": stranger}, cassandra_ca),
        ("kafka-ca", {"ca.crt": expired}, kafka_ca),
        ("cassandra-ca", {"ca.crt": expired}, cassandra_ca),
    ]:
        replace_secret(app.namespace, name, data)
        log = stopped_at_start(app)
        assert named in log, log  # stopped by this swap, not by something else
        replace_secret(app.namespace, name, good[name])
        assert committed(secured_session, app) == before

    app.start()
    localrun.wait_caught_up(secured_session, app.as_localrun(), topics, timeout=300)
    assert app.stop() == 0
    want = dict(localrun.word_truth(lines))
    got = localrun.read_store(secured_session, app.keyspace, "word-count", key_serde="str", value_serde="long")
    assert counting.counters_equal(got, want) is None, counting.counters_equal(got, want)
