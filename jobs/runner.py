"""The batch loop of one replica, from start-up checks to a graceful exit.

Per iteration, for each stage of the job, over the partitions this replica owns:

1. plan: read the offsets rows, replay in-flight plans exactly, plan new capped ranges;
2. read exactly those ranges: with a consumer in the driver (`floe_jobs.kafkaio`), or with
   Spark's Kafka source when a batch of input topics is large (`kafka.spark_read_min_records`).
   A repartition stage's read stops at the row cap (its records may be runs of rows,
   `floe_jobs.runs`) and a new plan is cut where it stopped. The new plans (`planned_seq` etc.)
   are stored in Cassandra before the batch has any effect. A repartition stage drops the rows
   whose source position was already applied; the rest goes to the stage as a DataFrame;
3. run the stage function; its state helpers apply per-key effects fenced by the sequence;
4. write what it emits to Kafka and wait for the acknowledgements;
5. commit: next_offset/committed_seq (and source positions) in Cassandra, one row write per
   partition; then the same offsets to the Kafka group.

A crash between 1 and 5 leaves the plan in flight and the next owner replays it. Revocations
wait for the running batch (`Membership.batch`), so partitions change hands at batch boundaries.

Stages run in lanes, one thread each: stages that read the same topics share a lane (they share
offsets rows), the others run side by side. Word count's `split` thus commits its input
partitions once per batch of its own instead of once per turn of both stages — which halves how
long an input partition goes uncommitted, in steady state and in a handover — and its batches
overlap `count`'s on the machine's cores. Each lane has its own Kafka reader and producer and
its own Spark scheduler pool (FAIR between lanes, so one lane's job does not queue behind
another's tasks); lanes share the Spark session, the Cassandra sessions and the group member.

SIGTERM: no new plan; the running batch finishes and commits within
`shutdown.drain_timeout_seconds`; the consumer closes (leaving the group) and Spark stops;
exit 0. A second SIGTERM or the deadline aborts: Spark's JVM is killed and the Cassandra
sessions closed (no more state writes from this process), the consumer leaves, exit 4 — the
batch's plan stays in flight for replay.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from confluent_kafka import admin as kafka_admin
from confluent_kafka.admin import AdminClient
from floe_jobs import (
    api,
    faults,
    health,
    kafkaio,
    kafkasec,
    offsets,
    outages,
    planning,
    records,
    sparkio,
    state,
    statecache,
)
from floe_jobs.config import FloeConfig
from floe_jobs.exitcodes import EXIT_ABORTED, EXIT_FAILED, EXIT_OK
from floe_jobs.stores.errors import StoreConfigError

log = logging.getLogger("floe_jobs")

# records a stage's warm-up runs over (the last ones of one partition of its topics)
WARM_UP_RECORDS = 50


class StartupError(RuntimeError):
    """A dependency is unreachable or missing at start; the message says which."""


def load_entrypoint(spec: str) -> tuple[Any, ModuleType]:
    """`package.module:attr`, or `path/to/file.py[:attr]` (attr defaults to `job`, then `main`)."""
    target, _, attr = spec.partition(":") if not spec.endswith(".py") else (spec, "", "")
    if target.endswith(".py") or os.sep in target:
        path = Path(target)
        if not path.is_file():
            raise StartupError(f"job.entrypoint (FLOE_JOB_ENTRYPOINT): file {path} does not exist")
        name = "floe_user_" + "".join(c if c.isalnum() else "_" for c in path.stem)
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise StartupError(f"job.entrypoint: cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
        # The module is not importable on Spark's Python workers: ship its functions by value.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise StartupError(f"job.entrypoint (FLOE_JOB_ENTRYPOINT): cannot import {target!r}: {exc}") from exc
    for name in [attr] if attr else ["job", "main"]:
        if hasattr(module, name):
            return getattr(module, name), module
    raise StartupError(f"job.entrypoint: {module.__name__} has no attribute {attr or 'job or main'!r}")


def _retry(what: str, fn: Any, *, attempts: int = 6, first_delay: float = 1.0) -> Any:
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (StoreConfigError, kafkasec.SecurityError):
            raise  # refused credentials or certificates: the settings must change, not the weather
        except Exception as exc:
            if attempt == attempts:
                raise StartupError(f"{what} unreachable after {attempts} attempts: {exc}") from exc
            log.warning("Retrying what=%s attempt=%d error=%s", what, attempt, exc)
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    raise AssertionError("unreachable")


def ensure_topics(cfg: FloeConfig, admin: AdminClient, job: api.Job) -> dict[str, int]:
    """Check the input topics exist; create the repartition and dead-letter topics if absent."""
    md = _retry(
        f"Kafka at {cfg.kafka.bootstrap_servers} (kafka.bootstrap_servers)",
        lambda: admin.list_topics(timeout=10),
    )
    counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
    missing = [t for t in cfg.kafka.topics if t not in counts]
    if missing:
        raise StartupError(f"kafka.topics: input topics {missing} do not exist on {cfg.kafka.bootstrap_servers}")
    width = max(counts[t] for t in cfg.kafka.topics)
    wanted = {cfg.repartition_topic(s.source): width for s in job.stages if s.source is not None}
    wanted.setdefault(cfg.dlq_topic, 1)
    create = [
        kafka_admin.NewTopic(name, num_partitions=n, replication_factor=-1)  # type: ignore[attr-defined]
        for name, n in wanted.items()
        if name not in counts
    ]
    if create:
        for name, fut in admin.create_topics(create, operation_timeout=30).items():
            try:
                fut.result()
                log.info("Created topic=%s", name)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise StartupError(f"cannot create topic {name}: {exc}") from exc
        md = admin.list_topics(timeout=10)
        counts = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
    return counts


@dataclass(frozen=True)
class StageRead:
    """What one pass of a stage read: the frame, the plans as cut to what was read, the records
    read, and each partition's source positions once the batch commits (repartition topics)."""

    df: Any
    parts: list[planning.PartitionPlan]
    size: int
    positions: dict[tuple[str, int], dict[str, tuple[int, int]]]


