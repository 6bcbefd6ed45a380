"""A replica whose configuration asks for JSON logs writes its log lines as JSON objects.

The word-count job runs as a `floe-job` process against the real Kafka, Cassandra and Spark,
with `logging.format: json` in its config file (as the operator renders it from
`spec.logging.format`); its stderr must hold the lines of a committed batch as parseable JSON
with the agreed fields, and no Python log line in the text format. Spark's JVM writes its own
log4j lines to the same stream; they are not the runtime's and are left out of the checks.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from floe_stack import localrun

pytestmark = [pytest.mark.kafka, pytest.mark.cassandra, pytest.mark.spark]

# a line in the runtime's text format: "2026-11-28 01:02:03,456 INFO floe_jobs.runner ..."
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("{"):
            lines.append(json.loads(raw))
    return lines


def test_a_replica_configured_for_json_logs_writes_json_lines(word_count_app: localrun.App, session: Any) -> None:
    app = word_count_app
    config_file = app.workdir / "floe.yaml"
    config_file.write_text("logging:\n  format: json\n")
    lines = localrun.word_lines(500, seed=38)
    localrun.produce(app.bootstrap, app.topics[0], lines)
    replica = localrun.Replica(app, "r0", FLOE_CONFIG=str(config_file)).start()
    try:
        localrun.wait_caught_up(
            session, app, [*app.topics, f"{app.app_id}-words-repartition"], timeout=240, replicas=[replica]
        )
    finally:
        code = replica.stop()
    assert code == 0
    text = replica.log_path.read_text(errors="replace").rsplit("==== start", 1)[-1]
    assert not [raw for raw in text.splitlines() if TEXT_LINE.match(raw)], "a Python log line in the text format"
    records = _json_lines(text)
    committed = [r for r in records if r["message"].startswith("Committed stage=")]
    assert committed, f"no JSON 'Committed stage=' line among {len(records)} JSON lines"
    for record in records:
        assert {"time", "level", "logger", "message", "app", "pod"} <= record.keys(), record
        assert RFC3339_UTC.match(record["time"]), record["time"]
        assert (record["app"], record["pod"]) == (app.app_id, "r0")
    assert committed[0]["logger"].startswith("floe_jobs")
    assert committed[0]["level"] == "INFO"
