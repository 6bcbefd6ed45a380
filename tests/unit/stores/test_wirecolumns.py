"""Whole Arrow columns encoded for Cassandra (`floe_jobs.stores.wirecolumns`) are byte for byte
what the driver's own types send for each value, nulls included."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from cassandra.cqltypes import DateType, Int32Type, LongType
from floe_jobs.stores import wirecolumns

PROTOCOL = 4


def test_int_and_bigint_columns_are_sent_as_the_drivers_types_send_each_value_with_nulls_as_none() -> None:
    ints = [0, 1, -1, 2**31 - 1, -(2**31), None, 7]
    longs = [0, -5, 2**63 - 1, -(2**63), None, 123_456_789_012]
    assert wirecolumns.integers(pa.chunked_array([pa.array(ints, pa.int32())]), ">i4") == [
        None if v is None else Int32Type.serialize(v, PROTOCOL) for v in ints]
    assert wirecolumns.integers(pa.chunked_array([pa.array(longs, pa.int64())]), ">i8") == [
        None if v is None else LongType.serialize(v, PROTOCOL) for v in longs]


def test_a_fill_takes_the_place_of_each_null() -> None:
    column = pa.chunked_array([pa.array([None, 3], pa.int32()), pa.array([None], pa.int32())])
    assert wirecolumns.integers(column, ">i4", fill=0) == [Int32Type.serialize(v, PROTOCOL) for v in (0, 3, 0)]


TIMES = [
    datetime(2026, 12, 7, 11, 8, 1, 925000),
    datetime(1969, 12, 31, 23, 59, 59, 999000),
    None,
    datetime(1900, 1, 1),
    datetime(1969, 12, 31, 23, 59, 58, 999500),  # a part finer than a millisecond, before 1970
]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz", [None, "UTC", "Europe/Paris"])
def test_timestamps_of_any_unit_and_zone_are_sent_as_the_drivers_date_type_sends_them(
    unit: str, tz: str | None
) -> None:
    values = [None if t is None else (t.replace(microsecond=0) if unit == "s" else t) for t in TIMES]
    aware = [None if t is None or tz is None else t.replace(tzinfo=UTC) for t in values]
    column = pa.chunked_array([pa.array(aware if tz else values, pa.timestamp("us", tz=tz))
                               .cast(pa.timestamp(unit, tz=tz), safe=False)])
    want = [None if v is None else DateType.serialize(v, PROTOCOL) for v in column.to_pylist()]
    assert wirecolumns.timestamps(column) == want
