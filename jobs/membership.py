"""Kafka consumer-group membership: which input partitions this replica owns right now.

The consumer never fetches records (every assigned partition is paused at once); the batch
loop reads the data (`floe_jobs.kafkaio`). It exists for the group protocol — KIP-848
(`group.protocol=consumer`) when the brokers support it, else classic with the cooperative-sticky
assignor — and to mirror the offsets committed in Cassandra into the group, so
`kafka-consumer-groups`, KEDA and Burrow see the lag.

A thread of its own polls the consumer all the time, so group events are answered at once
instead of after the running batch: a rebalance (classic: every member must rejoin) completes
while batches run, and partitions assigned to this replica are planned by the very next batch
(`wait` wakes idle loops). Revocations still happen only at a batch boundary: each batch loop
(one per lane of stages, see `floe_jobs.lanes`) holds `batch()` around each batch, and a
revocation callback waits until no running batch holds a revoked partition before it gives the
partitions up, so a revoked partition never has a batch of this replica in flight when the next
owner starts. A partition being revoked is left out of batches that start meanwhile, so the wait
is one batch of the lane that reads it, not of every lane. Heartbeats are sent by librdkafka's
own thread; batches are capped well below `max.poll.interval.ms`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from floe_jobs import assignmentcheck
from floe_jobs.config import FloeConfig
from floe_jobs.kafkaio import ISOLATION, with_properties

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


class GroupConfigsRefused(ValueError):
    """The brokers refused the group's session timeout or heartbeat interval as KIP-848 group
    configs: they lie outside the brokers' group.consumer.{min,max}.* bounds."""


def apply_group_configs(admin: AdminClient, cfg: FloeConfig, *, timeout: float = 10.0) -> None:
    """Under KIP-848 the session timeout and heartbeat interval are group configs on the broker
    (librdkafka rejects them client-side): set them on the group with IncrementalAlterConfigs.
    Brokers bound them by group.consumer.{min,max}.{session.timeout,heartbeat.interval}.ms; a
    value outside them raises `GroupConfigsRefused`."""
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
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.INVALID_CONFIG:
                raise GroupConfigsRefused(
                    f"kafka.session_timeout_ms / kafka.heartbeat_interval_ms (spec.shutdown.sessionTimeoutMs / "
                    f"heartbeatIntervalMs of a StreamingApp): the brokers refused {dict(entries)} as KIP-848 group "
                    f"configs of {cfg.group_id}: {error.str()}. Set values within the brokers' "
                    "group.consumer.min/max.session.timeout.ms and group.consumer.min/max.heartbeat.interval.ms, "
                    "lower those bounds on the brokers, or use the classic protocol (kafka.group_protocol, "
                    "spec.kafka.groupProtocol)"
                ) from exc
            raise ValueError(
                f"kafka.session_timeout_ms / kafka.heartbeat_interval_ms: setting {dict(entries)} as group configs "
                f"of {cfg.group_id} failed: {exc}"
            ) from exc
    log.info("Set group configs group=%s %s", cfg.group_id, dict(entries))


def choose_protocol(admin: AdminClient, cfg: FloeConfig) -> str:
    """The group protocol this replica joins with, its KIP-848 group configs set when that is
    the consumer protocol.

    `auto` takes the consumer protocol when the brokers support it and accept the group's
    session timeout and heartbeat interval, else classic: a stock Kafka 4 broker bounds them
    at 45 s and 5 s at least, above Floe's defaults (10 s and 3 s, which keep a handover
    short), and an app that cannot start with its defaults is worse than one on the classic
    protocol. The brokers answer every replica of the app alike, so all choose the same. An
    explicit `consumer` keeps the refusal (`GroupConfigsRefused`), which stops the replica
    with what to change.
    """
    protocol = cfg.kafka.group_protocol
    if protocol == "classic":
        return protocol
    if protocol == "auto" and not broker_supports_kip848(admin):
        return "classic"
    try:
        apply_group_configs(admin, cfg)
    except GroupConfigsRefused as exc:
        if protocol == "consumer":
            raise
        log.warning("Joining with the classic protocol group=%s: %s", cfg.group_id, exc)
        return "classic"
    return "consumer"


