"""The driver-side re-key of small batches: rows and positions as Spark's plan gives them."""

from __future__ import annotations

from floe_jobs import smallbatch


def test_combined_gives_one_row_per_input_partition_and_key() -> None:
    rows = [
        ("t", 0, 10, b"b", 1),
        ("t", 0, 11, b"a", 1),
        ("t", 1, 40, b"a", 5),
        ("t", 0, 12, b"b", 1),
        ("t", 0, 9, b"a", 2),
    ]
    got = smallbatch.combined(rows, "sum")
    # value: the sum as a UTF-8 decimal; position: (the partition's last offset, the key's rank)
    assert sorted(got) == [
        (b"a", b"3", "t", 0, 12, 1),
        (b"a", b"5", "t", 1, 40, 1),
        (b"b", b"2", "t", 0, 12, 2),
    ]
    assert sorted(smallbatch.combined(rows, "max")) == [
        (b"a", b"2", "t", 0, 12, 1),
        (b"a", b"5", "t", 1, 40, 1),
        (b"b", b"1", "t", 0, 12, 2),
    ]
    assert sorted(smallbatch.combined(rows, "min"))[0] == (b"a", b"1", "t", 0, 12, 1)


def test_combined_skips_null_values_and_ranks_null_keys_first_then_unsigned_bytes() -> None:
    rows = [("t", 0, 1, b"\xff", None), ("t", 0, 2, b"a", 3), ("t", 0, 3, None, 1), ("t", 0, 3, b"a", None)]
    got = smallbatch.combined(rows, "count")
    assert got == [(None, b"1", "t", 0, 3, 1), (b"a", b"3", "t", 0, 3, 2), (b"\xff", None, "t", 0, 3, 3)]


def test_combined_is_the_same_whatever_the_row_order() -> None:
    rows = [("t", p, o, bytes([65 + (o * 7 + p) % 5]), o % 3) for p in range(3) for o in range(30)]
    assert sorted(smallbatch.combined(rows, "sum")) == sorted(smallbatch.combined(list(reversed(rows)), "sum"))


def test_indexed_numbers_the_rows_of_each_input_record() -> None:
    rows = [("t", 0, 5, b"b", b""), ("t", 0, 5, b"a", b""), ("t", 0, 6, b"a", b""), ("t", 0, 5, b"a", b"")]
    assert sorted(smallbatch.indexed(rows)) == [
        (b"a", b"", "t", 0, 5, 1),
        (b"a", b"", "t", 0, 5, 2),
        (b"a", b"", "t", 0, 6, 1),
        (b"b", b"", "t", 0, 5, 3),
    ]


def test_indexed_takes_the_stages_own_numbers() -> None:
    rows = [("t", 0, 5, b"x", "v1"), ("t", 0, 5, b"y", "v2")]
    assert smallbatch.indexed(rows, [7, 3]) == [(b"x", "v1", "t", 0, 5, 7), (b"y", "v2", "t", 0, 5, 3)]


def test_reduced_groups_by_partition_and_key_skipping_nulls() -> None:
    rows = [(0, "a", 1), (0, "a", None), (1, "a", 4), (0, "b", None), (0, "a", 2)]
    assert sorted(smallbatch.reduced(rows, "sum"), key=repr) == [(0, "a", 3), (0, "b", None), (1, "a", 4)]
    assert (0, "a", 2) in smallbatch.reduced(rows, "max")
