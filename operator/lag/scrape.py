"""Consumer lag of every StreamingApp, measured in one pass per interval.

An app's lag is that of its input topics and of its own repartition topics, the topics a
stage after a re-key reads (`<app id>-<name>-repartition`): a backlog there is output still
behind while the input is caught up. Which repartition topics an app has is read from its
offsets rows (`appids.repartition_topics`), so their end offsets are asked from the scrape after
the one that first read their rows, with the input's; a topic first named by this scrape's rows
is asked at once in a second request of its own, so it is never missed for an interval.

A scrape asks each Kafka cluster once for the end offsets of every input and repartition
partition of every app (librdkafka sends one ListOffsets request per partition leader, so the cost is one
request per broker whatever the number of apps), reads the committed offsets of all apps
from their keyspaces' offsets tables with concurrent asynchronous queries (one per app: its
rows are one Cassandra partition), and falls back to the Kafka group's committed offsets only for partitions that
have no row yet. Each stage keeps its own position per partition (`floe_jobs.offsets`): a partition's
committed offset is that of the stage furthest behind, so a topic read by two stages shows the
lag of the slower one; rows of an earlier runtime (no stage) count until a stage takes them over.

Time lag is estimated per partition from a bounded ring of recent (end offset, time)
points: the time at which the end offset passed the committed offset is interpolated
between the two points around it, and the lag is now minus that time. A caught-up
partition reads 0; a partition whose committed offset is older than every point is dated by
extrapolating backwards with the ring's average rate (with one point only: that point's age, a
lower bound), flagged as not exact. The estimate is never NaN.

Each partition also gets a status in Burrow's vocabulary over a sliding window of
observations: OK, WARN (lag grew at every observation of the window), STALL (commits keep
coming but the committed offset did not move while lag > 0), STOP (no commit was seen for
longer than the window while lag > 0).

Nothing here talks to the Kubernetes API; errors of one cluster mark only that cluster's
apps stale, and the next scrape retries from scratch.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from floe_operator import appids, cassandra, kafka, model

log = logging.getLogger(__name__)

Status = Literal["OK", "WARN", "STALL", "STOP"]
STATUSES: tuple[Status, ...] = ("OK", "WARN", "STALL", "STOP")
OffsetSource = Literal["cassandra", "kafka", "none"]
Clock = Callable[[], float]
TP = tuple[str, int]

# Bounds of the per-partition memory: points of the end-offset ring, observations of the status window.
RING_POINTS = 64
WINDOW_OBSERVATIONS = 64
# Group offsets read at once in a scrape (each a short-lived consumer with its own connection).
GROUP_READS_IN_FLIGHT = 16
# A group found with no commits for an app's partitions is read again after this long, not at
# every scrape (see KafkaOffsets.many_group_offsets).
EMPTY_GROUP_RECHECK_SECONDS = 60.0


# --- time lag ---------------------------------------------------------------------------


class OffsetRing:
    """Recent (end offset, time) points of one partition, oldest first, at most `size` of them.

    A point is added only when the end offset moved, so the ring keeps the first time each
    offset was seen: a quiet topic keeps its last real point instead of drifting forward.
    """

    __slots__ = ("_offsets", "_times", "size")

    def __init__(self, size: int = RING_POINTS) -> None:
        self.size = size
        self._offsets: deque[int] = deque(maxlen=size)
        self._times: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, offset: int, at: float, *, keep_from: int | None = None) -> None:
        """Record that the end offset reached `offset` at `at`.

        A full ring drops its oldest point, unless `keep_from` (the committed offset, the one
        the ring must still date) lies before the second oldest: then the oldest still brackets
        it, and the interior point whose removal moves the interpolated times least goes instead.
        A consumer far behind thus keeps a ring that reaches back to its committed offset,
        thinned where the rate was steady, rather than one that forgets the records it has yet
        to read and must extrapolate their times.
        """
        if self._offsets:
            last = self._offsets[-1]
            if offset == last:
                return
            if offset < last:
                # Topic recreated or truncated: the old points describe another log.
                self._offsets.clear()
                self._times.clear()
        if len(self._offsets) == self.size > 2 and keep_from is not None and keep_from < self._offsets[1]:
            i = self._least_needed()
            del self._offsets[i]
            del self._times[i]
        self._offsets.append(offset)
        self._times.append(at)

    def _least_needed(self) -> int:
        """The interior point that interpolating between its neighbours dates most closely."""
        o, t = self._offsets, self._times

        def error(i: int) -> float:
            span = o[i + 1] - o[i - 1]
            return abs(t[i] - (t[i - 1] + (o[i] - o[i - 1]) / span * (t[i + 1] - t[i - 1])))

        return min(range(1, len(o) - 1), key=error)

    def points(self) -> list[tuple[int, float]]:
        return list(zip(self._offsets, self._times, strict=True))

    def time_of(self, offset: int) -> tuple[float, bool] | None:
        """When the end offset reached `offset`: (time, exact); exact is False when `offset` lies
        before every point, dated by extrapolating with the ring's average rate (a guess) or, with
        one point, by that point (a lower bound of the age)."""
        if not self._offsets:
            return None
        offsets = self._offsets
        times = self._times
        if offset >= offsets[-1]:
            return times[-1], True
        if offset <= offsets[0]:
            if len(offsets) >= 2 and offset < offsets[0]:
                # Before the oldest point: extrapolate with the average rate the ring saw.
                rate = (offsets[-1] - offsets[0]) / max(times[-1] - times[0], 1e-9)
                return times[0] - (offsets[0] - offset) / rate, False
            return times[0], offset == offsets[0]
        i = bisect.bisect_right(list(offsets), offset)
        o1, o2 = offsets[i - 1], offsets[i]
        t1, t2 = times[i - 1], times[i]
        return t1 + (offset - o1) / (o2 - o1) * (t2 - t1), True


def time_lag(ring: OffsetRing, *, committed: int, end: int, now: float) -> tuple[float, bool]:
    """Seconds since the first unprocessed record reached the log, and whether that is an estimate within the ring.

    0 when caught up (an idle topic included). Never NaN, never negative.
    """
    if committed >= end:
        return 0.0, True
    found = ring.time_of(committed)
    if found is None:
        return 0.0, False
    at, exact = found
    return max(0.0, now - at), exact


# --- partition state and status ---------------------------------------------------------


@dataclass
class Observation:
    at: float
    end: int
    committed: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


@dataclass
class PartitionState:
    """What the exporter remembers of one partition between scrapes (bounded)."""

    ring: OffsetRing = field(default_factory=OffsetRing)
    window: deque[Observation] = field(default_factory=lambda: deque(maxlen=WINDOW_OBSERVATIONS))
    first_seen: float | None = None
    commit_mark: tuple[int, float | None] | None = None
    commit_changed: float | None = None
    offset_changed: float | None = None

    def observe(self, *, at: float, end: int, committed: int, committed_at: float | None, window: float) -> None:
        self.ring.add(end, at, keep_from=committed)
        if self.first_seen is None:
            self.first_seen = at
        mark = (committed, committed_at)
        if self.commit_mark is None or mark != self.commit_mark:
            if self.commit_mark is None or committed != self.commit_mark[0]:
                self.offset_changed = at
            self.commit_changed = at
            self.commit_mark = mark
        self.window.append(Observation(at, end, committed))
        while self.window and self.window[0].at < at - window:
            self.window.popleft()


def partition_status(state: PartitionState, *, now: float, window: float, has_commit_time: bool) -> Status:
    """Burrow's evaluation, over the observations of the last `window` seconds."""
    if not state.window or state.window[-1].lag == 0:
        return "OK"
    observed_for = now - (state.first_seen if state.first_seen is not None else now)
    if observed_for >= window:
        if state.commit_changed is not None and now - state.commit_changed > window:
            # Nothing new written at all (neither offset nor commit time).
            return "STOP" if has_commit_time else "STALL"
        if has_commit_time and state.offset_changed is not None and now - state.offset_changed > window:
            return "STALL"
    obs = list(state.window)
    if len(obs) >= 3 and obs[-1].at - obs[0].at >= window * 0.5:
        lags = [o.lag for o in obs]
        if all(b > a for a, b in itertools.pairwise(lags)):
            return "WARN"
    return "OK"


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    end: int
    committed: int | None
    source: OffsetSource
    lag: int
    lag_seconds: float
    exact: bool
    status: Status
    # a partition of one of the app's repartition topics (not of spec.kafka.topics)
    repartition: bool = False


