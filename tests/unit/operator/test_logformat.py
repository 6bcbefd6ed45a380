"""The operator's JSON log lines: the runtime's fields, and the app Kopf names on a record."""

from __future__ import annotations

import json
import logging

import pytest
from floe_operator import logformat, main


def _record(msg: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, msg, (), None)
    record.created = 1795827723.4567
    record.__dict__.update(extra)
    return record


def test_a_json_line_names_the_app_kopf_logs_about() -> None:
    ref = {"apiVersion": "streaming.floe.dev/v1alpha1", "kind": "StreamingApp", "name": "orders",
           "namespace": "team-a", "uid": "u1"}
    line = json.loads(logformat.JsonFormatter(pod="floe-0").format(_record("Creating Deployment", k8s_ref=ref)))
    assert line == {
        "time": "2026-11-28T01:02:03.456Z",
        "level": "INFO",
        "logger": "kopf.objects",
        "message": "Creating Deployment",
        "app": "team-a/orders",
        "pod": "floe-0",
    }


def test_a_line_about_no_app_has_no_app_field() -> None:
    assert "app" not in json.loads(logformat.JsonFormatter().format(_record("Lag loop started")))


def test_the_log_format_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOE_LOG_FORMAT", raising=False)
    assert main.parse_args([]).log_format == "text"
    monkeypatch.setenv("FLOE_LOG_FORMAT", "json")
    assert main.parse_args([]).log_format == "json"


def test_an_unknown_log_format_in_the_environment_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLOE_LOG_FORMAT", "logfmt")
    with pytest.raises(SystemExit):
        main.parse_args([])
    assert "FLOE_LOG_FORMAT must be one of text, json (got 'logfmt')" in capsys.readouterr().err
