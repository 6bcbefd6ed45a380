"""FLOE_ variables are the operator's (docs/security.md, part 4): where the operator listed what
it set (FLOE_ENV_NAMES), any other FLOE_ variable stops the start naming it; anywhere, a FLOE_
name that no setting declares (a typo) does too. The CLI exits 2 for both."""

from __future__ import annotations

import os

import pytest
from floe_jobs import cli, config

from .test_config import BASE_ENV

OWNED = {**BASE_ENV, "FLOE_ENV_NAMES": ",".join(sorted({*BASE_ENV, "FLOE_ENV_NAMES"}))}


def test_what_the_operator_listed_loads() -> None:
    assert config.load(environ=OWNED).app_id == "word-count"


def test_a_variable_the_operator_did_not_set_is_refused_by_name() -> None:
    with pytest.raises(config.ConfigError) as err:
        config.load(environ={**OWNED, "FLOE_KAFKA_EXTRA": '{"ssl.endpoint.identification.algorithm": "none"}'})
    assert str(err.value).startswith("invalid environment:\n  FLOE_KAFKA_EXTRA: set, but not by the operator")


def test_the_list_cannot_be_widened_by_an_unlisted_name_even_a_known_setting() -> None:
    with pytest.raises(config.ConfigError, match="FLOE_SPARK_CONF: set, but not by the operator"):
        config.load(environ={**OWNED, "FLOE_SPARK_CONF": "{}"})


def test_a_typo_is_refused_without_a_list_too() -> None:
    with pytest.raises(config.ConfigError, match="FLOE_KAFKA_TOPIC: no setting has this variable"):
        config.load(environ={**BASE_ENV, "FLOE_KAFKA_TOPIC": "other"})


def test_test_hooks_pass_only_outside_a_pod() -> None:
    assert config.foreign_variables({**BASE_ENV, "FLOE_TEST_CRASH_DIR": "/tmp"}) == []
    assert config.foreign_variables({**OWNED, "FLOE_TEST_CRASH_DIR": "/tmp"})[0].startswith("FLOE_TEST_CRASH_DIR: set")


def test_own_variable_lists_what_the_cli_sets() -> None:
    env = dict(OWNED)
    config.own_variable(env, "FLOE_JOB_ENTRYPOINT", "other.py")
    assert config.foreign_variables(env) == []
    bare = dict(BASE_ENV)
    config.own_variable(bare, "FLOE_JOB_ENTRYPOINT", "other.py")
    assert "FLOE_ENV_NAMES" not in bare


def test_cli_exits_2_naming_the_foreign_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith("FLOE_"):
            monkeypatch.delenv(name)
    for name, value in {**OWNED, "FLOE_KAFKA_EXTRA": "{}"}.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["--check"]) == 2
    assert "FLOE_KAFKA_EXTRA: set, but not by the operator" in capsys.readouterr().err
