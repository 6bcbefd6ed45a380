"""The throughput workloads' inputs and answer checks: a run whose output or store is wrong,
incomplete or (for dedup) repeated fails instead of scoring."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import workloads  # a script's module, on its folder's path


def out(*pairs: tuple[str, str]) -> list[tuple[bytes | None, bytes | None]]:
    return [(k.encode(), v.encode()) for k, v in pairs]


def test_dedup_input_holds_every_id_and_the_asked_number_of_records() -> None:
    records = workloads.repeated_ids(1_200, 1_000, seed=1)
    assert len(records) == 1_200 and workloads.distinct_of(workloads.DEDUP, records) == 1_000


def test_latest_expects_the_last_update_of_each_key() -> None:
    records = workloads.key_updates(50, 10, seed=2)
    want = workloads.expected(workloads.LATEST, records)
    last = {}
    for k, v in records:
        last[k] = v
    assert want == last and len(want) == 10


def test_word_count_output_is_checked_count_by_count() -> None:
    lines: list[workloads.Record] = ["a b b", "B c"]
    assert (
        workloads.check_output(workloads.WORD_COUNT, lines, out(("a", "1"), ("b", "3"), ("c", "1")))[
            "output_keys_checked"
        ]
        == 3
    )
    with pytest.raises(AssertionError, match=r"1 of 3 keys wrong or missing.*'b': \('2', '3'\)"):
        workloads.check_output(workloads.WORD_COUNT, lines, out(("a", "1"), ("b", "2"), ("c", "1")))


def test_a_duplicate_in_the_dedup_output_fails_the_run() -> None:
    records = workloads.repeated_ids(3, 2, seed=3)
    ids = sorted({r[0] for r in records if isinstance(r, tuple)})
    assert workloads.check_output(workloads.DEDUP, records, out(*[(i, i) for i in ids]))["output_duplicates"] == 0
    with pytest.raises(AssertionError, match="1 duplicate records of 2 ids"):
        workloads.check_output(workloads.DEDUP, records, out(*[(i, i) for i in ids], (ids[0], ids[0])))


def test_a_missing_or_extra_key_in_the_store_fails_the_run() -> None:
    records = workloads.key_updates(4, 2, seed=4)
    want = workloads.expected(workloads.LATEST, records)
    assert workloads.check_store(workloads.LATEST, records, lambda *_: dict(want)) == 2
    with pytest.raises(AssertionError, match="1 keys not in the input"):
        workloads.check_store(workloads.LATEST, records, lambda *_: {**want, "zz": "1"})
    seen = {k: 0 for k in want}
    assert workloads.check_store(workloads.DEDUP, records, lambda *_: seen) == 2
    with pytest.raises(AssertionError, match="1 of 2 keys wrong or missing"):
        workloads.check_store(workloads.DEDUP, records, lambda *_: dict(list(seen.items())[:1]))
