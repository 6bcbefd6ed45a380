"""The snapshot manifest's pure parts: its JSON form, checksums, matching a job, restored rows."""

from __future__ import annotations

import pytest
from floe_jobs.snapshots import manifest as mf
from floe_jobs.snapshots.manifest import Manifest, PartitionCut, SnapshotError, StageCut, StoreCopy, TailCopy


def word_count(**changes: object) -> Manifest:
    split = StageCut("split", None, "wc-lines", [
        PartitionCut(0, 120, 4, 5, 120, 180, 1_000_005),
        PartitionCut(1, 90, 3, 3, planned_ts=1_000_003),
    ])
    count = StageCut("count", "words", "wc-words-repartition", [
        PartitionCut(0, 400, 7, 7, planned_ts=2_000_007,
                     source_positions={"wc-lines:0": [110, 3], "wc-lines:1": [80, 1]}),
    ])
    fields: dict[str, object] = {
        "app_id": "wc", "keyspace": "ks", "job": "word_count.py", "input_topics": ["wc-lines"],
        "stages": [split, count],
        "stores": [StoreCopy("word-count", "partitioned", "word_count_kstreams_store", "count", 2, "00", 10, ["a"])],
        "tails": [TailCopy("count", 1, "00", 5, ["t"])],
        "created_at": "2026-11-28T10:00:00.000Z", "seconds": 1.5, "attempts": 3, "generation": 4, "image": "img",
    }
    fields.update(changes)
    return Manifest(**fields)  # type: ignore[arg-type]


TARGET = mf.Target(stages={"split": None, "count": "words"}, input_topics=["wc-lines"],
                   stores={"word-count": "partitioned"})


def test_manifest_round_trips_through_json() -> None:
    m = word_count()
    assert Manifest.from_json(m.to_json()) == m


def test_manifest_of_another_format_is_refused() -> None:
    with pytest.raises(SnapshotError, match="manifest format 2 is not one this release reads"):
        Manifest.from_json('{"format": 2}')


def test_manifest_missing_a_field_is_refused() -> None:
    with pytest.raises(SnapshotError, match="incomplete or malformed"):
        Manifest.from_json('{"format": 1, "stages": [], "stores": []}')


def test_checksum_ignores_row_order_and_sees_every_field() -> None:
    rows = [(0, b"a", b"\x00\x01", 3, 17), (1, b"b", None, 4, 18)]
    assert mf.checksum(rows) == mf.checksum(list(reversed(rows)))
    for changed in [(0, b"a", b"\x00\x02", 3, 17), (0, b"a", b"\x00\x01", 2, 17), (0, b"a", b"\x00\x01", 3, 16),
                    (2, b"a", b"\x00\x01", 3, 17), (0, b"c", b"\x00\x01", 3, 17)]:
        assert mf.checksum([changed, rows[1]]) != mf.checksum(rows)
    assert mf.checksum([]) == "0000000000000000"


def test_a_matching_job_has_no_mismatch() -> None:
    assert mf.mismatches(word_count(), TARGET) == []


def test_mismatches_name_stages_sources_topics_and_stores() -> None:
    target = mf.Target(stages={"split": None, "sum": "words"}, input_topics=["other"],
                       stores={"word-count": "global", "extra": "partitioned"})
    found = mf.mismatches(word_count(), target)
    assert found == [
        "stages: the snapshot has ['count', 'split'], the job has ['split', 'sum']",
        "input topics: the snapshot has ['wc-lines'], the app has ['other']",
        "stores: the snapshot has ['word-count'], the app has ['extra', 'word-count']",
        "store word-count: type partitioned in the snapshot, global in the app",
    ]
    moved = mf.Target(stages={"split": None, "count": "letters"}, input_topics=["wc-lines"],
                      stores={"word-count": "partitioned"})
    assert mf.mismatches(word_count(), moved) == [
        "stage count: reads repartition 'words' in the snapshot, repartition 'letters' in the job"
    ]


def test_restored_rows_keep_input_cuts_and_move_repartition_stages_to_the_new_topic() -> None:
    rows = mf.restored_rows(word_count(), repartition_topic={"words": "new-words-repartition"},
                            starts={("new-words-repartition", 0): 0})
    assert rows == [
        # a plan in flight stays in flight: the new owner replays exactly that range and sequence
        mf.RestoredRow("split", "wc-lines", 0, 120, 4, 5, 120, 180, 1_000_005, {}),
        mf.RestoredRow("split", "wc-lines", 1, 90, 3, 3, None, None, 1_000_003, {}),
        mf.RestoredRow("count", "new-words-repartition", 0, 0, 7, 7, None, None, 2_000_007,
                       {"wc-lines:0": [110, 3], "wc-lines:1": [80, 1]}),
    ]


def test_repartition_stage_with_a_plan_in_flight_is_refused() -> None:
    count = StageCut("count", "words", "wc-words-repartition", [PartitionCut(0, 400, 7, 8, 400, 450, 2)])
    with pytest.raises(SnapshotError, match="stage count partition 0 has a plan in flight"):
        mf.restored_rows(word_count(stages=[count]), repartition_topic={"words": "x"}, starts={})


def test_second_repartition_hop_is_refused() -> None:
    count = StageCut("count", "words", "wc-words-repartition",
                     [PartitionCut(0, 400, 7, 7, source_positions={"wc-letters-repartition:0": [3, 0]})])
    with pytest.raises(SnapshotError, match="more than one repartition hop"):
        mf.check_restorable(word_count(stages=[count]))


def test_tail_keeps_records_of_committed_upstream_batches_only() -> None:
    ends = {"wc-lines:0": 120}
    assert mf.tail_wanted(("wc-lines:0", (119, 4)), ends)
    assert not mf.tail_wanted(("wc-lines:0", (120, 0)), ends)  # the plan in flight: replayed
    assert not mf.tail_wanted(("wc-lines:1", (3, 0)), ends)  # a partition with no committed position
    assert mf.tail_wanted(None, ends)  # not tracked: kept


def test_writer_flags_parse_and_a_malformed_one_is_named() -> None:
    from floe_jobs import config
    from floe_jobs.snapshots import cli

    assert cli.parse_writers(["word-count=count", "b=split"]) == {"word-count": "count", "b": "split"}
    with pytest.raises(config.ConfigError, match="--writer 'word-count': expected STORE=STAGE"):
        cli.parse_writers(["word-count"])
