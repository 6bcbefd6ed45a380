"""Which failures mean "Cassandra or Kafka is unreachable", and how a replica waits them out.

A replica can do nothing useful while its offsets store or its brokers are down, and nothing
it could do would help: restarting only adds a Spark start (15-90 s) to the outage and, in
Kubernetes, a crash-loop backoff that outlasts it. So a batch that fails because a dependency
is unreachable is retried, with a short capped backoff and no limit, while the replica reports
itself not ready (`/readyz` 503, so a rollout waits and a Service stops routing its queries)
and stays alive (`/healthz` keeps passing: the loop turns). Any other failure — a bug in a
stage, a record the job cannot handle — is still counted by the runner, which gives up after a
few, so that people see it.

`unavailable` classifies an error by walking its causes: the Cassandra driver's "no replica
answered" family (NoHostAvailable, OperationTimedOut, Unavailable, read/write timeouts, a
connection lost), the stores' `StoreUnavailableError`, librdkafka's transport, timeout and
leadership codes, and the same failures reported from inside a Spark job (Spark's Kafka
connector, or a Python worker's Cassandra session), which only its text names. A cluster that
answers but refuses the credentials or the TLS handshake is not unreachable: waiting would not
fix it, so such a failure counts as a failed batch and the replica stops (the driver reports
every node's refusal inside a NoHostAvailable, and librdkafka's authentication codes are not
among the codes below).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from cassandra import (
    CoordinationFailure,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from confluent_kafka import KafkaError, KafkaException
from floe_jobs.stores.config import refused_by_every_node
from floe_jobs.stores.errors import StoreUnavailableError

log = logging.getLogger("floe_jobs")

CASSANDRA = "cassandra"
KAFKA = "kafka"

CASSANDRA_ERRORS: tuple[type[BaseException], ...] = (
    NoHostAvailable,
    OperationTimedOut,
    Unavailable,
    ReadTimeout,
    WriteTimeout,
    CoordinationFailure,
    ConnectionException,
    StoreUnavailableError,
)

# librdkafka codes that say "no broker (or no leader, no coordinator) answered in time": each
# goes away by itself once the brokers are back. An unknown partition is among them: a broker
# that shuts down takes the client's metadata with it, and a restarted one answers so until it
# has loaded its logs (a deleted input topic lands there too, and is then logged every 30 s by
# name). Codes for bad requests, authorization or a fenced member are not here: waiting would
# not fix them.
KAFKA_CODES: frozenset[int] = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._TIMED_OUT_QUEUE,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError._UNKNOWN_BROKER,
        KafkaError._DESTROY_BROKER,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)

# What a failed Spark job says when the failure is one of the above: Spark wraps the Java
# exception of its Kafka connector, or a Python worker's traceback, in its own error's text.
SPARK_TEXTS: tuple[tuple[str, str], ...] = (
    ("org.apache.kafka.common.errors.TimeoutException", KAFKA),
    ("org.apache.kafka.common.errors.DisconnectException", KAFKA),
    ("org.apache.kafka.common.errors.NetworkException", KAFKA),
    ("org.apache.kafka.common.errors.NotLeaderOrFollowerException", KAFKA),
    ("cassandra.cluster.NoHostAvailable", CASSANDRA),
    ("cassandra.OperationTimedOut", CASSANDRA),
    ("cassandra.Unavailable", CASSANDRA),
    ("StoreUnavailableError", CASSANDRA),
)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the errors it was raised from or during, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # `raise ... from None` hides the context: it was not the cause
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _kafka_code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return int(exc.args[0].code())
    return None


def unavailable(exc: BaseException) -> str | None:
    """The dependency (`cassandra` or `kafka`) whose being unreachable `exc` reports, or None for
    any other failure."""
    for e in _causes(exc):
        if isinstance(e, NoHostAvailable) and refused_by_every_node(e):
            return None
        if isinstance(e, CASSANDRA_ERRORS):
            return CASSANDRA
        code = _kafka_code(e)
        if code is not None and code in KAFKA_CODES:
            return KAFKA
        if type(e).__module__.startswith(("py4j", "pyspark")):
            text = str(e)
            for needle, dependency in SPARK_TEXTS:
                if needle in text:
                    return dependency
    return None


class Readiness(Protocol):
    """Where a wait is reported (`floe_jobs.health.Health`)."""

    def waiting_for(self, loop: str, dependency: str | None) -> None: ...


class Wait:
    """One batch loop's wait for an unreachable dependency: the delay before each retry, the log
    lines, and the readiness it reports. Single-threaded use (its loop's thread)."""

    def __init__(
        self,
        loop: str,
        *,
        readiness: Readiness,
        first_delay: float = 1.0,
        max_delay: float = 5.0,
        log_every: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.loop = loop
        self.readiness = readiness
        self.first_delay = first_delay
        # short: the retry after the dependency is back is what the outage costs on top
        self.max_delay = max_delay
        self.log_every = log_every
        self.clock = clock
        self.dependency: str | None = None
        self.since = 0.0
        self.attempts = 0
        self._logged_at = 0.0

    def failed(self, dependency: str, error: BaseException) -> float:
        """A batch failed because `dependency` is unreachable: the seconds to wait before the next
        attempt. Logs when the wait starts (or moves to another dependency), then every
        `log_every` seconds."""
        now = self.clock()
        if self.dependency is None:
            self.since = now
            self.attempts = 0
        self.attempts += 1
        if dependency != self.dependency:
            self.dependency = dependency
            self._logged_at = now
            self.readiness.waiting_for(self.loop, dependency)
            log.warning(
                "Waiting for dependency=%s lane=%s error=%s; not ready, the plan in flight is retried",
                dependency,
                self.loop,
                _short(error),
            )
        elif now - self._logged_at >= self.log_every:
            self._logged_at = now
            log.warning(
                "Still waiting for dependency=%s lane=%s seconds=%.0f attempts=%d error=%s",
                dependency,
                self.loop,
                now - self.since,
                self.attempts,
                _short(error),
            )
        return float(min(self.max_delay, self.first_delay * 2 ** (self.attempts - 1)))

    def succeeded(self) -> None:
        """A batch (or an idle pass) went through: the wait, if any, is over."""
        if self.dependency is None:
            return
        log.info(
            "Dependency available again dependency=%s lane=%s seconds=%.1f attempts=%d",
            self.dependency,
            self.loop,
            self.clock() - self.since,
            self.attempts,
        )
        self.dependency = None
        self.readiness.waiting_for(self.loop, None)


def _short(error: BaseException, limit: int = 300) -> str:
    """An error on one line, cut: driver errors can list every host with a traceback each."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RepeatedClientErrors(logging.Filter):
    """Passes one line of each librdkafka facility per client every `every` seconds.

    While a broker is down, librdkafka logs every failed connect attempt of every client (a
    replica has a reader, a sink per lane and the group member), many lines a minute per client,
    which buried the one line that says the replica waits. The first line of a kind
    goes through at once; the next one after `every` seconds says how many were left out.
    """

    def __init__(self, *, every: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # confluent-kafka logs librdkafka's lines as ("%s [%s] %s", facility, client, text)
        if record.msg != "%s [%s] %s" or not isinstance(args, tuple) or len(args) != 3:
            return True
        key = (str(args[0]), str(args[1]))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            return False
        self._last[key] = now
        dropped = self._dropped.pop(key, 0)
        if dropped:
            record.msg = "%s [%s] %s (%d more like it in the last %.0f s not logged)"
            record.args = (*args, dropped, now - (last or now))
        return True
