"""What a job author writes against: a `Job` of stages, each a function of one micro-batch.

A stage function receives a `Batch` — the records of its owned partitions as a Spark DataFrame
with the Kafka columns (key, value, topic, partition, offset, timestamp, headers) plus the job's
stores — and returns what to emit: a DataFrame of key/value[/headers][/topic] rows (to the first
output topic unless rows carry a topic), an `Emit` or a list of them, or None.

    job = Job()

    @job.stage()                      # reads kafka.topics
    def split(batch):
        words = batch.df.select("topic", "partition", "offset",
                                F.posexplode(F.split(F.lower(F.col("value").cast("string")), r"\\W+")))
        return batch.rekey(words.where("col != ''"), name="words", key=F.col("col"), index="pos")

    @job.stage(source="words")        # reads <app-id>-words-repartition
    def count(batch):
        counts = batch.aggregate(batch.df, store="word-count", key=F.col("key").cast("string"))
        return counts.select(F.col("key"), F.col("value").cast("string"))

A plain function is a one-stage job. The helpers (`aggregate`, `latest`, `dedup`, `lookup`)
read and write state per distinct key from the executors, with the exactly-once fence of
`floe_jobs.state`. State a stage keeps is partitioned by that stage's input partition, so a
stage that keeps state reads one topic; re-key first (`rekey`) when the grouping key is not the
record key of the input. Stage functions must be deterministic: a replay after a crash reads
the same records and must compute the same result.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from floe_jobs import offsets, placement, smallbatch, state
from floe_jobs.config import FloeConfig, StoreSettings
from floe_jobs.kafkaio import KafkaSink
from floe_jobs.localdf import arrow_dataframe, arrow_schema, beside, collect_rows, local_dataframe
from floe_jobs.statecache import Ownership
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, IntegerType, StructField, StructType


@dataclass(frozen=True)
class Emit:
    """Rows to write to `topic` (None: each row's `topic` column).

    `order` names columns of `df` (not written) by which the rows are written in order, the
    first two also grouping them, as `rekey` needs: the runtime sorts in the driver when it
    produces the rows itself, which costs no Spark shuffle, and in Spark before its Kafka sink."""

    df: DataFrame
    topic: str | None
    order: tuple[str, ...] = ()
    # the rows are re-keyed: the sink adds their source-position headers from the first four
    # `order` columns (in Python when it produces them itself: collecting the headers as nested
    # rows would double the collect's cost)
    positions: bool = False
    # a combining re-key's rows (one per key and source partition) when the stage already holds
    # them, as an Arrow table of key, value and `REKEY_ORDER` in the order they are written
    # (`smallbatch.ranked`): the sink packs them into runs (`floe_jobs.runs`) without a Spark job
    table: Any = field(default=None, repr=False, compare=False)
    # the rows of df.select("key", "value", *order) when the stage already holds them in the
    # driver (a small batch's re-key): the sink produces them without another Spark job
    rows: list[tuple[Any, ...]] | None = field(default=None, repr=False, compare=False)


StageFn = Callable[["Batch"], Any]

# re-keyed rows are written per source partition in (offset, index) order: the reading stage
# keeps one high-water mark per source partition (`floe_jobs.records.drop_applied`)
REKEY_ORDER = ("_floe_src_topic", "_floe_src_partition", "_floe_src_offset", "_floe_src_idx")
# the columns of re-keyed rows: written ones, then their order
REKEYED = ["key", "value", *REKEY_ORDER]
# how `Batch.rekey(combine=...)` combines values per key before they are sent
COMBINE_OPS: dict[str, Callable[..., Column]] = {"sum": F.sum, "count": F.sum, "min": F.min, "max": F.max}


@dataclass(frozen=True)
class Stage:
    name: str
    fn: StageFn
    source: str | None  # None: the app's input topics; else the name of a repartition topic


@dataclass
class Job:
    stages: list[Stage] = field(default_factory=list)
    # store name → (key serde, value serde) served by the HTTP query endpoint (metrics.query_port)
    queries: dict[str, tuple[str, str]] = field(default_factory=dict)

    def expose(self, store: str, *, key_serde: str = "str", value_serde: str = "str") -> None:
        """Serve `store` read-only at GET /stores/<store>/keys/<key> and /stores/<store>?prefix=…"""
        self.queries[store] = (key_serde, value_serde)

    def stage(self, *, source: str | None = None, name: str | None = None) -> Callable[[StageFn], StageFn]:
        def register(fn: StageFn) -> StageFn:
            self.stages.append(Stage(name=name or fn.__name__, fn=fn, source=source))
            return fn

        return register

    def validate(self) -> None:
        if not self.stages:
            raise ValueError("the job has no stages")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        for name in names:
            offsets.check_stage_name(name)


def as_job(obj: Any) -> Job:
    if isinstance(obj, Job):
        obj.validate()
        return obj
    if callable(obj):
        return Job(stages=[Stage(name=getattr(obj, "__name__", "main"), fn=obj, source=None)])
    raise TypeError(f"the entrypoint must be a floe_jobs.api.Job or a function of a Batch, got {type(obj).__name__}")


class BatchClock:
    """Seconds per phase of one batch, for the log line every committed batch writes."""

    def __init__(self) -> None:
        self.started = self._last = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last
        self._last = now

    @property
    def total(self) -> float:
        return self._last - self.started

    def summary(self) -> str:
        return " ".join(f"{name}={seconds:.3f}" for name, seconds in self.phases.items())


class StateHelperError(ValueError):
    pass


class StageConfigError(StateHelperError):
    """A stage uses the stores against the configuration: found by the warm-up's dry run, it
    stops the replica before its first batch (`floe_jobs.warmup`), exit code 2."""


class StoreWriterError(StageConfigError):
    """Two stages of one job write the same store: their fences (one per input partition of
    each stage's topic) would skip each other's updates as already applied."""


class StoreTypeError(StageConfigError):
    """A helper opens a store of a type it cannot use: fenced state lives in partitioned stores
    only (a global table has no partition to fence by, a versioned one another layout), and
    `lookup` reads partitioned and global stores."""


# the store types each helper opens
FENCED_TYPES = ("partitioned",)
LOOKUP_TYPES = ("partitioned", "global")


@dataclass
class Batch:
    """One micro-batch of one stage."""

    spark: SparkSession
    df: DataFrame
    stage: str
    cfg: FloeConfig
    args: list[str]
    # batch sequence per input (topic, partition): the fence of the state this batch writes
    seqs: dict[tuple[str, int], int]
    # the replica's producer (dead letters go out through it during the stage)
    sink: KafkaSink
    # seconds per phase of this batch; the state helpers add theirs ("state")
    clock: BatchClock = field(default_factory=lambda: BatchClock())
    dlq_records: int = 0
    # a warm-up run (`floe_jobs.warmup`): helpers touch no store (every key reads as absent and
    # nothing is written) and the sink produces nothing
    dry_run: bool = False
    # input records planned for this batch; None: unknown (every helper runs in Spark)
    records: int | None = None
    # the replica's known state rows and the assignments of the batch's partitions
    # (`floe_jobs.statecache`); None: every state read goes to Cassandra
    owned: Ownership | None = None
    # write timestamp (µs) per input (topic, partition) of the state this batch writes, so that a
    # stale owner's late writes lose to newer batches' (`floe_jobs.planning.stamp_for`); empty:
    # the clock (a warm-up, which writes nothing, or a tool driving helpers outside the loop)
    stamps: dict[tuple[str, int], int] = field(default_factory=dict)
    # store → the stage that writes it, shared by every batch of a replica (`_fenced` checks it)
    writers: dict[str, str] = field(default_factory=dict)
    # where the batch's phases run, decided once for it (`floe_jobs.placement`); None: decided
    # here from `records` (a tool or a test driving helpers outside the loop)
    where: placement.Placement | None = None
    # a trial over some records (`floe_jobs.quarantine`): helpers read the stores but write
    # nothing, and the sink produces nothing, so a trial has no effect
    trial: bool = False
    # called before the batch's first effect (a state write); the runtime then knows the batch
    # may have left effects behind (`floe_jobs.quarantine`)
    on_effect: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.where is None:
            self.where = placement.decide(self.cfg, records=self.records)

    @property
    def stores(self) -> dict[str, StoreSettings]:
        return {s.name: s for s in self.cfg.stores}

    # -- plumbing ---------------------------------------------------------------------------
    def _placement(self) -> placement.Placement:
        assert self.where is not None  # set by __post_init__
        return self.where

    def _small(self) -> bool:
        """Whether helpers do their grouping in the driver (`floe_jobs.smallbatch`)."""
        return self._placement().driver_grouping

    def _collected_by_sink(self) -> bool:
        """Whether the sink will collect what this batch emits and produce it from the driver
        (a warm-up's too), rather than hand a Spark plan to Spark's Kafka sink."""
        return not self._placement().spark_sink

    def _fences(self) -> dict[int, int]:
        fences: dict[int, int] = {}
        topics = {t for t, _ in self.seqs}
        if len(topics) > 1:
            raise StateHelperError(
                f"stage {self.stage!r} keeps state but reads several topics {sorted(topics)}; "
                "re-key them into one repartition topic first (Batch.rekey)"
            )
        for (_, partition), seq in self.seqs.items():
            fences[partition] = seq
        return fences

    def _stamps(self) -> dict[int, int] | None:
        """Write timestamps by input partition (one topic: `_fences` checked it); None: the clock."""
        if not self.stamps:
            return None
        return {partition: stamp for (_, partition), stamp in self.stamps.items()}

    def _fenced(self, fn: Callable[..., Any], ref: state.StoreRef, **kwargs: Any) -> Callable[..., Any]:
        """`fn` (a fenced state helper of `floe_jobs.state`) bound to this batch's store, fences,
        write timestamps and known rows."""
        writer = self.writers.setdefault(ref.name, self.stage)
        if writer != self.stage:
            raise StoreWriterError(
                f"store {ref.name!r} is written by stages {writer!r} and {self.stage!r}; one store has one "
                "writing stage: give each stage a store of its own (stores), and read another stage's "
                "store with Batch.lookup"
            )
        bound = functools.partial(
            fn, ref=ref, fences=self._fences(), stamps=self._stamps(), owned=self.owned, readonly=self.trial, **kwargs
        )
        if self.trial or self.dry_run or self.on_effect is None:
            return bound
        effect = self.on_effect

        def apply(rows: Any) -> Any:
            effect()
            return bound(rows)

        return apply

    def store_ref(
        self, name: str, *, key_serde: str, value_serde: str, helper: str = "", types: tuple[str, ...] = ()
    ) -> state.StoreRef:
        """What opens store `name`. `helper` and `types`: the helper that opens it and the store
        types it can use; another declared type is a `StoreTypeError` naming the stage."""
        spec = self.stores.get(name)
        if spec is None:
            raise StateHelperError(
                f"store {name!r} is not configured; configured stores: {sorted(self.stores)} (key: stores)"
            )
        if types and spec.type not in types:
            raise StoreTypeError(_wrong_type(self.stage, helper, name, spec.type, types))
        c = self.cfg.cassandra
        return state.StoreRef(
            cassandra=c.connection(),
            keyspace=c.keyspace,
            name=spec.name,
            type=spec.type,
            ttl_seconds=spec.ttl_seconds,
            key_serde=key_serde,
            value_serde=value_serde,
        )

    def _apply(
        self,
        rows: DataFrame,
        fn: Callable[..., Any],
        out_value: StructField,
        *,
        collected: list[tuple[Any, ...]] | None = None,
        aligned: bool = False,
    ) -> DataFrame:
        """Run `fn` over the (partition, key, value) rows in the driver; its output as a DataFrame.

        The rows are already aggregated per key, so they are few next to the batch's records,
        and one collect is a single Spark job; the state reads and writes then go out from one
        Cassandra session with the stores' bounded concurrency, and the result is local data
        that later actions of the stage never recompute (nor re-apply). `collected`: the rows,
        when a small batch grouped them in the driver. `aligned`: `fn` answers each row once,
        in the order of `state.by_partition` (the fenced helpers), so the result is that
        table's partition and key columns beside the answers, with no tuple per row."""
        key_field = rows.schema["key"]
        schema = StructType(
            [
                StructField("partition", rows.schema["partition"].dataType),
                StructField("key", key_field.dataType),
                out_value,
            ]
        )
        # as Arrow when Spark collects it: the state helpers group it by partition in column
        # operations (`state.group_table`), with no Python tuple per row before that
        given: Any = rows.toArrow() if collected is None else collected
        self.clock.lap("fn")
        if self.dry_run:
            keyed = (
                collected
                if collected is not None
                else zip(given.column(0).to_pylist(), given.column(1).to_pylist(), strict=True)
            )
            result = [(p, k, None) for p, k, *_v in keyed]
        elif aligned and collected is None:
            ordered = state.by_partition(given)
            answers = [answer for _p, _k, answer in fn(ordered)]
            self.clock.lap("state")
            table = beside(ordered, answers, schema)
            if table is not None:
                return arrow_dataframe(self.spark, table, schema)
            parts, keys = ordered.column(0).to_pylist(), ordered.column(1).to_pylist()
            return local_dataframe(self.spark, list(zip(parts, keys, answers, strict=True)), schema)
        else:
            result = list(fn(given))
        self.clock.lap("state")
        return local_dataframe(self.spark, result, schema)

    # -- re-keying ----------------------------------------------------------------------------
    def rekey(
        self,
        df: DataFrame,
        *,
        name: str,
        key: Column,
        value: Column | None = None,
        index: str | None = None,
        combine: str | None = None,
    ) -> Emit:
        """Send rows to `<app-id>-<name>-repartition` keyed by `key`.

        `df` must keep the input's topic, partition and offset columns; `index` names a column
        numbering the rows derived from one input record (e.g. posexplode's `pos`), else one is
        computed. Each row carries its source position in headers; the reading stage drops
        positions it has already applied, which makes a replay of this stage exactly-once.

        `combine` (sum, count, min or max) first combines `value` (default 1 per row) per key
        and input partition within the batch, as Spark does before a shuffle, and writes one
        row per key and input partition whose value is the result as a UTF-8 decimal (read it
        back with `.cast("string").cast("long")`). For an aggregation that follows, this sends
        each key once per batch instead of once per occurrence. A combined row's position is
        (the batch's last offset of that input partition, the key's rank): a replay of the
        same planned range makes the same rows at the same positions, and a later batch's
        positions are higher, so the reading stage still drops what it applied.
        """
        _check_rekey(df, name=name, index=index, combine=combine)
        if self._small() and (combine is not None or index is not None or value is None):
            return self._rekey_in_driver(df, name=name, key=key, value=value, index=index, combine=combine)
        grouped = None
        if combine is not None:
            grouped = self._grouped(df, key=key, value=value, combine=combine)
            keyed = self._combined(grouped)
        else:
            keyed = _keyed(df, key=key, value=value, index=index)
        out = keyed.select(
            F.col("_floe_key").alias("key"),
            F.col("_floe_value").alias("value"),
            *[
                F.col(c).alias(o)
                for c, o in zip(("topic", "partition", "offset", "_floe_idx"), REKEY_ORDER, strict=True)
            ],
        )
        table = None
        if grouped is not None and self._collected_by_sink():
            # The rows are collected anyway: collect the group-by and rank in the driver, which
            # spares the two windows' shuffles (docs/runtime.md, "What a batch costs").
            table = smallbatch.ranked(grouped.toArrow()).rename_columns(REKEYED)
        return Emit(out, self.cfg.repartition_topic(name), order=REKEY_ORDER, positions=True, table=table)

    def _rekey_in_driver(
        self, df: DataFrame, *, name: str, key: Column, value: Column | None, index: str | None, combine: str | None
    ) -> Emit:
        """`rekey` for a small batch: one collect, then the rows and positions the Spark plan
        would give, computed in the driver (`floe_jobs.smallbatch`)."""
        if combine is not None:
            # a column that is the same on every row is added in Arrow, not collected from Spark
            # row by row: the topic when the batch reads one, a count's 1s
            topics = {t for t, _ in self.seqs}
            topic = next(iter(topics)) if len(topics) == 1 else None
            columns: list[Column | str] = [
                *(["topic"] if topic is None else []),
                "partition",
                "offset",
                key.cast("binary").alias("key"),
                *([value.cast("long").alias("value")] if value is not None else []),
            ]
            rows = smallbatch.with_constants(df.select(*columns).toArrow(), topic=topic, ones=value is None)
            combined = smallbatch.combined(rows, combine).rename_columns(REKEYED)
            return Emit(
                arrow_dataframe(self.spark, combined, self._rekeyed_schema(df, BinaryType())),
                self.cfg.repartition_topic(name),
                order=REKEY_ORDER,
                positions=True,
                table=combined,
            )
        source = [F.col("topic"), F.col("partition"), F.col("offset"), key.cast("binary").alias("_floe_key")]
        value_col = (value if value is not None else F.lit(b"").cast("binary")).alias("_floe_value")
        picked = df.select(*source, value_col, *([F.col(index).cast("int")] if index is not None else []))
        got = collect_rows(picked)
        if index is not None:
            rows = smallbatch.indexed([r[:5] for r in got], [r[5] for r in got])
        else:
            rows = smallbatch.indexed(got)
        value_type = picked.schema["_floe_value"].dataType
        return Emit(
            local_dataframe(self.spark, rows, self._rekeyed_schema(df, value_type)),
            self.cfg.repartition_topic(name),
            order=REKEY_ORDER,
            positions=True,
            rows=rows,
        )

    @staticmethod
    def _rekeyed_schema(df: DataFrame, value_type: DataType) -> StructType:
        """The columns of re-keyed rows: key, value, then `REKEY_ORDER` typed as `df`'s source columns."""
        return StructType(
            [
                StructField("key", BinaryType()),
                StructField("value", value_type),
                *(
                    StructField(o, df.schema[c].dataType)
                    for c, o in zip(("topic", "partition", "offset"), REKEY_ORDER, strict=False)
                ),
                StructField(REKEY_ORDER[3], IntegerType()),
            ]
        )

    def _grouped(self, df: DataFrame, *, key: Column, value: Column | None, combine: str) -> DataFrame:
        """One row per (input topic, input partition, key): `combine` over its values, and its
        last offset (`smallbatch.ranked` takes these rows)."""
        rows = df.select(
            "topic",
            "partition",
            "offset",
            key.cast("binary").alias("_floe_key"),
            (value if value is not None else F.lit(1)).cast("long").alias("_floe_v"),
        )
        return rows.groupBy("topic", "partition", "_floe_key").agg(
            COMBINE_OPS[combine]("_floe_v").alias("_floe_v"), F.max("offset").alias("_floe_last")
        )

    @staticmethod
    def _combined(grouped: DataFrame) -> DataFrame:
        """The grouped rows at their positions (see `rekey`), as a Spark plan."""
        by_source = Window.partitionBy("topic", "partition")
        return grouped.select(
            "topic",
            "partition",
            "_floe_key",
            F.col("_floe_v").cast("string").cast("binary").alias("_floe_value"),
            F.max("_floe_last").over(by_source).alias("offset"),
            F.row_number().over(by_source.orderBy("_floe_key")).alias("_floe_idx"),
        )

    # -- state helpers -------------------------------------------------------------------------
    def aggregate(
        self,
        df: DataFrame,
        *,
        store: str,
        key: Column,
        value: Column | None = None,
        op: str = "sum",
        key_serde: str = "str",
        value_serde: str = "long",
    ) -> DataFrame:
        """Aggregate `value` (default 1 per row) by key into `store`; returns (partition, key, value)
        with each touched key's new total. Aggregated in Spark first, one read and write per key."""
        if op not in COMBINE_OPS:
            raise StateHelperError(f"aggregate op {op!r}: accepted values are {sorted(COMBINE_OPS)}")
        value = value if value is not None else F.lit(1).cast("long")
        grouped = df.groupBy(F.col("partition"), key.alias("key")).agg(COMBINE_OPS[op](value).alias("value"))
        ref = self.store_ref(
            store, key_serde=key_serde, value_serde=value_serde, helper="aggregate", types=FENCED_TYPES
        )
        fn = self._fenced(state.merge_partition_rows, ref, combine=op)
        rows = None
        if self._small():  # the group-by in the driver; Spark's plan only gives the types
            rows = smallbatch.reduced(df.select(F.col("partition"), key.alias("key"), value).toArrow(), op)
        return self._apply(
            grouped, fn, StructField("value", grouped.schema["value"].dataType), collected=rows, aligned=True
        )

    def latest(
        self,
        df: DataFrame,
        *,
        store: str,
        key: Column,
        value: Column,
        key_serde: str = "str",
        value_serde: str = "str",
    ) -> DataFrame:
        """Keep the last value per key (by offset) in `store`; returns (partition, key, value).
        A struct, map or array value is stored as JSON text (readable with the `json` serde)."""
        last = df.groupBy(F.col("partition"), key.alias("key")).agg(F.max_by(value, F.col("offset")).alias("value"))
        if _is_struct(last, "value"):
            last = last.withColumn("value", F.to_json("value"))
            value_serde = "str"
        ref = self.store_ref(store, key_serde=key_serde, value_serde=value_serde, helper="latest", types=FENCED_TYPES)
        fn = self._fenced(state.latest_partition_rows, ref)
        return self._apply(last, fn, StructField("value", last.schema["value"].dataType), aligned=True)

    def dedup(self, df: DataFrame, *, store: str, key: Column, key_serde: str = "str") -> DataFrame:
        """Rows whose key was not seen within the store's TTL (ttl_seconds); first occurrence wins."""
        keyed = df.withColumn("_floe_key", key)
        ref = self.store_ref(store, key_serde=key_serde, value_serde="long", helper="dedup", types=FENCED_TYPES)
        fn = self._fenced(state.first_seen_partition_rows, ref)
        if self._small() and arrow_schema(keyed.schema) is not None:
            return self._dedup_in_driver(keyed, fn, df.schema)
        first = keyed.groupBy(F.col("partition"), F.col("_floe_key").alias("key")).agg(F.min("offset").alias("value"))
        verdicts = self._apply(first, fn, StructField("keep", _bool_type()), aligned=True)
        kept = verdicts.where("keep").select(F.col("partition").alias("_p"), F.col("key").alias("_k"))
        firsts = first.join(kept, (first["partition"] == kept["_p"]) & (first["key"] == kept["_k"])).select(
            F.col("partition").alias("_p2"), F.col("key").alias("_k2"), F.col("value").alias("_first_offset")
        )
        # by key too: the rows of one run of re-keyed rows share an offset (`floe_jobs.runs`)
        on = (
            (keyed["partition"] == firsts["_p2"])
            & (keyed["_floe_key"] == firsts["_k2"])
            & (keyed["offset"] == firsts["_first_offset"])
        )
        return keyed.join(firsts, on).drop("_p2", "_k2", "_first_offset", "_floe_key")

    def _dedup_in_driver(self, keyed: DataFrame, fn: Callable[..., Any], schema: StructType) -> DataFrame:
        """`dedup` of a small batch (`floe_jobs.smallbatch`): one collect of its rows, the first
        rows found and joined back in Arrow, the kept rows handed back to Spark as Arrow. The
        same rows as the Spark plan's (its group-by and two joins are three shuffles)."""
        table = keyed.toArrow()
        firsts = smallbatch.reduced(table.select(["partition", "_floe_key", "offset"]), "min")
        self.clock.lap("fn")
        kept: list[tuple[Any, ...]] = []
        if not self.dry_run:
            keep = {(p, k) for p, k, verdict in fn(firsts) if verdict}
            kept = [f for f in firsts if (f[0], f[1]) in keep]
        rows = smallbatch.at(table, ("partition", "_floe_key", "offset"), kept).drop_columns(["_floe_key"])
        self.clock.lap("state")
        return arrow_dataframe(self.spark, rows, schema)

    def lookup(
        self,
        df: DataFrame,
        *,
        store: str,
        key: Column,
        as_column: str,
        key_serde: str = "str",
        value_serde: str = "str",
    ) -> DataFrame:
        """Stream-table lookup: add `as_column` with the stored value of `key` (null when absent)."""
        keyed = df.withColumn("_floe_key", key)
        keys = keyed.select(F.col("partition"), F.col("_floe_key").alias("key"), F.lit(None).cast("string").alias("v"))
        ref = self.store_ref(store, key_serde=key_serde, value_serde=value_serde, helper="lookup", types=LOOKUP_TYPES)
        fn = functools.partial(state.lookup_rows, ref=ref)
        found = self._apply(keys.distinct(), fn, StructField(as_column, _string_type()))
        found = found.withColumnRenamed("partition", "_lp").withColumnRenamed("key", "_lk")
        on = (keyed["partition"] == found["_lp"]) & (keyed["_floe_key"] == found["_lk"])
        return keyed.join(found, on, "left").drop("_lp", "_lk", "_floe_key")

    # -- bad input ----------------------------------------------------------------------------
    def decode_json(self, df: DataFrame, schema: StructType | str) -> DataFrame:
        """Parse `value` as JSON; rows that do not parse go to `<app-id>-dlq` with the error in
        headers (floe.error, floe.topic, floe.partition, floe.offset) and are left out."""
        struct = _as_struct(schema)
        with_corrupt = StructType([*struct.fields, StructField("_corrupt", _string_type())])
        parsed = df.withColumn(
            "_json",
            F.from_json(F.col("value").cast("string"), with_corrupt, {"columnNameOfCorruptRecord": "_corrupt"}),
        )
        bad_cond = F.col("_json").isNull() | F.col("_json._corrupt").isNotNull()
        bad = parsed.where(bad_cond)
        headers = F.array(
            F.struct(F.lit("floe.error").alias("key"), F.lit(b"not valid JSON for the schema").alias("value")),
            F.struct(F.lit("floe.topic").alias("key"), F.col("topic").cast("binary").alias("value")),
            F.struct(F.lit("floe.partition").alias("key"), _text_bytes("partition").alias("value")),
            F.struct(F.lit("floe.offset").alias("key"), _text_bytes("offset").alias("value")),
        )
        # one Spark job; the rows go out through the replica's producer and are acknowledged
        bad_rows = bad.select("key", "value", headers.alias("headers"))
        self.dlq_records += self.sink.write(bad_rows, topic=self.cfg.dlq_topic, dry_run=self.dry_run or self.trial)
        good = parsed.where(~bad_cond)
        return good.select(*df.columns, *[F.col(f"_json.{f.name}").alias(f.name) for f in struct.fields])


def _wrong_type(stage: str, helper: str, store: str, declared: str, types: tuple[str, ...]) -> str:
    """What a stage that opens a store of the wrong type is told: the stage, the store, its type
    and what to change."""
    usage = f"{helper}(store={store!r})" if helper else f"store_ref({store!r})"
    if types == FENCED_TYPES:
        why = "keeps exactly-once state, fenced per input partition, which only a partitioned store holds"
        fix = (
            f"declare a partitioned store for this state in stores (FLOE_STORES; spec.state.stores), under a new "
            f"name since a store's type cannot change, and read {store!r} with lookup"
            if declared == "global"
            else "declare a partitioned store for this state in stores (FLOE_STORES; spec.state.stores), under a "
            "new name since a store's type cannot change"
        )
    else:
        why = f"reads {' and '.join(types)} stores"
        fix = (
            "declare the store partitioned or global (a new name: a store's type cannot change), or read the "
            "versioned store with floe_jobs.stores' versioned classes"
        )
    return f"stage {stage!r}: {usage} {why}, and store {store!r} is declared {declared}: {fix}"


def _text_bytes(column: str) -> Column:
    return F.col(column).cast("string").cast("binary")


def _as_struct(schema: StructType | str) -> StructType:
    parsed = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    if not isinstance(parsed, StructType):
        raise StateHelperError(f"decode_json needs a struct schema, got {parsed.simpleString()}")
    return parsed


def _is_struct(df: DataFrame, column: str) -> bool:
    return df.schema[column].dataType.typeName() in ("struct", "map", "array")


def _bool_type() -> Any:
    from pyspark.sql.types import BooleanType

    return BooleanType()


def _string_type() -> Any:
    from pyspark.sql.types import StringType

    return StringType()


def _check_rekey(df: DataFrame, *, name: str, index: str | None, combine: str | None) -> None:
    """Refuse a `rekey` call that could not keep its positions: the input's position columns
    missing, an unknown combine, or an index beside a combine (which merges the rows it numbers)."""
    missing = {"topic", "partition", "offset"} - set(df.columns)
    if missing:
        raise StateHelperError(f"rekey({name!r}) needs the input columns {sorted(missing)} in the DataFrame")
    if combine is not None and combine not in COMBINE_OPS:
        raise StateHelperError(f"rekey({name!r}) combine {combine!r}: accepted values are {sorted(COMBINE_OPS)}")
    if combine is not None and index is not None:
        raise StateHelperError(f"rekey({name!r}): index numbers rows that combine merges; pass one of them")


def _keyed(df: DataFrame, *, key: Column, value: Column | None, index: str | None) -> DataFrame:
    """`df` with a re-keyed row's key, value and index within its input record: `index`'s column,
    or a rank by key and value, which a replay of the same records computes again."""
    value_col = value if value is not None else F.lit(b"").cast("binary")
    keyed = df.withColumn("_floe_key", key.cast("binary")).withColumn("_floe_value", value_col)
    if index is not None:
        return keyed.withColumn("_floe_idx", F.col(index).cast("int"))
    order = Window.partitionBy("topic", "partition", "offset").orderBy("_floe_key", "_floe_value")
    return keyed.withColumn("_floe_idx", F.row_number().over(order))
