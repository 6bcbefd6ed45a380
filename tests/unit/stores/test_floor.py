"""The consistency floor: which levels keep the fence for which replication (pure rules)."""

from __future__ import annotations

import re

import pytest
from floe_jobs.stores import CassandraConfig, StoreConfigError
from floe_jobs.stores.floor import Replication, floor_error, level_error

SIMPLE = "org.apache.cassandra.locator.SimpleStrategy"
NTS = "org.apache.cassandra.locator.NetworkTopologyStrategy"


def simple(rf: int) -> Replication:
    return Replication.from_schema({"class": SIMPLE, "replication_factor": str(rf)})


def nts(**dcs: int) -> Replication:
    return Replication.from_schema({"class": NTS, **{dc: str(n) for dc, n in dcs.items()}})


def error(level: str, replication: Replication, *, serial: str = "LOCAL_SERIAL", dc: str | None = "dc1") -> str | None:
    return floor_error(level, serial, replication, keyspace="app", datacenter=dc)


@pytest.mark.parametrize("level", ["QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL", "quorum"])
@pytest.mark.parametrize("rf", [1, 2, 3, 5])
def test_quorum_levels_keep_the_fence_at_any_replication(level: str, rf: int) -> None:
    assert error(level, simple(rf)) is None
    assert error(level, nts(dc1=rf, dc2=3)) is None


@pytest.mark.parametrize(
    ("level", "largest"),
    [("ONE", 1), ("TWO", 3), ("THREE", 5)],
)
def test_counted_levels_keep_the_fence_only_as_a_majority_of_every_copy(level: str, largest: int) -> None:
    for rf in range(1, largest + 1):
        assert error(level, simple(rf)) is None, rf
    assert error(level, simple(largest + 1)) is not None
    # under NetworkTopologyStrategy every datacenter's copies count (ONE is not DC-local)
    assert error("ONE", nts(dc1=1)) is None
    assert error("ONE", nts(dc1=1, dc2=1)) is not None


def test_one_with_three_copies_is_refused_saying_what_to_change() -> None:
    message = error("ONE", simple(3))
    assert message is not None
    assert "cassandra.consistency (FLOE_CASSANDRA_CONSISTENCY; a StreamingApp's spec.state.cassandra.consistency)" in (
        message
    )
    assert "ONE cannot keep the fence of keyspace app (SimpleStrategy, replication factor 3)" in message
    assert "use LOCAL_QUORUM (the default) or QUORUM" in message


def test_local_one_counts_the_local_datacenter_only() -> None:
    assert error("LOCAL_ONE", nts(dc1=1, dc2=3), dc="dc1") is None
    assert error("LOCAL_ONE", nts(dc1=3, dc2=1), dc="dc1") is not None
    assert error("LOCAL_ONE", simple(1)) is None
    assert error("LOCAL_ONE", simple(2)) is not None


def test_local_levels_need_copies_in_the_local_datacenter() -> None:
    message = error("LOCAL_QUORUM", nts(dc2=3), dc="dc1")
    assert message is not None and "local datacenter dc1" in message and "cassandra.local_datacenter" in message
    assert error("QUORUM", nts(dc2=3), serial="LOCAL_SERIAL", dc="dc1") is not None  # LOCAL_SERIAL there
    assert error("QUORUM", nts(dc2=3), serial="SERIAL", dc="dc1") is None
    # SimpleStrategy has no datacenters: every copy is local
    assert error("LOCAL_QUORUM", simple(3), dc="anywhere") is None


def test_counted_levels_under_an_unknown_strategy_are_refused() -> None:
    other = Replication.from_schema({"class": "org.example.EverywhereStrategy"})
    assert error("ONE", other) is not None
    assert error("LOCAL_QUORUM", other) is None


@pytest.mark.parametrize(
    ("consistency", "serial", "wanted"),
    [
        ("ANY", "LOCAL_SERIAL", "ANY is not a level of both reads and writes"),
        ("SERIAL", "LOCAL_SERIAL", "SERIAL is not a level of both reads and writes"),
        ("LOCAL_QUORUM", "QUORUM", "QUORUM is not a serial level; use LOCAL_SERIAL (the default) or SERIAL"),
    ],
)
def test_levels_wrong_whatever_the_replication_are_refused_by_the_configuration(
    consistency: str, serial: str, wanted: str
) -> None:
    message = level_error(consistency, serial)
    assert message is not None and wanted in message
    with pytest.raises(StoreConfigError, match=re.escape(wanted)):
        CassandraConfig(consistency=consistency, serial_consistency=serial)


def test_transient_replication_counts_full_copies() -> None:
    assert Replication.from_schema({"class": SIMPLE, "replication_factor": "3/1"}).total == 3
