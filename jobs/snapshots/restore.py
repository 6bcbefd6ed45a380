"""Restoring a snapshot into a new app (`restoreFrom` semantics) or into the same app, in place
(`replace`; docs/snapshots.md).

Refuses, naming the reason: a URI without a manifest (never taken, or interrupted before it
completed), a snapshot whose stages, input topics or stores differ from the target job's, a
store whose files do not hold the rows the manifest counts and sums, and (unless `replace`) a
target app that already has positions. Every refusal comes before the first write. Then it
provisions the target's tables as a replica would; in place, it deletes the app's offsets rows
(one conditional batch, so that a restore cut short leaves an app without positions, which the
next attempt completes) and truncates its store tables (a truncation removes rows whatever
their write timestamps, which the restored rows keep). It writes every store row under its
original write timestamp, fence and remaining TTL, and the offsets rows last, all in one
conditional batch, so that each stage resumes exactly at the cut. Nothing may run the app
meanwhile: the operator runs an in-place restore only once its pods are gone and its consumer
group is empty.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any

from cassandra import ConsistencyLevel
from floe_jobs import api, offsets
from floe_jobs.config import FloeConfig
from floe_jobs.planning import OffsetRow
from floe_jobs.snapshots import manifest as mf
from floe_jobs.snapshots import tail
from floe_jobs.snapshots.manifest import Manifest, SnapshotError
from floe_jobs.snapshots.take import MANIFEST_DIR

log = logging.getLogger(__name__)

OWNER = "restored from a snapshot"


@dataclass(frozen=True)
class Restored:
    manifest: Manifest
    rows: int
    seconds: float


def read_manifest(spark: Any, uri: str) -> Manifest:
    """The snapshot's manifest; refused when there is none."""
    path = f"{uri.rstrip('/')}/{MANIFEST_DIR}"
    try:
        lines = [r[0] for r in spark.read.text(path).collect()]
    except Exception as exc:  # Spark's AnalysisException [PATH_NOT_FOUND]
        if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
            raise SnapshotError(
                f"no snapshot at {uri}: it has no manifest (never taken, or interrupted before it completed)"
            ) from exc
        raise
    if not lines:
        raise SnapshotError(f"no snapshot at {uri}: its manifest is empty")
    return Manifest.from_json("\n".join(lines))


def target_of(cfg: FloeConfig, job: api.Job) -> mf.Target:
    return mf.Target(
        stages={s.name: s.source for s in job.stages},
        input_topics=list(cfg.kafka.topics),
        stores={s.name: s.type for s in cfg.stores},
    )


def restore(cfg: FloeConfig, job: api.Job, *, session: Any, spark: Any, uri: str, replace: bool = False) -> Restored:
    """Restore the snapshot at `uri` into the app `cfg.app_id`: one with no positions yet, or with
    `replace` one whose state and positions the snapshot's replace."""
    from floe_jobs import startup

    started = time.monotonic()
    m = read_manifest(spark, uri)
    wrong = mf.mismatches(m, target_of(cfg, job))
    if wrong:
        raise SnapshotError(f"snapshot at {uri} (app {m.app_id}) does not match app {cfg.app_id}: " + "; ".join(wrong))
    mf.check_restorable(m)
    if not replace and offsets.stage_progress(session, keyspace=cfg.cassandra.keyspace, app_id=cfg.app_id):
        raise SnapshotError(
            f"app {cfg.app_id} already has positions in {cfg.cassandra.keyspace}.{offsets.TABLE}: a snapshot is"
            " restored into a new app (another app id), or in place with --replace while none of the app's"
            " replicas runs"
        )
    data = {store.name: _verified_store(spark, uri, store) for store in m.stores}
    tails = {t.stage: _verified_tail(spark, uri, t) for t in m.tails}
    startup.provision(cfg, session)
    _ensure_topics(cfg, job)
    if replace:
        _clear(session, cfg, [store.table for store in m.stores])
    total = 0
    for store in m.stores:
        total += _write_store(session, cfg.cassandra.keyspace, store.table, data[store.name])
        log.info("Restored store=%s rows=%d", store.name, store.rows)
    new_topics = {s.source: cfg.repartition_topic(s.source) for s in job.stages if s.source is not None}
    starts: dict[tuple[str, int], int] = {}
    for stage in m.stages:
        if stage.source is None:
            continue
        topic = new_topics[stage.source]
        begun = tail.produce(cfg, topic, tails.get(stage.name, []))
        starts.update({(topic, p): offset for p, offset in begun.items()})
        log.info("Restored repartition tail stage=%s records=%d", stage.name, len(tails.get(stage.name, [])))
    _write_positions(session, cfg, mf.restored_rows(m, repartition_topic=new_topics, starts=starts))
    seconds = round(time.monotonic() - started, 3)
    log.info("Restore complete app=%s from=%s rows=%d seconds=%.2f", cfg.app_id, uri, total, seconds)
    return Restored(manifest=m, rows=total, seconds=seconds)


def _read(spark: Any, uri: str, what: str, files: list[str]) -> Any:
    """The rows of `files` as one Arrow table, or None when there are no files."""
    if not files:
        return None
    paths = [f"{uri.rstrip('/')}/{f}" for f in files]
    try:
        return spark.read.parquet(*paths).toArrow()
    except Exception as exc:
        raise SnapshotError(f"snapshot at {uri}: the files of {what} cannot be read: {exc}") from exc


def _verify(uri: str, what: str, rows: list[mf.Row], count: int, want: str) -> None:
    """Refused unless `rows` are exactly what the manifest counts and sums."""
    got = mf.checksum(rows)
    if len(rows) != count or got != want:
        raise SnapshotError(
            f"snapshot at {uri}: {what} holds {len(rows)} rows with checksum {got}, the manifest"
            f" says {count} rows with checksum {want}: the snapshot is damaged"
        )


