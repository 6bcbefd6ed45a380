"""The replica context: what the batch loop's parts read of the replica they run in.

A replica's parts (`warmup`, `lanes`, `quarantine`, `stagepass`, `stopping`) receive this
context, not the `runner.Runner` that composes them, so they sit on the floor below it and none
of them needs the others' state to be read: the configuration and the job, who this process is,
its health, the Spark session, Cassandra's session and the offsets table, the group member and
the state cache. The mutable state of each part lives with its owner instead (the stage passes'
budget statistics and positions in `stagepass.PassState`, the lanes' readiness in
`lanes.Readiness`, the stop flags in `stopping.Stops`).

The session, the offsets table, Spark and the group member are set once by `Runner.start`, in
that order; before the replica joins its group they are None.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from floe_jobs import api, health, kafkaio, statecache
from floe_jobs.config import FloeConfig

if TYPE_CHECKING:
    from floe_jobs.membership import Membership
    from floe_jobs.offsets import OffsetsTable


@dataclass
class ReplicaContext:
    """What a replica's parts share: set up by `Runner`, read (and the clients used) by the rest."""

    cfg: FloeConfig
    job: api.Job
    member: str
    # who claims this process's batches in the offsets table: the member name for people, and
    # a token of this process, so that a replica restarted under the same name is not taken
    # for its former self (`floe_jobs.offsets`)
    owner: str
    health: health.Health
    # Spark's Kafka source may read large batches of input topics: its connector is on
    # spark.jars and the batch cap lets a batch be that large (`floe_jobs.placement`)
    spark_reads: bool
    state_cache: statecache.StateCache
    # store → the stage that writes it (`api.Batch.writers`)
    store_writers: dict[str, str] = field(default_factory=dict)
    spark: Any = None
    session: Any = None
    offsets: OffsetsTable | None = None
    membership: Membership | None = None

    @classmethod
    def of(cls, cfg: FloeConfig, job: api.Job, *, member_name: str | None = None) -> ReplicaContext:
        """The context of a replica of `job` that has not started yet."""
        member = member_name or cfg.pod.name or socket.gethostname()
        return cls(
            cfg=cfg,
            job=job,
            member=member,
            owner=f"{member}/{uuid.uuid4().hex[:8]}",
            health=health.Health(stall_seconds=cfg.metrics.stall_seconds, app=cfg.metrics_app),
            spark_reads=(
                kafkaio.spark_connector(cfg) and cfg.kafka.spark_read_min_records <= cfg.kafka.max_records_per_batch
            ),
            state_cache=statecache.StateCache(cfg.state.cache_max_keys),
        )

    @property
    def app(self) -> str:
        return self.cfg.app_id

    @property
    def metrics_app(self) -> str:
        """The `app` label of the replica's series: the StreamingApp's name, as the operator's
        series carry it (`floe_jobs.health`)."""
        return self.cfg.metrics_app

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

    def all_topics(self) -> list[str]:
        """Every topic the job's stages read, for the group member's subscription."""
        return sorted({t for s in self.job.stages for t in self.stage_topics(s)})
