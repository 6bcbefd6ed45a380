"""Fence decisions: a replay of the same batch sequence never applies a delta twice."""

from __future__ import annotations

import pytest
from floe_jobs import state
from floe_jobs.state import COMBINERS, decide_first_seen, decide_latest, decide_merge

ADD = COMBINERS["sum"]


def test_merge_new_key() -> None:
    assert decide_merge(None, 3, batch=5, combine=ADD) == (3, True)


def test_merge_older_fence_applies() -> None:
    assert decide_merge((10, 4), 3, batch=5, combine=ADD) == (13, True)
    assert decide_merge((10, None), 3, batch=5, combine=ADD) == (13, True)


def test_merge_same_or_newer_fence_skips() -> None:
    assert decide_merge((13, 5), 3, batch=5, combine=ADD) == (13, False)
    assert decide_merge((13, 6), 3, batch=5, combine=ADD) == (13, False)


def test_merge_deleted_value_restarts() -> None:
    assert decide_merge((None, 2), 4, batch=5, combine=ADD) == (4, True)


def test_replay_sequence_is_exactly_once() -> None:
    """Apply batches 1..3, crash after writing half of batch 3's keys, replay batch 3."""
    stored: dict[str, tuple[int, int | None]] = {}
    batches = {1: {"a": 1, "b": 2}, 2: {"a": 5}, 3: {"a": 1, "b": 1, "c": 7}}

    def run(seq: int, keys: list[str]) -> None:
        for k in keys:
            value, write = decide_merge(stored.get(k), batches[seq][k], batch=seq, combine=ADD)
            if write:
                stored[k] = (value, seq)

    run(1, ["a", "b"])
    run(2, ["a"])
    run(3, ["a", "c"])  # crash: b not written, offsets not committed
    run(3, ["a", "b", "c"])  # replay
    assert {k: v for k, (v, _) in stored.items()} == {"a": 7, "b": 3, "c": 7}


def test_min_max_combiners() -> None:
    assert decide_merge((4, 1), 2, batch=2, combine=COMBINERS["min"]) == (2, True)
    assert decide_merge((4, 1), 2, batch=2, combine=COMBINERS["max"]) == (4, True)


def test_missing_key_as_the_store_reports_it() -> None:
    assert decide_merge((None, None), 3, batch=1, combine=ADD) == (3, True)
    assert decide_latest((None, None), "x", batch=1) == ("x", True)


def test_latest() -> None:
    assert decide_latest(None, "x", batch=1) == ("x", True)
    assert decide_latest(("old", 1), "x", batch=2) == ("x", True)
    assert decide_latest(("x", 2), "y", batch=2) == ("x", False)


def test_first_seen() -> None:
    assert decide_first_seen(None, batch=3) == (True, True)
    assert decide_first_seen((None, None), batch=3) == (True, True)  # how the store reports a missing key
    assert decide_first_seen((1, 2), batch=3) == (False, False)
    # written by an earlier attempt of this very batch: first seen here, keep (output at-least-once)
    assert decide_first_seen((1, 3), batch=3) == (True, False)
    assert state.already_applied((1, 3), 3) and not state.already_applied((1, None), 3)


def test_a_store_has_one_writing_stage() -> None:
    """Fences are per input partition of the writing stage's topic: a second stage writing the
    same store would skip its updates as applied, so it is refused, naming both stages."""
    import pytest
    from floe_jobs import api

    writers: dict[str, str] = {}
    from floe_jobs.stores.config import CassandraConfig

    ref = state.StoreRef(CassandraConfig(hosts=("h",)), "ks", "counts", "partitioned", None, "str", "long")

    def batch(stage: str) -> api.Batch:
        return api.Batch(
            spark=None, df=None, stage=stage, cfg=None, args=[], seqs={("t", 0): 1}, sink=None, writers=writers  # type: ignore[arg-type]
        )

    batch("count")._fenced(state.merge_partition_rows, ref, combine="sum")
    batch("count")._fenced(state.merge_partition_rows, ref, combine="sum")  # the same stage again
    with pytest.raises(api.StoreWriterError, match="store 'counts' is written by stages 'count' and 'totals'"):
        batch("totals")._fenced(state.latest_partition_rows, ref)


@pytest.mark.parametrize(
    ("helper", "declared", "wanted"),
    [
        ("aggregate", "global", "read 'lookups' with lookup"),
        ("dedup", "versioned-partitioned", "declare a partitioned store for this state"),
        ("latest", "versioned-global", "declare a partitioned store for this state"),
        ("lookup", "versioned-partitioned", "declare the store partitioned or global"),
    ],
)
def test_a_helper_refuses_a_store_of_a_type_it_cannot_use(helper: str, declared: str, wanted: str) -> None:
    """Fenced state lives in partitioned stores only and lookups read partitioned and global
    ones: another declared type is refused when the helper opens the store (the warm-up's dry
    run does), naming the stage, the store, its type and what to change."""
    from floe_jobs import api, config

    cfg = config.load(
        environ={
            "FLOE_APP_ID": "app",
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "FLOE_KAFKA_TOPICS": "in",
            "FLOE_CASSANDRA_KEYSPACE": "ks",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
            "FLOE_STORES": f'[{{"name": "lookups", "type": "{declared}"}}]',
        }
    )
    batch = api.Batch(spark=None, df=None, stage="count", cfg=cfg, args=[], seqs={}, sink=None)  # type: ignore[arg-type]
    types = api.LOOKUP_TYPES if helper == "lookup" else api.FENCED_TYPES
    with pytest.raises(api.StoreTypeError) as err:
        batch.store_ref("lookups", key_serde="str", value_serde="str", helper=helper, types=types)
    message = str(err.value)
    assert f"stage 'count': {helper}(store='lookups')" in message
    assert f"store 'lookups' is declared {declared}" in message
    assert wanted in message
    assert isinstance(err.value, api.StageConfigError)  # the warm-up stops the replica on it
