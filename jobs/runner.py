"""The batch loop of one replica, from start-up checks to a graceful exit.

`Runner` composes a replica from its parts and runs them in order. What the parts share is the
replica context (`floe_jobs.replica`: the configuration and the job, the Spark session, Cassandra's
session and the offsets table, the group member, the known state rows, health), which `Runner`
sets up and hands to each part; each part's own state lives with it (the stop flags in
`stopping.Stops`, the lanes' readiness in `lanes.Readiness`, the passes' budget statistics and
positions in `stagepass.PassState`). No part imports this module. The work is done by the modules
named for it:

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
from types import FrameType
from typing import Any

from confluent_kafka.admin import AdminClient
from floe_jobs import (
    api,
    health,
    kafkaaccess,
    kafkaio,
    lanes,
    offsets,
    sparkio,
    stagepass,
    startup,
    stopping,
    warmup,
)
from floe_jobs.config import FloeConfig
from floe_jobs.exitcodes import EXIT_FAILED
from floe_jobs.replica import ReplicaContext
from floe_jobs.startup import ensure_topics
from floe_jobs.startup import retry as _retry

log = logging.getLogger("floe_jobs")


class Runner:
    """A replica: its parts, the order they run in, and where each is done."""

    def __init__(self, cfg: FloeConfig, job: api.Job, *, member_name: str | None = None) -> None:
        self.ctx = ReplicaContext.of(cfg, job, member_name=member_name)
        self.stops = stopping.Stops()
        self.passes = stagepass.PassState()
        self.ready = lanes.Readiness()
        self.lanes: list[lanes.Lane] = []

    # -- signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        stopping.on_signal(self.ctx, self.stops, signum)

    def abort(self, reason: str) -> None:
        """Stop without committing (`floe_jobs.stopping.abort`)."""
        stopping.abort(self.ctx, self.stops, reason)

    # -- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        """Check and set up everything the first batch needs, warm the stages up, then join the
        group; a `StartupError` names what is missing or unreachable."""
        from floe_jobs import membership
        from floe_jobs.stores import config as store_config
        from floe_jobs.stores import floor

        ctx = self.ctx
        cfg = ctx.cfg
        if cfg.metrics.port:
            health.serve(ctx.health, port=cfg.metrics.port)
        refused = kafkaaccess.ErrorWatch()
        conf: dict[str, Any] = {"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.security.librdkafka()}
        admin = AdminClient(kafkaio.with_properties(conf, cfg, "admin"), error_cb=refused)
        bootstrap = cfg.kafka.bootstrap_servers
        kafkaaccess.check_access(admin, refused, cfg.kafka.security, bootstrap=bootstrap, timeout=10.0)
        ensure_topics(cfg, admin, ctx.job)
        c = cfg.cassandra
        ccfg = c.connection()
        ctx.session = _retry(
            f"Cassandra at {','.join(c.hosts)}:{c.port} (cassandra.hosts)",
            lambda: store_config.connect(ccfg),
        )
        # before any read or table: levels that cannot keep the fence for the keyspace's real
        # replication stop the replica (exit 2, `floe_jobs.stores.floor`)
        floor.check_keyspace(
            ctx.session,
            keyspace=c.keyspace,
            consistency=ccfg.consistency,
            serial_consistency=ccfg.serial_consistency,
            datacenter=ccfg.local_datacenter,
        )
        startup.provision(cfg, ctx.session)
        ctx.offsets = offsets.OffsetsTable(
            ctx.session, keyspace=c.keyspace, app_id=cfg.app_id, owner=ctx.owner, readers=ctx.readers()
        )
        protocol = membership.choose_protocol(admin, cfg)
        log.info(
            "Starting app=%s member=%s protocol=%s stages=%s",
            ctx.app,
            ctx.member,
            protocol,
            [s.name for s in ctx.job.stages],
        )
        ctx.spark = sparkio.build_session(cfg, app_name=f"floe-{ctx.app}")
        client_id = f"{ctx.app}-{ctx.member}"
        self.lanes = lanes.build(cfg, ctx.job.stages, ctx.stage_topics, client_id=client_id)
        warmup.warm_up(ctx, self.lanes)
        ctx.membership = membership.Membership(
            cfg, topics=ctx.all_topics(), client_id=client_id, protocol=protocol, admin=admin
        )
        ctx.health.in_group = True
        if ctx.job.queries and cfg.metrics.query_port:
            startup.serve_queries(cfg, ctx.job, ctx.session)

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        """Run every lane until SIGTERM (or a lane gives up), then shut down."""
        assert self.ctx.membership is not None
        lanes.run_all(self.ctx, self.lanes, ready=self.ready, passes=self.passes, stops=self.stops)
        if self.stops.halt.is_set():
            return EXIT_FAILED
        return self.shutdown()

    # -- shutdown -----------------------------------------------------------------------------
    def shutdown(self) -> int:
        """Leave the group and close every client (`floe_jobs.stopping.shutdown`)."""
        clients = [c for lane in self.lanes for c in (lane.reader, lane.sink)]
        return stopping.shutdown(self.ctx, self.stops, clients)
