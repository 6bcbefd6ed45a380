"""Version skew between the operator and an app's image: a file rendered for a newer config
schema loads without the keys it lists as optional, and any other key this runtime does not
declare stops the start with both schemas and the fix named. A file of this schema keeps
refusing unknown keys as typos."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from floe_jobs import cli, config

from .appenv import WORD_COUNT_ENV

NEWER = config.CONFIG_SCHEMA + 1


def _file(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "floe.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_newer_file_loads_without_its_optional_keys(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    doc = {
        "config_schema": NEWER,
        "optional_keys": ["app_name", "metrics.exemplars", "stores.colour"],
        "app_name": "word-count",
        "metrics": {"port": 9500, "exemplars": True},
        "stores": [{"name": "word-count", "type": "partitioned", "colour": "blue"}],
    }
    cfg = config.load(path=_file(tmp_path, doc), environ=WORD_COUNT_ENV)
    assert cfg.metrics.port == 9500 and cfg.app_name == "word-count"
    assert [s.name for s in cfg.stores] == ["word-count"]
    assert "metrics.exemplars" in caplog.text and "stores.0.colour" in caplog.text
    assert f"config schema {NEWER}" in caplog.text


def test_a_newer_file_with_a_key_this_runtime_lacks_names_both_schemas(tmp_path: Path) -> None:
    doc = {"config_schema": NEWER, "optional_keys": ["app_name"], "kafka": {"output_guarantee": "exactlyOnce"}}
    with pytest.raises(config.ConfigError) as err:
        config.load(path=_file(tmp_path, doc), environ=WORD_COUNT_ENV)
    text = str(err.value)
    assert "kafka.output_guarantee: not known to this runtime" in text
    assert f"rendered for config schema {NEWER}" in text
    assert f"reads config schema {config.CONFIG_SCHEMA}" in text
    assert f"floe {config.runtime_version()}" in text and "spec.image" in text


def test_a_file_of_this_schema_refuses_an_unknown_key_even_when_listed(tmp_path: Path) -> None:
    doc = {"config_schema": config.CONFIG_SCHEMA, "optional_keys": ["kafka.bootstrap"], "kafka": {"bootstrap": "x"}}
    with pytest.raises(config.ConfigError, match=r"kafka\.bootstrap: is not a known key"):
        config.load(path=_file(tmp_path, doc), environ=WORD_COUNT_ENV)


def test_a_variable_of_a_newer_operator_is_refused_with_the_skew_named(tmp_path: Path) -> None:
    path = _file(tmp_path, {"config_schema": NEWER})
    with pytest.raises(config.ConfigError) as err:
        config.load(path=path, environ={**WORD_COUNT_ENV, "FLOE_KAFKA_OAUTH_CLIENT_SECRET": "s"})
    text = str(err.value)
    assert "FLOE_KAFKA_OAUTH_CLIENT_SECRET: no setting has this variable" in text
    assert f"rendered for config schema {NEWER}" in text
    # of this schema, the same variable is a typo and says nothing of versions
    with pytest.raises(config.ConfigError) as same:
        config.load(environ={**WORD_COUNT_ENV, "FLOE_KAFKA_OAUTH_CLIENT_SECRET": "s"})
    assert "config schema" not in str(same.value)


def test_optional_keys_are_the_dispensable_settings_present() -> None:
    assert config.optional_keys({"app_id": "a", "app_name": "a"}) == ["app_name"]
    assert config.optional_keys({"app_id": "a"}) == []


def test_the_cli_exits_2_naming_the_skew_on_stderr_and_in_the_termination_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("FLOE_")]:
        monkeypatch.delenv(name)
    for k, v in WORD_COUNT_ENV.items():
        monkeypatch.setenv(k, v)
    last_words = tmp_path / "termination-log"
    last_words.touch()  # the kubelet creates it in a pod
    monkeypatch.setattr(cli, "TERMINATION_LOG", str(last_words))
    path = _file(tmp_path, {"config_schema": NEWER, "job": {"entrypoint": "x:y", "retries": 3}})
    assert cli.main(["--check", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "job.retries: not known to this runtime" in err and f"config schema {NEWER}" in err
    # the same words where the operator reads them (the container's termination message)
    assert last_words.read_text() == err.strip()
