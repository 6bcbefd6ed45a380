"""`floe-job offsets`: the app's offsets rows with their lag, as JSON, read-only.

Run inside one of the app's pods (`kubectl floe status` runs it with `kubectl exec`), it loads the
replica's own configuration (floe.yaml and the FLOE_* environment its Secrets fill), reads the
app's rows of the offsets table and the end offsets of their partitions, and prints one JSON
object: `{"app_id", "partitions": [{stage, topic, partition, owner, next_offset, end_offset, lag,
committed_at, in_flight, stopped_at, stopped_error, held_until}]}`.

Why here: the owner and the last commit of a partition exist only in the offsets rows (contract
1), and reading them takes the app's Cassandra and Kafka credentials, which the pod already holds.
Running the read where the credentials are means the person asking needs only `pods/exec` in the
namespace, and no credential ever leaves the pod: nothing of the configuration is printed, only
positions. It writes nothing, joins no consumer group (watermarks are asked with an unsubscribed
consumer) and provisions nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from floe_jobs import config as config_mod
from floe_jobs.exitcodes import EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE


def with_lag(rows: Iterable[Mapping[str, Any]], ends: Mapping[tuple[str, int], int | None]) -> list[dict[str, Any]]:
    """Each row with `end_offset` and `lag` (end - next, never below 0; None where the end is not known)."""
    out = []
    for row in rows:
        end = ends.get((row["topic"], row["partition"]))
        lag = None if end is None or end < 0 else max(0, end - int(row["next_offset"]))
        out.append({**row, "end_offset": end, "lag": lag})
    return out


def cassandra_session(cfg: config_mod.FloeConfig, prog: str) -> Any | None:
    """The app's Cassandra session for a one-shot command, or None after saying on stderr that
    the cluster did not answer (the command then exits `EXIT_UNREACHABLE`)."""
    from floe_jobs.stores import config as store_config

    try:
        return store_config.connect(cfg.cassandra.connection())
    except Exception as exc:  # the driver raises NoHostAvailable, AuthenticationFailed, ...
        print(f"{prog}: Cassandra at {','.join(cfg.cassandra.hosts)} did not answer: {exc}", file=sys.stderr)
        return None


def main(argv: list[str]) -> int:
    if argv not in ([], ["--json"]):
        print("usage: floe-job offsets   (prints the app's offsets rows and their lag as JSON)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = config_mod.load()
    except config_mod.ConfigError as exc:
        print(f"floe-job offsets: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from floe_jobs import kafkaio, offsets

    session = cassandra_session(cfg, "floe-job offsets")
    if session is None:
        return EXIT_UNREACHABLE
    try:
        rows = offsets.rows_for_people(session, keyspace=cfg.cassandra.keyspace, app_id=cfg.app_id)
    finally:
        session.cluster.shutdown()
    ends: dict[tuple[str, int], int | None] = {}
    reader = kafkaio.RangeReader(cfg, client_id=f"{cfg.app_id}-offsets-report")
    try:
        for tp in sorted({(r["topic"], r["partition"]) for r in rows}):
            try:
                ends[tp] = reader.watermarks([tp])[tp].high
            except Exception:  # a topic deleted since, or a broker away: the lag is then unknown
                ends[tp] = None
    finally:
        reader.close()
    print(json.dumps({"app_id": cfg.app_id, "partitions": with_lag(rows, ends)}, sort_keys=True))
    return EXIT_OK
