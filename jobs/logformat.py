"""How a replica's log lines look: text for people, or one JSON object per line for log pipelines.

`spec.logging.format` of a StreamingApp reaches the runtime as `logging.format` of its config
(`floe_jobs.config.LoggingSettings`); `floe-job` sets logging up as text before the config is
read (so a config error is readable), then `apply` switches the root handlers' formatter.

A JSON line holds `time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message` (the
formatted message exactly as the text format prints it: its `key=value` pairs are not parsed
into fields, so a query written against the text lines still matches), `app` and `pod`, and
`exc_info` (the traceback as text) when a line carries an exception. The operator formats its
lines with this module too (`floe_operator.logformat`, a contract module of the runtime that the
operator may import), so both wings' lines have one shape. The values of `app` differ: a
replica's is its app id (`status.appId`), the operator's the app's `namespace/name`, which Kopf
names on its records; the runtime is not told the app's name.

Stdlib only: a `logging.Formatter` subclass and `json.dumps`, nothing the job image lacks.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record; `fields` (app, pod) are added to every line where known, and
    what `record_fields` finds on the record (the operator's subclass: the app Kopf names)."""

    def __init__(self, **fields: str | None) -> None:
        super().__init__()
        self.fields = {k: v for k, v in fields.items() if v}

    def record_fields(self, record: logging.LogRecord) -> dict[str, str]:
        """Fields of this record's own, laid over `fields`; none here."""
        return {}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
            **self.record_fields(record),
        }
        if record.exc_info and not record.exc_text:
            # cached like the text formatter does, so several handlers format it once
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def rfc3339(created: float) -> str:
    """A record's time as RFC 3339 in UTC with milliseconds: 2026-11-28T01:02:03.456Z."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def formatter(fmt: LogFormat, *, app: str | None = None, pod: str | None = None) -> logging.Formatter:
    """The formatter of a log format: JSON with app and pod, else Floe's text line."""
    return JsonFormatter(app=app, pod=pod) if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def apply(fmt: LogFormat, *, app: str | None = None, pod: str | None = None) -> None:
    """Give every handler of the root logger the formatter of `fmt` (its filters stay)."""
    chosen = formatter(fmt, app=app, pod=pod)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(chosen)
