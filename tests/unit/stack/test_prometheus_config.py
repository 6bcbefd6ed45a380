"""The local Prometheus's pure parts: the module version of a release, its configuration, target files."""

from __future__ import annotations

import json
from pathlib import Path

from floe_stack import prometheus
from floe_stack.layout import Layout


def test_module_versions_of_prometheus_3_releases() -> None:
    assert prometheus.module_version("3.16.0") == "0.316.0"
    assert prometheus.module_version("3.5.1") == "0.305.1"


def test_config_scrapes_the_two_file_listed_jobs_and_loads_every_rule_file(tmp_path: Path) -> None:
    paths = prometheus.Paths(Layout(root=tmp_path / "repo", cache=tmp_path / "cache"))
    cfg = prometheus.config(paths)
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}  # type: ignore[attr-defined]
    assert set(jobs) == {"floe", "floe-apps"}
    # The operator's series carry the app's namespace, which Prometheus must keep.
    assert jobs["floe"]["honor_labels"] is True
    assert "honor_labels" not in jobs["floe-apps"]
    assert jobs["floe"]["file_sd_configs"][0]["files"] == [str(paths.operator_targets / "*.json")]
    assert cfg["rule_files"] == [str(paths.rules / "*.yml")]


def test_target_files_are_replaced_whole(tmp_path: Path) -> None:
    path = prometheus.write_targets(tmp_path, "r-0", ["127.0.0.1:1"], {"namespace": "a"})
    prometheus.write_targets(tmp_path, "r-0", ["127.0.0.1:2"], {"namespace": "b"})
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:2"], "labels": {"namespace": "b"}}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-0.json"]
