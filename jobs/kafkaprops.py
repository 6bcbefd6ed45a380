"""Kafka client properties a StreamingApp sets (`spec.kafka.properties`): which keys it may not
set, and which of Floe's clients each key reaches.

Floe owns the settings its guarantees rest on (group membership, offsets, isolation, idempotent
acknowledged writes, the partitioner both sinks share) and the security settings, whose secret
parts come only from Secrets through `spec.kafka.security` (`floe_jobs.kafkasec`). Everything
else passes through to librdkafka, which refuses a key it does not know when the runtime starts
(`problems`).

`DENIED` and `DENIED_PATTERNS` are the one list. The CRD's CEL rules on the map are generated
from it (`cel_rules`, written into crds/streamingapp.yaml by `python -m floe_stack.crdrules`,
and a unit test fails while the CRD differs), so admission refuses what the runtime's config
validation (`floe_jobs.config`) refuses: the runtime's check is the last line of defence for a
config that did not come through the API server.

What each client gets (`for_client`): the runtime's group member and range readers take the
consumer's keys, its producer the producer's, admin clients neither role's; the operator's own
clients (topic checks, offset resets, the lag scrape) take only the keys about reaching the
brokers (`OPERATOR_PREFIXES`), never `client.id`: they serve many apps. A `client.id` is a
prefix of every runtime client's id (`client_id`), as Kafka Streams treats it, so the clients of
one replica stay told apart. Spark's Kafka source and sink get the same keys `kafka.`-prefixed
(`java`); the Java client ignores, with a warning, a librdkafka-only key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

Role = Literal["consumer", "producer", "admin", "operator"]

MAX_PROPERTIES = 64
MAX_KEY_LENGTH = 128
MAX_VALUE_LENGTH = 4096

_MEMBERSHIP = "Floe runs the group membership (leave on close, drained shutdown)"
_OFFSETS = "offsets are committed with the state in Cassandra, exactly once"

DENIED: dict[str, str] = {
    "bootstrap.servers": "set spec.kafka.bootstrapServers",
    "metadata.broker.list": "set spec.kafka.bootstrapServers",
    "group.id": "set spec.kafka.consumerGroup",
    "group.instance.id": _MEMBERSHIP,
    "group.protocol": "set spec.kafka.groupProtocol",
    "group.protocol.type": "set spec.kafka.groupProtocol",
    "group.remote.assignor": "set spec.kafka.groupProtocol",
    "partition.assignment.strategy": "set spec.kafka.groupProtocol",
    "session.timeout.ms": "set spec.shutdown.sessionTimeoutMs",
    "heartbeat.interval.ms": "set spec.shutdown.heartbeatIntervalMs",
    "max.poll.interval.ms": _MEMBERSHIP,
    "enable.partition.eof": _MEMBERSHIP,
    "enable.auto.commit": _OFFSETS,
    "enable.auto.offset.store": _OFFSETS,
    "auto.commit.interval.ms": _OFFSETS,
    "auto.offset.reset": "set spec.kafka.startingOffsets (or spec.offsetReset)",
    "isolation.level": "Floe reads committed records only (records of aborted transactions are never applied)",
    "enable.idempotence": "Floe's producers are idempotent with acks=all",
    "acks": "Floe's producers are idempotent with acks=all",
    "request.required.acks": "Floe's producers are idempotent with acks=all",
    "transactional.id": "Floe's output is not transactional (at-least-once, see docs/runtime.md)",
    "partitioner": "Floe partitions keyed records as Kafka's Java producer does (murmur2), so both sinks agree",
    "delivery.report.only.error": "Floe's producer reports failed deliveries only",
    "key.serializer": "records are bytes: the job encodes and decodes them",
    "value.serializer": "records are bytes: the job encodes and decodes them",
    "key.deserializer": "records are bytes: the job encodes and decodes them",
    "value.deserializer": "records are bytes: the job encodes and decodes them",
    "interceptor.classes": "no client code is loaded from properties",
    "plugin.library.paths": "no client code is loaded from properties",
    "security.protocol": "set spec.kafka.security.protocol",
}
"""Keys Floe owns: key → what to use instead."""

_CREDENTIALS = "credentials and TLS material come only from Secrets"
DENIED_PATTERNS: tuple[tuple[Literal["prefix", "suffix", "contains"], str, str], ...] = (
    ("prefix", "sasl.", f"set spec.kafka.security.sasl ({_CREDENTIALS})"),
    ("prefix", "ssl.", f"set spec.kafka.security.tls ({_CREDENTIALS})"),
    ("prefix", "ssl_", f"set spec.kafka.security.tls ({_CREDENTIALS})"),
    ("prefix", "https.", f"set spec.kafka.security ({_CREDENTIALS})"),
    ("prefix", "enable.ssl.", "set spec.kafka.security.tls (verifyHostname)"),
    ("prefix", "enable.sasl.", "set spec.kafka.security.sasl"),
    ("contains", "password", _CREDENTIALS),
    ("contains", "secret", _CREDENTIALS),
    ("suffix", ".location", f"no file is read from properties ({_CREDENTIALS})"),
    ("suffix", "_cb", "client callbacks are Floe's"),
    ("suffix", "logger", "client callbacks are Floe's"),
    ("prefix", "on_", "client callbacks are Floe's"),
)
"""Families of keys, matched on the lower-cased key: (how, text, what to use instead)."""

CONSUMER_ONLY_PREFIXES = (
    "fetch.",
    "queued.",
    "max.partition.fetch.bytes",
    "check.crcs",
    "client.rack",
    "coordinator.query.interval.ms",
    "consume.callback.max.messages",
)
"""librdkafka's consumer-only keys (CONFIGURATION.md, column C): not given to producers or
admin clients, which would log a warning for each."""

PRODUCER_ONLY_PREFIXES = (
    "compression.",
    "compression.codec",
    "linger.ms",
    "queue.buffering.",
    "batch.",
    "message.send.max.retries",
    "retries",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "request.timeout.ms",
    "sticky.partitioning.linger.ms",
    "max.in.flight",
    "transaction.timeout.ms",
)
"""librdkafka's producer-only keys (column P): not given to consumers or admin clients."""

