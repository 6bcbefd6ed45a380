"""State rows that something other than a batch stamped later than the batch: the store library
at its own clock, raw CQL `USING TIMESTAMP`, a writer whose clock runs an hour ahead. The state
helpers (`floe_jobs.state`) write above them, so every batch's delta is kept, read back cold.

The batches' stamps are taken the way the runtime takes them (`planning.plan_batch` from an
offsets row and the planner's clock, which a test may set off); the rows are read back with a
fresh store, from Cassandra, as a new replica would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cassandra.cluster import Session
from floe_jobs import planning, state
from floe_jobs.planning import OffsetRow, Watermarks
from floe_jobs.statecache import Ownership, StateCache
from floe_jobs.stores import CassandraConfig, PartitionedStore, serdes
from floe_jobs.stores.schema import StoreSpec, table_name
from prometheus_client import CollectorRegistry

pytestmark = pytest.mark.cassandra

HOUR_US = 3_600_000_000


@pytest.fixture(params=[None, 3600], ids=["no-ttl", "ttl"])
def ref(request: pytest.FixtureRequest, session: Session, keyspace: str, store_name: str,
        cassandra_hosts: list[str], cassandra_port: int) -> Iterator[state.StoreRef]:
    """A store as the runtime provisions it, without and with a TTL (written by other statements)."""
    ttl = request.param
    PartitionedStore(session, StoreSpec(name=store_name, type="partitioned", ttl_seconds=ttl), keyspace=keyspace,
                     registry=CollectorRegistry())
    yield state.StoreRef(cassandra=CassandraConfig(hosts=tuple(cassandra_hosts), port=cassandra_port),
                         keyspace=keyspace, name=store_name, type="partitioned", ttl_seconds=ttl,
                         key_serde="str", value_serde="long")
    state.shutdown_sessions()


def library(session: Session, ref: state.StoreRef) -> PartitionedStore[str, int]:
    """The store library on the same table, as a tool or a query endpoint opens it."""
    return PartitionedStore(session, ref.name, keyspace=ref.keyspace, key_serde=serdes.STR,
                            value_serde=serdes.LONG, registry=CollectorRegistry())


def cold(session: Session, ref: state.StoreRef) -> dict[str, tuple[Any, int | None]]:
    """(value, fence) of every row with a value, read from Cassandra by a store that kept nothing."""
    store = library(session, ref)
    keys = [key for key, _ in store.all(0)]
    return store.get_many_fenced(0, keys)


def write_ahead(session: Session, ref: state.StoreRef, key: str, value: int, stamp: int) -> None:
    """A row written by another writer under write timestamp `stamp` (no fence: not a batch)."""
    session.execute(
        f"INSERT INTO {ref.keyspace}.{table_name(ref.name)} (partition, key, time, value) VALUES (0, %s, "
        f"toTimestamp(now()), %s) USING TIMESTAMP {stamp}",
        (serdes.STR.encode(key), serdes.LONG.encode(value)),
    )


def clock_us() -> int:
    return time.time_ns() // 1000


class Partition:
    """The offsets row of input partition 0 and the plans made from it, as the runtime makes them:
    each batch planned and stamped from the row its predecessor left, by a planner whose clock is
    `skew_us` off."""

    def __init__(self, skew_us: int = 0) -> None:
        self.skew_us = skew_us
        self.row = OffsetRow("in", 0, next_offset=0, planned_ts=clock_us() + skew_us - 1)

    def plan(self) -> planning.PartitionPlan:
        plan = planning.plan_batch(owned=[("in", 0)], rows={("in", 0): self.row},
                                   watermarks={("in", 0): Watermarks(0, self.row.next_offset + 10)},
                                   starting_offsets="earliest", budget=10, now_us=clock_us() + self.skew_us)
        (p,) = plan.partitions
        self.row = OffsetRow("in", 0, next_offset=self.row.next_offset, committed_seq=self.row.committed_seq,
                             planned_seq=p.seq, planned_from=p.start, planned_to=p.end, planned_ts=p.stamp)
        return p

    def commit(self, p: planning.PartitionPlan) -> None:
        self.row = OffsetRow("in", 0, next_offset=p.end, committed_seq=p.seq, planned_seq=p.seq,
                             planned_from=p.start, planned_to=p.end, planned_ts=self.row.planned_ts)


def merge(ref: state.StoreRef, p: planning.PartitionPlan, deltas: dict[str, int],
          owned: Ownership | None) -> dict[str, int]:
    rows = [(0, key, delta) for key, delta in deltas.items()]
    out = state.merge_partition_rows(rows, ref=ref, fences={0: p.seq}, stamps={0: p.stamp}, combine="sum",
                                     owned=owned)
    return {key: value for _p, key, value in out}


def test_batches_after_a_row_written_an_hour_ahead_keep_every_delta(session: Session, ref: state.StoreRef
                                                                   ) -> None:
    write_ahead(session, ref, "k", 100, clock_us() + HOUR_US)
    part = Partition()
    owned = Ownership(StateCache(100), {0: 1})  # the replica keeps what it reads and writes
    got = []
    for delta in (1, 2, 3):
        p = part.plan()
        got.append(merge(ref, p, {"k": delta, f"new{delta}": delta}, owned)["k"])
        part.commit(p)
    assert got == [101, 103, 106]
    assert cold(session, ref) == {"k": (106, 3), "new1": (1, 1), "new2": (2, 2), "new3": (3, 3)}
    # a new replica reads the rows cold and goes on from them
    p = part.plan()
    assert merge(ref, p, {"k": 4}, Ownership(StateCache(100), {0: 1})) == {"k": 110}
    assert cold(session, ref)["k"] == (110, 4)


def test_a_store_library_write_during_a_batch_cannot_swallow_its_delta(session: Session, ref: state.StoreRef
                                                                      ) -> None:
    part = Partition()
    p = part.plan()
    merge(ref, p, {"k": 1}, None)
    part.commit(p)
    p = part.plan()  # the batch is stamped when it is planned ...
    time.sleep(0.01)
    library(session, ref).put(0, "k", 50)  # ... and the library writes the row at its clock before the batch does
    assert merge(ref, p, {"k": 5}, None) == {"k": 55}
    assert cold(session, ref) == {"k": (55, 2)}


def test_a_replica_whose_clock_was_set_back_keeps_every_delta(session: Session, ref: state.StoreRef) -> None:
    """The planner an hour behind the writer of the rows (an offsets row made by a release without
    stamps, or made again after the rows were written): every batch still lands."""
    library(session, ref).put(0, "k", 7)
    part = Partition(skew_us=-HOUR_US)
    for seq, delta in enumerate((1, 2, 3), start=1):
        p = part.plan()
        assert p.stamp < clock_us() - HOUR_US // 2  # the planner is an hour behind
        merge(ref, p, {"k": delta}, Ownership(StateCache(100), {0: seq}))
        part.commit(p)
    assert cold(session, ref) == {"k": (13, 3)}


def test_a_late_write_of_an_earlier_attempt_loses_to_the_replay_and_to_newer_batches(
    session: Session, ref: state.StoreRef
) -> None:
    """A zombie's late write, with a value of its own (a helper that is not deterministic), never
    wins: not against the replay of its batch, which is stamped above it, nor, above a row
    another writer stamped an hour ahead, against the batch after."""
    store = library(session, ref)
    write_ahead(session, ref, "ahead", 100, clock_us() + HOUR_US)
    part = Partition()
    first = part.plan()
    # the first attempt reads its rows and decides, then stalls before it writes
    seen = store.get_many_stamped(0, ["plain", "ahead"])
    late = {key: planning.row_stamp(first.stamp, seen[key][2]) for key in seen}
    replay = part.plan()  # the next owner replays the plan: same sequence, a stamp above
    assert (replay.seq, replay.replay) == (first.seq, True) and replay.stamp > first.stamp
    assert merge(ref, replay, {"plain": 1, "ahead": 1}, None) == {"plain": 1, "ahead": 101}
    part.commit(replay)
    store.put_many_fenced(0, [("plain", 999)], batch=first.seq, stamp=first.stamp, stamps={"plain": late["plain"]})
    assert cold(session, ref)["plain"] == (1, 1)
    newer = part.plan()
    assert merge(ref, newer, {"ahead": 1}, None) == {"ahead": 102}
    store.put_many_fenced(0, [("ahead", 999)], batch=first.seq, stamp=first.stamp, stamps={"ahead": late["ahead"]})
    assert cold(session, ref) == {"plain": (1, 1), "ahead": (102, 2)}
