"""Pure pieces of the runtime: Spark range options, entrypoint loading, offsets table naming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from floe_jobs import api, offsets, runner, sparkio
from floe_jobs.planning import PartitionPlan


def test_range_options_read_exactly_the_plans() -> None:
    plans = [
        PartitionPlan("a", 0, 3, 10, 20, False),
        PartitionPlan("a", 2, 1, 0, 5, True),
        PartitionPlan("b", 1, 9, 7, 8, False),
    ]
    opts = sparkio.range_options(plans)
    assert json.loads(opts["assign"]) == {"a": [0, 2], "b": [1]}
    assert json.loads(opts["startingOffsets"]) == {"a": {"0": 10, "2": 0}, "b": {"1": 7}}
    assert json.loads(opts["endingOffsets"]) == {"a": {"0": 20, "2": 5}, "b": {"1": 8}}


def test_offsets_table_name_is_valid_and_bounded() -> None:
    assert offsets.offsets_table("word-count") == "floe_offsets_word_count"
    long = offsets.offsets_table("a" * 63)
    assert len(long) <= 48 and long.startswith("floe_offsets_")
    assert long != offsets.offsets_table("a" * 62 + "b")


def test_entrypoint_from_file_and_module(tmp_path: Path) -> None:
    f = tmp_path / "my_job.py"
    f.write_text("from floe_jobs.api import Job\njob = Job()\n@job.stage()\ndef s(batch):\n    return None\n")
    target, _ = runner.load_entrypoint(str(f))
    job = api.as_job(target)
    assert [s.name for s in job.stages] == ["s"]
    fn, _ = runner.load_entrypoint("floe_jobs.planning:plan_batch")
    assert api.as_job(fn).stages[0].source is None


def test_entrypoint_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(runner.StartupError, match=r"job\.entrypoint"):
        runner.load_entrypoint(str(tmp_path / "missing.py"))
    with pytest.raises(runner.StartupError, match="cannot import"):
        runner.load_entrypoint("no_such_module_xyz:fn")
    with pytest.raises(runner.StartupError, match="no attribute"):
        runner.load_entrypoint("floe_jobs.planning:nope")


def test_job_validation() -> None:
    job = api.Job()
    with pytest.raises(ValueError, match="no stages"):
        api.as_job(job)
    with pytest.raises(TypeError, match="Job or a function"):
        api.as_job(42)