OPERATOR_PREFIXES = (
    "socket.",
    "broker.address.",
    "broker.version.fallback",
    "api.version.",
    "client.dns.lookup",
    "connections.max.idle.ms",
    "reconnect.backoff.",
    "metadata.max.age.ms",
    "topic.metadata.",
    "resolve.canonical.bootstrap.servers.only",
)
"""Keys about reaching the brokers: the only ones the operator's clients of the app's cluster take."""


def refusal(key: str) -> str | None:
    """Why `spec.kafka.properties.<key>` may not be set and what to use instead, or None."""
    lowered = key.lower()
    if lowered in DENIED:
        return f"spec.kafka.properties.{key} is owned by Floe: {DENIED[lowered]}"
    for how, text, instead in DENIED_PATTERNS:
        hit = {
            "prefix": lowered.startswith(text),
            "suffix": lowered.endswith(text),
            "contains": text in lowered,
        }[how]
        if hit:
            return f"spec.kafka.properties.{key} may not be set: {instead}"
    return None


def refusals(props: Iterable[str]) -> list[str]:
    """`refusal` of every key that has one, in key order."""
    return [r for r in (refusal(k) for k in sorted(props)) if r is not None]


def _matches(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.startswith(prefixes)


def for_client(props: Mapping[str, str], role: Role) -> dict[str, str]:
    """The properties one kind of client takes (see the module docstring); `client.id` is left
    out: it is applied by `client_id`."""
    out: dict[str, str] = {}
    for key, value in props.items():
        if key == "client.id":
            continue
        consumer_only = _matches(key, CONSUMER_ONLY_PREFIXES)
        producer_only = _matches(key, PRODUCER_ONLY_PREFIXES)
        takes = {
            "consumer": not producer_only,
            "producer": not consumer_only,
            "admin": not (consumer_only or producer_only),
            "operator": _matches(key, OPERATOR_PREFIXES),
        }[role]
        if takes:
            out[key] = value
    return out


def client_id(props: Mapping[str, str], own: str) -> str:
    """A runtime client's id: Floe's own (`own`), after the app's `client.id` prefix when set."""
    prefix = props.get("client.id")
    return f"{prefix}-{own}" if prefix else own


def java(props: Mapping[str, str], role: Role) -> dict[str, str]:
    """The properties of Spark's Kafka source (`consumer`) or sink (`producer`) as its options."""
    return {f"kafka.{key}": value for key, value in for_client(props, role).items()}


def problems(props: Mapping[str, str]) -> list[str]:
    """Keys librdkafka refuses (unknown, or a value it cannot take), each named as
    `spec.kafka.properties.<key>` with librdkafka's reason; one throwaway client, which connects
    nowhere, and one more per key only when that one refused."""
    if not props:
        return []
    if _probe(dict(props)) is None:
        return []
    out = []
    for key in sorted(props):
        reason = _probe({key: props[key]})
        if reason is not None:
            out.append(f"spec.kafka.properties.{key}: librdkafka refused it: {reason}")
    return out or [f"spec.kafka.properties: librdkafka refused them together: {_probe(dict(props))}"]


def _probe(props: dict[str, str]) -> str | None:
    from confluent_kafka import KafkaException, Producer

    try:
        # log_level 0: a consumer key on this producer is fine here, not worth a warning line
        Producer({**props, "log_level": 0})
    except KafkaException as exc:
        return str(exc.args[0].str())
    return None


def _cel_list(keys: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{k}'" for k in keys) + "]"


def cel_rules() -> list[dict[str, str]]:
    """The CRD's `x-kubernetes-validations` of spec.kafka.properties: one rule for `DENIED`,
    whose message names a refused key with what to use instead, and one per answer of
    `DENIED_PATTERNS`, naming a key that broke it (the first; the next shows once it is gone)."""
    owned = "{" + ", ".join(f"'{key}': '{_cel_text(instead)}'" for key, instead in DENIED.items()) + "}"
    # the first refused key only: building a list of messages (map, join) is estimated far
    # beyond the API server's CEL cost budget, since a map's keys have no length bound
    first = f"self.filter(k, k.lowerAscii() in {owned})[0]"
    rules = [
        {
            "rule": f"self.all(k, !(k.lowerAscii() in {owned}))",
            "messageExpression": (
                f"'spec.kafka.properties.' + {first} + ' is owned by Floe: ' + {owned}[{first}.lowerAscii()]"
            ),
            "message": (
                "spec.kafka.properties may not set a key Floe owns (the refusal says what to set instead): "
                + ", ".join(DENIED)
            ),
        }
    ]
    patterns: dict[str, list[tuple[str, str]]] = {}
    for how, text, instead in DENIED_PATTERNS:
        patterns.setdefault(instead, []).append((how, text))
    call = {"prefix": "startsWith", "suffix": "endsWith", "contains": "contains"}
    for instead, tests in patterns.items():
        hit = " || ".join(f"k.lowerAscii().{call[how]}('{text}')" for how, text in tests)
        shown = ", ".join({"prefix": f"{t}*", "suffix": f"*{t}", "contains": f"*{t}*"}[h] for h, t in tests)
        rules.append(
            {
                "rule": f"self.all(k, !({hit}))",
                "messageExpression": (
                    f"'spec.kafka.properties.' + self.filter(k, {hit})[0] + "
                    f"' may not be set: {_cel_text(instead)}'"
                ),
                "message": f"spec.kafka.properties may not set {shown}: {instead}",
            }
        )
    return rules


def _cel_text(text: str) -> str:
    """`text` inside a single-quoted CEL string literal."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
