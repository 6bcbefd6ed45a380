"""Which failures a replica waits out (an unreachable Cassandra or Kafka) and which it counts
towards giving up; the wait's backoff, log lines and readiness."""

from __future__ import annotations

import logging
import ssl

import pytest
from cassandra import AuthenticationFailed, OperationTimedOut, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable
from confluent_kafka import KafkaError, KafkaException
from floe_jobs import health, kafkaio, outages
from floe_jobs.stores.errors import StoreQueryError, StoreUnavailableError


def _raised(outer: type[Exception], inner: BaseException) -> BaseException:
    """`outer` raised from `inner`, as the runtime's layers wrap driver errors."""
    try:
        raise outer("wrapped") from inner
    except Exception as exc:
        return exc


class Py4JJavaError(Exception):
    """An error of Spark's Java side as the driver sees it: only its text names the cause."""


Py4JJavaError.__module__ = "py4j.protocol"


@pytest.mark.parametrize(
    "error",
    [
        NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": ConnectionRefusedError(111)}),
        OperationTimedOut("errors={}, last_host=127.0.0.2:9042"),
        Unavailable("Cannot achieve consistency level LOCAL_QUORUM", consistency=6, required_replicas=2,
                    alive_replicas=1),
        WriteTimeout("Operation timed out", consistency=6, required_responses=2, received_responses=1, write_type=0),
        StoreUnavailableError("Cassandra unavailable", attempts=3, store="word-count", operation="put"),
        _raised(RuntimeError, NoHostAvailable("Unable to connect to any servers", {})),
        Py4JJavaError("Job aborted ... PythonException: cassandra.cluster.NoHostAvailable: ('Unable to connect')"),
    ],
)
def test_cassandra_unreachable_is_waited_for(error: BaseException) -> None:
    assert outages.unavailable(error) == outages.CASSANDRA


@pytest.mark.parametrize(
    "error",
    [
        KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused")),
        KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
        KafkaException(KafkaError(KafkaError._TIMED_OUT)),
        KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)),
        # what a watermark query answers while the broker shuts down, or has not loaded its logs
        KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Failed to get watermark offsets")),
        _raised(kafkaio.ReadError, KafkaException(KafkaError(KafkaError._TIMED_OUT))),
        _raised(RuntimeError, KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))),
        Py4JJavaError("org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment"),
    ],
)
def test_kafka_unreachable_is_waited_for(error: BaseException) -> None:
    assert outages.unavailable(error) == outages.KAFKA


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a stage bug"),
        StoreQueryError("Cassandra rejected the statement", store="word-count"),
        KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
        KafkaException(KafkaError(KafkaError._FENCED, fatal=True)),
        kafkaio.ReadError("records of topic=t partition=0 in the planned range are gone"),
        Py4JJavaError("java.lang.ArithmeticException: / by zero"),
        _raised(ValueError, ZeroDivisionError()),
        # a cluster that answers and refuses this replica's credentials or certificates
        NoHostAvailable("Unable to connect", {"127.0.0.1:9142": AuthenticationFailed("Provided username and/or "
                                                                                        "password are incorrect")}),
        _raised(RuntimeError, NoHostAvailable("Unable to connect", {
            "127.0.0.1:9142": ssl.SSLCertVerificationError(1, "certificate verify failed: certificate has expired"),
            "127.0.0.2:9142": AuthenticationFailed("bad credentials"),
        })),
        # how the driver reports a CA that did not sign the node's certificate
        NoHostAvailable("Unable to connect", {"127.0.0.1:9142": PermissionError(
            1, "Tried connecting to [...]. Last error: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"
        )}),
        KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED)),
        KafkaException(KafkaError(KafkaError._SSL, "certificate verify failed")),
        Py4JJavaError("org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed"),
    ],
)
def test_other_failures_are_counted(error: BaseException) -> None:
    assert outages.unavailable(error) is None


def test_a_cluster_only_partly_refusing_is_still_waited_for() -> None:
    # one node refused (a restarted node still loading its roles), another is down: wait
    error = NoHostAvailable("Unable to connect", {
        "127.0.0.1:9142": AuthenticationFailed("bad credentials"), "127.0.0.2:9142": ConnectionRefusedError(111),
    })
    assert outages.unavailable(error) == outages.CASSANDRA


