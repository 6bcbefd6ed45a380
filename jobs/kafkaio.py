"""Kafka at the edges of a batch: exact offset-range reads and acknowledged writes.

Small batches go through the driver: Spark's Kafka source and sink cost a Spark job per batch,
with a Kafka client created for it (offset lookups, a consumer or producer per task), which on a
small machine costs more than a few hundred records. A long-lived consumer (assigned, never
subscribed: it is no group member) and a long-lived idempotent producer do the same work in
milliseconds. Large batches go through Spark (`read_with_spark`, and the sink above
`kafka.spark_sink_min_records` input records): there the driver's per-record Python work (tens
of microseconds a record, read, framed and filtered) costs more than the job, and the records
stay in the JVM.

- `RangeReader.read` returns exactly the records of the planned ranges `[start, end)`; records
  deleted by retention fail the read (like Spark's `failOnDataLoss`), so a replay never reads
  different input silently. Every reader is `read_committed` (`ISOLATION`), the driver's and
  Spark's source alike: records of aborted transactions are never read, and a range may hold
  offsets that no read returns (transaction markers, aborted records), so a range is complete
  when the consumer's position reaches its end, whatever offset its last record had. Ranges are
  planned up to the last stable offset, below any open transaction (`RangeReader.watermarks`),
  so a read never waits for records that a transaction still holds back.
  `read_rows` may stop a partition early, at a limit of rows (a run of re-keyed rows counting
  as its rows): a repartition stage's plan is then cut where its read stopped.
- `KafkaSink.write` returns once every record is acknowledged (`acks=all`, idempotent by
  default), keyed records partitioned as Kafka's Java producer does (murmur2), so keys land on
  the partitions the Spark sink chose before; combined re-keyed rows go out as runs on the
  partitions murmur2 gives their keys (`floe_jobs.runs`). Output stays at-least-once: a replayed
  batch writes its output again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from floe_jobs import kafkaprops, runs
from floe_jobs.config import FloeConfig
from floe_jobs.planning import PartitionPlan, Watermarks
from floe_jobs.records import (
    Record,
    position_headers,
    position_headers_column,
    run_headers,
    schema,
    to_dataframe,
)

log = logging.getLogger(__name__)

# what every reader of the runtime reads: committed records only (DESIGN contract 9: upstream
# aborted transactions are never read)
ISOLATION = "read_committed"
# a read or a flush that makes no progress for this long asks the brokers for metadata: when
# none answers, the batch fails at once as "Kafka unavailable" (`floe_jobs.outages` waits that
# out, not ready) instead of blocking silently until its timeout
STALL_PROBE_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 5.0


def _brokers_answer(client: Consumer | Producer) -> None:
    """Raise the client's KafkaException (a transport or timeout code) when no broker answers a
    metadata request."""
    client.list_topics(timeout=PROBE_TIMEOUT_SECONDS)


def client_settings(cfg: FloeConfig) -> dict[str, Any]:
    """Connection settings every librdkafka client of the runtime shares: bootstrap and the
    security settings (`floe_jobs.kafkasec`)."""
    return {"bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.security.librdkafka()}


def with_properties(conf: Mapping[str, Any], cfg: FloeConfig, role: kafkaprops.Role) -> dict[str, Any]:
    """`conf` (a client's settings, its `client.id` Floe's own) with the app's Kafka client
    properties of its `role` over Floe's tuning (`floe_jobs.kafkaprops`); the keys Floe owns
    are never among them (refused at admission and by the config)."""
    props = cfg.kafka.extra
    out = {**conf, **kafkaprops.for_client(props, role)}
    if "client.id" in conf:
        out["client.id"] = kafkaprops.client_id(props, str(conf["client.id"]))
    return out


class ReadError(RuntimeError):
    """The planned records could not be read as planned (deleted, or the broker did not answer)."""


class RangeReader:
    """Reads watermarks and planned offset ranges with an assigned consumer. Single-threaded use."""

    def __init__(self, cfg: FloeConfig, *, client_id: str, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self._consumer = Consumer(
            with_properties(
                {
                    **client_settings(cfg),
                    # never subscribes: the id only names the client, no group is joined
                    "group.id": f"{cfg.group_id}-reader",
                    "client.id": f"{client_id}-reader",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "error",
                    # also makes the watermark queries answer the last stable offset as the end
                    "isolation.level": ISOLATION,
                    "fetch.wait.max.ms": 50,
                },
                cfg,
                "consumer",
            ),
            logger=log,
        )

    def watermarks(self, tps: Iterable[tuple[str, int]], *, timeout: float = 10.0) -> dict[tuple[str, int], Watermarks]:
        """Log start and readable end of each partition, from the brokers (not cached). The end
        is the last stable offset (librdkafka's ListOffsets carries the consumer's isolation
        level): the high watermark, unless a transaction is open, then its first offset. A plan
        that ended at the high watermark would wait for that transaction's end."""
        out: dict[tuple[str, int], Watermarks] = {}
        for topic, partition in tps:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
            out[(topic, partition)] = Watermarks(low=low, high=high)
        return out

    def partitions(self, topics: Iterable[str], *, timeout: float = 10.0) -> dict[str, list[int]]:
        """Partition numbers of each existing topic among `topics`."""
        md = self._consumer.list_topics(timeout=timeout)
        return {t: sorted(md.topics[t].partitions) for t in topics if t in md.topics and md.topics[t].error is None}

    def read(self, plans: Iterable[PartitionPlan]) -> list[Record]:
        return self.read_rows(plans)[0]

    def read_rows(
        self, plans: Iterable[PartitionPlan], limits: Mapping[tuple[str, int], int] | None = None
    ) -> tuple[list[Record], dict[tuple[str, int], int]]:
        """The planned records, except that a partition with a limit stops before the first
        record that would take its rows past it (a run counts as its rows, `floe_jobs.runs`; a
        partition's first record is always taken): the records, and the offset each partition
        that stopped early stopped at."""
        ranges = {p.tp: (p.start, p.end) for p in plans if p.end > p.start}
        if not ranges:
            return [], {}
        self._consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _end) in ranges.items()])
        try:
            return self._consume(ranges, limits or {})
        finally:
            self._consumer.unassign()

    def _consume(
        self, ranges: Mapping[tuple[str, int], tuple[int, int]], limits: Mapping[tuple[str, int], int]
    ) -> tuple[list[Record], dict[tuple[str, int], int]]:
        out: list[Record] = []
        remaining = set(ranges)
        rows = dict.fromkeys(limits, 0)
        stopped: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + self.timeout
        progressed = time.monotonic()
        # one datetime per millisecond, shared by the records stamped in it (most of a batch's
        # records share a few): making one per record was a tenth of a large read's Python time
        stamps: dict[int, datetime | None] = {}
        while remaining:
            progressed = self._still_answered(progressed, deadline, ranges, remaining)
            moved = False
            # consume() waits for its whole timeout unless it fills num_messages: keep it short
            for msg in self._consumer.consume(num_messages=10_000, timeout=0.02):
                if msg.error() is not None:
                    _reader_event(msg)
                    continue
                moved = True
                tp = (str(msg.topic()), int(msg.partition() or 0))
                offset = int(msg.offset() or 0)
                if tp not in remaining or offset >= ranges[tp][1]:
                    continue  # fetched past the plan's end: not this batch's
                headers = msg.headers()
                if tp in rows:
                    run = runs.info(headers) if headers else None  # type: ignore[arg-type]
                    taken = 1 if run is None else run.rows
                    if rows[tp] and rows[tp] + taken > limits[tp]:
                        remaining.discard(tp)  # this record would pass the limit: stop before it
                        stopped[tp] = offset
                        continue
                    rows[tp] += taken
                _ts_type, ts_ms = msg.timestamp()
                if ts_ms not in stamps:
                    stamps[ts_ms] = datetime.fromtimestamp(ts_ms / 1000, UTC) if ts_ms >= 0 else None
                out.append(
                    Record(
                        msg.key(),
                        msg.value(),
                        tp[0],
                        tp[1],
                        offset,
                        stamps[ts_ms],
                        headers,  # type: ignore[arg-type]  # a list of (key, value) when any
                    )
                )
                if offset + 1 >= ranges[tp][1]:
                    remaining.discard(tp)
            if moved:
                progressed = time.monotonic()
            # ranges that end in offsets with no record (control records, compaction)
            if remaining:
                for pos in self._consumer.position([TopicPartition(t, p) for t, p in remaining]):
                    if pos.offset >= ranges[(pos.topic, pos.partition)][1]:
                        remaining.discard((pos.topic, pos.partition))
        return out, stopped

    def _still_answered(
        self,
        progressed: float,
        deadline: float,
        ranges: Mapping[tuple[str, int], tuple[int, int]],
        remaining: set[tuple[str, int]],
    ) -> float:
        """When a read last progressed, or now when the brokers still answer a probe after
        STALL_PROBE_SECONDS without records (the read is slow, not cut off); past the deadline, a
        ReadError whose cause is a timeout (`floe_jobs.outages` waits that out)."""
        now = time.monotonic()
        if now - progressed > STALL_PROBE_SECONDS:
            _brokers_answer(self._consumer)
            progressed = now
        if now > deadline:
            raise ReadError(
                f"planned records not read within {self.timeout:.0f}s; partitions left "
                f"{sorted((tp, ranges[tp]) for tp in remaining)}"
            ) from KafkaException(KafkaError(KafkaError._TIMED_OUT, "planned records not read"))
        return progressed

    def close(self) -> None:
        self._consumer.close()


