"""Whole Arrow columns encoded as the Cassandra driver sends a prepared statement's values.

A restore writes every row of a store under its own fence, time, write timestamp and TTL. Turned
into Python values first (a `datetime` per time) and encoded one value at a time by the driver's
types (`serialize` per value), a million rows spent much of the restore's Python CPU there
(docs/snapshots.md, "Measured"). Here a column is encoded at once: the driver sends an `int` as 4
and a `bigint` or `timestamp` (milliseconds since the epoch) as 8 big-endian two's-complement
bytes, which is numpy's `>i4` and `>i8`; a null is sent as None. The results go into batches
through `kv.add_row`, which takes values as sent.
"""

from __future__ import annotations

from typing import Any

_MS_PER = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def integers(column: Any, dtype: str, *, fill: int | None = None) -> list[bytes | None]:
    """Each value of an Arrow integer column as sent for a column of `dtype` (`>i4` for int, `>i8`
    for bigint); a null as None, or as `fill` when given."""
    import numpy as np
    import pyarrow.compute as pc

    width = np.dtype(dtype).itemsize
    plain = pc.fill_null(column, 0 if fill is None else fill).to_numpy(zero_copy_only=False)
    buf = plain.astype(dtype).tobytes()
    out: list[bytes | None] = [buf[i : i + width] for i in range(0, len(buf), width)]
    if fill is None and column.null_count:
        for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
            out[i] = None
    return out


def timestamps(column: Any) -> list[bytes | None]:
    """Each value of an Arrow timestamp column (any unit, with or without a time zone: the values
    are instants since the epoch in UTC) as sent for a Cassandra `timestamp`: milliseconds since
    the epoch, a finer part cut off towards zero as the driver's `DateType` does; a null as None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    per_ms = _MS_PER[column.type.unit]
    raw = pc.fill_null(pc.cast(column, pa.int64()), 0).to_numpy(zero_copy_only=False)
    ms = raw * 1000 if per_ms is None else np.sign(raw) * (np.abs(raw) // per_ms)
    return integers(pa.array(ms, pa.int64(), mask=column.is_null().to_numpy(zero_copy_only=False)), ">i8")
