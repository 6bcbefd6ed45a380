"""How the operator's log lines look: text for people, or one JSON object per line for log pipelines.

`--log-format json` (env FLOE_LOG_FORMAT, chart value `operator.logFormat`) gives each line
`time` (RFC 3339, UTC, milliseconds), `level`, `logger`, `message` (as the text line has it:
`key=value` pairs are not parsed), `app` (namespace/name) on the lines Kopf logs about one
StreamingApp, `pod` (the operator's own pod, POD_NAME) and `exc_info` (the traceback as text).
These are the fields of the runtime's JSON lines (`floe_jobs.logformat`), but not all their
values: a replica's `app` is its app id (`status.appId`), not `namespace/name`, so a query over
both wings matches the two values.

Kopf has a JSON format of its own (`kopf.configure(log_format=kopf.LogFormat.JSON)`); it is
not used because its fields differ from the runtime's (`timestamp` and `severity` with
lowercase levels, no logger name, the object under `object`) and it needs python-json-logger
formatting every line. The line itself is the runtime's (`floe_jobs.logformat`, one of the
runtime modules the operator may import); Kopf's per-object loggers hand their object as the
record's `k8s_ref` attribute, which this subclass reads for `app`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from floe_jobs import logformat
from floe_jobs.logformat import TEXT_FORMAT, LogFormat

LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")


class JsonFormatter(logformat.JsonFormatter):
    """The runtime's JSON line, with the app Kopf names on the record and this pod's name."""

    def __init__(self, *, pod: str | None = None) -> None:
        super().__init__(pod=pod)

    def record_fields(self, record: logging.LogRecord) -> dict[str, str]:
        app = app_of(getattr(record, "k8s_ref", None))
        return {"app": app} if app else {}


def app_of(ref: object) -> str | None:
    """`namespace/name` of the object a Kopf per-object logger names, else None."""
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    namespace = ref.get("namespace")
    return f"{namespace}/{ref['name']}" if namespace else str(ref["name"])


def configure(level: str, fmt: LogFormat, environ: Mapping[str, str] | None = None) -> None:
    """Set up the root logger: one stderr handler with the text or the JSON formatter."""
    env = os.environ if environ is None else environ
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(pod=env.get("POD_NAME")) if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
