"""StreamingAppSnapshot against the real API server: its CEL rules refuse bad input at apply time
with a message that says what to change, and the operator fails a snapshot it cannot take
(a missing app, an app that never ran) with the reason, without creating a Job.

The snapshot Job itself runs on the stack's node: tests/integration/operator/test_pod_snapshot.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from ..waiting import wait_for
from .conftest import app_manifest
from .kube import Kubectl, condition

pytestmark = pytest.mark.k8s

GOOD: dict[str, Any] = {
    "apiVersion": "streaming.floe.dev/v1alpha1",
    "kind": "StreamingAppSnapshot",
    "metadata": {"name": "nightly"},
    "spec": {
        "app": "word-count",
        "location": "file:///snapshots/word-count/2026-11-28",
        "volume": {"claimName": "backups"},
        "writers": {"word-count": "count"},
    },
}


def _with(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    for key, value in spec.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return obj


# (case id, object, text the API server's message must contain)
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("empty-app", _with(app=""), "spec.app: Invalid value"),
    ("no-location", _with(location=None), "spec.location: Required value"),
    ("s3-scheme", _with(location="s3://backups/wc", volume=None), "for Amazon S3 use s3a://"),
    ("http-scheme", _with(location="https://backups.example.com/wc", volume=None),
     "spec.location must be a URI of scheme file, s3a, gs, abfs, abfss or hdfs"),
    ("relative-file", _with(location="file://snapshots/wc"), "spec.location must be an absolute file URI"),
    ("file-without-volume", _with(volume=None), "spec.volume is required with a file:// location"),
    ("file-outside-the-mount", _with(location="file:///data/wc"),
     "spec.location must be a path below spec.volume.mountPath"),
    ("volume-for-s3a", _with(location="s3a://backups/wc"), "spec.volume is for file:// locations only"),
    ("dot-dot", _with(location="file:///snapshots/../etc/wc"), "spec.location must not contain '..'"),
    ("mount-over-tmp", _with(location="file:///tmp/wc", volume={"claimName": "b", "mountPath": "/tmp"}),
     "spec.volume.mountPath must not be /tmp"),
    ("long-name", {**copy.deepcopy(GOOD), "metadata": {"name": "n" * 64}}, "metadata.name must be at most 63"),
]


@pytest.mark.parametrize(("case", "obj", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_snapshot_is_refused_at_apply_time(
    kube: Kubectl, namespace: str, case: str, obj: dict[str, Any], expected: str
) -> None:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    proc = kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert proc.returncode != 0, f"{case} was admitted"
    assert expected in proc.stderr, proc.stderr


@pytest.mark.parametrize("location", ["s3a://backups/wc/1", "gs://backups/wc/1", "abfss://c@a.dfs.core.windows.net/wc"])
def test_object_store_locations_need_no_volume(kube: Kubectl, namespace: str, location: str) -> None:
    obj = _with(location=location, volume=None)
    obj["metadata"]["namespace"] = namespace
    kube.run("create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(obj))


def test_the_spec_is_immutable(kube: Kubectl, namespace: str) -> None:
    # Created without an operator watching: the snapshot only sits there.
    obj = copy.deepcopy(GOOD)
    obj["metadata"] = {"name": "immutable", "namespace": namespace}
    kube.run("create", "-f", "-", stdin=yaml.safe_dump(obj))
    try:
        stored = kube.get("streamingappsnapshot", "immutable", namespace)
        assert stored is not None and stored["spec"]["volume"]["mountPath"] == "/snapshots"  # the default
        proc = kube.run("patch", "streamingappsnapshot", "immutable", "-n", namespace, "--type=merge",
                        "-p", json.dumps({"spec": {"location": "file:///snapshots/elsewhere"}}), check=False)
        assert proc.returncode != 0
        assert "spec is immutable: a snapshot runs once" in proc.stderr, proc.stderr
    finally:
        kube.run("delete", "streamingappsnapshot", "immutable", "-n", namespace, "--wait=false")


def _failed(kube: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    found = kube.get("streamingappsnapshot", name, namespace)
    if found is None or (found.get("status") or {}).get("phase") != "Failed":
        return None
    return found


@pytest.mark.kafka
@pytest.mark.cassandra
def test_a_snapshot_of_a_missing_app_fails_naming_it(kube: Kubectl, namespace: str, operator: object) -> None:
    obj = _with(app="no-such-app", location="s3a://backups/no-such-app/1", volume=None)
    obj["metadata"] = {"name": "of-a-missing-app", "namespace": namespace}
    kube.apply(obj)
    found = wait_for(lambda: _failed(kube, namespace, "of-a-missing-app"), timeout=60,
                     what="the snapshot of a missing app Failed")
    failed = condition(found, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "AppNotFound")
    assert f"StreamingApp no-such-app not found in namespace {namespace}" in failed["message"]
    assert condition(found, "Ready")["status"] == "False"
    assert kube.list("job", namespace, "streaming.floe.dev/snapshot=of-a-missing-app") == []


@pytest.mark.kafka
@pytest.mark.cassandra
def test_a_snapshot_of_an_app_suspended_since_it_was_created_fails_before_any_job(
    kube: Kubectl, spec_args: dict[str, Any], operator: object
) -> None:
    namespace = spec_args["namespace"]
    kube.apply(app_manifest("never-ran", **spec_args, suspend=True))
    wait_for(lambda: ((kube.get("streamingapp", "never-ran", namespace) or {}).get("status") or {}).get("appId"),
             timeout=90, what="the operator to see the suspended app")
    obj = _with(app="never-ran", location="s3a://backups/never-ran/1", volume=None)
    obj["metadata"] = {"name": "of-a-suspended-app", "namespace": namespace}
    kube.apply(obj)
    found = wait_for(lambda: _failed(kube, namespace, "of-a-suspended-app"), timeout=60,
                     what="the snapshot of an app that never ran Failed")
    failed = condition(found, "Failed")
    assert failed["reason"] == "AppNeverRan", failed
    assert "StreamingApp never-ran" in failed["message"] and "has no committed positions" in failed["message"]
    assert kube.list("job", namespace, "streaming.floe.dev/snapshot=of-a-suspended-app") == []