def _verified_store(spark: Any, uri: str, store: mf.StoreCopy) -> Any:
    """A store's rows as an Arrow table (None when it has none), checked against the manifest."""
    table = _read(spark, uri, store.name, store.files)
    # a store row's checksum covers partition, key, value, fence and write time (`cut.as_checked`)
    names = ("partition", "key", "value", "floe_batch", "written")
    checked = [] if table is None else list(zip(*[table.column(c).to_pylist() for c in names], strict=True))
    _verify(uri, store.name, checked, store.rows, store.checksum)
    return table


def _verified_tail(spark: Any, uri: str, copy: mf.TailCopy) -> list[mf.Row]:
    """A repartition tail's records as `tail.read` returned them, checked against the manifest."""
    table = _read(spark, uri, f"repartition tail of {copy.stage}", copy.files)
    rows = [] if table is None else tail.from_arrow(table)
    _verify(uri, f"repartition tail of {copy.stage}", rows, copy.rows, copy.checksum)
    return rows


def _ensure_topics(cfg: FloeConfig, job: api.Job) -> None:
    """The new app's repartition topics (and its dead-letter topic), as a replica creates them."""
    from confluent_kafka.admin import AdminClient
    from floe_jobs import kafkaio, startup

    admin = AdminClient(kafkaio.with_properties(kafkaio.client_settings(cfg), cfg, "admin"))
    try:
        startup.ensure_topics(cfg, admin, job)
    except startup.StartupError as exc:
        raise SnapshotError(str(exc)) from exc


def _clear(session: Any, cfg: FloeConfig, tables: list[str]) -> None:
    """The app's positions, then its store tables: what a restore in place replaces."""
    table = offsets.OffsetsTable(session, keyspace=cfg.cassandra.keyspace, app_id=cfg.app_id)
    gone = table.clear()
    if gone is None:
        raise SnapshotError(f"the positions of app {cfg.app_id} changed while the restore deleted them: a replica"
                            " of the app runs; stop every one before restoring in place")
    log.info("Deleted the app's positions app=%s rows=%d", cfg.app_id, gone)
    for name in tables:
        session.execute(f"TRUNCATE {cfg.cassandra.keyspace}.{name}", timeout=120)
        log.info("Truncated table=%s.%s", cfg.cassandra.keyspace, name)


BATCH_ROWS = 100


def _write_store(session: Any, keyspace: str, table: str, rows: Any) -> int:
    """Every row of the Arrow table `rows` under its own write timestamp and TTL, in
    single-partition unlogged batches of `BATCH_ROWS` (one mutation each, as `put_all` writes)
    sent concurrently. The values are encoded a column at a time (`wirecolumns`)."""
    import numpy as np
    from cassandra.concurrent import execute_concurrent
    from cassandra.query import BatchStatement, BatchType
    from floe_jobs.stores import kv, wirecolumns

    if rows is None or not rows.num_rows:
        return 0
    protocol = session.cluster.protocol_version
    stmt = session.prepare(
        f"INSERT INTO {keyspace}.{table} (partition, key, value, floe_batch, time) VALUES (?, ?, ?, ?, ?)"
        " USING TIMESTAMP ? AND TTL ?"
    )
    now = int(time.time() * 1_000_000)
    rows = rows.sort_by("partition")
    sent = list(zip(
        wirecolumns.integers(rows.column("partition"), ">i4"),
        rows.column("key").to_pylist(),
        rows.column("value").to_pylist(),
        wirecolumns.integers(rows.column("floe_batch"), ">i8"),
        wirecolumns.timestamps(rows.column("time")),
        wirecolumns.integers(rows.column("written"), ">i8", fill=now),
        wirecolumns.integers(rows.column("ttl"), ">i4", fill=0),
        strict=True,
    ))
    # rows sorted by partition: each run of one partition cut into batches of BATCH_ROWS
    parts = rows.column("partition").to_numpy()
    bounds = [0, *(np.flatnonzero(np.diff(parts)) + 1).tolist(), len(sent)]
    batches = []
    for lo, hi in itertools.pairwise(bounds):
        for start in range(lo, hi, BATCH_ROWS):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=ConsistencyLevel.LOCAL_QUORUM)
            for values in sent[start : min(start + BATCH_ROWS, hi)]:
                kv.add_row(batch, stmt, (), protocol, values)
            batches.append((batch, None))
    for ok, result in execute_concurrent(session, batches, concurrency=16, raise_on_first_error=False):
        if not ok:
            raise SnapshotError(f"writing {keyspace}.{table} failed: {result}")
    return int(rows.num_rows)


def _write_positions(session: Any, cfg: FloeConfig, rows: list[mf.RestoredRow]) -> None:
    """Every stage's row, in one conditional batch (`OffsetsTable.restore`)."""
    table = offsets.OffsetsTable(session, keyspace=cfg.cassandra.keyspace, app_id=cfg.app_id)
    positioned = [
        (
            r.stage,
            OffsetRow(
                topic=r.topic,
                partition=r.partition,
                next_offset=r.next_offset,
                committed_seq=r.committed_seq,
                planned_seq=r.planned_seq,
                planned_from=r.planned_from,
                planned_to=r.planned_to,
                source_positions={k: (v[0], v[1]) for k, v in r.source_positions.items()},
                planned_ts=r.planned_ts,
                owner=OWNER,
            ),
        )
        for r in rows
    ]
    if positioned and not table.restore(positioned):
        raise SnapshotError(f"app {cfg.app_id} got positions while the snapshot was restored; nothing was written")
