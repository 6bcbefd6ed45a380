"""What the operator needs to know from Kafka before a rollout: do the topics exist, how many partitions.

One admin client per cluster, and one metadata answer per cluster shared by every app for
a few seconds, so a resync of hundreds of apps costs a handful of metadata requests.
Metadata is listed for the whole cluster rather than per topic, so asking never
auto-creates a topic.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from floe_jobs import kafkaaccess, kafkaprops, kafkasec
from floe_operator import model


class KafkaUnavailable(Exception):
    """The brokers could not be reached or did not answer in time."""


class CredentialsRejected(KafkaUnavailable):
    """The brokers refused the app's credentials or certificates (or its CA refused theirs);
    `tls`: in the TLS handshake, not in SASL authentication."""

    def __init__(self, message: str, *, tls: bool = False) -> None:
        super().__init__(message)
        self.tls = tls


@dataclass(frozen=True)
class Target:
    """How to reach one Kafka cluster, with secret material resolved: the same security shape
    the runtime configures its clients from (`floe_jobs.kafkasec`)."""

    bootstrap_servers: str
    security: kafkasec.KafkaSecurity = field(default_factory=kafkasec.KafkaSecurity)
    # the app's spec.kafka.properties that concern reaching the brokers (`kafkaprops.for_client`
    # "operator": socket.*, broker.address.family, ...), sorted pairs: a Target stays hashable,
    # and apps that set none share one client per cluster
    properties: tuple[tuple[str, str], ...] = ()

    def client_config(self) -> dict[str, Any]:
        """Settings of the operator's clients of this cluster. librdkafka logs only critical
        lines: a cluster that cannot be reached would otherwise log a line per broker and
        reconnect for as long as the operator runs. What goes wrong reaches the app's status
        (KafkaUnavailable and the credential and TLS reasons) through errors and `error_cb`."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "log_level": 2,
            **dict(self.properties),
            **self.security.librdkafka(),
        }


