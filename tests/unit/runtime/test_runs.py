"""Runs of re-keyed rows: Kafka's partitioner, packing, and the reading stage's row-by-row filter."""

from __future__ import annotations

import random
from collections.abc import Callable

import pyarrow as pa
import pytest
from floe_jobs import records, runs

RekeyedTable = Callable[[list[tuple[object, ...]]], pa.Table]  # the `rekeyed_table` fixture

# Kafka's own murmur2 of these keys (org.apache.kafka.common.utils.Utils.murmur2, kafka-clients
# 3.9.0), and toPositive(h) % 6
JAVA_MURMUR2 = {
    b"21": (-973932308, 0),
    b"foobar": (-790332482, 0),
    b"a-little-bit-long-string": (-985981536, 2),
    b"a-little-bit-longer-string": (-1486304829, 5),
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": (-58897971, 5),
    b"abc": (479470107, 3),
    b"": (275646681, 3),
    b"v0000001": (668381293, 1),
    "été".encode(): (-2101193575, 1),
}


def test_murmur2_and_partitions_equal_kafkas() -> None:
    keys = pa.array(list(JAVA_MURMUR2), pa.binary())
    hashes = runs.murmur2(keys).view("int32").tolist()
    assert hashes == [h for h, _ in JAVA_MURMUR2.values()]
    assert runs.partitions(keys, 6).tolist() == [p for _, p in JAVA_MURMUR2.values()]
    # a slice of an array (non-zero offset) hashes the same
    assert runs.partitions(keys.slice(2), 6).tolist() == [p for _, p in list(JAVA_MURMUR2.values())[2:]]


def _rows(rng: random.Random, n: int) -> list[tuple[object, ...]]:
    """Combined re-key rows of two sources in position order (what the sink hands `pack`)."""
    rows: list[tuple[object, ...]] = []
    for src in (0, 1):
        keys = sorted({f"w{rng.randrange(10 * n)}".encode() for _ in range(n)})
        rows.extend((k, str(rng.randrange(1, 9)).encode(), "lines", src, 40 + src, i) for i, k in enumerate(keys, 1))
    rows.append((None, b"3", "lines", 1, 41, len(rows) + 1))
    return rows


def _unpacked(run: runs.Run) -> list[tuple[object, ...]]:
    table = runs.table(run.value)
    return [
        (k, v, run.src_topic, run.src_partition, off, idx)
        for k, v, off, idx in zip(*(table.column(c).to_pylist() for c in ("key", "value", "off", "idx")), strict=True)
    ]


def test_pack_puts_every_row_once_on_its_keys_partition_in_position_order(rekeyed_table: RekeyedTable) -> None:
    rows = _rows(random.Random(7), 6000)
    packed = runs.pack(rekeyed_table(rows), 4)
    unpacked = [r for run in packed for r in _unpacked(run)]
    assert sorted(unpacked, key=repr) == sorted(rows, key=repr)
    for run in packed:
        got = _unpacked(run)
        keys = pa.array([r[0] for r in got], pa.binary())
        if got[0][0] is None:  # a null key goes to the source partition's number
            assert run.partition == got[0][3] % 4
        else:
            assert set(runs.partitions(keys, 4).tolist()) == {run.partition}
        assert [r[4:] for r in got] == sorted(r[4:] for r in got)
        assert len({r[3] for r in got}) == 1, "one source per run"
        headers = records.run_headers(run)
        last = got[-1]
        assert records.source_position(headers) == (f"lines:{last[3]}", (last[4], last[5]))
        assert runs.info(headers) == runs.RunInfo(len(got), (got[0][4], got[0][5]))
        assert len(got) <= runs.RUN_MAX_ROWS
    # per source and partition, one run follows another in position order
    for src in (0, 1):
        for partition in range(4):
            mine = [r for run in packed for r in _unpacked(run) if run.partition == partition and r[3] == src]
            assert [r[4:] for r in mine] == sorted(r[4:] for r in mine)


def test_runs_are_bounded_in_rows_and_bytes(rekeyed_table: RekeyedTable) -> None:
    many = [(f"k{i:05d}".encode(), b"1", "lines", 0, 9, i) for i in range(1, 20_001)]
    packed = runs.pack(rekeyed_table(many), 1)
    assert [r.rows for r in packed] == [4096] * 4 + [20_000 - 4 * 4096]
    big = [(f"k{i}".encode(), b"x" * 100_000, "lines", 0, 9, i) for i in range(1, 13)]
    sized = runs.pack(rekeyed_table(big), 1)
    assert all(len(r.value) < runs.RUN_MAX_BYTES + 100_200 for r in sized)
    assert sum(runs.table(r.value).num_rows for r in sized) == 12 and len(sized) >= 3


def _record(run: runs.Run, offset: int) -> records.Record:
    return records.Record(None, run.value, "rp", run.partition, offset, None, records.run_headers(run))


def test_drop_applied_treats_a_run_as_its_rows(rekeyed_table: RekeyedTable) -> None:
    rows = [(f"k{i:04d}".encode(), b"1", "lines", 0, 7, i) for i in range(1, 10_001)]
    first, second, third = (_record(run, n) for n, run in enumerate(runs.pack(rekeyed_table(rows), 1)))
    assert runs.info(first.headers) == runs.RunInfo(4096, (7, 1))
    # mark inside the second run: the first is dropped, the second cut, the third kept whole
    kept, seen = records.drop_applied([first, second, third], {("rp", 0): {"lines:0": (7, 5000)}})
    assert [r.offset for r in kept] == [1, 2]
    assert runs.table(kept[0].value).column("idx").to_pylist() == list(range(5001, 8193))
    assert runs.info(kept[0].headers) == runs.RunInfo(3192, (7, 5001))
    assert kept[1] is third
    assert seen == {("rp", 0): {"lines:0": (7, 10_000)}}
    assert records.row_count(kept) == 5000
    # a copy of rows written one by one by an earlier attempt marks the run's rows as applied too
    single = records.Record(b"k", b"1", "rp", 0, 0, None, records.position_headers("lines", 0, 7, 4100))
    kept, _ = records.drop_applied([single, second], {})
    assert runs.table(kept[1].value).column("idx").to_pylist()[0] == 4101
    # nothing applied: the run is kept as it came
    kept, _ = records.drop_applied([first], {})
    assert kept == [first]


def test_row_count_counts_runs_as_their_rows(rekeyed_table: RekeyedTable) -> None:
    packed = runs.pack(rekeyed_table([(b"a", b"1", "lines", 0, 3, 1), (b"b", b"1", "lines", 0, 3, 2)]), 1)
    plain = records.Record(b"k", b"v", "in", 0, 5, None, None)
    assert records.row_count([plain, _record(packed[0], 0), plain]) == 4


def test_a_malformed_run_header_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"malformed floe.run header b'12:x': .*<rows>:<first offset>:<first index>"):
        runs.info([("floe.src", b"lines:0"), ("floe.run", b"12:x")])
    assert runs.info([("floe.src", b"lines:0")]) is None
