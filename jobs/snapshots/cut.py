"""Reading one partition's cut from Cassandra while the app runs (docs/snapshots.md, option a).

The offsets row is read before and after the partition's store rows are copied; the copy counts
only if the row did not change in between (same next_offset, sequences and plan stamp): then no
plan was claimed and nothing committed meanwhile, and any row written by the plan in flight at
the first read carries that plan's fence, which a replay of it honours. Otherwise the partition
is copied again. A stage fed by a repartition topic must also be at a committed batch (its plan
in flight names a range of a topic the restored app does not read), so the copy waits for it.

Copying only reads, so a partition sees no pause from it, as long as one of its windows between
two commits lasts as long as its copy. One whose batches are all shorter (many rows, short
batches) would never offer one: after `hold_after` seconds of trying, the cut holds the
partition at a committed batch (`OffsetsTable.hold`: no new plan of it meanwhile), copies it and
releases it. That partition then pauses for one copy of its rows, and the snapshot always ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cassandra import ConsistencyLevel
from floe_jobs import faults, offsets
from floe_jobs.planning import OffsetRow
from floe_jobs.snapshots.manifest import PartitionCut, Row, SnapshotError

log = logging.getLogger(__name__)

# partition, key, value, floe_batch, time (ms since the epoch), write time (µs) of value and of
# fence, TTL left; the time as a number, which the driver hands over without a datetime per row
_ROWS = (
    "SELECT partition, key, value, floe_batch, toUnixTimestamp(time), WRITETIME(value), WRITETIME(floe_batch),"
    " TTL(floe_batch) FROM {table} WHERE partition = ?"
)

FullRow = tuple[int, bytes, bytes | None, int | None, int | None, int | None, int | None]
"""A store row as copied: partition, key, value, floe_batch, time (ms since the epoch), written
(µs: the later of the value's and the fence's write times), ttl (s left)."""


def as_checked(row: FullRow) -> Row:
    """The fields of a copied row that its checksum covers."""
    return (row[0], row[1], row[2], row[3], row[5])


@dataclass
class Reader:
    """Reads cuts of one app; `settle_timeout`: seconds a partition may take to offer a clean
    window (and, for a repartition stage, a committed batch) before the snapshot fails;
    `hold_after`: seconds of optimistic copies before the partition is held; `hold_min`: the
    shortest hold, seconds."""

    session: Any
    keyspace: str
    app_id: str
    settle_timeout: float = 120.0
    hold_after: float = 5.0
    hold_min: float = 5.0
    attempts: int = 0
    holds: int = 0

    def __post_init__(self) -> None:
        self._table = offsets.OffsetsTable(self.session, keyspace=self.keyspace, app_id=self.app_id)
        self._selects: dict[str, Any] = {}
        self._copy_s = 0.0  # the last copy of a partition's rows, seconds (`_copy`)

    def rows_of(self) -> list[offsets.Stored]:
        """Every live offsets row of the app (retired legacy rows left out)."""
        return [r for r in self._table.stored() if r.next_offset is not None]

    def _store_rows(self, table: str, partition: int) -> list[FullRow]:
        stmt = self._selects.get(table)
        if stmt is None:
            stmt = self.session.prepare(_ROWS.format(table=f"{self.keyspace}.{table}"))
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            stmt.fetch_size = 5000
            self._selects[table] = stmt
        # Each next page is asked for before this one is copied, so Cassandra reads it meanwhile
        # (iterating a result fetches a page only once the one before is used up). One flat
        # tuple per row, no conversions: the driver already gives ints and bytes.
        out: list[FullRow] = []
        future = self.session.execute_async(stmt, (partition,))
        while True:
            page = future.result().current_rows
            more = future.has_more_pages
            if more:
                future.start_fetching_next_page()
            out += [
                (r[0], r[1], r[2], r[3], r[4], r[6] if r[5] is None or (r[6] is not None and r[6] > r[5]) else r[5],
                 r[7])
                for r in page
            ]
            if not more:
                return out

    def cut(
        self,
        stage: str,
        topic: str,
        partition: int,
        tables: list[str],
        *,
        committed_only: bool,
        on_attempt: Callable[[], None] | None = None,
    ) -> tuple[PartitionCut, dict[str, list[FullRow]]]:
        """The stage's offsets row of `partition` and the rows of that partition of `tables`, as
        of one batch boundary (see the module docstring)."""
        start = time.monotonic()
        deadline = start + self.settle_timeout
        pause = 0.02
        self._copy_s = 0.0
        while True:
            self.attempts += 1
            if on_attempt is not None:
                on_attempt()
            before = self._table.position(stage, topic, partition)
            if before is None or before.next_offset is None:
                raise SnapshotError(f"stage {stage} has no position for {topic} partition {partition}")
            in_flight = (before.planned_seq or 0) > (before.committed_seq or 0)
            if not in_flight and time.monotonic() - start >= self.hold_after:
                held = self._held_copy(stage, before, tables)
                if held is not None:
                    return held
            elif not (committed_only and in_flight):
                copied = self._copy(tables, partition)
                if self._table.position(stage, topic, partition) == before:
                    return _partition_cut(before.row()), copied
            if time.monotonic() > deadline:
                what = "committed batch that lasted" if committed_only else "window"
                raise SnapshotError(
                    f"stage {stage} partition {partition} of {topic} offered no {what} as long as the copy of its"
                    f" rows within {self.settle_timeout:.0f}s (snapshot --settle-timeout); suspend the app"
                    " (spec.suspend: true) and take the snapshot again"
                )
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    def _copy(self, tables: list[str], partition: int) -> dict[str, list[FullRow]]:
        """The partition's rows of `tables`; how long that took is the next hold's measure."""
        began = time.monotonic()
        copied = {table: self._store_rows(table, partition) for table in tables}
        self._copy_s = time.monotonic() - began
        return copied

    def _held_copy(
        self, stage: str, before: offsets.Stored, tables: list[str]
    ) -> tuple[PartitionCut, dict[str, list[FullRow]]] | None:
        """The partition's copy under a hold set at `before` (a committed batch), released at
        once after it; None if the row moved before the hold or during the copy (a replica of
        an earlier release ignores holds, and a hold runs out: it lasts three of the last copy,
        held or not, at least `hold_min` seconds, so one that ran out is followed by a longer)."""
        until = faults.clock_us() + int(max(self.hold_min, 3 * self._copy_s) * 1_000_000)
        if not self._table.hold(stage, before, until_us=until):
            return None
        self.holds += 1
        try:
            copied = self._copy(tables, before.partition)
            after = self._table.position(stage, before.topic, before.partition)
        finally:
            self._table.release(stage, before.topic, before.partition, until_us=until)
        if after != replace(before, held_until=until):
            return None
        log.info("Copied stage=%s topic=%s partition=%d under a hold", stage, before.topic, before.partition)
        return _partition_cut(before.row()), copied


def _partition_cut(row: OffsetRow) -> PartitionCut:
    in_flight = row.planned_seq > row.committed_seq
    return PartitionCut(
        partition=row.partition,
        next_offset=row.next_offset,
        committed_seq=row.committed_seq,
        planned_seq=row.planned_seq,
        planned_from=row.planned_from if in_flight else None,
        planned_to=row.planned_to if in_flight else None,
        planned_ts=row.planned_ts,
        source_positions={k: [v[0], v[1]] for k, v in sorted(row.source_positions.items())},
    )
