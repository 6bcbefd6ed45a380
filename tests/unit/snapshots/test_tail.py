"""The repartition tail's Arrow form: rows read back from it are the rows written, checksum included."""

from __future__ import annotations

from floe_jobs.snapshots import manifest as mf
from floe_jobs.snapshots import tail


def test_tail_rows_survive_their_arrow_form() -> None:
    rows: list[mf.Row] = [
        (0, 5, b"kafka", b"3", (("floe.src", b"in:2"), ("floe.off", b"40"), ("floe.idx", b"1"))),
        (0, 6, None, b"\x00arrow", (("floe.run", b"2:41:0"), ("empty", None))),
        (3, 0, b"k", None, ()),
    ]
    back = tail.from_arrow(tail.to_arrow(rows))
    assert back == rows
    assert mf.checksum(back) == mf.checksum(rows)
    assert tail.from_arrow(tail.to_arrow([])) == []