def target_of(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> Target:
    kafka = app.spec.kafka
    sec = kafka.security
    username = password = ca = cert = key = None
    if sec.sasl is not None:
        ref = sec.sasl.credentials_secret_ref
        username = secrets.get(ref.name, {}).get(ref.username_key)
        password = secrets.get(ref.name, {}).get(ref.password_key)
    if sec.tls is not None:
        if sec.tls.ca_secret_ref is not None:
            ca = secrets.get(sec.tls.ca_secret_ref.name, {}).get(sec.tls.ca_secret_ref.key)
        if sec.tls.client_cert_secret_ref is not None:
            cc = sec.tls.client_cert_secret_ref
            cert = secrets.get(cc.name, {}).get(cc.cert_key)
            key = secrets.get(cc.name, {}).get(cc.key_key)
    return Target(
        bootstrap_servers=kafka.bootstrap_servers,
        properties=tuple(sorted(kafkaprops.for_client(kafka.properties, "operator").items())),
        security=kafkasec.KafkaSecurity(
            protocol=sec.protocol,
            sasl_mechanism=sec.sasl.mechanism if sec.sasl else None,
            username=username,
            password=password,
            ca_pem=ca,
            cert_pem=cert,
            key_pem=key,
            verify_hostname=sec.tls.verify_hostname if sec.tls is not None else True,
        ),
    )


class Inspector:
    """Partition counts of topics, cached per cluster for `ttl` seconds."""

    def __init__(self, *, ttl: float = 15.0, timeout: float = 5.0) -> None:
        self._ttl = ttl
        self._timeout = timeout
        self._admins: dict[Target, Any] = {}
        self._refused: dict[Target, kafkaaccess.ErrorWatch] = {}
        self._cache: dict[Target, tuple[float, dict[str, int]]] = {}
        self._locks: dict[Target, threading.Lock] = {}
        self._guard = threading.Lock()

    def _admin(self, target: Target) -> Any:
        """One admin client per cluster, kept for the operator's lifetime."""
        from confluent_kafka.admin import AdminClient

        with self._guard:
            admin = self._admins.get(target)
            if admin is None:
                watch = self._refused[target] = kafkaaccess.ErrorWatch()
                admin = self._admins[target] = AdminClient(target.client_config(), error_cb=watch)
            return admin

    def _topics(self, target: Target) -> dict[str, int]:
        from confluent_kafka import KafkaException

        with self._guard:
            lock = self._locks.setdefault(target, threading.Lock())
        with lock:
            cached = self._cache.get(target)
            if cached is not None and time.monotonic() - cached[0] < self._ttl:
                return cached[1]
            admin = self._admin(target)
            try:
                metadata = admin.list_topics(timeout=self._timeout)
            except KafkaException as exc:
                admin.poll(0)  # serves error_cb: an authentication or TLS failure behind the transport error
                watch = self._refused[target]
                if watch.refused is not None:
                    error, watch.refused = watch.refused, None
                    raise CredentialsRejected(
                        kafkaaccess.refusal(target.security, bootstrap=target.bootstrap_servers, error=error),
                        tls=kafkaaccess.tls_refused(error),
                    ) from exc
                raise KafkaUnavailable(f"cannot list topics at {target.bootstrap_servers}: {exc}") from exc
            topics = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}
            self._cache[target] = (time.monotonic(), topics)
            return topics

    def partitions_sync(self, target: Target, topics: list[str]) -> dict[str, int | None]:
        known = self._topics(target)
        return {topic: known.get(topic) for topic in topics}

    async def partitions(self, target: Target, topics: list[str]) -> dict[str, int | None]:
        """Topic → partition count, None for a topic that does not exist."""
        cached = self._cache.get(target)
        if cached is not None and time.monotonic() - cached[0] < self._ttl:
            # No worker thread for a fresh answer: under a burst they are all busy with API calls.
            return {topic: cached[1].get(topic) for topic in topics}
        return await asyncio.to_thread(self.partitions_sync, target, topics)

    def delete_topics_sync(self, target: Target, topics: list[str]) -> None:
        from confluent_kafka import KafkaError, KafkaException

        if not topics:
            return
        futures = self._admin(target).delete_topics(topics, operation_timeout=30, request_timeout=self._timeout)
        for topic, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaUnavailable(f"cannot delete topic {topic} at {target.bootstrap_servers}: {exc}") from exc
        self.forget(target)

    async def delete_topics(self, target: Target, topics: list[str]) -> None:
        """Delete topics; ones already gone are fine."""
        await asyncio.to_thread(self.delete_topics_sync, target, topics)

    def forget(self, target: Target) -> None:
        """Drop the cached answer, e.g. after a topic was reported missing."""
        self._cache.pop(target, None)

    # --- offset reset (spec.offsetReset) ---------------------------------------------------

    def _partitions_of(self, target: Target, topics: list[str]) -> list[tuple[str, int]]:
        counts = self._topics(target)
        return [(t, p) for t in topics for p in range(counts.get(t, 0))]

    def watermarks_sync(self, target: Target, topics: list[str]) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) → (log start, log end) of every partition of `topics`; the end is
        the last stable offset (below any open transaction), the end the replicas plan to."""
        tps = self._partitions_of(target, topics)
        low, high = self._list_offsets(target, tps, "earliest"), self._list_offsets(target, tps, "latest")
        return {tp: (low[tp], high[tp]) for tp in low}

    def offsets_at_sync(self, target: Target, topics: list[str], timestamp_ms: int) -> dict[tuple[str, int], int]:
        """(topic, partition) → the first offset whose record timestamp is at or after
        `timestamp_ms`; the log end where no record is that late (Kafka answers -1 there)."""
        found = self._list_offsets(target, self._partitions_of(target, topics), "timestamp", timestamp_ms)
        late = [tp for tp, offset in found.items() if offset < 0]
        return found | self._list_offsets(target, late, "latest")

    def _list_offsets(
        self, target: Target, tps: list[tuple[str, int]], kind: str, timestamp_ms: int = 0
    ) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        if not tps:
            return {}
        spec = OffsetSpec.for_timestamp(timestamp_ms) if kind == "timestamp" else getattr(OffsetSpec, kind)()
        # as the replicas read (read_committed): "latest" is the last stable offset, so a reset
        # never lands inside an open transaction that the replicas' plans stop below
        futures = self._admin(target).list_offsets(
            {TopicPartition(t, p): spec for t, p in tps},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=self._timeout,
        )
        try:
            return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot list offsets at {target.bootstrap_servers}: {exc}") from exc

    def group_members_sync(self, target: Target, group: str) -> int:
        """Members of consumer group `group` now (0 for a group that does not exist)."""
        from confluent_kafka import KafkaError, KafkaException

        future = self._admin(target).describe_consumer_groups([group], request_timeout=self._timeout)[group]
        try:
            return len(future.result().members)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return 0
            raise KafkaUnavailable(f"cannot describe group {group} at {target.bootstrap_servers}: {exc}") from exc

    def commit_group_sync(self, target: Target, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Set the group's committed offsets (it must have no member), as the runtime mirrors
        Cassandra's positions into it: tools that read the group (KEDA) then agree at once."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = ConsumerGroupTopicPartitions(group, partitions)
        try:
            self._admin(target).alter_consumer_group_offsets([request], request_timeout=self._timeout)[group].result()
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot set offsets of group {group} at {target.bootstrap_servers}: {exc}") from exc