class WriteError(RuntimeError):
    """Some output records were not acknowledged; the batch fails and is replayed."""


def spark_connection_options(cfg: FloeConfig) -> dict[str, str]:
    """The driver clients' connection settings as options of Spark's Kafka source and sink, as
    the Java client spells them (the JAAS line for SASL, PEM trust and key stores for TLS)."""
    return {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers, **cfg.kafka.security.java()}


def spark_source_options(cfg: FloeConfig) -> dict[str, str]:
    """Options of Spark's Kafka source: the connection, and committed records only, as the
    driver's reader (the Java consumer's default is read_uncommitted)."""
    props = kafkaprops.java(cfg.kafka.extra, "consumer")
    return {**spark_connection_options(cfg), **props, "kafka.isolation.level": ISOLATION}


def spark_sink_options(cfg: FloeConfig) -> dict[str, str]:
    """Options of Spark's Kafka sink equal to the driver producer's settings."""
    opts = {**spark_connection_options(cfg), **kafkaprops.java(cfg.kafka.extra, "producer"), "kafka.acks": "all"}
    if cfg.kafka.idempotent_output:
        opts["kafka.enable.idempotence"] = "true"
    return opts


def spark_connector(cfg: FloeConfig) -> bool:
    """Whether Spark's Kafka connector is on `spark.jars` (its source and sink can be used)."""
    return any("spark-sql-kafka" in Path(jar).name for jar in cfg.spark.jars)


