"""The snapshot manifest, and what a restore derives from it: pure functions, no I/O.

The manifest is the last thing a snapshot writes (docs/snapshots.md), so its presence is the
proof that the data beside it is complete; it names every Parquet file, with the row count and
an order-free checksum of each store, and every stage's offsets row at the cut.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT = 1


class SnapshotError(ValueError):
    """A snapshot that cannot be taken or restored; the message names what to change."""


@dataclass(frozen=True)
class PartitionCut:
    """One stage's offsets row of one partition at the cut."""

    partition: int
    next_offset: int
    committed_seq: int
    planned_seq: int
    planned_from: int | None = None
    planned_to: int | None = None
    planned_ts: int | None = None
    source_positions: dict[str, list[int]] = field(default_factory=dict)

    @property
    def in_flight(self) -> bool:
        return self.planned_seq > self.committed_seq and self.planned_from is not None


@dataclass(frozen=True)
class StageCut:
    name: str
    source: str | None  # None: the app's input topics; else the repartition topic's name
    topic: str
    partitions: list[PartitionCut]


@dataclass(frozen=True)
class StoreCopy:
    name: str
    type: str
    table: str
    writer: str
    rows: int
    checksum: str
    bytes: int
    files: list[str]


@dataclass(frozen=True)
class TailCopy:
    """The records of a repartition stage's old topic that it had not applied at the cut and that
    its upstream stage had committed: the restore writes them into the new app's topic."""

    stage: str
    rows: int
    checksum: str
    bytes: int
    files: list[str]