def test_context_counts_unless_suppressed() -> None:
    def raise_in_handler(suppress: bool) -> BaseException:
        try:
            try:
                raise NoHostAvailable("down", {})
            except NoHostAvailable:
                if suppress:
                    raise RuntimeError("handled") from None
                raise RuntimeError("while retrying")  # noqa: B904 - the implicit context is the point
        except RuntimeError as exc:
            return exc
        raise AssertionError

    # raised during the handling of a driver error: that error is why it failed
    with_context = raise_in_handler(False)
    assert outages.unavailable(with_context) == outages.CASSANDRA
    # `from None` says the earlier error was not the cause
    assert outages.unavailable(raise_in_handler(True)) is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_wait_backs_off_logs_and_reports_readiness(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    probes = health.Health(stall_seconds=300, app="wc-unit")
    probes.in_group = True
    probes.batch_since_assignment = True
    assert probes.ready()
    wait = outages.Wait("split", readiness=probes, first_delay=1.0, max_delay=5.0, log_every=30.0, clock=clock)
    error = NoHostAvailable("Unable to connect to any servers", {"127.0.0.1:9042": ConnectionRefusedError(111)})
    caplog.set_level(logging.INFO, logger="floe_jobs")

    delays = []
    for _ in range(6):
        delays.append(wait.failed(outages.CASSANDRA, error))
        clock.now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert not probes.ready()
    assert probes.snapshot()["waiting_for"] == ["cassandra"]
    assert health.DEPENDENCY_UNAVAILABLE.labels("wc-unit", "cassandra")._value.get() == 1
    lines = [r.getMessage() for r in caplog.records]
    # one line when the wait starts, one more once log_every (30 s) has passed: not one per retry
    assert len(lines) == 1
    assert lines[0].startswith("Waiting for dependency=cassandra lane=split error=NoHostAvailable:")
    clock.now += 10
    wait.failed(outages.CASSANDRA, error)
    assert [r.getMessage() for r in caplog.records][-1].startswith(
        "Still waiting for dependency=cassandra lane=split seconds=32 attempts=7"
    )

    clock.now += 3.5
    wait.succeeded()
    assert caplog.records[-1].getMessage() == (
        "Dependency available again dependency=cassandra lane=split seconds=35.5 attempts=7"
    )
    assert probes.ready()
    assert health.DEPENDENCY_UNAVAILABLE.labels("wc-unit", "cassandra")._value.get() == 0
    # a success with no wait running logs nothing
    count = len(caplog.records)
    wait.succeeded()
    assert len(caplog.records) == count
    # a new outage starts again from the first delay
    assert wait.failed(outages.KAFKA, KafkaException(KafkaError(KafkaError._TRANSPORT))) == 1.0
    assert probes.snapshot()["waiting_for"] == ["kafka"]


def test_readiness_waits_for_every_waiting_lane() -> None:
    probes = health.Health(stall_seconds=300, app="wc-unit-2")
    probes.in_group = True
    probes.batch_since_assignment = True
    split = outages.Wait("split", readiness=probes)
    count = outages.Wait("count", readiness=probes)
    split.failed(outages.KAFKA, KafkaException(KafkaError(KafkaError._TRANSPORT)))
    count.failed(outages.CASSANDRA, OperationTimedOut("timed out"))
    assert probes.snapshot()["waiting_for"] == ["cassandra", "kafka"]
    split.succeeded()
    assert not probes.ready()
    count.succeeded()
    assert probes.ready()


def test_long_driver_errors_are_cut_to_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="floe_jobs")
    wait = outages.Wait("split", readiness=health.Health(stall_seconds=300))
    wait.failed(outages.CASSANDRA, NoHostAvailable("x\n" * 500, {}))
    message = caplog.records[-1].getMessage()
    assert "\n" not in message
    assert len(message) < 500


def test_repeated_client_lines_pass_once_per_interval() -> None:
    clock = Clock()
    quiet = outages.RepeatedClientErrors(every=30.0, clock=clock)

    def line(client: str, text: str = "Connect to ipv4#127.0.0.1:9092 failed: Connection refused") -> logging.LogRecord:
        return logging.LogRecord("floe_jobs.kafkaio", logging.ERROR, __file__, 1, "%s [%s] %s", ("FAIL", client, text),
                                 None)

    assert quiet.filter(line("r0#consumer-1"))
    assert quiet.filter(line("r0-sink#producer-2"))  # another client: its own first line
    passed = 0
    for _ in range(100):
        clock.now += 0.05
        passed += quiet.filter(line("r0#consumer-1"))
    assert passed == 0
    clock.now += 30
    again = line("r0#consumer-1")
    assert quiet.filter(again)
    assert again.getMessage().endswith("(100 more like it in the last 35 s not logged)")
    # the runtime's own lines are never held back
    own = logging.LogRecord("floe_jobs", logging.WARNING, __file__, 1, "Waiting for dependency=%s", ("kafka",), None)
    assert all(quiet.filter(own) for _ in range(3))