def read_with_spark(spark: Any, cfg: FloeConfig, plans: Iterable[PartitionPlan]) -> Any:
    """Exactly the planned ranges `[start, end)`, read by Spark's Kafka source, as a DataFrame with
    the columns of `records.schema()`. Lazy: the records are read by the jobs that use it, in the
    JVM, without passing through the driver's Python. Missing records (deleted by retention) fail
    the job (`failOnDataLoss`), as `RangeReader.read` does."""
    ranges = [p for p in plans if p.end > p.start]
    if not ranges:
        return to_dataframe(spark, [])
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for p in ranges:
        assign.setdefault(p.topic, []).append(p.partition)
        starting.setdefault(p.topic, {})[str(p.partition)] = p.start
        ending.setdefault(p.topic, {})[str(p.partition)] = p.end
    reader = spark.read.format("kafka")
    for key, value in spark_source_options(cfg).items():
        reader = reader.option(key, value)
    df = (
        reader.option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .load()
    )
    return df.select(*schema().fieldNames())


class KafkaSink:
    """Writes rows to Kafka and waits for their acknowledgements. Single-threaded use.

    Small outputs are collected and produced from the driver (no Kafka client per Spark task).
    Large ones go through Spark's Kafka sink when its connector is on `spark.jars`: collecting
    rows into Python costs tens of microseconds each, where Spark's sink keeps them in the JVM
    (docs/runtime.md, "What a batch costs"). Both partition keyed records with murmur2."""

    def __init__(self, cfg: FloeConfig, *, client_id: str, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self.spark_options = spark_sink_options(cfg)
        self.spark_sink = spark_connector(cfg)
        conf = {
            **client_settings(cfg),
            "client.id": f"{client_id}-sink",
            "acks": "all",
            "partitioner": "murmur2_random",  # Kafka's Java producer: the partitions Spark's sink chose
            "linger.ms": 5,
            "compression.type": "lz4",
            # a batch's output is produced in one go: room for it all (librdkafka's default,
            # 100,000, made the loop wait for deliveries mid-batch)
            "queue.buffering.max.messages": 2_000_000,
            # delivery callbacks only for failures: a callback per record is Python work per
            # record, and success needs no handling (the flush waits for every acknowledgement)
            "delivery.report.only.error": True,
            # one callback for the producer, not one passed with every record: the keyword
            # argument on every `produce` call is Python work per record
            "on_delivery": self._failed,
        }
        # the failures reported since the current write began (single-threaded use)
        self._errors: list[KafkaError] = []
        if cfg.kafka.idempotent_output:
            conf["enable.idempotence"] = True
        conf = with_properties(conf, cfg, "producer")
        self.max_message_bytes = int(conf.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
        self._producer = Producer(conf, logger=log)

    def write(
        self,
        df: Any,
        *,
        topic: str | None,
        large: bool = False,
        order: tuple[str, ...] = (),
        positions: bool = False,
        dry_run: bool = False,
        rows: Sequence[tuple[Any, ...]] | None = None,
        table: Any = None,
    ) -> int:
        """Write a DataFrame's key/value[/headers][/topic] rows; `topic` None: each row's topic.

        One Spark job either way; `large` (an estimate: the batch read many records) picks
        Spark's sink when it is available. `order`: columns (not written) giving the order in
        which rows are written, grouped by the first two (see `floe_jobs.api.Emit`);
        `positions`: the rows get source-position headers made from the first four of them.
        `table`: a combining re-key's rows as Arrow (`floe_jobs.api.Emit.table`), which go out
        as runs (`floe_jobs.runs`).
        Returns the number of rows written. `dry_run`: everything but producing (a warm-up, a
        trial), down to refusing a record above the producer's message.max.bytes as a write would.
        `rows`: the rows of `df.select("key", "value", *order)` when the driver already holds
        them (`floe_jobs.api.Emit.rows`); they are produced without a Spark job."""
        if table is not None and topic is not None:
            if not dry_run:
                self.write_runs(topic, table)
            return int(table.num_rows)
        cols = [c for c in ("key", "value", "headers", "topic") if c in df.columns]
        if topic is not None and "topic" in cols:
            cols.remove("topic")
        if topic is None and "topic" not in cols:
            raise ValueError("rows to write need a topic: an Emit topic or a `topic` column")
        if large and self.spark_sink and not dry_run:
            if order:
                df = df.repartition(*order[:2]).sortWithinPartitions(*order)
            if positions:
                df = df.withColumn("headers", position_headers_column(*order[:4]))
                cols = [*cols, "headers"]
            return self._write_with_spark(df.select(*cols), topic)
        if rows is not None and cols == ["key", "value"]:
            return self._write_held(rows, topic, order=order, positions=positions, dry_run=dry_run)
        # as Arrow columns: sorted, split and converted a column at a time, with no Python
        # tuple per row before the producer's call (docs/runtime.md, "Where a replica's Python
        # CPU goes")
        table = df.select(*cols, *order).toArrow()
        out = output_columns(table, cols, order=order, positions=positions)
        if dry_run:
            self._check_sizes(out, topic)
            return int(table.num_rows)
        targets = out.topics if out.topics is not None else topic
        assert targets is not None  # no topic: `cols` has the topic column (checked above)
        return self._produce_columns(targets, out)

    def _write_held(
        self,
        rows: Sequence[tuple[Any, ...]],
        topic: str | None,
        *,
        order: tuple[str, ...],
        positions: bool,
        dry_run: bool,
    ) -> int:
        """`write` of key/value rows the driver already holds (`floe_jobs.api.Emit.rows`), with
        their order columns after the two written ones: no Spark job."""
        collected = list(rows)
        if order:
            # the sort keys follow the written columns; a sort in Python costs no Spark shuffle
            collected.sort(key=lambda r: tuple(r[2:]))
        if dry_run:
            self._check_sizes(OutputColumns(
                keys=[r[0] for r in collected],
                values=[r[1] for r in collected],
                headers=[position_headers(*r[2:6]) for r in collected] if positions else None,
            ), topic)
            return len(collected)
        return self.write_rows(
            (r[0], r[1], position_headers(*r[2:6]) if positions else None, topic) for r in collected
        )

    def _check_sizes(self, out: OutputColumns, topic: str | None) -> None:
        """Raise the error a write of `out` would fail with on a record above the producer's
        message.max.bytes (`oversized`), without producing anything."""
        found = oversized(out, self.max_message_bytes)
        if found is not None:
            i, size = found
            target = topic if topic is not None else (out.topics or ["?"] * (i + 1))[i]
            raise WriteError(
                f"an output record for topic {target} is {size:,} bytes, above the producer's "
                f"message.max.bytes {self.max_message_bytes:,}: Kafka refuses it; make the stage's "
                "output for this record smaller"
            )

    def write_runs(self, topic: str, rows: Any) -> int:
        """Produce re-keyed rows (an Arrow table of key, value, src topic, src partition, src
        offset, src index, sorted by source and position) packed into runs (`floe_jobs.runs`);
        wait until every run is acknowledged. Returns how many runs were written."""
        # a metadata request answers at once from a live broker: a broker that is down must not
        # hold the batch for the whole write timeout (the lane waits the outage out instead)
        md = self._producer.list_topics(topic, timeout=STALL_PROBE_SECONDS)
        meta = md.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise WriteError(f"topic {topic} has no partitions to write runs to: {meta.error if meta else 'absent'}")
        packed = runs.pack(rows, len(meta.partitions))
        return self._produce((topic, None, run.value, run_headers(run), run.partition) for run in packed)

    def _write_with_spark(self, df: Any, topic: str | None) -> int:
        # cached: the count after the write reads the rows back instead of computing them again
        # (observed metrics are not reported for the Kafka sink's writes)
        rows = df.persist()
        try:
            writer = rows.write.format("kafka")
            for key, value in self.spark_options.items():
                writer = writer.option(key, value)
            if topic is not None:
                writer = writer.option("topic", topic)
            writer.save()  # returns after the sink's producers flushed (acknowledged)
            return int(rows.count())
        finally:
            rows.unpersist()

    def write_rows(self, rows: Iterable[tuple[Any, Any, Any, Any]]) -> int:
        """Produce (key, value, headers, topic) rows and wait until every one is acknowledged;
        headers as a list of (str, bytes) or None."""
        return self._produce((target, key, value, headers, -1) for key, value, headers, target in rows)

    def _produce_columns(self, topic: str | list[str], out: OutputColumns) -> int:
        """Produce `out`'s rows to `topic` (one topic, or one per row); wait until every one is
        acknowledged. The common case (one topic, no headers) is one call per row with
        nothing else done in Python for it."""
        if isinstance(topic, str) and out.headers is None:
            self._errors.clear()
            produce = self._producer.produce
            for key, value in zip(out.keys, out.values, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    self._wait_for_room(lambda k=key, v=value: produce(topic, v, k))
            return self._acknowledged(len(out.keys))
        topics = [topic] * len(out.keys) if isinstance(topic, str) else topic
        headers = out.headers if out.headers is not None else [None] * len(out.keys)
        return self._produce(zip(topics, out.keys, out.values, headers, [-1] * len(out.keys), strict=True))

    def _wait_for_room(self, produce: Any) -> None:
        """Call `produce` again until the local queue takes the record: deliveries drain it,
        unless no broker answers (then `_brokers_answer` raises)."""
        full_since = time.monotonic()
        while True:
            self._producer.poll(0.05)
            try:
                produce()
                return
            except BufferError:
                now = time.monotonic()
                if now - full_since > STALL_PROBE_SECONDS:
                    _brokers_answer(self._producer)
                    full_since = now

    def _produce(self, records: Iterable[tuple[str, Any, Any, Any, int]]) -> int:
        """Produce (topic, key, value, headers, partition) records, -1 for the partitioner's
        choice; wait until every one is acknowledged."""
        self._errors.clear()
        n = 0
        produce = self._producer.produce
        for target, key, value, headers, partition in records:
            kwargs = {"key": _bytes(key), "value": _bytes(value), "headers": headers, "partition": partition}
            try:
                produce(target, **kwargs)
            except BufferError:
                self._wait_for_room(lambda t=target, kw=kwargs: produce(t, **kw))
            n += 1
        return self._acknowledged(n)

    def _failed(self, err: KafkaError | None, _msg: Any) -> None:
        """The producer's delivery callback, called only for failures
        (`delivery.report.only.error`), on the thread that polls or flushes: the write's."""
        if err is not None:
            self._errors.append(err)

    def _acknowledged(self, n: int) -> int:
        """Wait until the `n` records produced are acknowledged, and fail if a delivery
        callback reported a failure since the write began. Returns `n`. A failure of an
        earlier write that is reported late fails this one too: the batch is retried, which
        writes its output again (at-least-once), rather than losing the report."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = self._producer.flush(max(0.0, min(STALL_PROBE_SECONDS, deadline - time.monotonic())))
            if not left or time.monotonic() >= deadline:
                break
            # Records still queued: fail now if no broker answers. They stay queued and may be
            # delivered later: output is at-least-once, and the replay writes them again after.
            _brokers_answer(self._producer)
        # the Kafka error as the cause: `floe_jobs.outages` tells a broker outage by its code
        if left:
            raise WriteError(f"{left} output records not acknowledged within {self.timeout:.0f}s") from KafkaException(
                KafkaError(KafkaError._MSG_TIMED_OUT, "output records not acknowledged")
            )
        errors = list(self._errors)
        if errors:
            raise WriteError(
                f"{len(errors)} output records failed; first error: {errors[0].str()}"
            ) from KafkaException(errors[0])
        return n

    def close(self) -> None:
        self._producer.flush(10)


@dataclass(frozen=True)
class OutputColumns:
    """Rows to produce as parallel lists: keys and values as bytes or str (what the producer
    takes), headers per row (None: no row has any), topics per row (None: the write's topic)."""

    keys: list[Any]
    values: list[Any]
    headers: list[Any] | None = None
    topics: list[str] | None = None


# librdkafka refuses a record before sending it when its size on the wire is above the
# producer's message.max.bytes (default 1,000,000): its key, value and headers plus at most 36
# bytes of v2 record framing (length, attributes, timestamp and offset deltas, key and value
# lengths and header count, as varints of their widest)
RECORD_OVERHEAD = 36
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000


def _varint_size(n: int) -> int:
    """Bytes of Kafka's zig-zag varint encoding of `n`."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _field_size(x: Any) -> int:
    if x is None:
        return 0
    return len(x.encode()) if isinstance(x, str) else len(x)


def record_size(key: Any, value: Any, headers: Sequence[tuple[str, Any]] | None = None) -> int:
    """The most a record takes on the wire as librdkafka counts it against message.max.bytes."""
    size = RECORD_OVERHEAD + _field_size(key) + _field_size(value)
    for name, header in headers or ():
        n, v = _field_size(name), _field_size(header)
        size += _varint_size(n) + n + _varint_size(v) + v
    return size


def oversized(out: OutputColumns, limit: int) -> tuple[int, int] | None:
    """(index, size) of the first row of `out` that a producer with `message.max.bytes` `limit`
    refuses, or None. A dry run checks this, so that narrowing a batch whose write failed on
    such a record finds the input record that made it (producing is the only other way to
    learn it, and a trial produces nothing)."""
    headers = out.headers or [None] * len(out.keys)
    for i, (key, value, hdrs) in enumerate(zip(out.keys, out.values, headers, strict=True)):
        size = record_size(key, value, hdrs)
        if size > limit:
            return i, size
    return None


def output_columns(
    table: Any, cols: Sequence[str], *, order: Sequence[str] = (), positions: bool = False
) -> OutputColumns:
    """The rows of an Arrow table of `cols` (key, value, headers, topic, in that order, each
    optional) then `order` columns, in the order of the `order` columns (a stable sort: rows
    that tie keep their order), as `KafkaSink` produces them. `positions`: each row's headers
    are its source position, from the first four `order` columns (`records.position_headers`).

    Column operations where Arrow has one: the sort, and string or binary keys and values
    taken as Python str or bytes a column at once; only headers are built per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if order and table.num_rows:
        table = table.take(pc.sort_indices(table, sort_keys=[(c, "ascending") for c in order]))
    names = list(cols)
    n = table.num_rows

    def column(name: str) -> list[Any]:
        if name not in names:
            return [None] * n
        col = table.column(names.index(name))
        t = col.type
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            return list(col.to_pylist())  # typed: pyarrow is untyped
        return [_bytes(v) for v in col.to_pylist()]

    headers: list[Any] | None = None
    if positions:
        src = [table.column(len(names) + i).to_pylist() for i in range(4)]
        headers = [position_headers(*p) for p in zip(*src, strict=True)]
    elif "headers" in names:
        collected = table.column(names.index("headers")).to_pylist()
        if any(collected):
            headers = [_headers(h) for h in collected]
    topics = table.column(names.index("topic")).to_pylist() if "topic" in names else None
    return OutputColumns(keys=column("key"), values=column("value"), headers=headers, topics=topics)


def _headers(headers: Any) -> list[tuple[str, bytes | str | None]] | None:
    """Collected headers as (key, value) pairs, from tuples or structs collected as dicts."""
    if not headers:
        return None
    return [(h["key"], _bytes(h["value"])) if isinstance(h, dict) else (h[0], _bytes(h[1])) for h in headers]


def _bytes(value: Any) -> bytes | str | None:
    if value is None or isinstance(value, bytes | str):
        return value
    return bytes(value)


def _reader_event(msg: Any) -> None:
    """An error a read's consumer returned in place of a record: records of the planned range
    gone (retention) and fatal errors end the read; others are logged and the read goes on."""
    err = msg.error()
    if err.code() == KafkaError._AUTO_OFFSET_RESET:
        raise ReadError(
            f"records of topic={msg.topic()} partition={msg.partition()} in the planned range "
            f"are gone (deleted by retention?): {err.str()}"
        )
    if err.fatal():
        raise KafkaException(err)
    log.warning("Reader event error=%s", err)