@dataclass
class Lane:
    """Stages run one after the other by one thread, with the Kafka clients only it uses."""

    name: str
    stages: list[api.Stage]
    topics: frozenset[str]
    reader: kafkaio.RangeReader | None = None
    sink: kafkaio.KafkaSink | None = None
    # assignment generation (`Membership.rebalances`) seen at the start of its last full pass
    passed_generation: int = -1
    failures: int = 0


def group_lanes(stages: list[api.Stage], topics_of: Any) -> list[tuple[list[api.Stage], frozenset[str]]]:
    """Stages grouped so that no two groups read a common topic (such stages share offsets rows
    and must not plan concurrently); stage order is kept within a group."""
    groups: list[tuple[list[api.Stage], frozenset[str]]] = []
    for stage in stages:
        topics = frozenset(topics_of(stage))
        merged = [g for g in groups if g[1] & topics]
        rest = [g for g in groups if not g[1] & topics]
        members = [s for g in merged for s in g[0]] + [stage]
        members.sort(key=stages.index)
        groups = [*rest, (members, topics.union(*(g[1] for g in merged)))]
    groups.sort(key=lambda g: stages.index(g[0][0]))
    return groups


class Runner:
    def __init__(self, cfg: FloeConfig, job: api.Job, *, member_name: str | None = None) -> None:
        self.cfg = cfg
        self.job = job
        self.member = member_name or cfg.pod.name or socket.gethostname()
        # who claims this process's batches in the offsets table: the member name for people, and
        # a token of this process, so that a replica restarted under the same name is not taken
        # for its former self (`floe_jobs.offsets`)
        self.owner = f"{self.member}/{uuid.uuid4().hex[:8]}"
        self.app = cfg.app_id
        self.health = health.Health(stall_seconds=cfg.metrics.stall_seconds, app=cfg.app_id)
        self.stop_requested = threading.Event()
        self.deadline: float | None = None
        self._aborting = False
        self._shutting_down = False
        # set when a lane gave up (batches kept failing): the other lanes stop too
        self._halt = threading.Event()
        self._avg_bytes: dict[str, float] = {}
        self._rows_per_record: dict[str, float] = {}
        self.spark: Any = None
        # large batches are read by Spark's Kafka source when its connector is on spark.jars and
        # the batch cap lets a batch be that large
        self.spark_reads = (
            kafkaio.spark_connector(cfg) and cfg.kafka.spark_read_min_records <= cfg.kafka.max_records_per_batch
        )
        self.session: Any = None
        self.membership: Any = None
        self.lanes: list[Lane] = []
        self.offsets: offsets.OffsetsTable | None = None
        self._lock = threading.Lock()
        self._last_owned: list[tuple[str, int]] = []
        self.state_cache = statecache.StateCache(cfg.state.cache_max_keys)
        # store → the stage that writes it (`api.Batch.writers`)
        self.store_writers: dict[str, str] = {}

    # -- signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stop_requested.is_set():
            log.warning("Received second signal=%d; aborting the running batch", signum)
            self.abort("second signal")
            return
        drain = self.cfg.shutdown.drain_timeout_seconds
        log.info("Received signal=%d; draining deadline_seconds=%.1f", signum, drain)
        self.deadline = time.monotonic() + drain
        self.stop_requested.set()
        self.health.stopping = True
        threading.Thread(target=self._watchdog, name="floe-drain-watchdog", daemon=True).start()

    def _watchdog(self) -> None:
        assert self.deadline is not None
        while time.monotonic() < self.deadline:
            if self._shutting_down:
                return  # the batch committed; closing the consumer and Spark needs no deadline
            time.sleep(0.1)
        self.abort("drain deadline passed")

    def abort(self, reason: str) -> None:
        """Stop without committing: kill Spark's JVM and close the Cassandra sessions first, so
        nothing of the running batch is written after we leave the group."""
        if self._aborting:
            return
        self._aborting = True
        busy = self.membership is not None and self.membership.busy
        log.error("Aborting reason=%s in_batch=%s; the in-flight plans will be replayed", reason, busy)
        with contextlib.suppress(Exception):
            from pyspark import SparkContext

            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None)
            if proc is not None:
                proc.kill()
                proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            state.shutdown_sessions()
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.cluster.shutdown()
        if self.membership is not None:
            with contextlib.suppress(Exception):
                self.membership.close(leave=self.cfg.kafka.leave_group_on_close)
        logging.shutdown()
        os._exit(EXIT_ABORTED)

    # -- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        from floe_jobs import membership
        from floe_jobs.stores import config as store_config

        cfg = self.cfg
        if cfg.metrics.port:
            health.serve(self.health, port=cfg.metrics.port)
        refused = kafkasec.ErrorWatch()
        conf: dict[str, Any] = {"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.security.librdkafka()}
        admin = AdminClient({**conf, **cfg.kafka.extra}, error_cb=refused)
        kafkasec.check_access(admin, refused, cfg.kafka.security, bootstrap=cfg.kafka.bootstrap_servers, timeout=10.0)
        ensure_topics(cfg, admin, self.job)
        c = cfg.cassandra
        ccfg = c.connection()
        self.session = _retry(
            f"Cassandra at {','.join(c.hosts)}:{c.port} (cassandra.hosts)",
            lambda: store_config.connect(ccfg),
        )
        self._provision()
        self.offsets = offsets.OffsetsTable(self.session, keyspace=c.keyspace, app_id=cfg.app_id, owner=self.owner)
        protocol = cfg.kafka.group_protocol
        if protocol == "auto":
            protocol = "consumer" if membership.broker_supports_kip848(admin) else "classic"
        if protocol == "consumer":
            membership.apply_group_configs(admin, cfg)
        log.info(
            "Starting app=%s member=%s protocol=%s stages=%s",
            self.app,
            self.member,
            protocol,
            [s.name for s in self.job.stages],
        )
        self.spark = sparkio.build_session(cfg, app_name=f"floe-{self.app}")
        client_id = f"{self.app}-{self.member}"
        for i, (stages, topics) in enumerate(group_lanes(self.job.stages, self._stage_topics)):
            name = "+".join(s.name for s in stages)
            lane_client = client_id if i == 0 else f"{client_id}-{i}"
            self.lanes.append(
                Lane(
                    name=name,
                    stages=stages,
                    topics=topics,
                    reader=kafkaio.RangeReader(cfg, client_id=lane_client),
                    sink=kafkaio.KafkaSink(cfg, client_id=lane_client),
                )
            )
        self._warm_up()
        self.membership = membership.Membership(cfg, topics=self._all_topics(), client_id=client_id, protocol=protocol)
        self.health.in_group = True
        if self.job.queries and cfg.metrics.query_port:
            self._serve_queries()

    def _warm_up(self) -> None:
        """Run every stage once before joining the group, as a dry run over the last records of
        its topics (none for a new app): the first run of a stage in a process plans, compiles
        and loads everything it uses (1.5-5 s measured on 2 cores, against 0.1-0.5 s warm, and
        it stalls the other lanes meanwhile), and partitions a replica takes over must not wait
        for that — in a handover, or when the group protocol hands it a topic it did not read
        before. An empty batch is not enough: what runs over no rows skips most of that. With
        Spark's Kafka source in use for large batches of input topics, such a stage runs a second
        time over the same records read by it (its first read in a process loads the Kafka client).

        Nothing is committed, written or produced: no plan is stored, the batch has no sequence,
        its helpers read every key as absent and write nothing (`Batch.dry_run`), and what it
        emits is collected and dropped. A stage that fails on this input starts cold."""
        for lane in self.lanes:
            assert lane.reader is not None and lane.sink is not None
            self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", lane.name)
            for stage in lane.stages:
                clock = api.BatchClock()
                try:
                    plans = self._sample(lane.reader, self._stage_topics(stage))
                    sample = lane.reader.read(plans)
                    clock.lap("read")
                    self._dry_run(lane, stage, records.to_dataframe(self.spark, sample), clock)
                    if self.spark_reads and plans and stage.source is None:
                        df = kafkaio.read_with_spark(self.spark, self.cfg, plans)
                        self._dry_run(lane, stage, df, clock, lap="spark")
                    log.info(
                        "Warmed up stage=%s records=%d seconds=%.2f %s",
                        stage.name,
                        len(sample),
                        clock.total,
                        clock.summary(),
                    )
                except api.StoreWriterError:  # a configuration error: the replica must not start
                    raise
                except Exception as exc:  # a stage that refuses this input only starts cold
                    log.warning("Warm-up of stage=%s failed (it starts cold) error=%s", stage.name, exc)
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)

    def _dry_run(self, lane: Lane, stage: api.Stage, df: Any, clock: api.BatchClock, *, lap: str = "") -> None:
        """Run `stage` over `df` as a dry run (see `_warm_up`), its phases timed on `clock`."""
        assert lane.sink is not None
        result = stage.fn(self._batch(lane, stage, df, clock, seqs={}, dry_run=True))
        clock.lap(lap + "fn")
        for e in self._emitted(result):
            _write(lane.sink, e, dry_run=True)
        clock.lap(lap + "emit")

    def _batch(
        self,
        lane: Lane,
        stage: api.Stage,
        df: Any,
        clock: api.BatchClock,
        *,
        seqs: dict[tuple[str, int], int],
        stamps: dict[tuple[str, int], int] | None = None,
        dry_run: bool = False,
        records: int | None = None,
        owned: statecache.Ownership | None = None,
    ) -> api.Batch:
        """What a stage function receives: its records, the session, the lane's sink and a clock.
        A warm-up's batch has no record count, so its helpers run the Spark plans that large
        batches need, not the driver-side ones of small batches."""
        assert lane.sink is not None
        return api.Batch(
            spark=self.spark,
            df=df,
            stage=stage.name,
            cfg=self.cfg,
            args=list(self.cfg.job.args),
            seqs=seqs,
            stamps=stamps or {},
            sink=lane.sink,
            clock=clock,
            dry_run=dry_run,
            records=records,
            owned=owned,
            writers=self.store_writers,
        )

    def _sample(self, reader: kafkaio.RangeReader, topics: list[str]) -> list[planning.PartitionPlan]:
        """A plan over the last WARM_UP_RECORDS records of the first partition of `topics` that has any."""
        md = reader.partitions(topics)
        for topic in topics:
            for partition in sorted(md.get(topic, [])):
                marks = reader.watermarks([(topic, partition)])[(topic, partition)]
                if marks.high > marks.low:
                    start = max(marks.low, marks.high - WARM_UP_RECORDS)
                    return [planning.PartitionPlan(topic, partition, 0, start, marks.high, replay=False)]
        return []

    def _serve_queries(self) -> None:
        """The stores' read-only HTTP query endpoint, on its own port and event loop thread."""
        import asyncio

        from aiohttp import web
        from floe_jobs.stores import (
            GlobalStore,
            GlobalView,
            PartitionedStore,
            PartitionedView,
            StoreOptions,
            endpoints,
            schema,
            serdes,
        )

        views: dict[str, Any] = {}
        specs = {s.name: s for s in self.cfg.stores}
        for name, (key_serde, value_serde) in self.job.queries.items():
            if name not in specs:
                raise StartupError(f"the job exposes store {name!r} but stores has no such entry")
            spec = schema.StoreSpec(name=name, type=specs[name].type)
            kwargs: dict[str, Any] = {
                "keyspace": self.cfg.cassandra.keyspace,
                "key_serde": serdes.by_name(key_serde),
                "value_serde": serdes.by_name(value_serde),
                "options": StoreOptions(create_table=False),
            }
            if spec.type == "global":
                views[name] = GlobalView(GlobalStore(self.session, spec, **kwargs))
            else:
                views[name] = PartitionedView(PartitionedStore(self.session, spec, **kwargs))
        port = self.cfg.metrics.query_port

        def serve() -> None:
            loop = asyncio.new_event_loop()
            runner = web.AppRunner(endpoints.make_app(views))
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "0.0.0.0", port).start())
            log.info("Serving store queries port=%d stores=%s", port, sorted(views))
            loop.run_forever()

        threading.Thread(target=serve, name="floe-queries", daemon=True).start()

    def _provision(self) -> None:
        from floe_jobs.stores import schema

        cfg = self.cfg
        ks = cfg.cassandra.keyspace
        specs = [
            schema.StoreSpec(name=s.name, type=s.type, ttl_seconds=s.ttl_seconds, table_options=s.table_options)
            for s in cfg.stores
        ]
        schema.provision(
            self.session,
            keyspace=ks,
            replication=None,
            stores=specs,
            extra_tables={offsets.TABLE: offsets.table_cql(ks)},
        )
        offsets.upgrade(self.session, keyspace=ks)

    def _stage_topics(self, stage: api.Stage) -> list[str]:
        if stage.source is None:
            return list(self.cfg.kafka.topics)
        return [self.cfg.repartition_topic(stage.source)]

    def _all_topics(self) -> list[str]:
        return sorted({t for s in self.job.stages for t in self._stage_topics(s)})

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        """Run every lane in its own thread until SIGTERM (or a lane gives up), then shut down.
        The main thread only waits, so signals are handled at once."""
        assert self.membership is not None
        threads = [
            threading.Thread(target=self._run_lane, args=(lane,), name=f"floe-lane-{lane.name}", daemon=True)
            for lane in self.lanes
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
        if self._halt.is_set():
            return EXIT_FAILED
        return self.shutdown()

    def _stopping(self) -> bool:
        return self.stop_requested.is_set() or self._halt.is_set()

    def _run_lane(self, lane: Lane) -> None:
        assert self.membership is not None
        # jobs of this thread go to the lane's pool: FAIR scheduling between lanes
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", lane.name)
        idle = self.cfg.kafka.poll_interval_ms / 1000
        outage = outages.Wait(lane.name, readiness=self.health)
        while not self._stopping():
            self.health.beat(lane.name)
            worked = 0
            generation = self.membership.rebalances
            try:
                for stage in lane.stages:
                    if self._stopping():
                        break
                    # one batch per stage; between two of them is a boundary for revocations
                    with self.membership.batch(lane.topics) as owned:
                        tps = [tp for tp in owned if tp[0] in set(self._stage_topics(stage))]
                        if tps:
                            worked += self.run_stage(stage, tps, lane)
                lane.failures = 0
                outage.succeeded()
                self._passed(lane, generation)
            except offsets.OwnershipLost as lost:
                # not a failure: this replica was paused past its session and another one owns
                # the partitions now; the next pass plans only what the group gives it
                log.warning(
                    "Abandoned batch stage=%s partitions=%s (another replica owns them now); "
                    "this replica commits nothing of it",
                    lost.stage,
                    lost.tps,
                )
                self._forget_state_of(lost.tps)
                continue
            except Exception as exc:
                dependency = outages.unavailable(exc)
                if dependency is not None:
                    # waited out, not counted: a restart would only add a Spark start to the outage
                    self.stop_requested.wait(outage.failed(dependency, exc))
                    continue
                lane.failures += 1
                self._failed(lane)
                log.exception(
                    "Batch failed lane=%s failures=%d; its plan stays in flight and is replayed",
                    lane.name,
                    lane.failures,
                )
                if lane.failures >= 5:
                    self._halt.set()
                    return
                self.stop_requested.wait(min(2**lane.failures, 30))
                continue
            if not worked:
                # nothing to read: sleep until new records are likely, or new partitions arrive
                self.membership.wait(idle)

    def _passed(self, lane: Lane, generation: int) -> None:
        """A lane completed a pass over what it owned at `generation`: ready once every lane has
        done so since the last assignment change."""
        owned = self.membership.owned
        with self._lock:
            lane.passed_generation = generation
            if owned != self._last_owned:
                self._last_owned = owned
                health.OWNED.labels(self.app).set(len(owned))
                health.REBALANCES.labels(self.app).set(self.membership.rebalances)
            self.health.owned = len(owned)
            current = self.membership.rebalances
            self.health.batch_since_assignment = all(ln.passed_generation == current for ln in self.lanes)

    def _failed(self, lane: Lane) -> None:
        """A lane's pass failed: not ready until it completes one again, so that a replica whose
        batches keep failing leaves its Service's endpoints and holds up a rollout that brought it."""
        with self._lock:
            lane.passed_generation = -1
            self.health.batch_since_assignment = False

    def _budget(self, stage: str) -> int:
        k = self.cfg.kafka
        return planning.record_budget(
            max_records=k.max_records_per_batch,
            max_bytes=k.max_bytes_per_batch,
            avg_record_bytes=self._avg_bytes.get(stage),
            rows_per_record=self._rows_per_record.get(stage),
        )

    def run_stage(self, stage: api.Stage, tps: list[tuple[str, int]], lane: Lane) -> int:
        """One pass of `stage` over the partitions `tps`: plan, read, apply, emit, commit. The
        records of the batch; 0 when there was nothing to read."""
        assert self.offsets is not None and self.membership is not None
        assert lane.reader is not None and lane.sink is not None
        clock = api.BatchClock()
        planned = self._plan(stage, tps, lane.reader)
        if planned is None:
            return 0
        plan, rows = planned
        clock.lap("plan")
        held = self.membership.assignments(p.tp for p in plan.partitions)
        got = self._read(stage, plan, rows, lane.reader, clock)
        parts, size = got.parts, got.size
        assignments = self.membership.assignments(p.tp for p in parts)
        batch = self._batch(
            lane,
            stage,
            got.df,
            clock,
            seqs={p.tp: p.seq for p in parts},
            stamps={p.tp: p.stamp for p in parts},
            records=size,
            owned=statecache.Ownership(self.state_cache, {p: n for (_t, p), n in assignments.items()}),
        )
        result = stage.fn(batch)
        clock.lap("fn")
        faults.point(f"{stage.name}:after-state")
        self._check_owned(stage, parts, held, ask_cassandra=True)
        out = self._emit(result, lane.sink, large=size > self.cfg.kafka.spark_sink_min_records)
        clock.lap("emit")
        faults.point(f"{stage.name}:after-emit")
        self._check_owned(stage, parts, held, ask_cassandra=False)
        if not self.offsets.commit(parts, got.positions):
            raise offsets.OwnershipLost([p.tp for p in parts], stage=stage.name)
        clock.lap("commit")
        self.membership.commit({p.tp: p.end for p in parts})
        clock.lap("group")
        replay = any(p.replay for p in plan.partitions)
        self._committed(stage, parts, size=size, out=out, dlq=batch.dlq_records, replay=replay, clock=clock)
        return size

    def _plan(
        self, stage: api.Stage, tps: list[tuple[str, int]], reader: kafkaio.RangeReader
    ) -> tuple[planning.BatchPlan, dict[tuple[str, int], planning.OffsetRow]] | None:
        """The stage's next batch over `tps` (an in-flight plan replayed exactly, or a new capped
        range) and the offsets rows it was planned from; None when there is nothing to read."""
        assert self.offsets is not None and self.membership is not None
        topics = self._stage_topics(stage)
        self.state_cache.retain(set(self.membership.assignments(self.membership.owned).values()))
        rows = self.offsets.read(topics)
        # rows another process claimed last: what this replica kept of their state may be stale
        self._forget_state_of([tp for tp, row in rows.items() if tp in tps and row.owner != self.owner])
        marks = reader.watermarks(tps)
        for (topic, partition), m in marks.items():
            health.END_OFFSET.labels(self.app, topic, str(partition)).set(m.high)
        plan = planning.plan_batch(
            owned=tps,
            rows=rows,
            watermarks=marks,
            starting_offsets=self.cfg.kafka.starting_offsets,
            budget=self._budget(stage.name),
            now_us=time.time_ns() // 1000,
        )
        for warning in plan.warnings:
            log.warning(warning)
        if plan.new_rows:
            self.offsets.create(plan.new_rows)
        if not plan.partitions:
            return None
        replays = [p for p in plan.partitions if p.replay]
        if replays:
            log.info(
                "Replaying stage=%s plans=%s",
                stage.name,
                [(p.topic, p.partition, p.seq, p.start, p.end) for p in replays],
            )
        return plan, rows

    def _read(
        self,
        stage: api.Stage,
        plan: planning.BatchPlan,
        rows: dict[tuple[str, int], planning.OffsetRow],
        reader: kafkaio.RangeReader,
        clock: api.BatchClock,
    ) -> StageRead:
        """Claim the planned partitions and read their records into a DataFrame: through Spark's
        Kafka source for a large batch of an input topic, else in the driver (where a repartition
        topic's records already applied are dropped)."""
        before = {tp: dict(rows[tp].source_positions) for tp in (p.tp for p in plan.partitions) if tp in rows}
        # what each claim expects to find: the row as read, or as just created
        expected = {**{(r.topic, r.partition): r for r in plan.new_rows}, **rows}
        seen: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}
        parts = plan.partitions
        if stage.source is None and self.spark_reads and plan.records >= self.cfg.kafka.spark_read_min_records:
            # records read are not counted (that would be a job): the plan's size is what is read
            self._claim(stage, parts, expected)
            df = kafkaio.read_with_spark(self.spark, self.cfg, parts)
            size, skipped = plan.records, 0
            clock.lap("read")
        else:
            # A repartition topic's records may be runs of rows: its reads stop at the row cap,
            # and the plans are stored as cut, before anything of the batch has effects.
            limits = planning.row_limits(parts, self.cfg.kafka.max_records_per_batch) if stage.source else None
            batch_records, stopped = reader.read_rows(parts, limits)
            parts = planning.cut(parts, stopped)
            self._claim(stage, parts, expected)
            size = records.row_count(batch_records)
            average = records.average_bytes(batch_records)
            if average is not None:
                self._avg_bytes[stage.name] = average
                self._rows_per_record[stage.name] = size / len(batch_records)
            read = len(batch_records)
            if stage.source is not None:
                batch_records, seen = records.drop_applied(batch_records, before)
            skipped = read - len(batch_records)
            clock.lap("read")
            df = records.to_dataframe(self.spark, batch_records)
            clock.lap("frame")
        positions: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}
        if stage.source is not None:
            if skipped > 0:
                health.RECORDS_DEDUPED.labels(self.app).inc(skipped)
                log.info("Dropped already-applied repartition records stage=%s records=%d", stage.name, skipped)
            positions = {p.tp: planning.advance_positions(before.get(p.tp, {}), seen.get(p.tp, {})) for p in parts}
        return StageRead(df=df, parts=parts, size=size, positions=positions)

    def _committed(
        self,
        stage: api.Stage,
        parts: list[planning.PartitionPlan],
        *,
        size: int,
        out: int,
        dlq: int,
        replay: bool,
        clock: api.BatchClock,
    ) -> None:
        """The metrics and the log line of a committed batch."""
        for p in parts:
            health.COMMITTED.labels(self.app, p.topic, str(p.partition)).set(p.end)
        health.RECORDS_IN.labels(self.app, stage.name).inc(size)
        health.RECORDS_OUT.labels(self.app, stage.name).inc(out)
        health.RECORDS_DLQ.labels(self.app).inc(dlq)
        health.BATCHES.labels(self.app, stage.name, "replay" if replay else "new").inc()
        health.BATCH_SECONDS.labels(self.app, stage.name).observe(clock.total)
        health.BATCH_RECORDS.labels(self.app, stage.name).observe(size)
        health.LAST_BATCH.labels(self.app).set(time.time())
        health.STATE_CACHE_KEYS.labels(self.app).set(self.state_cache.keys)
        log.info(
            "Committed stage=%s partitions=%d records=%d out=%d seconds=%.2f %s",
            stage.name,
            len(parts),
            size,
            out,
            clock.total,
            clock.summary(),
        )

    def _claim(
        self, stage: api.Stage, parts: list[planning.PartitionPlan], expected: dict[tuple[str, int], planning.OffsetRow]
    ) -> None:
        """Claim the batch's partitions before it has any effect (`OffsetsTable.claim`)."""
        assert self.offsets is not None
        if not self.offsets.claim(parts, expected):
            raise offsets.OwnershipLost([p.tp for p in parts], stage=stage.name)
        faults.point(f"{stage.name}:after-claim")

    def _check_owned(
        self,
        stage: api.Stage,
        parts: list[planning.PartitionPlan],
        held: dict[tuple[str, int], int],
        *,
        ask_cassandra: bool,
    ) -> None:
        """Give the batch up if its partitions changed hands since it started: the group took them
        (`held`: their assignments then), or, `ask_cassandra`, another replica claimed them. The
        group's word can come late to a replica that was paused; Cassandra's cannot."""
        assert self.offsets is not None and self.membership is not None
        now = self.membership.assignments(held)
        lost = [tp for tp, number in held.items() if now.get(tp) != number]
        if not lost and ask_cassandra:
            lost = self.offsets.lost(parts)
        if lost:
            raise offsets.OwnershipLost(lost, stage=stage.name)

    def _forget_state_of(self, tps: list[tuple[str, int]]) -> None:
        """Drop what this replica kept of the state of these input partitions' store partitions."""
        for _topic, partition in tps:
            self.state_cache.forget_partition(partition)

    def _emitted(self, result: Any) -> list[api.Emit]:
        """What a stage returned, as `Emit`s."""
        from pyspark.sql import DataFrame

        if result is None:
            return []
        out: list[api.Emit] = []
        for item in result if isinstance(result, list | tuple) else [result]:
            if isinstance(item, DataFrame):
                if "topic" in item.columns:
                    item = api.Emit(item, None)
                elif self.cfg.kafka.output_topics:
                    item = api.Emit(item, self.cfg.kafka.output_topics[0])
                else:
                    raise ValueError("the stage returned rows but kafka.output_topics is empty")
            if not isinstance(item, api.Emit):
                raise TypeError(f"a stage returns DataFrame, Emit, a list of them or None; got {type(item).__name__}")
            out.append(item)
        return out

    def _emit(self, result: Any, sink: kafkaio.KafkaSink, *, large: bool) -> int:
        return sum(_write(sink, e, large=large) for e in self._emitted(result))

    # -- shutdown -----------------------------------------------------------------------------
    def shutdown(self) -> int:
        self._shutting_down = True
        log.info("Shutting down app=%s member=%s", self.app, self.member)
        self.health.stopping = True
        leave = self.cfg.kafka.leave_group_on_close
        if self.membership is not None:
            self.membership.close(leave=leave)
        for client in [c for lane in self.lanes for c in (lane.reader, lane.sink)]:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        if self.spark is not None:
            with contextlib.suppress(Exception):
                self.spark.stop()
        if self.session is not None:
            with contextlib.suppress(Exception):
                self.session.cluster.shutdown()
        log.info("Stopped app=%s member=%s left_group=%s", self.app, self.member, leave)
        if not leave:
            # A closed consumer always leaves; exit before its finaliser can.
            logging.shutdown()
            os._exit(EXIT_OK)
        return EXIT_OK


def _write(sink: kafkaio.KafkaSink, e: api.Emit, *, large: bool = False, dry_run: bool = False) -> int:
    """What a stage emitted, written by the lane's sink (`KafkaSink.write`); the rows written."""
    return sink.write(
        e.df,
        topic=e.topic,
        large=large,
        order=e.order,
        positions=e.positions,
        dry_run=dry_run,
        rows=e.rows,
        table=e.table,
    )
