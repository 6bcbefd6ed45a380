"""Position keys of the offsets table: one row per stage and topic-partition, legacy rows told apart."""

from __future__ import annotations

import pytest
from floe_jobs import api, offsets


def test_a_position_key_names_the_stage_and_reads_back() -> None:
    key = offsets.position_key("count", "app-words-repartition")
    assert key == "count/app-words-repartition"
    assert offsets.parse_key(key) == ("count", "app-words-repartition")


def test_a_bare_topic_is_a_legacy_row_of_no_stage() -> None:
    assert offsets.parse_key("lines") == (None, "lines")
    assert offsets.parse_key("my.topic_name-1") == (None, "my.topic_name-1")


def test_the_topic_is_what_follows_the_last_separator() -> None:
    # Kafka topic names cannot hold '/': whatever precedes the last one is the stage
    assert offsets.parse_key("a/b/lines") == ("a/b", "lines")


@pytest.mark.parametrize("name", ["", "split/words", "/"])
def test_a_stage_name_that_cannot_key_a_row_is_refused_naming_the_fix(name: str) -> None:
    with pytest.raises(ValueError, match=r"may not contain '/'.*Job.stage\(name=...\)"):
        offsets.position_key(name, "lines")


def test_a_job_with_a_slash_in_a_stage_name_is_refused_at_start() -> None:
    job = api.Job()
    job.stage(name="split/words")(lambda batch: None)
    with pytest.raises(ValueError, match="stage name 'split/words'"):
        api.as_job(job)


def test_furthest_behind_takes_the_lowest_stage_and_ignores_a_legacy_row_once_staged_rows_exist() -> None:
    rows = [
        ("split", "lines", 0, 900),
        ("lengths", "lines", 0, 400),
        (None, "lines", 0, 100),  # taken over: ignored
        (None, "lines", 1, 250),  # not taken over yet: counted
        ("split", "lines", 2, 70),
    ]
    got = offsets.furthest_behind(rows, lambda v: (v,))
    assert got == {("lines", 0): 400, ("lines", 1): 250, ("lines", 2): 70}
