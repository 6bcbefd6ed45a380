"""The batch loop of one replica, from start-up checks to a graceful exit.

`Runner` owns what a replica's parts share (the configuration and the job, the Spark session,
Cassandra's session and the offsets table, the group member, the lanes, the known state rows,
the flags that stop it) and hands the work to the modules named for it:

- `floe_jobs.startup`: the entry point, the topics, the tables, the query endpoint, and the
  `StartupError` that keeps a replica from starting;
- `floe_jobs.warmup`: every stage run once as a dry run before the replica joins its group;
- `floe_jobs.lanes`: the threads that run the stages, and the loop each of them turns;
- `floe_jobs.stagepass`: one pass of a stage (plan, read, apply, emit, commit), the order that
  makes its state effect happen once;
- `floe_jobs.placement`: where a batch runs, in the driver or in Spark, decided once per batch;
- `floe_jobs.stopping`: the drain on SIGTERM, the abort when it cannot finish in time.

Per pass, for each stage of the job, over the partitions this replica owns: plan (replay an
in-flight plan exactly, or a new capped range), read exactly those ranges and claim them before
the batch has any effect, run the stage function (its state helpers fence every effect by the
batch's sequence), write what it emits to Kafka, commit the offsets in Cassandra and then in the
group. A crash anywhere before the commit leaves the plan in flight and the next owner replays
it. Revocations wait for the running batch (`Membership.batch`), so partitions change hands at
batch boundaries.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import uuid
from types import FrameType
from typing import Any

from confluent_kafka.admin import AdminClient
from floe_jobs import (
    api,
    health,
    kafkaio,
    kafkasec,
    lanes,
    offsets,
    sparkio,
    startup,
    statecache,
    stopping,
    warmup,
)
from floe_jobs.config import FloeConfig
from floe_jobs.exitcodes import EXIT_FAILED
from floe_jobs.lanes import Lane, group_lanes
from floe_jobs.stagepass import StageRead
from floe_jobs.startup import StartupError, ensure_topics, load_entrypoint
from floe_jobs.startup import retry as _retry
from floe_jobs.warmup import WARM_UP_RECORDS

__all__ = [
    "WARM_UP_RECORDS",
    "Lane",
    "Runner",
    "StageRead",
    "StartupError",
    "ensure_topics",
    "group_lanes",
    "load_entrypoint",
]

log = logging.getLogger("floe_jobs")


class Runner:
    """A replica: what its parts share, the order they run in, and where each is done."""

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
        self.aborting = False
        self.shutting_down = False
        # set when a lane gave up (batches kept failing): the other lanes stop too
        self.halt = threading.Event()
        # per stage, what its last read taught of its records (`stagepass.budget`)
        self.avg_bytes: dict[str, float] = {}
        self.rows_per_record: dict[str, float] = {}
        self.spark: Any = None
        # Spark's Kafka source may read large batches of input topics: its connector is on
        # spark.jars and the batch cap lets a batch be that large (`floe_jobs.placement`)
        self.spark_reads = (
            kafkaio.spark_connector(cfg) and cfg.kafka.spark_read_min_records <= cfg.kafka.max_records_per_batch
        )
        self.session: Any = None
        self.membership: Any = None
        self.lanes: list[Lane] = []
        self.offsets: offsets.OffsetsTable | None = None
        # guards the lanes' readiness bookkeeping (`lanes._passed`)
        self.lock = threading.Lock()
        self.last_owned: list[tuple[str, int]] = []
        self.state_cache = statecache.StateCache(cfg.state.cache_max_keys)
        # store → the stage that writes it (`api.Batch.writers`)
        self.store_writers: dict[str, str] = {}
        # (stage, (topic, partition)) → the stage's committed position as last read or committed
        # here: the group mirrors the lowest of a partition's stages (`stagepass.group_positions`)
        self.positions: dict[tuple[str, tuple[str, int]], int] = {}

    # -- signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        stopping.on_signal(self, signum)

    def abort(self, reason: str) -> None:
        """Stop without committing (`floe_jobs.stopping.abort`)."""
        stopping.abort(self, reason)

    # -- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        """Check and set up everything the first batch needs, warm the stages up, then join the
        group; a `StartupError` names what is missing or unreachable."""
        from floe_jobs import membership
        from floe_jobs.stores import config as store_config
        from floe_jobs.stores import floor

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
        # before any read or table: levels that cannot keep the fence for the keyspace's real
        # replication stop the replica (exit 2, `floe_jobs.stores.floor`)
        floor.check_keyspace(
            self.session,
            keyspace=c.keyspace,
            consistency=ccfg.consistency,
            serial_consistency=ccfg.serial_consistency,
            datacenter=ccfg.local_datacenter,
        )
        self._provision()
        self.offsets = offsets.OffsetsTable(
            self.session, keyspace=c.keyspace, app_id=cfg.app_id, owner=self.owner, readers=self.readers()
        )
        protocol = membership.choose_protocol(admin, cfg)
        log.info(
            "Starting app=%s member=%s protocol=%s stages=%s",
            self.app,
            self.member,
            protocol,
            [s.name for s in self.job.stages],
        )
        self.spark = sparkio.build_session(cfg, app_name=f"floe-{self.app}")
        client_id = f"{self.app}-{self.member}"
        self.lanes = lanes.build(cfg, self.job.stages, self.stage_topics, client_id=client_id)
        warmup.warm_up(self)
        self.membership = membership.Membership(cfg, topics=self._all_topics(), client_id=client_id, protocol=protocol)
        self.health.in_group = True
        if self.job.queries and cfg.metrics.query_port:
            startup.serve_queries(cfg, self.job, self.session)

    def _provision(self) -> None:
        startup.provision(self.cfg, self.session)

    def stage_topics(self, stage: api.Stage) -> list[str]:
        """The topics a stage reads: the input topics, or its source's repartition topic."""
        if stage.source is None:
            return list(self.cfg.kafka.topics)
        return [self.cfg.repartition_topic(stage.source)]

    def readers(self) -> dict[str, list[str]]:
        """Topic → the stages that read it, each with a position of its own (`floe_jobs.offsets`)."""
        out: dict[str, list[str]] = {}
        for s in self.job.stages:
            for topic in self.stage_topics(s):
                out.setdefault(topic, []).append(s.name)
        return out

    def _all_topics(self) -> list[str]:
        return sorted({t for s in self.job.stages for t in self.stage_topics(s)})

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        """Run every lane until SIGTERM (or a lane gives up), then shut down."""
        assert self.membership is not None
        lanes.run_all(self)
        if self.halt.is_set():
            return EXIT_FAILED
        return self.shutdown()

    def should_stop(self) -> bool:
        """Whether the lanes should stop: a signal, or a lane that gave up."""
        return self.stop_requested.is_set() or self.halt.is_set()

    # -- shutdown -----------------------------------------------------------------------------
    def shutdown(self) -> int:
        """Leave the group and close every client (`floe_jobs.stopping.shutdown`)."""
        return stopping.shutdown(self)
