"""How many Parquet files a snapshot writes a store as (`take.files_for`): few enough that no file
holds a sliver of it, and no more than Spark's cores, whose tasks write them side by side."""

from __future__ import annotations

from floe_jobs.snapshots import take


def test_a_store_is_one_file_per_quarter_million_rows_at_most_one_per_core_and_never_none() -> None:
    assert take.files_for(0, 2) == 1
    assert take.files_for(300, 2) == 1
    assert take.files_for(take.ROWS_PER_FILE, 8) == 1
    assert take.files_for(take.ROWS_PER_FILE + 1, 8) == 2
    assert take.files_for(1_000_000, 2) == 2
    assert take.files_for(1_000_000, 8) == 4
    assert take.files_for(10_000_000, 8) == 8
