"""Taking a snapshot: every stage's partitions cut (`cut`), the store rows written with Spark as
Parquet under the URI, then, last, the manifest (docs/snapshots.md).

The URI is anything Spark's Hadoop file systems write (`file:///…` on a volume, `s3a://…`); the
store rows are read in the driver, partition by partition (each cut must be validated against
its offsets row as one read), and written by Spark's executors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from floe_jobs import api
from floe_jobs.config import FloeConfig
from floe_jobs.snapshots import cut as cut_mod
from floe_jobs.snapshots import tail
from floe_jobs.snapshots.manifest import (
    Manifest,
    PartitionCut,
    SnapshotError,
    StageCut,
    StoreCopy,
    TailCopy,
    checksum,
)

log = logging.getLogger(__name__)

STORE_SCHEMA = (
    "partition int, key binary, value binary, floe_batch bigint, time timestamp, written bigint, ttl int"
)
MANIFEST_DIR = "manifest"


def store_dir(uri: str, store: str) -> str:
    return f"{uri.rstrip('/')}/stores/{store}"


def writers_of(job: api.Job, cfg: FloeConfig, declared: Mapping[str, str]) -> dict[str, str]:
    """store → the stage that writes it: as declared, or the job's only stage. Refuses a store
    without a writer, an unknown stage or store, and a store type this slice does not copy."""
    names = [s.name for s in job.stages]
    stores = {s.name: s.type for s in cfg.stores}
    unknown = sorted(set(declared) - set(stores))
    if unknown:
        raise SnapshotError(f"--writer names stores {unknown} that the app does not have (stores: {sorted(stores)})")
    out: dict[str, str] = {}
    for name, kind in sorted(stores.items()):
        if kind != "partitioned":
            raise SnapshotError(f"store {name} is {kind}: snapshots copy partitioned stores only so far")
        writer = declared.get(name) or (names[0] if len(names) == 1 else None)
        if writer is None:
            raise SnapshotError(
                f"store {name}: name the stage that writes it (--writer {name}=<stage>; stages: {names})"
            )
        if writer not in names:
            raise SnapshotError(f"--writer {name}={writer}: the job has no stage {writer} (stages: {names})")
        out[name] = writer
    return out


def take(
    cfg: FloeConfig,
    job: api.Job,
    *,
    session: Any,
    spark: Any,
    uri: str,
    writers: Mapping[str, str] | None = None,
    settle_timeout: float = 120.0,
    generation: int | None = None,
    image: str | None = None,
) -> Manifest:
    """Take a snapshot of the running app `cfg.app_id` into `uri` and return its manifest."""
    started = time.monotonic()
    rekeyed, feeders = _stage_order(cfg, job)
    by_store = writers_of(job, cfg, writers or {})
    reader = cut_mod.Reader(session, cfg.cassandra.keyspace, cfg.app_id, settle_timeout=settle_timeout)
    warming = threading.Thread(target=_warm_up, args=(spark,), name="spark-warm-up", daemon=True)
    warming.start()
    # repartition stages first: what they applied must come from batches their upstream stage
    # had planned by its own cut, which the restored app then replays or does not need
    stages, copied = _cut(cfg, [*rekeyed, *feeders], by_store, reader)
    warming.join()
    tails = []
    if rekeyed:
        upstream = stages[feeders[0].name]
        ends = {f"{upstream.topic}:{p.partition}": p.next_offset for p in upstream.partitions}
        tails = [_write_tail(cfg, spark, stages[stage.name], ends, uri) for stage in rekeyed]
    copies = [_write_store(spark, name, rows, by_store[name], uri) for name, rows in sorted(copied.items())]
    manifest = Manifest(
        app_id=cfg.app_id,
        keyspace=cfg.cassandra.keyspace,
        job=cfg.job.entrypoint,
        input_topics=list(cfg.kafka.topics),
        stages=[stages[s.name] for s in job.stages],
        stores=copies,
        tails=tails,
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        seconds=round(time.monotonic() - started, 3),
        attempts=reader.attempts,
        generation=generation,
        image=image,
    )
    # last: its presence is the proof that everything it names is written (from Arrow: a list of
    # Python rows would start a Python worker for one row)
    import pyarrow as pa

    spark.createDataFrame(pa.table({"value": [manifest.to_json()]}), "value string").coalesce(1).write.mode(
        "errorifexists"
    ).text(f"{uri.rstrip('/')}/{MANIFEST_DIR}")
    log.info("Snapshot complete uri=%s seconds=%.2f", uri, manifest.seconds)
    return manifest


def _warm_up(spark: Any) -> None:
    """One row of a store through the write path the store's files take, to nowhere (Spark's
    `noop` format), while the driver cuts: Spark's first job in a process pays for loading and
    compiling that path, in an otherwise idle JVM rather than in the first store's write
    (docs/snapshots.md, "Measured"). A failure here only logs: the real write reports its own."""
    import pyarrow as pa

    one = pa.table({"partition": pa.array([0], pa.int32()), "key": pa.array([b"k"], pa.binary()),
                    "value": pa.array([b"v"], pa.binary()), "floe_batch": pa.array([1], pa.int64()),
                    "time": pa.array([0], pa.timestamp("us")), "written": pa.array([1], pa.int64()),
                    "ttl": pa.array([None], pa.int32())})
    try:
        spark.createDataFrame(one, STORE_SCHEMA).coalesce(1).write.format("noop").mode("overwrite").save()
    except Exception as exc:  # a warm-up: nothing depends on it
        log.warning("Spark warm-up before the store writes failed: %s", exc)


def _stage_order(cfg: FloeConfig, job: api.Job) -> tuple[list[api.Stage], list[api.Stage]]:
    """The job's repartition stages and the stages that read the input, refusing the shapes a
    snapshot does not cover yet (several input topics; repartition stages fed by several stages)."""
    if len(cfg.kafka.topics) != 1:
        raise SnapshotError(f"the app reads {len(cfg.kafka.topics)} input topics: snapshots support one so far")
    rekeyed = [s for s in job.stages if s.source is not None]
    feeders = [s for s in job.stages if s.source is None]
    if rekeyed and len(feeders) != 1:
        raise SnapshotError(f"stages {[s.name for s in feeders]} read the input topics: a job with repartition"
                            " stages needs exactly one such stage for a snapshot so far")
    return rekeyed, feeders


def _cut(
    cfg: FloeConfig, ordered: list[api.Stage], by_store: Mapping[str, str], reader: cut_mod.Reader
) -> tuple[dict[str, StageCut], dict[str, list[cut_mod.FullRow]]]:
    """Each stage's cut, in `ordered`, partition by partition, with the rows of the stores it
    writes as of that cut; a store row fenced above its writer's cut means the writer named
    for it is not the one that writes it."""
    from floe_jobs.stores import schema

    tables = {name: schema.table_name(name) for name in by_store}
    live = reader.rows_of()
    copied: dict[str, list[cut_mod.FullRow]] = {name: [] for name in by_store}
    stages: dict[str, StageCut] = {}
    for stage in ordered:
        topic = cfg.kafka.topics[0] if stage.source is None else cfg.repartition_topic(stage.source)
        partitions = sorted(r.partition for r in live if r.stage == stage.name and r.topic == topic)
        mine = [name for name, writer in by_store.items() if writer == stage.name]
        cuts: list[PartitionCut] = []
        for p in partitions:
            part_cut, found = reader.cut(
                stage.name, topic, p, [tables[n] for n in mine], committed_only=stage.source is not None
            )
            for name in mine:
                got = found[tables[name]]
                above = [r[3] for r in got if r[3] is not None and r[3] > part_cut.planned_seq]
                if above:
                    raise SnapshotError(
                        f"store {name} partition {p} has rows fenced by batch {max(above)}, above stage"
                        f" {stage.name}'s sequence {part_cut.planned_seq}: is {stage.name} its writer (--writer)?"
                    )
                copied[name].extend(got)
            cuts.append(part_cut)
        stages[stage.name] = StageCut(name=stage.name, source=stage.source, topic=topic, partitions=cuts)
        log.info(
            "Cut stage=%s partitions=%d attempts=%d holds=%d", stage.name, len(cuts), reader.attempts, reader.holds
        )
    return stages, copied


def _write_tail(cfg: FloeConfig, spark: Any, stage: StageCut, ends: Mapping[str, int], uri: str) -> TailCopy:
    """The repartition records `stage` had not applied at its cut, up to its upstream's cut."""
    records = tail.read(cfg, stage, ends)
    path = f"{uri.rstrip('/')}/repartition/{stage.name}"
    files = []
    if records:  # no files for none (a restore reads no rows then), and no Spark job
        tail.write(spark, records, path)
        files = _files(spark, path)
    log.info("Wrote repartition tail stage=%s records=%d", stage.name, len(records))
    return TailCopy(
        stage=stage.name,
        rows=len(records),
        checksum=checksum(records),
        bytes=sum(size for _, size in files),
        files=[f"repartition/{stage.name}/{f}" for f, _ in files],
    )


