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


def test_ranked_places_grouped_rows_as_combined_does() -> None:
    """Spark's group-by then `ranked` (larger batches) equals `combined` (small ones): a replay
    that takes the other path makes the same rows at the same positions."""
    rows = [
        ("t", p, o, None if o % 11 == 0 else bytes([200 + (o * 7 + p) % 5]), o % 3) for p in range(3) for o in range(40)
    ]
    groups: dict[tuple, tuple[int, int]] = {}
    for topic, partition, offset, key, value in rows:
        total, last = groups.get((topic, partition, key), (0, -1))
        groups[(topic, partition, key)] = (total + value, max(last, offset))
    grouped = [(*g, total, last) for g, (total, last) in groups.items()]
    assert sorted(smallbatch.ranked(grouped), key=repr) == sorted(smallbatch.combined(rows, "sum"), key=repr)


def test_ranked_keeps_a_null_value_and_takes_the_largest_last_offset_of_each_source() -> None:
    got = smallbatch.ranked([("t", 0, b"b", 2, 7), ("t", 0, b"a", None, 9), ("t", 1, b"a", 1, 3)])
    assert sorted(got, key=repr) == [
        (b"a", None, "t", 0, 9, 1),
        (b"a", b"1", "t", 1, 3, 1),
        (b"b", b"2", "t", 0, 9, 2),
    ]
