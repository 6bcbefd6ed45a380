"""Kafka consumer-group membership: which input partitions this replica owns right now.

The consumer never fetches records (every assigned partition is paused at once); Spark reads
the data. It exists for the group protocol — KIP-848 (`group.protocol=consumer`) when the
brokers support it, else classic with the cooperative-sticky assignor — and to mirror the
offsets committed in Cassandra into the group, so `kafka-consumer-groups`, KEDA and Burrow see
the lag.

`poll()` is called by the batch loop between batches only, so assignment callbacks always run
at a batch boundary: a revoked partition has no batch in flight when it is handed over, and a
newly assigned one is planned from its stored offsets in the next batch. Heartbeats are sent
by librdkafka's own thread and do not depend on the loop; batches are capped well below
`max.poll.interval.ms`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from floe_jobs.config import FloeConfig
from floe_jobs.planning import Watermarks

log = logging.getLogger(__name__)

TP = tuple[str, int]


def broker_supports_kip848(admin: AdminClient, *, timeout: float = 10.0) -> bool:
    """True when the brokers list groups by type (ListGroups v5, Kafka 3.8+, where KIP-848 lives).

    librdkafka exposes no ApiVersions call; a typed group listing is the cheapest request that
    only KIP-848-era brokers answer.
    """
    try:
        from confluent_kafka import ConsumerGroupType

        fut = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}, request_timeout=timeout)
        fut.result()
        return True
    except Exception as exc:
        log.info("Broker does not take KIP-848 group listing error=%s; using the classic protocol", exc)
        return False


def apply_group_configs(admin: AdminClient, cfg: FloeConfig, *, timeout: float = 10.0) -> None:
    """Under KIP-848 the session timeout and heartbeat interval are group configs on the broker
    (librdkafka rejects them client-side): set them on the group with IncrementalAlterConfigs.
    Brokers bound them by group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = []
    if cfg.kafka.session_timeout_ms:
        entries.append(("consumer.session.timeout.ms", cfg.kafka.session_timeout_ms))
    if cfg.kafka.heartbeat_interval_ms:
        entries.append(("consumer.heartbeat.interval.ms", cfg.kafka.heartbeat_interval_ms))
    if not entries:
        return
    resource = ConfigResource(
        ResourceType.GROUP,
        cfg.group_id,
        incremental_configs=[
            ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET) for name, value in entries
        ],
    )
    for fut in admin.incremental_alter_configs([resource], request_timeout=timeout).values():
        try:
            fut.result()
        except Exception as exc:
            raise ValueError(
                f"kafka.session_timeout_ms / kafka.heartbeat_interval_ms: the brokers refused {dict(entries)} "
                f"as group configs of {cfg.group_id}: {exc}"
            ) from exc
    log.info("Set group configs group=%s %s", cfg.group_id, dict(entries))


class Membership:
    """A paused confluent-kafka consumer in the app's group. Single-threaded use (the batch loop)."""

    def __init__(self, cfg: FloeConfig, *, topics: Iterable[str], client_id: str, protocol: str) -> None:
        self.cfg = cfg
        self.topics = sorted(set(topics))
        self.protocol = protocol
        self._owned: set[TP] = set()
        self._lock = threading.Lock()
        self.rebalances = 0
        self.assigned_once = False
        self.last_rebalance_at = 0.0
        self.revoked_log: list[tuple[float, list[TP]]] = []
        self._closed = False
        k = cfg.kafka
        conf: dict[str, Any] = {
            "bootstrap.servers": k.bootstrap_servers,
            "group.id": cfg.group_id,
            "client.id": client_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": k.starting_offsets,
            "max.poll.interval.ms": 300_000,
            "enable.partition.eof": False,
            "group.protocol": protocol,
        }
        if protocol == "classic":
            conf["partition.assignment.strategy"] = "cooperative-sticky"
            if k.session_timeout_ms:
                conf["session.timeout.ms"] = k.session_timeout_ms
            if k.heartbeat_interval_ms:
                conf["heartbeat.interval.ms"] = k.heartbeat_interval_ms
        if k.instance_id:
            conf["group.instance.id"] = k.instance_id
        conf.update(k.extra)
        self._consumer = Consumer(conf, logger=log)
        self._consumer.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # callbacks run inside poll(), on the loop's thread
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        added = [(p.topic, p.partition) for p in partitions]
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        with self._lock:
            self._owned.update(added)
        self.assigned_once = True
        self.rebalances += 1
        self.last_rebalance_at = time.time()
        log.info("Assigned partitions=%s owned=%d", sorted(added), len(self._owned))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        removed = [(p.topic, p.partition) for p in partitions]
        with self._lock:
            self._owned.difference_update(removed)
        consumer.incremental_unassign(partitions)
        self.rebalances += 1
        self.last_rebalance_at = time.time()
        self.revoked_log.append((time.time(), removed))
        log.info("Revoked partitions=%s owned=%d", sorted(removed), len(self._owned))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        log.warning("Lost partitions=%s (session expired)", sorted((p.topic, p.partition) for p in partitions))
        self._on_revoke(consumer, partitions)

    @property
    def owned(self) -> list[TP]:
        with self._lock:
            return sorted(self._owned)

    def poll(self, timeout: float) -> None:
        """Serve callbacks and group events; returns after `timeout` seconds at most."""
        msg = self._consumer.poll(timeout)
        err = msg.error() if msg is not None else None
        if err is not None:
            if err.fatal():
                raise KafkaException(err)
            log.warning("Consumer event error=%s", err)

    def watermarks(self, tps: Iterable[TP], *, timeout: float = 10.0) -> dict[TP, Watermarks]:
        out: dict[TP, Watermarks] = {}
        for topic, partition in tps:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
            out[(topic, partition)] = Watermarks(low=low, high=high)
        return out

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Mirror Cassandra's committed positions into the group (best effort, asynchronous)."""
        owned = set(self.owned)
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items()) if (t, p) in owned]
        if not tps:
            return
        try:
            self._consumer.commit(offsets=tps, asynchronous=True)
        except KafkaException as exc:
            log.warning("Group offset commit failed error=%s (Cassandra holds the offsets)", exc)

    def close(self, *, leave: bool) -> None:
        """Leave the group at once (leave=True), or drop the connection and let the session expire."""
        if self._closed:
            return
        self._closed = True
        if leave:
            self._consumer.close()
            log.info("Left group group=%s", self.cfg.group_id)
        else:
            # Without a LeaveGroup the coordinator keeps this member until its session expires.
            # librdkafka always leaves on close() unless the member is static (classic protocol),
            # so a dynamic member simply stops: the process exits without closing.
            log.info("Stopped without leaving group=%s (session timeout applies)", self.cfg.group_id)
