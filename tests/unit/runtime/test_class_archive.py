"""Which class archive a replica's JVM is given, and how (`floe_jobs.sparkio`): pure, no JVM."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from floe_jobs import classarchive, config, sparkio


def _cfg(archive: str = "", conf: dict[str, str] | None = None) -> config.FloeConfig:
    return config.from_dict(
        {
            "app_id": "team-a-clicks",
            "kafka": {"bootstrap_servers": "kafka:9092", "topics": ["clicks"]},
            "cassandra": {"keyspace": "analytics"},
            "job": {"entrypoint": "clicks.main:job"},
            "spark": {"master": "local[2]", "class_archive": archive, "conf": conf or {}},
        }
    )


def test_a_configured_archive_is_given_as_the_platform_s_java_option(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    cfg = _cfg(str(archive))
    path = sparkio.class_archive(cfg.spark.class_archive)
    conf = sparkio.session_conf(cfg, path)
    assert path == str(archive)
    assert conf["spark.driver.defaultJavaOptions"] == f"-XX:SharedArchiveFile={archive}"
    # Floe's own JVM options stay where they were: the archive does not replace them
    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC -XX:TieredStopAtLevel=1"


def test_an_app_s_own_java_options_keep_the_archive(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"x")
    cfg = _cfg(str(archive), {"spark.driver.extraJavaOptions": "-XX:+UseZGC"})
    conf = sparkio.session_conf(cfg, sparkio.class_archive(cfg.spark.class_archive))
    assert conf["spark.driver.extraJavaOptions"] == "-XX:+UseZGC"
    assert conf["spark.driver.defaultJavaOptions"] == f"-XX:SharedArchiveFile={archive}"


def test_a_missing_configured_archive_is_warned_about_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "gone.jsa"
    with caplog.at_level(logging.WARNING, logger="floe_jobs.sparkio"):
        path = sparkio.class_archive(str(missing))
    assert path == ""
    assert f"No class archive at {missing} (spark.class_archive)" in caplog.text
    assert "spark.driver.defaultJavaOptions" not in sparkio.session_conf(_cfg(str(missing)), path)


def test_unset_means_the_image_s_archive_where_the_file_exists(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(sparkio, "IMAGE_CLASS_ARCHIVE", str(tmp_path / "spark-classes.jsa"))
    assert sparkio.class_archive("") == ""  # outside the image: none, and nothing to warn about
    (tmp_path / "spark-classes.jsa").write_bytes(b"x")
    assert sparkio.class_archive("") == str(tmp_path / "spark-classes.jsa")


def test_the_image_path_is_where_the_dockerfile_writes_the_archive() -> None:
    dockerfile = (Path(__file__).parents[3] / "images" / "job.Dockerfile").read_text()
    assert f" floe-job class-archive {sparkio.IMAGE_CLASS_ARCHIVE}\n" in dockerfile


def test_the_training_records_are_lines_of_words_in_partitions() -> None:
    records = classarchive.training_records(30)
    assert len(records) == 30
    assert {r.partition for r in records} == {0, 1, 2}
    assert [r.offset for r in records] == list(range(30))
    assert all(r.value and len(r.value.split()) == 7 for r in records)


def test_the_command_refuses_anything_but_one_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert classarchive.main([]) == 2
    assert classarchive.main(["--help"]) == 2
    assert "usage: floe-job class-archive FILE" in capsys.readouterr().err