def _write_store(spark: Any, name: str, rows: list[cut_mod.FullRow], writer: str, uri: str) -> StoreCopy:
    """A store's rows as of its writer's cut, as Parquet under the snapshot's `stores/<name>`;
    their checksum is summed in a thread of its own while Spark writes the files."""
    from concurrent.futures import ThreadPoolExecutor

    from floe_jobs.stores import schema

    path = store_dir(uri, name)
    with ThreadPoolExecutor(1, thread_name_prefix="checksum") as pool:
        summed = pool.submit(checksum, map(cut_mod.as_checked, rows))
        _write_rows(spark, rows, path)
        files = _files(spark, path)
        total = summed.result()
    log.info("Wrote store=%s rows=%d files=%d", name, len(rows), len(files))
    return StoreCopy(
        name=name,
        type="partitioned",
        table=schema.table_name(name),
        writer=writer,
        rows=len(rows),
        checksum=total,
        bytes=sum(size for _, size in files),
        files=[f"stores/{name}/{f}" for f, _ in files],
    )


# A store is written as one Parquet file per ROWS_PER_FILE rows, but at most one per core Spark
# has (whose tasks write them side by side). Left alone, Spark cuts a DataFrame made from an Arrow
# table into a task, and so a file, per 10,000 rows (spark.sql.execution.arrow.maxRecordsPerBatch),
# each with a task's and a file's overhead (docs/snapshots.md, "Measured").
ROWS_PER_FILE = 250_000


