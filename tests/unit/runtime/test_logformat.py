"""The runtime's JSON log lines: one object per line, the agreed fields, the message left as is."""

from __future__ import annotations

import json
import logging
import sys

from floe_jobs import config, logformat

from .test_config import BASE_ENV


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("floe_jobs.runner", logging.WARNING, __file__, 1, msg, args, exc_info)
    record.created = 1795827723.4567  # 2026-11-28T01:02:03.456Z
    return record


def test_a_json_line_has_time_level_logger_message_app_and_pod() -> None:
    fmt = logformat.JsonFormatter(app="orders", pod="orders-7c9d-abcde")
    line = json.loads(fmt.format(_record("Batch failed lane=%s attempt=%d", "0", 3)))
    assert line == {
        "time": "2026-11-28T01:02:03.456Z",
        "level": "WARNING",
        "logger": "floe_jobs.runner",
        "message": "Batch failed lane=0 attempt=3",
        "app": "orders",
        "pod": "orders-7c9d-abcde",
    }


def test_a_json_line_carries_the_exception_as_exc_info_text_on_one_line() -> None:
    text = logformat.JsonFormatter(app="orders").format(_record("Batch failed", exc=True))
    assert "\n" not in text
    line = json.loads(text)
    assert line["exc_info"].startswith("Traceback (most recent call last)")
    assert line["exc_info"].endswith("ValueError: boom")
    assert "pod" not in line


def test_the_text_format_is_unchanged_by_default() -> None:
    fmt = logformat.formatter("text", app="orders", pod="p")
    assert fmt.format(_record("Batch failed lane=%s", "0")).endswith(" WARNING floe_jobs.runner Batch failed lane=0")


def test_logging_format_is_a_setting_with_its_variable() -> None:
    assert config.load(environ=BASE_ENV).logging.format == "text"
    assert config.load(environ={**BASE_ENV, "FLOE_LOGGING_FORMAT": "json"}).logging.format == "json"
    assert config.env_name("logging", "format") == "FLOE_LOGGING_FORMAT"
