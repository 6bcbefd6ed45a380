"""How the operator's log lines look: text for people, or one JSON object per line for log pipelines.

`--log-format json` (env FLOE_LOG_FORMAT, chart value `operator.logFormat`) gives each line
`time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message` (as the text line has it:
`key=value` pairs are not parsed), `app` (namespace/name) on the lines Kopf logs about one
StreamingApp, `pod` (the operator's own pod, POD_NAME) and `exc_info` (the traceback as text).
These are the fields of the runtime's JSON lines (`floe_jobs.logformat`), so one query over
both wings finds an app's lines.

Kopf has a JSON format of its own (`kopf.configure(log_format=kopf.LogFormat.JSON)`); it is
not used because its fields differ from the runtime's (`timestamp` and `severity` with
lowercase levels, no logger name, the object under `object`) and it needs python-json-logger
formatting every line. Kopf's per-object loggers hand their object as the record's `k8s_ref`
attribute, which this formatter reads for `app`. The runtime's module is not imported here:
the operator uses the runtime only through its contract modules (pyproject's import
contracts), and both are a few lines of stdlib.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the app Kopf names on the record and this pod's name."""

    def __init__(self, *, pod: str | None = None) -> None:
        super().__init__()
        self.pod = pod

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        app = app_of(getattr(record, "k8s_ref", None))
        if app:
            line["app"] = app
        if self.pod:
            line["pod"] = self.pod
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def app_of(ref: object) -> str | None:
    """`namespace/name` of the object a Kopf per-object logger names, else None."""
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    namespace = ref.get("namespace")
    return f"{namespace}/{ref['name']}" if namespace else str(ref["name"])


def rfc3339(created: float) -> str:
    """A record's time as RFC 3339 in UTC with milliseconds: 2026-11-28T01:02:03.456Z."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure(level: str, fmt: LogFormat, environ: Mapping[str, str] | None = None) -> None:
    """Set up the root logger: one stderr handler with the text or the JSON formatter."""
    env = os.environ if environ is None else environ
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(pod=env.get("POD_NAME")) if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