def files_for(rows: int, parallelism: int) -> int:
    """How many Parquet files a store of `rows` rows is written as."""
    return max(1, min(parallelism, -(-rows // ROWS_PER_FILE)))


def _write_rows(spark: Any, rows: list[cut_mod.FullRow], path: str) -> None:
    import pyarrow as pa

    columns: list[Any] = list(zip(*rows, strict=True)) if rows else [[] for _ in range(7)]
    table = pa.table(
        {
            "partition": pa.array(columns[0], pa.int32()),
            "key": pa.array(columns[1], pa.binary()),
            "value": pa.array(columns[2], pa.binary()),
            "floe_batch": pa.array(columns[3], pa.int64()),
            "time": pa.array(columns[4], pa.int64()).cast(pa.timestamp("ms")).cast(pa.timestamp("us")),
            "written": pa.array(columns[5], pa.int64()),
            "ttl": pa.array(columns[6], pa.int32()),
        }
    )
    # one chunk: Spark 4.0's createDataFrame keeps only some rows of a table of several (localdf)
    df = spark.createDataFrame(table.combine_chunks(), STORE_SCHEMA)
    df.coalesce(files_for(len(rows), spark.sparkContext.defaultParallelism)).write.mode("errorifexists").parquet(path)


def _files(spark: Any, path: str) -> list[tuple[str, int]]:
    """The Parquet files under `path` (names relative to it) with their sizes, through Spark's
    Hadoop file system for the URI's scheme."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    out = []
    for status in fs.listStatus(hpath):
        name = status.getPath().getName()
        if name.endswith(".parquet"):
            out.append((name, int(status.getLen())))
    return sorted(out)
