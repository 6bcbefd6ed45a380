"""Word count against secured Kafka and Cassandra, through the operator's rendering.

The app is a StreamingApp manifest whose credentials and certificates live in real Secrets of
the local API server; its replica is started exactly as `floe run` starts one (the rendered
ConfigMap and pod environment, Secret references read from the API server). Kafka is the
stack's SASL_SSL listener (SCRAM or PLAIN users, the local CA) or its SSL listener that requires
a client certificate (mTLS); Cassandra is the secured node (PasswordAuthenticator, client TLS
with hostname verification). Counts must be exact in the store and the output topic; the
operator's lag reader reads the same secured cluster; the password and the client key appear
in no ConfigMap, no log line of the replica and no process's command line or Spark's
environment (Spark's own configuration: tests/integration/runtime/test_spark_redaction.py).
mTLS runs with the client key in the forms users hold: PKCS#1 (cert-manager's default) and SEC1
EC, which the runtime hands every client as PKCS#8. Bad input: test_bad_input.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from floe_operator import cassandra, kafka, model
from floe_operator.lag import scrape as lag_scrape
from floe_stack import localrun

from tests import counting

from .conftest import SPARK_PATHS, SecuredApp, children_environments, command_lines

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark, pytest.mark.k8s]



@pytest.mark.parametrize(
    ("auth", "paths"),
    # an EC key in SEC1 PEM takes the same mTLS path as an RSA one once converted (tests/unit/runtime/
    # test_pem.py converts both): `make test-all` runs it end to end too
    [("SCRAM-SHA-512", "spark"), ("PLAIN", "driver"), ("mTLS-pkcs1", "spark"),
     pytest.param("mTLS-ec-sec1", "spark", marks=pytest.mark.slow)],
)
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
    assert counting.counters_equal(got, want) is None, counting.counters_equal(got, want)
    emitted = localrun.last_values(localrun.read_topic(app.plain_bootstrap, app.output))
    assert counting.counters_equal({k: int(v) for k, v in emitted.items()}, want) is None

    # the operator's lag reader, with the same Secrets resolved, reads the secured cluster: no lag
    secrets = {name: dict(data) for name, data in app.secrets.items()}
    ref = lag_scrape.app_ref(model.StreamingApp.from_body(app.body), secrets)
    provisioner = cassandra.Provisioner(connect_timeout=5.0)
    try:
        scraper = lag_scrape.Scraper(
            kafka_offsets=lag_scrape.KafkaOffsets(timeout=5.0),
            cassandra_offsets=lag_scrape.CassandraOffsets(provisioner.session),
            partitions_of=kafka.Inspector(ttl=0.0, timeout=5.0).partitions_sync,
        )
        (measured,) = scraper.scrape([ref]).apps
    finally:
        provisioner.close()
    assert not measured.stale, measured.error
    # the app's end offsets: its input's and those of the repartition topic `count` reads
    repartition = f"{app.app_id}-words-repartition"
    inputs = sum(localrun.end_offsets(app.plain_bootstrap, app.topic).values())
    rekeyed = sum(localrun.end_offsets(app.plain_bootstrap, repartition).values())
    assert inputs == len(lines)
    assert rekeyed > 0
    assert measured.end_total == inputs + rekeyed
    assert {p.topic for p in measured.partitions} == {app.topic, repartition}
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
