"""The driver JVM's class archive on the real Spark (`floe_jobs.classarchive`): the archive the
stack wrote with `floe-job class-archive` is mapped by a session the runtime starts, and a file
the JVM cannot use (no archive, or one written for another class path) is named in a warning
while the session starts from the jars."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import classarchive, sparkio

pytestmark = [pytest.mark.spark]

# A replica's session in a process of its own (a JVM maps an archive only when it starts): the
# runtime's logged words, and whether a job runs on it.
SESSION = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from floe_jobs import config, sparkio
cfg = config.from_dict(json.loads(sys.argv[1]))
spark = sparkio.build_session(cfg, app_name="class-archive-test")
print("COUNT", spark.range(5).count(), flush=True)
"""


def _session(archive: str, tmp_path: Path, **conf: str) -> subprocess.CompletedProcess[str]:
    cfg = {
        "app_id": "class-archive-test",
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
        "cassandra": {"keyspace": "unused"},
        "job": {"entrypoint": "unused:job"},
        "spark": {"master": "local[1]", "class_archive": archive, "conf": {"spark.local.dir": str(tmp_path), **conf}},
    }
    return subprocess.run([sys.executable, "-c", SESSION, json.dumps(cfg)], capture_output=True, text=True,
                          timeout=300)


def test_the_stack_s_archive_is_mapped_by_the_session_the_runtime_starts(spark: Any, stack_env: dict[str, str]) -> None:
    archive = stack_env["FLOE_SPARK_CLASS_ARCHIVE"]
    assert Path(archive).is_file() and Path(archive).stat().st_size > 10 * 2**20, archive
    assert sparkio.archive_mapped(spark, archive)
    # and the training's batch shapes run on it: a word per line position, ten distinct words
    assert classarchive.train(spark) == 10


def test_a_file_that_is_no_archive_is_named_and_the_session_starts_from_the_jars(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.jsa"
    bogus.write_bytes(os.urandom(65536))
    done = _session(str(bogus), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "COUNT 5" in done.stdout
    assert f"The JVM did not map the class archive {bogus} and loads its classes from the jars" in done.stderr
    assert "The JVM maps the class archive" not in done.stderr


def test_a_driver_class_path_the_archive_was_not_written_for_is_named_and_the_session_starts_from_the_jars(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    """What an app image that adds jars to the driver's class path gets (docs/chart.md)."""
    archive = stack_env["FLOE_SPARK_CLASS_ARCHIVE"]
    extra = tmp_path / "extra.jar"
    shutil.copy(stack_env["FLOE_SPARK_JARS"].split(",")[0], extra)
    done = _session(archive, tmp_path, **{"spark.driver.extraClassPath": str(extra)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "COUNT 5" in done.stdout
    assert f"The JVM did not map the class archive {archive} and loads its classes from the jars" in done.stderr
