"""Deleting a snapshot's data: what `floe-job delete-snapshot --at URI` does for a
StreamingAppSnapshot whose `spec.deletionPolicy` is Delete (retention of scheduled snapshots,
or a `kubectl delete`).

A location is deleted only when it is recognisably a snapshot of this app: its manifest names
the app id the configuration runs under, or, with no manifest (a snapshot that failed
halfway), it holds nothing but the entries a snapshot writes. Anything else is refused with what
was found, so a mistyped location never costs data that is not Floe's. A location that does not
exist is already deleted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from floe_jobs.snapshots.manifest import SnapshotError
from floe_jobs.snapshots.take import MANIFEST_DIR

log = logging.getLogger(__name__)

# What `take` writes under a location: the stores' Parquet, the repartition tails, the manifest.
LAYOUT = frozenset({"stores", "repartition", MANIFEST_DIR})


@dataclass(frozen=True)
class Deleted:
    uri: str
    existed: bool
    had_manifest: bool


def refusal(uri: str, app_id: str, *, entries: list[str], manifest_app: str | None) -> str | None:
    """Why the location `uri` holding `entries` (names of its children) must not be deleted for
    the app `app_id`, or None when it may; `manifest_app` is the app id its manifest names (None:
    no manifest)."""
    if manifest_app is not None:
        if manifest_app != app_id:
            return (f"{uri} holds a snapshot of app id {manifest_app}, not of {app_id}: it was left in place; "
                    "delete it by hand if it is no longer needed")
        return None
    foreign = sorted(set(entries) - LAYOUT)
    if foreign:
        return (f"{uri} has no snapshot manifest and holds entries a snapshot never writes ({', '.join(foreign)}): "
                "it was left in place; delete it by hand if it is no longer needed")
    return None


def delete(spark: Any, uri: str, *, app_id: str) -> Deleted:
    """Delete the snapshot at `uri` through Spark's Hadoop file system for its scheme."""
    from floe_jobs.snapshots import restore

    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        log.info("Snapshot already absent uri=%s", uri)
        return Deleted(uri, existed=False, had_manifest=False)
    entries = [s.getPath().getName() for s in fs.listStatus(path)]
    manifest_app = None
    if MANIFEST_DIR in entries:
        try:
            manifest_app = restore.read_manifest(spark, uri).app_id
        except SnapshotError:  # cut short while the manifest was written: a partial snapshot
            manifest_app = None
    why = refusal(uri, app_id, entries=entries, manifest_app=manifest_app)
    if why is not None:
        raise SnapshotError(why)
    if not fs.delete(path, True):
        raise SnapshotError(f"deleting {uri} failed: its file system refused (permissions?)")
    log.info("Deleted snapshot uri=%s had_manifest=%s", uri, manifest_app is not None)
    return Deleted(uri, existed=True, had_manifest=manifest_app is not None)