def _consumer_conf(cfg: FloeConfig, *, client_id: str, protocol: str) -> dict[str, Any]:
    """The membership consumer's settings: it only joins and commits, never fetches."""
    k = cfg.kafka
    conf: dict[str, Any] = {
        "bootstrap.servers": k.bootstrap_servers,
        **k.security.librdkafka(),
        "group.id": cfg.group_id,
        "client.id": client_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": k.starting_offsets,
        "max.poll.interval.ms": 300_000,
        "enable.partition.eof": False,
        # it fetches nothing (paused), but its offsets and any fetch follow the readers' rule
        "isolation.level": ISOLATION,
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
    return with_properties(conf, cfg, "consumer")


class Membership:
    """A paused confluent-kafka consumer in the app's group, polled by its own thread.

    Batch loops (one thread per lane) use `batch()`, `wait()` and `commit()`; `close()` comes
    after they ended. Every call on the consumer happens on the poll thread (librdkafka blocks some calls, such as
    watermark queries, while another thread polls the same consumer); callbacks run there too."""

    POLL_SECONDS = 0.05
    # how long an asked coordinator may take to describe the group (the request then fails)
    DESCRIBE_TIMEOUT_S = 10.0
    # how long a rejoin waits for its leave's revocation before it subscribes again
    LEAVE_TIMEOUT_S = 10.0

    def __init__(
        self,
        cfg: FloeConfig,
        *,
        topics: Iterable[str],
        client_id: str,
        protocol: str,
        admin: AdminClient | None = None,
        check_every_s: float = 30.0,
    ) -> None:
        """`admin`: a client of the same cluster, which under KIP-848 (`protocol` "consumer")
        compares this member's assignment with the coordinator's every `check_every_s` seconds,
        and soon after a heartbeat timed out (`floe_jobs.assignmentcheck`)."""
        self.cfg = cfg
        self.topics = sorted(set(topics))
        self.protocol = protocol
        self._owned: set[TP] = set()
        # guards _owned, _held, _revoking, _wakers; notified when a batch ends (revocations wait)
        self._lock = threading.Condition()
        # partitions in running batches (a count: two lanes may read the same partition)
        self._held: Counter[TP] = Counter()
        # partitions whose revocation waits for a running batch: no new batch takes them
        self._revoking: set[TP] = set()
        # one wake-up per waiting thread: an assignment change wakes every idle lane
        self._wakers: dict[int, threading.Event] = {}
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._to_commit: dict[TP, int] = {}
        self.rebalances = 0
        self.revoked_log: list[tuple[float, list[TP]]] = []
        # per owned partition, the number of the assignment that gave it to this replica: a
        # partition revoked and assigned again between two batches comes back under a new one
        self._assignments: dict[TP, int] = {}
        self._assigned_count = 0
        self._closed = False
        # comparisons of this member's assignment with the coordinator's, and rejoins they led to
        self.comparisons = 0
        self.rejoins = 0
        self._admin = admin if protocol == "consumer" else None
        heartbeat_s = (cfg.kafka.heartbeat_interval_ms or 5000) / 1000  # the broker's default: 5 s
        self._watch = assignmentcheck.Watch(
            every_s=check_every_s, soon_s=max(1.0, heartbeat_s), tolerance_s=max(5.0, 3 * heartbeat_s)
        )
        self._watch.start(time.monotonic())
        self._describing: Any = None  # the coordinator's answer being waited for
        self._heartbeat_timed_out = False  # set by the log line, read by the poll thread
        conf = _consumer_conf(cfg, client_id=client_id, protocol=protocol)
        self._consumer = Consumer(conf, logger=_ClientLog(self))
        self._subscribe()
        self._thread = threading.Thread(target=self._poll_loop, name="floe-membership", daemon=True)
        self._thread.start()

    def _subscribe(self) -> None:
        self._consumer.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll(self.POLL_SECONDS)
                self._commit_pending()
                self._check_assignment()
            except BaseException as exc:  # handed to the batch loop by wait()/batch()
                self._error = exc
                self._wake_all()
                return

    def _poll(self, timeout: float) -> None:
        msg = self._consumer.poll(timeout)
        err = msg.error() if msg is not None else None
        if err is not None:
            if err.fatal():
                raise KafkaException(err)
            log.warning("Consumer event error=%s", err)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"group membership failed: {self._error}") from self._error

    # callbacks run inside poll(), on the poll thread
    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        added = [(p.topic, p.partition) for p in partitions]
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
        with self._lock:
            self._owned.update(added)
            for tp in added:
                self._assigned_count += 1
                self._assignments[tp] = self._assigned_count
        self.rebalances += 1
        self._wake_all()
        log.info("Assigned partitions=%s owned=%d", sorted(added), len(self._owned))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._release(consumer, partitions, wait=True)

    def _release(self, consumer: Any, partitions: list[TopicPartition], *, wait: bool) -> None:
        removed = [(p.topic, p.partition) for p in partitions]
        with self._lock:
            # a batch boundary: running batches over these partitions commit before they go
            self._revoking.update(removed)
            while wait and any(self._held[tp] for tp in removed) and not self._stop.is_set():
                self._lock.wait(0.5)
            self._owned.difference_update(removed)
            self._revoking.difference_update(removed)
            for tp in removed:
                self._assignments.pop(tp, None)
        # only what the consumer holds: unassigning one it does not hold fails the whole call.
        # Called even with nothing to unassign: inside a rebalance callback, a call not made
        # lets the client unassign every revoked partition itself.
        held = {(p.topic, p.partition) for p in consumer.assignment()}
        consumer.incremental_unassign([p for p in partitions if (p.topic, p.partition) in held])
        self._wake_all()
        self.rebalances += 1
        self.revoked_log.append((time.time(), removed))
        log.info("Revoked partitions=%s owned=%d", sorted(removed), len(self._owned))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The group gave these partitions to others already (this member's session expired, e.g.
        it was paused): they go at once, without waiting for running batches, which see them
        gone (`assignments`) and give up instead of committing (`stagepass.check_owned`)."""
        log.warning("Lost partitions=%s (session expired)", sorted((p.topic, p.partition) for p in partitions))
        self._release(consumer, partitions, wait=False)

    # -- KIP-848: an assignment heard of on one side only (floe_jobs.assignmentcheck) -----------
    def _check_assignment(self) -> None:
        """Ask the coordinator for its view of this member when due, without blocking the poll
        thread, and compare it with the consumer's when it answers."""
        if self._admin is None:
            return
        self._admin.poll(0)  # serves its error callback, whose events would otherwise queue up
        now = time.monotonic()
        if self._heartbeat_timed_out:
            self._heartbeat_timed_out = False
            self._watch.heartbeat_timed_out(now)
        if self._describing is not None:
            # the request's own timeout ends it: no answer comes as a failure
            if self._describing.done():
                answer, self._describing = self._describing, None
                self._compare(answer, now)
            return
        if self._watch.due(now):
            group = self.cfg.group_id
            self._describing = self._admin.describe_consumer_groups(
                [group], request_timeout=self.DESCRIBE_TIMEOUT_S
            )[group]

    def heartbeat_timed_out(self) -> None:
        """A heartbeat got no answer in time (from librdkafka's log, on the poll thread): its
        answer may have held an assignment change that will not be sent again."""
        self._heartbeat_timed_out = True

    def _compare(self, answer: Any, now: float) -> None:
        try:
            group = answer.result(0)
        except KafkaException as exc:
            if isinstance(exc.args[0], KafkaError) and exc.args[0].code() in _REFUSED:
                # a principal that may join a group may describe it; one that may not is told once
                log.warning("Describing the group was refused error=%s: assignments are not compared", exc)
                self._admin = None
                return
            log.debug("Describing the group failed error=%s", exc)
            self._watch.unanswered(now)
            return
        me = self._consumer.memberid()
        member = next((m for m in group.members if m.member_id == me), None)
        if member is None:  # joining, or fenced: its next heartbeat tells
            self._watch.unanswered(now)
            return
        current = [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions]
        target = member.target_assignment
        wanted = None if target is None else [(tp.topic, tp.partition) for tp in target.topic_partitions]
        local = [(tp.topic, tp.partition) for tp in self._consumer.assignment()]
        self.comparisons += 1
        gap = assignmentcheck.out_of_step(local, current, wanted)
        log.debug("Compared with the coordinator's view gap=%s current=%s target=%s", sorted(gap), current, wanted)
        lasted = self._watch.saw(now, gap, self.rebalances)
        if lasted is not None:
            self._rejoin(gap, lasted)

    def _rejoin(self, gap: set[TP], seconds: float) -> None:
        """Leave the group and join it again: the join is a full heartbeat, whose answer is the
        whole assignment. Leaving revokes as a rebalance does (running batches commit first)."""
        log.warning(
            "Assignment out of step with the group coordinator for %.1fs partitions=%s (a heartbeat's "
            "answer was lost): leaving the group and joining again",
            seconds,
            sorted(gap),
        )
        self.rejoins += 1
        self._consumer.unsubscribe()
        deadline = time.monotonic() + self.LEAVE_TIMEOUT_S
        while self._consumer.assignment() and not self._stop.is_set() and time.monotonic() < deadline:
            self._poll(self.POLL_SECONDS)
        # partitions still counted as owned here that the consumer does not hold (never told of them)
        leftover = [TopicPartition(t, p) for t, p in self.owned]
        if leftover:
            self._release(self._consumer, leftover, wait=True)
        if not self._stop.is_set():
            self._subscribe()

    @property
    def owned(self) -> list[TP]:
        with self._lock:
            return sorted(self._owned)

    def assignments(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The assignment number under which this replica owns each of `tps` (owned ones only).

        Two batches over a partition with the same number had no other owner between them, which
        is what lets `floe_jobs.statecache` keep what it knows of the partition's state rows."""
        with self._lock:
            return {tp: self._assignments[tp] for tp in tps if tp in self._assignments}

    @property
    def busy(self) -> bool:
        """Whether a batch is running."""
        with self._lock:
            return any(self._held.values())

    @contextlib.contextmanager
    def batch(self, topics: Collection[str] | None = None) -> Iterator[list[TP]]:
        """Hold a batch over the partitions of `topics` (None: all) owned now, yielded sorted:
        their revocation waits for the block to end. Partitions being revoked are left out."""
        self._raise_error()
        with self._lock:
            owned = sorted(
                tp for tp in self._owned if tp not in self._revoking and (topics is None or tp[0] in topics)
            )
            self._held.update(owned)
        try:
            yield owned
        finally:
            with self._lock:
                self._held.subtract(owned)
                self._held += Counter()  # drop the zero counts
                self._lock.notify_all()

    def _waker(self) -> threading.Event:
        with self._lock:
            return self._wakers.setdefault(threading.get_ident(), threading.Event())

    def _wake_all(self) -> None:
        with self._lock:
            wakers = list(self._wakers.values())
        for event in wakers:
            event.set()

    def wake(self) -> None:
        """End every idle `wait` now: the replica is stopping, and an idle lane that slept out its
        poll interval would hold the drain, and the leave, back by up to that interval."""
        self._wake_all()

    def wait(self, timeout: float) -> None:
        """Idle (the calling thread) until the assignment changes, `wake` is called or `timeout`
        seconds pass."""
        self._raise_error()
        event = self._waker()
        if event.wait(timeout):
            event.clear()

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Mirror Cassandra's committed positions into the group (best effort, asynchronous: the
        poll thread sends them, as it makes every call on the consumer)."""
        with self._lock:
            self._to_commit.update(offsets)

    def _commit_pending(self) -> None:
        with self._lock:
            pending, self._to_commit = self._to_commit, {}
            owned = set(self._owned)
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(pending.items()) if (t, p) in owned]
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
        self._stop.set()
        self._thread.join(timeout=10)
        if leave:
            self._consumer.close()
            log.info("Left group group=%s", self.cfg.group_id)
        else:
            # Without a LeaveGroup the coordinator keeps this member until its session expires.
            # librdkafka always leaves on close() unless the member is static (classic protocol),
            # so a dynamic member simply stops: the process exits without closing.
            log.info("Stopped without leaving group=%s (session timeout applies)", self.cfg.group_id)


_REFUSED = (
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
)


class _ClientLog:
    """librdkafka's log lines, passed on to this module's logger; a heartbeat that timed out
    also tells the membership to compare assignments soon."""

    def __init__(self, member: Membership) -> None:
        self._member = member

    def log(self, level: int, fmt: str, *args: Any) -> None:
        log.log(level, fmt, *args)
        if len(args) == 3 and assignmentcheck.heartbeat_timed_out(str(args[0]), str(args[2])):
            self._member.heartbeat_timed_out()
