"""Pure pieces of the runtime: repartition positions, entrypoint loading, offsets table naming."""

from __future__ import annotations

from pathlib import Path

import pytest
from floe_jobs import api, records, startup


def _rekeyed(partition: int, offset: int, src: str, off: int, idx: int) -> records.Record:
    headers = [(records.SRC_HEADER, src.encode()), (records.OFF_HEADER, str(off).encode()),
               (records.IDX_HEADER, str(idx).encode())]
    return records.Record(b"k", b"", "rp", partition, offset, None, headers)


def test_drop_applied_keeps_positions_above_the_stored_marks() -> None:
    batch = [
        _rekeyed(0, 10, "in:0", 5, 0),  # at the mark: applied by an earlier attempt
        _rekeyed(0, 11, "in:0", 5, 1),  # above it (same offset, next index)
        _rekeyed(0, 12, "in:1", 2, 0),  # a source with no mark yet
        _rekeyed(1, 3, "in:0", 4, 9),  # another partition: its own marks
        records.Record(None, b"x", "rp", 0, 13, None, None),  # no position: kept, untracked
    ]
    kept, seen = records.drop_applied(batch, {("rp", 0): {"in:0": (5, 0)}, ("rp", 1): {"in:0": (4, 9)}})
    assert [r.offset for r in kept] == [11, 12, 13]
    assert seen == {("rp", 0): {"in:0": (5, 1), "in:1": (2, 0)}}


def test_drop_applied_drops_a_replayed_copy_in_the_same_batch() -> None:
    # stage 1 wrote positions 0..2 of in:0, died before committing, and its replay wrote them
    # again before this stage read either copy: one batch holds both
    first = [_rekeyed(0, 20 + i, "in:0", 7, i) for i in range(3)]
    again = [_rekeyed(0, 23 + i, "in:0", 7, i) for i in range(3)]
    tail = [_rekeyed(0, 26, "in:0", 8, 0)]
    kept, seen = records.drop_applied(first + again + tail, {})
    assert [r.offset for r in kept] == [20, 21, 22, 26]
    assert seen == {("rp", 0): {"in:0": (8, 0)}}
    # a first copy cut short by the crash: the replay supplies the rest, once
    kept, _ = records.drop_applied(first[:1] + again, {})
    assert [r.offset for r in kept] == [20, 24, 25]


def test_source_position_reads_the_rekey_headers() -> None:
    assert records.source_position(_rekeyed(0, 0, "t:3", 17, 2).headers) == ("t:3", (17, 2))
    assert records.source_position(records.position_headers("lines", 4, 1_000_000_007, 12)) == (
        "lines:4",
        (1_000_000_007, 12),
    )
    assert records.source_position([("other", b"1")]) is None
    assert records.source_position(None) is None


def test_average_bytes_counts_key_value_and_overhead() -> None:
    rows = [records.Record(b"ab", b"cdef", "t", 0, 0, None, None), records.Record(None, None, "t", 0, 1, None, None)]
    assert records.average_bytes(rows) == (6 + 2 * records.RECORD_OVERHEAD_BYTES) / 2
    assert records.average_bytes([]) is None


def test_entrypoint_from_file_and_module(tmp_path: Path) -> None:
    f = tmp_path / "my_job.py"
    f.write_text("from floe_jobs.api import Job\njob = Job()\n@job.stage()\ndef s(batch):\n    return None\n")
    target, _ = startup.load_entrypoint(str(f))
    job = api.as_job(target)
    assert [s.name for s in job.stages] == ["s"]
    fn, _ = startup.load_entrypoint("floe_jobs.planning:plan_batch")
    assert api.as_job(fn).stages[0].source is None


def test_entrypoint_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(startup.StartupError, match=r"job\.entrypoint"):
        startup.load_entrypoint(str(tmp_path / "missing.py"))
    with pytest.raises(startup.StartupError, match="cannot import"):
        startup.load_entrypoint("no_such_module_xyz:fn")
    with pytest.raises(startup.StartupError, match="no attribute"):
        startup.load_entrypoint("floe_jobs.planning:nope")


def test_job_validation() -> None:
    job = api.Job()
    with pytest.raises(ValueError, match="no stages"):
        api.as_job(job)
    with pytest.raises(TypeError, match="Job or a function"):
        api.as_job(42)