@dataclass(frozen=True)
class Manifest:
    app_id: str
    keyspace: str
    job: str
    input_topics: list[str]
    stages: list[StageCut]
    stores: list[StoreCopy]
    created_at: str
    seconds: float
    attempts: int
    tails: list[TailCopy] = field(default_factory=list)
    generation: int | None = None
    image: str | None = None
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Manifest:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError(f"the manifest is not JSON: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else None
            raise SnapshotError(f"manifest format {found!r} is not one this release reads ({FORMAT})")
        try:
            stages = [
                StageCut(
                    name=s["name"],
                    source=s["source"],
                    topic=s["topic"],
                    partitions=[PartitionCut(**p) for p in s["partitions"]],
                )
                for s in raw.pop("stages")
            ]
            stores = [StoreCopy(**s) for s in raw.pop("stores")]
            tails = [TailCopy(**t) for t in raw.pop("tails", [])]
            return Manifest(stages=stages, stores=stores, tails=tails, **raw)
        except (KeyError, TypeError) as exc:
            raise SnapshotError(f"the manifest is incomplete or malformed: {exc}") from exc


# --- checksums ------------------------------------------------------------------------------

Row = tuple[Any, ...]
"""A copied row of plain values (int, bytes, str, None and tuples of them): a store row as
(partition, key, value, floe_batch, written µs), a repartition record as (partition, offset,
key, value, headers)."""


def row_digest(row: Row) -> int:
    """A row's 64-bit digest: SHA-256 of its repr, which is canonical for these value types."""
    return int.from_bytes(hashlib.sha256(repr(row).encode()).digest()[:8], "big")


def checksum(rows: Iterable[Row]) -> str:
    """Order-free checksum of rows: the sum of their digests modulo 2^64, as 16 hex digits."""
    total = 0
    for row in rows:
        total = (total + row_digest(row)) & 0xFFFFFFFFFFFFFFFF
    return f"{total:016x}"


# --- matching a snapshot with the job that restores it ---------------------------------------


@dataclass(frozen=True)
class Target:
    """What the restoring app is: its stages (name → source), input topics and stores (name → type)."""

    stages: Mapping[str, str | None]
    input_topics: Sequence[str]
    stores: Mapping[str, str]


def mismatches(m: Manifest, target: Target) -> list[str]:
    """Every way the snapshot does not fit the target job, each named; [] when it fits."""
    out: list[str] = []
    have = {s.name: s.source for s in m.stages}
    if sorted(have) != sorted(target.stages):
        out.append(f"stages: the snapshot has {sorted(have)}, the job has {sorted(target.stages)}")
    for name in sorted(set(have) & set(target.stages)):
        if have[name] != target.stages[name]:
            out.append(
                f"stage {name}: reads {_source(have[name])} in the snapshot, {_source(target.stages[name])} in the job"
            )
    if sorted(m.input_topics) != sorted(target.input_topics):
        out.append(
            f"input topics: the snapshot has {sorted(m.input_topics)}, the app has {sorted(target.input_topics)}"
        )
    stores = {s.name: s.type for s in m.stores}
    if sorted(stores) != sorted(target.stores):
        out.append(f"stores: the snapshot has {sorted(stores)}, the app has {sorted(target.stores)}")
    for name in sorted(set(stores) & set(target.stores)):
        if stores[name] != target.stores[name]:
            out.append(f"store {name}: type {stores[name]} in the snapshot, {target.stores[name]} in the app")
    return out


def _source(source: str | None) -> str:
    return "the input topics" if source is None else f"repartition {source!r}"


# --- the positions a restore writes --------------------------------------------------------------


@dataclass(frozen=True)
class RestoredRow:
    """One offsets row the restore writes for the new app."""

    stage: str
    topic: str
    partition: int
    next_offset: int
    committed_seq: int
    planned_seq: int
    planned_from: int | None
    planned_to: int | None
    planned_ts: int | None
    source_positions: dict[str, list[int]]


def check_restorable(m: Manifest) -> None:
    """Refuse a snapshot whose cut cannot be restored exactly into a new app (docs/snapshots.md,
    "Stages fed by a repartition topic")."""
    for stage in m.stages:
        if stage.source is None:
            continue
        for p in stage.partitions:
            if p.in_flight:
                raise SnapshotError(
                    f"stage {stage.name} partition {p.partition} has a plan in flight in the snapshot:"
                    " a repartition stage must be cut at a committed batch"
                )
            hops = sorted({key.rpartition(":")[0] for key in p.source_positions} - set(m.input_topics))
            if hops:
                raise SnapshotError(
                    f"stage {stage.name} applied records re-keyed from {hops}, which are not input topics:"
                    " restoring a job with more than one repartition hop is not supported yet"
                )


def restored_rows(
    m: Manifest, *, repartition_topic: Mapping[str, str], starts: Mapping[tuple[str, int], int]
) -> list[RestoredRow]:
    """The new app's offsets rows. A stage of the input topics resumes at its cut as taken (a
    plan in flight stays in flight: the new owner replays it exactly, as after a crash). A
    repartition stage reads the new app's topic (`repartition_topic`: its name → the new topic)
    from `starts` (its end before the restore wrote the copied tail there), with its sequences
    and source positions kept, at the committed batch it was cut at."""
    check_restorable(m)
    out: list[RestoredRow] = []
    for s in m.stages:
        for p in s.partitions:
            if s.source is None:
                out.append(
                    RestoredRow(s.name, s.topic, p.partition, p.next_offset, p.committed_seq, p.planned_seq,
                                p.planned_from, p.planned_to, p.planned_ts, dict(p.source_positions))
                )
                continue
            topic = repartition_topic[s.source]
            out.append(
                RestoredRow(s.name, topic, p.partition, starts.get((topic, p.partition), 0), p.committed_seq,
                            p.committed_seq, None, None, p.planned_ts, dict(p.source_positions))
            )
    return out


def tail_wanted(
    source: tuple[str, tuple[int, int]] | None, cuts: Mapping[str, int]
) -> bool:
    """Whether a record of a repartition topic past its stage's cut goes into the snapshot: its
    source position (`records.source_position`) is below its upstream stage's committed position
    `cuts["<topic>:<partition>"]` (a plan in flight there is replayed by the restored app, which
    writes its records again). A record without a source position is kept."""
    if source is None:
        return True
    key, (offset, _index) = source
    end = cuts.get(key)
    return end is not None and offset < end
