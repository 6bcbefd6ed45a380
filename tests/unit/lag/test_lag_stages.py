"""The lag scraper over per-stage offsets rows: a topic read by two stages, rows of an older runtime."""

from __future__ import annotations

from floe_operator.lag import scrape


def test_the_lag_scraper_reports_the_stage_furthest_behind_per_input_partition() -> None:
    rows = [
        ("split/lines", 0, 900, None),
        ("lengths/lines", 0, 400, None),
        ("lines", 0, 100, None),  # a legacy row beside staged ones: ignored
        ("lines", 1, 250, None),  # an older runtime's row, alone: read (version skew)
        ("lines", 2, None, None),  # a retired legacy row: skipped
        ("split/lines", 2, 30, None),
        ("count/app-words-repartition", 0, 5, None),  # not an input topic
    ]
    got = scrape.committed_rows(rows, {"lines"})
    assert {tp: r.next_offset for tp, r in got.items()} == {("lines", 0): 400, ("lines", 1): 250, ("lines", 2): 30}
