"""`floe-job snapshot` and `floe-job restore`: the library's two entry points, run with an app's
own configuration (floe.yaml and FLOE_* variables, as a replica loads them) and entry point.

    floe-job snapshot --to URI [--writer STORE=STAGE ...] [--settle-timeout S]
                      [--generation N] [--image IMAGE] [--summary-file PATH]
    floe-job restore --from URI [--replace] [--summary-file PATH]
    floe-job delete-snapshot --at URI

`snapshot` reads the running app `app_id` and writes nothing to it; `restore` loads a snapshot
into the app the configuration names, which must be new (no positions yet), or with `--replace`
replaces that app's state and positions with the snapshot's (none of its replicas may run). Both print one JSON
line (the manifest's summary) on success. `delete-snapshot` deletes the snapshot at URI if it is
one of this app's (`floe_jobs.snapshots.delete`), and prints what it found. Exit codes: 0 done;
2 refused (bad configuration, a missing, partial or mismatched snapshot, a partition that never
settled, a location to delete that is not this app's snapshot: the message says what to
change); 3 Cassandra unreachable.

`--summary-file` also writes the snapshot's (or the restore's) summary to a file, cut to what fits in
SUMMARY_FILE_LIMIT bytes: the operator's snapshot Job passes its container's termination log
(/dev/termination-log), which Kubernetes keeps in the pod's status, so the StreamingAppSnapshot's
status gets the size, rows and cut without anyone reading the data.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from floe_jobs import config as config_mod
from floe_jobs import logformat
from floe_jobs.exitcodes import EXIT_CONFIG, EXIT_OK, EXIT_UNREACHABLE

# What the kubelet keeps of a container's termination message.
SUMMARY_FILE_LIMIT = 4096


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"floe-job {command}")
    p.add_argument("--config", help="YAML config file (default: $FLOE_CONFIG); FLOE_* variables override it")
    p.add_argument("--log-level", default="INFO")
    if command == "snapshot":
        p.add_argument("--to", required=True, help="URI to write the snapshot under (file:///…, s3a://…), empty")
        p.add_argument("--writer", action="append", default=[], metavar="STORE=STAGE",
                       help="the stage that writes a store (needed when the job has several stages)")
        p.add_argument("--settle-timeout", type=float, default=120.0,
                       help="seconds a partition may take to offer a consistent window (held after 5 s of attempts)"
                            " before the snapshot fails")
        p.add_argument("--generation", type=int, help="the app's generation, recorded in the manifest")
        p.add_argument("--image", help="the app's image, recorded in the manifest")
    elif command == "restore":
        p.add_argument("--from", dest="source", required=True, help="URI of the snapshot")
        p.add_argument("--replace", action="store_true",
                       help="restore in place: replace the app's state and positions (no replica of it may run)")
    else:
        p.add_argument("--at", required=True, help="URI of a snapshot of this app to delete")
    if command in ("snapshot", "restore"):
        p.add_argument("--summary-file", metavar="PATH",
                       help="also write the summary JSON here, at most 4096 bytes (a container's termination log)")
    return p


def parse_writers(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        store, sep, stage = value.partition("=")
        if not sep or not store or not stage:
            raise config_mod.ConfigError(f"--writer {value!r}: expected STORE=STAGE")
        out[store] = stage
    return out


def snapshot_summary(m: Any, uri: str) -> dict[str, Any]:
    """What a snapshot reports on success: the manifest's totals, per store and tail, and per stage
    the partitions cut, the sum of their positions and how many had a batch in flight."""
    parts = [*m.stores, *m.tails]
    return {
        "uri": uri,
        "app_id": m.app_id,
        "seconds": m.seconds,
        "attempts": m.attempts,
        "bytes": sum(p.bytes for p in parts),
        "rows": sum(p.rows for p in parts),
        "stores": {s.name: {"rows": s.rows, "bytes": s.bytes} for s in m.stores},
        "tails": {t.stage: {"rows": t.rows, "bytes": t.bytes} for t in m.tails},
        "stages": {
            s.name: {
                "topic": s.topic,
                "partitions": len(s.partitions),
                "next_offsets": sum(p.next_offset for p in s.partitions),
                "in_flight": sum(1 for p in s.partitions if p.in_flight),
            }
            for s in m.stages
        },
    }


def bounded_text(summary: dict[str, Any], limit: int = SUMMARY_FILE_LIMIT) -> str:
    """`summary` as compact JSON of at most `limit` bytes: the details (tails, stores, stages) are
    left out, in that order, until it fits; the totals always are there."""
    cut = dict(summary)
    for key in ("tails", "stores", "stages", None):
        text = json.dumps(cut, sort_keys=True, separators=(",", ":"))
        if len(text.encode()) <= limit or key is None:
            return text
        cut.pop(key, None)
    raise AssertionError("unreachable")


def main(argv: list[str]) -> int:
    command, rest = argv[0], argv[1:]
    args = _parser(command).parse_args(rest)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr, format=logformat.TEXT_FORMAT)
    prog = f"floe-job {command}"
    try:
        cfg = config_mod.load(path=args.config)
        writers = parse_writers(args.writer) if command == "snapshot" else {}
    except config_mod.ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from floe_jobs import api, report, sparkio, startup
    from floe_jobs.snapshots import restore, take
    from floe_jobs.snapshots.manifest import SnapshotError

    if command == "delete-snapshot":
        return _delete(cfg, args.at, prog=prog)

    try:
        target, _ = startup.load_entrypoint(cfg.job.entrypoint)
        job = api.as_job(target)
    except (startup.StartupError, TypeError, ValueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    session = report.cassandra_session(cfg, prog)
    if session is None:
        return EXIT_UNREACHABLE
    spark: Any = None
    try:
        spark = sparkio.build_session(cfg, app_name=f"{cfg.app_id}-{command}")
        if command == "snapshot":
            m = take.take(cfg, job, session=session, spark=spark, uri=args.to, writers=writers,
                          settle_timeout=args.settle_timeout, generation=args.generation, image=args.image)
            summary = snapshot_summary(m, args.to)
        else:
            r = restore.restore(cfg, job, session=session, spark=spark, uri=args.source, replace=args.replace)
            summary = {"uri": args.source, "app_id": cfg.app_id, "from_app": r.manifest.app_id, "rows": r.rows,
                       "seconds": r.seconds, "replaced": args.replace}
    except SnapshotError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    finally:
        session.cluster.shutdown()
        if spark is not None:
            spark.stop()
    print(json.dumps(summary, sort_keys=True))
    if args.summary_file:
        with open(args.summary_file, "w", encoding="utf-8") as f:
            f.write(bounded_text(summary))
    return EXIT_OK


def _delete(cfg: Any, uri: str, *, prog: str) -> int:
    """`floe-job delete-snapshot`: needs neither the job's code nor Cassandra, only the file
    system the app's Spark configuration reaches."""
    from floe_jobs import sparkio
    from floe_jobs.snapshots import delete
    from floe_jobs.snapshots.manifest import SnapshotError

    spark = sparkio.build_session(cfg, app_name=f"{cfg.app_id}-delete-snapshot")
    try:
        done = delete.delete(spark, uri, app_id=cfg.app_id)
    except SnapshotError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    finally:
        spark.stop()
    print(json.dumps({"uri": uri, "existed": done.existed, "had_manifest": done.had_manifest}, sort_keys=True))
    return EXIT_OK