@dataclass(frozen=True)
class StoppedPartition:
    """A partition a poison record stopped: where, and the error the runtime recorded."""

    topic: str
    partition: int
    offset: int
    error: str


@dataclass(frozen=True)
class AppLag:
    """One app's lag at one scrape; `stale` when a source could not be read (values are then absent)."""

    namespace: str
    name: str
    at: float
    partitions: tuple[PartitionLag, ...] = ()
    stale: bool = False
    error: str | None = None
    # Σ end and Σ committed offsets over every partition, repartition ones included: the
    # native autoscaler's samples (`decide.Sample`)
    end_total: int = 0
    committed_total: int = 0
    # over the input partitions only: records appended to the input, and committed from it
    input_rate: float | None = None
    consumption_rate: float | None = None
    # partitions a poison record stopped (any of the app's topics, repartition ones included)
    stopped: tuple[StoppedPartition, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def total(self) -> int:
        """The app's lag: its input partitions' and its repartition partitions'."""
        return sum(p.lag for p in self.partitions)

    @property
    def repartition_total(self) -> int:
        """The share of `total` in the app's repartition topics."""
        return sum(p.lag for p in self.partitions if p.repartition)

    @property
    def has_repartition(self) -> bool:
        return any(p.repartition for p in self.partitions)

    @property
    def input_partitions(self) -> int:
        return sum(1 for p in self.partitions if not p.repartition)

    @property
    def max_lag(self) -> int:
        return max((p.lag for p in self.partitions), default=0)

    @property
    def max_seconds(self) -> float:
        return max((p.lag_seconds for p in self.partitions), default=0.0)

    def per_topic(self) -> dict[str, dict[str, float | int]]:
        topics: dict[str, dict[str, float | int]] = {}
        for p in self.partitions:
            entry = topics.setdefault(p.topic, {"records": 0, "seconds": 0.0, "partitions": 0})
            entry["records"] = int(entry["records"]) + p.lag
            entry["seconds"] = max(float(entry["seconds"]), p.lag_seconds)
            entry["partitions"] = int(entry["partitions"]) + 1
        return topics

    def worst_status(self) -> Status:
        return max((p.status for p in self.partitions), key=STATUSES.index, default="OK")


@dataclass(frozen=True)
class Scrape:
    at: float
    duration: float
    apps: tuple[AppLag, ...]
    errors: tuple[tuple[str, str], ...]  # (source, message)


# --- what is scraped ----------------------------------------------------------------------


@dataclass(frozen=True)
class AppRef:
    """What a scrape needs to know of one app, resolved from its spec and Secrets."""

    namespace: str
    name: str
    app_id: str
    group: str
    topics: tuple[str, ...]
    kafka: kafka.Target
    cassandra: cassandra.Target
    keyspace: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def app_ref(app: model.StreamingApp, secrets: Mapping[str, Mapping[str, str]]) -> AppRef:
    return AppRef(
        namespace=app.namespace,
        name=app.name,
        app_id=app.app_id,
        group=app.consumer_group,
        topics=tuple(app.spec.kafka.topics),
        kafka=kafka.target_of(app, secrets),
        cassandra=cassandra.target_of(app, secrets),
        keyspace=app.spec.state.cassandra.keyspace,
    )


# --- Kafka ---------------------------------------------------------------------------------


GroupRead = tuple[kafka.Target, str, tuple[TP, ...]]
# Pause between asks of a group's offsets while its coordinator is moving or loading.
COORDINATOR_RETRY_SECONDS = 0.1


def coordinator_moving(exc: Exception) -> bool:
    """Whether a failed group read only met a coordinator being elected or loading the offsets
    topic: a passing state (a fresh broker, a leader change), asked again within the read's
    timeout rather than marking the app stale for a whole scrape interval. librdkafka hands
    `committed()`'s NOT_COORDINATOR straight back instead of finding the coordinator again."""
    from confluent_kafka import KafkaError

    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and error.code() in (
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    )


class KafkaOffsets:
    """End offsets and group offsets, one admin client per cluster."""

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        group_reads_in_flight: int = GROUP_READS_IN_FLIGHT,
        empty_recheck_seconds: float = EMPTY_GROUP_RECHECK_SECONDS,
        clock: Clock = time.monotonic,
    ) -> None:
        self._timeout = timeout
        self._group_reads = group_reads_in_flight
        self._admins: dict[kafka.Target, Any] = {}
        self._guard = threading.Lock()
        self._empty_recheck = empty_recheck_seconds
        self._clock = clock
        self._empty_until: dict[GroupRead, float] = {}

    def _admin(self, target: kafka.Target) -> Any:
        from confluent_kafka.admin import AdminClient

        with self._guard:
            admin = self._admins.get(target)
            if admin is None:
                admin = AdminClient(target.client_config() | {"socket.timeout.ms": int(self._timeout * 1000)})
                self._admins[target] = admin
            return admin

    def request_ends(self, target: kafka.Target, tps: Iterable[TP]) -> dict[Any, Future[Any]]:
        """Start one ListOffsets(latest) for all partitions; the client sends one request per leader."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}  # type: ignore[no-untyped-call]
        if not request:
            return {}
        result: dict[Any, Future[Any]] = self._admin(target).list_offsets(request, request_timeout=self._timeout)
        return result

    def ends(self, futures: Mapping[Any, Future[Any]]) -> dict[TP, int]:
        from confluent_kafka import KafkaException

        out: dict[TP, int] = {}
        try:
            for tp, fut in futures.items():
                out[(tp.topic, tp.partition)] = int(fut.result(timeout=self._timeout * 2).offset)
        except (KafkaException, TimeoutError) as exc:
            raise kafka.KafkaUnavailable(f"listing end offsets failed: {exc}") from exc
        return out

    def group_offsets(self, target: kafka.Target, group: str, tps: Sequence[TP]) -> dict[TP, int]:
        """The group's committed offsets (partitions without a commit are left out).

        Read through a short-lived consumer of the group that never joins it (no subscribe), not
        the admin client: librdkafka's ListConsumerGroupOffsets dereferences a missing group
        handle when the broker answers NOT_COORDINATOR (a fresh broker still loading its offsets
        topic) and takes the whole process down (librdkafka issue 5040, present in 2.16). The
        consumer hands that answer back too: it is asked again until the timeout, so a coordinator
        being elected or loading does not mark the app stale.
        """
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        if not tps:
            return {}
        consumer = Consumer(
            target.client_config()
            | {"group.id": group, "enable.auto.commit": False, "socket.timeout.ms": int(self._timeout * 1000)}
        )
        partitions = [TopicPartition(t, p) for t, p in tps]
        deadline = time.monotonic() + self._timeout
        try:
            while True:
                try:
                    answer = consumer.committed(partitions, timeout=max(deadline - time.monotonic(), 0.1))
                    break
                except KafkaException as exc:
                    if not coordinator_moving(exc) or deadline - time.monotonic() <= COORDINATOR_RETRY_SECONDS:
                        raise kafka.KafkaUnavailable(f"listing offsets of group {group} failed: {exc}") from exc
                time.sleep(COORDINATOR_RETRY_SECONDS)
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): int(tp.offset) for tp in answer if tp.error is None and tp.offset >= 0}

    def many_group_offsets(
        self, requests: Mapping[tuple[str, str], tuple[kafka.Target, str, Sequence[TP]]]
    ) -> dict[tuple[str, str], dict[TP, int] | kafka.KafkaUnavailable]:
        """`group_offsets` of many apps (key → cluster, group, partitions), side by side. Each is
        a consumer's own connection and round trips: one after another, a burst of apps that have
        not committed to Cassandra yet would make a scrape last seconds.

        A group that had no commit for the partitions asked is taken as still empty until
        `empty_recheck_seconds` have passed. Such apps have not committed a batch yet (a replica
        commits to Cassandra first, so once it has, the group is no longer asked), and a burst of
        them would otherwise start a Kafka client per app at every scrape, and the operator's
        memory grows with them (docs/lag-and-autoscaling.md, "How lag is measured")."""
        now = self._clock()
        reads = {key: (target, group, tuple(tps)) for key, (target, group, tps) in requests.items()}
        out: dict[tuple[str, str], dict[TP, int] | kafka.KafkaUnavailable] = {
            key: {} for key, read in reads.items() if self._empty_until.get(read, 0.0) > now
        }
        due = {key: read for key, read in reads.items() if key not in out}
        if due:
            with ThreadPoolExecutor(max_workers=min(self._group_reads, len(due))) as pool:
                futures = {key: pool.submit(self.group_offsets, *read) for key, read in due.items()}
            for key, future in futures.items():
                try:
                    out[key] = future.result()
                except kafka.KafkaUnavailable as exc:
                    out[key] = exc
        # Only what was asked this time is remembered, so apps that went take their entries along.
        self._empty_until = {
            read: self._empty_until[read] if key not in due else now + self._empty_recheck
            for key, read in reads.items()
            if out[key] == {}
        }
        return out

    def close(self) -> None:
        self._admins.clear()


# --- Cassandra -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CommittedRow:
    next_offset: int
    committed_at: float | None
    # where a poison record stopped the partition (the runtime's `spec.errors: stop`), and why
    stopped_at: int | None = None
    stopped_error: str | None = None

    @property
    def stopped(self) -> bool:
        """Stopped where it is committed; a commit past the record (or an offset reset) clears it."""
        return self.stopped_at is not None and self.stopped_at == self.next_offset


def _epoch(value: Any) -> float | None:
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def committed_rows(rows: Iterable[Any], wanted: set[str], *, app_id: str | None = None) -> dict[TP, CommittedRow]:
    """(topic, partition) → the committed row of the stage furthest behind, from the offsets rows
    (key, partition, next_offset, committed_at[, stopped_at, stopped_error]) of one app, for the
    topics in `wanted`, the app's repartition topics when its `app_id` is given
    (`appids.is_repartition_topic`: their lag is the app's too) and any partition a poison
    record stopped (a stopped repartition partition too: the app's condition names it). Keys are
    `<stage>/<topic>`; a bare topic is a row of an earlier runtime (no stage), counted only where
    no stage has a row of its own (`floe_jobs.offsets.furthest_behind`). A stopped stage counts as
    furthest behind, so that its stop is reported. Retired legacy rows (next_offset null) are skipped."""
    from floe_jobs import offsets

    live = []
    for row in rows:
        key, partition, next_offset, committed_at = row[:4]
        stopped_at, stopped_error = tuple(row[4:6]) if len(row) >= 6 else (None, None)
        stage, topic = offsets.parse_key(key)
        counted = topic in wanted or (app_id is not None and appids.is_repartition_topic(app_id, topic))
        if next_offset is not None and (counted or stopped_at is not None):
            value = CommittedRow(int(next_offset), _epoch(committed_at), stopped_at, stopped_error)
            live.append((stage, topic, int(partition), value))
    return offsets.furthest_behind(live, lambda r: (0 if r.stopped else 1, r.next_offset))


SessionFor = Callable[[cassandra.Target], Any]


class CassandraOffsets:
    """Committed offsets of many apps, read with concurrent queries on one session per cluster."""

    def __init__(self, session_for: SessionFor, *, timeout: float = 5.0) -> None:
        self._session_for = session_for
        self._timeout = timeout
        self._prepared: dict[tuple[cassandra.Target, str], Any] = {}

    def _statement(self, session: Any, target: cassandra.Target, table: str) -> Any | None:
        from cassandra import ConsistencyLevel, InvalidRequest
        from floe_jobs.stores import schema

        stmt = self._prepared.get((target, table))
        if stmt is None:
            keyspace, name = table.split(".", 1)
            if schema.table_columns(session, keyspace, name) is None:
                return None  # not provisioned yet (checked first: a failed prepare is logged as an error)
            # an offsets table of an earlier release gets the stop columns when its app starts
            columns = schema.table_columns(session, keyspace, name) or set()
            stops = ", stopped_at, stopped_error" if {"stopped_at", "stopped_error"} <= columns else ""
            try:
                stmt = session.prepare(
                    f"SELECT topic, partition, next_offset, committed_at{stops} FROM {table} WHERE app_id = ?"
                )
            except InvalidRequest:
                return None  # not provisioned yet: no committed offsets in Cassandra
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            self._prepared[(target, table)] = stmt
        return stmt

    def read(self, apps: Sequence[AppRef]) -> dict[tuple[str, str], dict[TP, CommittedRow] | Exception]:
        """App key → rows by (topic, partition), or the exception that kept them from being read."""
        from cassandra import DriverException, InvalidRequest
        from cassandra.cluster import NoHostAvailable, OperationTimedOut
        from floe_jobs import offsets

        failures = (NoHostAvailable, OperationTimedOut, DriverException, OSError, cassandra.CassandraUnavailable)
        pending: list[tuple[AppRef, str, Any]] = []
        out: dict[tuple[str, str], dict[TP, CommittedRow] | Exception] = {}
        for app in apps:
            table = f"{app.keyspace}.{offsets.TABLE}"
            try:
                session = self._session_for(app.cassandra)
                stmt = self._statement(session, app.cassandra, table)
            except failures as exc:
                out[app.key] = exc
                continue
            out[app.key] = {}
            if stmt is not None:
                pending.append((app, table, session.execute_async(stmt, (app.app_id,), timeout=self._timeout)))
        for app, table, fut in pending:
            rows = out[app.key]
            if isinstance(rows, Exception):
                continue
            try:
                rows.update(committed_rows(fut.result(), set(app.topics), app_id=app.app_id))
            except InvalidRequest:
                # Table dropped since it was prepared; read again next time.
                self._prepared.pop((app.cassandra, table), None)
            except failures as exc:
                out[app.key] = exc
        return out


# --- the scraper --------------------------------------------------------------------------


PartitionsOf = Callable[[kafka.Target, list[str]], Mapping[str, int | None]]


@dataclass
class _Failures:
    """What failed during one scrape: errors by source, and the apps made stale (key → why)."""

    errors: list[tuple[str, str]] = field(default_factory=list)
    stale: dict[tuple[str, str], str] = field(default_factory=dict)


class Scraper:
    """Keeps per-partition history and turns one pass over the sources into `AppLag`s."""

    def __init__(
        self,
        *,
        kafka_offsets: KafkaOffsets,
        cassandra_offsets: CassandraOffsets,
        partitions_of: PartitionsOf,
        clock: Clock = time.time,
        window_seconds: float = 120.0,
        rate_seconds: float = 60.0,
    ) -> None:
        self.kafka = kafka_offsets
        self.cassandra = cassandra_offsets
        self.partitions_of = partitions_of
        self.clock = clock
        self.window = window_seconds
        self.rate_window = rate_seconds
        self._states: dict[tuple[str, str, str, int], PartitionState] = {}
        self._totals: dict[tuple[str, str], deque[tuple[float, int, int]]] = {}
        # app → its repartition topics, as its offsets rows named them at the last scrape
        self._repartition: dict[tuple[str, str], tuple[str, ...]] = {}

    def _rates(self, key: tuple[str, str], at: float, end: int, committed: int) -> tuple[float | None, float | None]:
        history = self._totals.setdefault(key, deque(maxlen=WINDOW_OBSERVATIONS))
        if history and (end < history[-1][1] or committed < history[-1][2]):
            history.clear()  # a topic was recreated or offsets reset: rates restart
        history.append((at, end, committed))
        while len(history) > 2 and history[1][0] <= at - self.rate_window:
            history.popleft()
        t0, e0, c0 = history[0]
        if at - t0 <= 0:
            return None, None
        return (end - e0) / (at - t0), (committed - c0) / (at - t0)

    def scrape(self, apps: Sequence[AppRef]) -> Scrape:
        """One pass: partitions and end offsets from each Kafka cluster, committed offsets from
        Cassandra (else the group's), then each app's lag; an app whose sources failed is stale."""
        started = time.perf_counter()
        failed = _Failures()
        by_cluster: dict[kafka.Target, list[AppRef]] = {}
        for app in apps:
            by_cluster.setdefault(app.kafka, []).append(app)
        tps_of = self._partitions(by_cluster, failed)
        # One end-offsets request per cluster (so one per broker), started before reading Cassandra.
        futures = self._request_ends(by_cluster, tps_of, failed)
        committed = self.cassandra.read([a for a in apps if a.key not in failed.stale])
        ends = self._ends(futures, by_cluster, failed)
        rows_of = _readable(committed, failed)
        self._repartitions_found(by_cluster, rows_of, tps_of, ends, failed)

        # Partitions without a row in Cassandra (an app not started yet): the group's commits.
        group_requests = {}
        for app in apps:
            missing = [tp for tp in tps_of.get(app.key, []) if tp not in rows_of.get(app.key, {})]
            if app.key not in failed.stale and missing:
                group_requests[app.key] = (app.kafka, app.group, missing)
        groups = self.kafka.many_group_offsets(group_requests)

        now = self.clock()
        results: list[AppLag] = []
        live: set[tuple[str, str, str, int]] = set()
        for app in apps:
            if app.key in failed.stale:
                results.append(AppLag(app.namespace, app.name, now, stale=True, error=failed.stale[app.key]))
                continue
            group = groups.get(app.key, {})
            if isinstance(group, kafka.KafkaUnavailable):
                failed.errors.append(("kafka", str(group)))
                results.append(AppLag(app.namespace, app.name, now, stale=True, error=str(group)))
                continue
            rows = rows_of.get(app.key, {})
            lag = self._lag_of(app, tps_of.get(app.key, []), ends.get(app.kafka, {}), rows, group, now)
            live.update((app.namespace, app.name, p.topic, p.partition) for p in lag.partitions)
            results.append(lag)
        self._forget(apps, live, failed.stale)
        return Scrape(
            at=now, duration=time.perf_counter() - started, apps=tuple(results), errors=tuple(failed.errors)
        )

    def _lag_of(
        self,
        app: AppRef,
        tps: Sequence[TP],
        ends: Mapping[TP, int],
        rows: Mapping[TP, CommittedRow],
        group: Mapping[TP, int],
        now: float,
    ) -> AppLag:
        """One app's lag from its partitions' end offsets and committed rows (the group's
        commits where a partition has no row yet), with the partitions its stages stopped."""
        inputs = set(app.topics)
        parts = [
            self._partition_lag(
                app, tp, end=end, row=rows.get(tp), group=group, now=now, repartition=tp[0] not in inputs
            )
            for tp in tps
            if (end := ends.get(tp)) is not None
        ]
        stopped = tuple(
            StoppedPartition(topic, partition, int(row.next_offset), row.stopped_error or "")
            for (topic, partition), row in sorted(rows.items())
            if row.stopped
        )
        return dataclasses.replace(self._app_lag(app, parts, now), stopped=stopped)

    def _topics(self, app: AppRef) -> tuple[str, ...]:
        """The app's input topics, then the repartition topics its rows named at the last scrape."""
        return app.topics + tuple(t for t in self._repartition.get(app.key, ()) if t not in app.topics)

    def _partitions(self, by_cluster: Mapping[kafka.Target, list[AppRef]], failed: _Failures) -> dict[Any, list[TP]]:
        """Each app's input and known repartition partitions (metadata cached per cluster by the inspector)."""
        tps_of: dict[Any, list[TP]] = {}
        for target, members in by_cluster.items():
            topics = sorted({t for a in members for t in self._topics(a)})
            try:
                counts = self.partitions_of(target, topics)
            except kafka.KafkaUnavailable as exc:
                failed.errors.append(("kafka", str(exc)))
                for a in members:
                    failed.stale[a.key] = str(exc)
                continue
            for a in members:
                tps_of[a.key] = [(t, p) for t in self._topics(a) for p in range(counts.get(t) or 0)]
        return tps_of

    def _repartitions_found(
        self,
        by_cluster: Mapping[kafka.Target, list[AppRef]],
        rows_of: Mapping[tuple[str, str], Mapping[TP, CommittedRow]],
        tps_of: dict[Any, list[TP]],
        ends: dict[kafka.Target, dict[TP, int]],
        failed: _Failures,
    ) -> None:
        """Take each app's repartition topics from the rows just read: `tps_of` gets their
        partitions (a topic no row names any more is left out), and the end offsets of partitions
        not asked with the input's (topics new to this scrape) are asked now, in one request per
        cluster, so a stage's backlog shows from the first scrape that reads its rows."""
        for target, members in by_cluster.items():
            if target not in ends:
                continue  # the cluster's apps are stale already
            current = [a for a in members if a.key in rows_of and a.key in tps_of and a.key not in failed.stale]
            for a in current:
                recorded = {topic for topic, _ in rows_of[a.key]}
                self._repartition[a.key] = appids.repartition_topics(a.app_id, recorded, a.topics)
            asked = {a.key: {topic for topic, _ in tps_of[a.key]} for a in current}
            new = sorted({t for a in current for t in self._repartition[a.key] if t not in asked[a.key]})
            counts: Mapping[str, int | None] = {}
            if new:
                try:
                    counts = self.partitions_of(target, new)
                except kafka.KafkaUnavailable as exc:
                    failed.errors.append(("kafka", str(exc)))
                    for a in current:
                        failed.stale.setdefault(a.key, str(exc))
                    continue
            for a in current:
                known = {tp for tp in tps_of[a.key] if tp[0] in a.topics or tp[0] in self._repartition[a.key]}
                added = [(t, p) for t in new if t in self._repartition[a.key] for p in range(counts.get(t) or 0)]
                tps_of[a.key] = [tp for tp in tps_of[a.key] if tp in known] + added
            missing = sorted({tp for a in current for tp in tps_of[a.key] if tp not in ends[target]})
            if not missing:
                continue
            try:
                ends[target].update(self.kafka.ends(self.kafka.request_ends(target, missing)))
            except Exception as exc:  # any client error marks the cluster's apps stale, as the first request does
                failed.errors.append(("kafka", f"{target.bootstrap_servers}: {exc}"))
                for a in current:
                    failed.stale.setdefault(a.key, str(exc))

    def _request_ends(
        self, by_cluster: Mapping[kafka.Target, list[AppRef]], tps_of: Mapping[Any, list[TP]], failed: _Failures
    ) -> dict[kafka.Target, dict[Any, Future[Any]]]:
        futures: dict[kafka.Target, dict[Any, Future[Any]]] = {}
        for target, members in by_cluster.items():
            wanted = sorted({tp for a in members if a.key in tps_of for tp in tps_of[a.key]})
            try:
                futures[target] = self.kafka.request_ends(target, wanted)
            except Exception as exc:  # any client error marks the cluster's apps stale
                failed.errors.append(("kafka", f"{target.bootstrap_servers}: {exc}"))
                for a in members:
                    failed.stale.setdefault(a.key, str(exc))
        return futures

    def _ends(
        self,
        futures: Mapping[kafka.Target, dict[Any, Future[Any]]],
        by_cluster: Mapping[kafka.Target, list[AppRef]],
        failed: _Failures,
    ) -> dict[kafka.Target, dict[TP, int]]:
        ends: dict[kafka.Target, dict[TP, int]] = {}
        for target, futs in futures.items():
            try:
                ends[target] = self.kafka.ends(futs)
            except kafka.KafkaUnavailable as exc:
                failed.errors.append(("kafka", f"{target.bootstrap_servers}: {exc}"))
                for a in by_cluster[target]:
                    failed.stale.setdefault(a.key, str(exc))
        return ends

    def _partition_lag(
        self,
        app: AppRef,
        tp: TP,
        *,
        end: int,
        row: CommittedRow | None,
        group: Mapping[TP, int],
        now: float,
        repartition: bool = False,
    ) -> PartitionLag:
        """One partition's lag, from its committed offset in Cassandra, else the group's, and its history."""
        topic, partition = tp
        source: OffsetSource
        if row is not None:
            c: int | None = row.next_offset
            source, commit_time = "cassandra", row.committed_at
        elif tp in group:
            c, source, commit_time = group[tp], "kafka", None
        else:
            c, source, commit_time = None, "none", None
        skey = (app.namespace, app.name, topic, partition)
        state = self._states.get(skey)
        if state is None:
            state = self._states[skey] = PartitionState()
        # Nothing committed yet: the app starts at the end (or has not started), so no lag.
        effective = c if c is not None else end
        state.observe(at=now, end=end, committed=effective, committed_at=commit_time, window=self.window)
        seconds, exact = time_lag(state.ring, committed=effective, end=end, now=now)
        return PartitionLag(
            topic=topic,
            partition=partition,
            end=end,
            committed=c,
            source=source,
            lag=max(0, end - effective),
            lag_seconds=round(seconds, 3),
            exact=exact,
            status=partition_status(state, now=now, window=self.window, has_commit_time=commit_time is not None),
            repartition=repartition,
        )

    def _app_lag(self, app: AppRef, parts: list[PartitionLag], now: float) -> AppLag:
        """The app's sums over all its partitions; its rates over the input partitions only (a
        record re-keyed is no new input)."""

        def sums(of: Sequence[PartitionLag]) -> tuple[int, int]:
            return sum(p.end for p in of), sum(p.committed if p.committed is not None else p.end for p in of)

        end_total, committed_total = sums(parts)
        input_rate, consumption_rate = self._rates(app.key, now, *sums([p for p in parts if not p.repartition]))
        return AppLag(
            namespace=app.namespace,
            name=app.name,
            at=now,
            partitions=tuple(parts),
            end_total=end_total,
            committed_total=committed_total,
            input_rate=input_rate,
            consumption_rate=consumption_rate,
        )

    def _forget(self, apps: Sequence[AppRef], live: set[tuple[str, str, str, int]], stale: Mapping[Any, str]) -> None:
        """Drop the history of apps and partitions that are gone (kept for stale apps)."""
        keep = {a.key for a in apps}
        for skey in list(self._states):
            app_key = (skey[0], skey[1])
            if app_key not in keep or (app_key not in stale and skey not in live):
                del self._states[skey]
        for key in list(self._totals):
            if key not in keep:
                del self._totals[key]
        for key in list(self._repartition):
            if key not in keep:
                del self._repartition[key]

    def memory_points(self) -> int:
        """Points and observations held, for the bounded-memory check."""
        return sum(len(s.ring) + len(s.window) for s in self._states.values())


def _readable(
    committed: Mapping[tuple[str, str], Any], failed: _Failures
) -> dict[tuple[str, str], dict[TP, CommittedRow]]:
    """The apps whose offsets rows were read; an app whose read failed is stale this pass."""
    rows_of: dict[tuple[str, str], dict[TP, CommittedRow]] = {}
    for key, rows in committed.items():
        if isinstance(rows, Exception):
            failed.errors.append(("cassandra", str(rows)))
            failed.stale.setdefault(key, f"Cassandra: {rows}")
        else:
            rows_of[key] = rows
    return rows_of
