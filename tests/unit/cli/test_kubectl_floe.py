"""`kubectl floe`'s pure parts: the command line, the patch bodies its verbs send, the status view
and table, the choice of pod to read offsets in, and validate's runtime check."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from floe_jobs import report
from floe_operator.cli import args, checks, views
from floe_operator.cli.kubectl import Target

ROOT = Path(__file__).resolve().parents[3]


def example() -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / "word-count" / "streamingapp.yaml").read_text())
    body["metadata"].setdefault("namespace", "team-a")
    return dict(body)


# -- command line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "orders", "-n", "team-a", "--context", "prod", "-o", "json"],
        ["-n", "team-a", "--context", "prod", "status", "orders", "-o", "json"],
        ["--context", "prod", "status", "-n", "team-a", "orders", "--output=json"],
    ],
)
def test_global_flags_are_taken_before_or_after_the_verb(argv: list[str]) -> None:
    opts = args.parse(argv)
    assert (opts.verb, opts.name, opts.namespace, opts.context, opts.output) == (
        "status", "orders", "team-a", "prod", "json"
    )


def test_global_flags_default_to_kubectls_own_when_absent() -> None:
    opts = args.parse(["suspend", "orders"])
    assert (opts.namespace, opts.context, opts.kubeconfig) == (None, None, None)


def test_status_output_is_table_or_json_only() -> None:
    with pytest.raises(SystemExit):
        args.parse(["status", "orders", "-o", "yaml"])


def test_target_passes_kubeconfig_context_and_namespace_through_to_kubectl() -> None:
    t = Target(namespace="team-a", context="prod", kubeconfig="/k/config")
    assert t.flags() == ["--kubeconfig", "/k/config", "--context", "prod", "--namespace", "team-a"]
    assert Target().flags() == []


# -- patch bodies ------------------------------------------------------------------------------


def test_suspend_and_resume_patch_spec_suspend() -> None:
    assert views.suspend_patch(True) == {"spec": {"suspend": True}}
    assert views.suspend_patch(False) == {"spec": {"suspend": False}}


def test_restart_patches_spec_restart_nonce() -> None:
    assert views.restart_patch("20260101T000000Z") == {"spec": {"restartNonce": "20260101T000000Z"}}
    with pytest.raises(views.UsageError, match="--nonce"):
        views.restart_patch("x" * 129)


def test_now_stamp_is_a_valid_reset_id_and_nonce() -> None:
    stamp = views.now_stamp(datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC))
    assert stamp == "20260301T120005Z"
    views.offset_reset_patch(reset_id=f"reset-{stamp}", to="earliest")


def test_reset_offsets_nulls_the_fields_it_does_not_use() -> None:
    # a merge patch keeps what it does not name: a previous reset's timestamp would stay and the CRD refuse it
    body = views.offset_reset_patch(reset_id="r1", to="earliest", topics=["orders"])
    reset = {"id": "r1", "to": "earliest", "timestamp": None, "topics": ["orders"], "offsets": None}
    assert body == {"spec": {"offsetReset": reset}}


def test_reset_offsets_to_explicit_offsets() -> None:
    body = views.offset_reset_patch(reset_id="r2", to="offsets", offsets=["orders:0=10", "orders.v2:11=0"])
    assert body["spec"]["offsetReset"]["offsets"] == [
        {"topic": "orders", "partition": 0, "offset": 10},
        {"topic": "orders.v2", "partition": 11, "offset": 0},
    ]
    assert body["spec"]["offsetReset"]["topics"] is None


def test_reset_offsets_to_timestamp() -> None:
    body = views.offset_reset_patch(reset_id="r3", to="timestamp", timestamp="2025-03-01T12:00:00Z")
    assert body["spec"]["offsetReset"]["timestamp"] == "2025-03-01T12:00:00Z"


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"to": "timestamp"}, "--timestamp is required"),
        ({"to": "earliest", "timestamp": "2025-03-01T12:00:00Z"}, "--timestamp is required"),
        ({"to": "timestamp", "timestamp": "yesterday"}, "--timestamp 'yesterday'"),
        ({"to": "offsets"}, "--offset is required"),
        ({"to": "latest", "offsets": ["a:0=1"]}, "--offset is required"),
        ({"to": "offsets", "offsets": ["a:0=1"], "topics": ["a"]}, "--topic does not go"),
        ({"to": "offsets", "offsets": ["a:x=1"]}, "TOPIC:PARTITION=OFFSET"),
        ({"to": "nowhere"}, "--to 'nowhere'"),
        ({"to": "earliest", "reset_id": "-bad"}, "--id '-bad'"),
    ],
)
def test_reset_offsets_refuses_what_the_crd_would_naming_the_flag(kwargs: dict[str, Any], flag: str) -> None:
    kwargs.setdefault("reset_id", "r")
    with pytest.raises(views.UsageError, match=flag.replace("(", r"\(")):
        views.offset_reset_patch(**kwargs)


SNAPSHOT = {"metadata": {"name": "orders-upgrade-7"},
            "spec": {"app": "orders", "location": "file:///snapshots/u/orders-upgrade-7",
                     "volume": {"claimName": "backups"}},
            "status": {"phase": "Succeeded"}}


def test_restore_from_a_snapshot_resource_takes_its_location_and_claim() -> None:
    location, volume = views.snapshot_source(SNAPSHOT, "orders")
    body = views.state_restore_patch(restore_id="undo-1", location=location, volume=volume)
    assert body == {"spec": {"stateRestore": {"id": "undo-1", "location": "file:///snapshots/u/orders-upgrade-7",
                                              "volume": {"claimName": "backups", "mountPath": "/snapshots"}}}}
    assert args.parse(["restore", "orders", "--snapshot", "orders-upgrade-7"]).snapshot == "orders-upgrade-7"


def test_restore_from_a_location_nulls_the_volume_it_does_not_need() -> None:
    body = views.state_restore_patch(restore_id="r", location="s3a://backups/orders/nightly")
    assert body["spec"]["stateRestore"]["volume"] is None


@pytest.mark.parametrize(
    ("snapshot", "said"),
    [
        ({**SNAPSHOT, "spec": {**SNAPSHOT["spec"], "app": "payments"}}, "a snapshot of 'payments', not of 'orders'"),
        ({**SNAPSHOT, "status": {"phase": "Failed"}}, "its phase is Failed, not Succeeded"),
        ({**SNAPSHOT, "status": {}}, "its phase is not set yet"),
    ],
)
def test_restore_refuses_a_snapshot_of_another_app_or_one_that_did_not_succeed(
    snapshot: dict[str, Any], said: str
) -> None:
    with pytest.raises(views.UsageError, match=said):
        views.snapshot_source(snapshot, "orders")


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"location": "file:///snapshots/x"}, "--claim is required"),
        ({"location": "file:///data/x", "claim": "backups"}, "below the claim's mount path /snapshots"),
        ({"location": "s3a://b/x", "claim": "backups"}, "--claim is for file:// locations only"),
        ({"location": "s3a://b/x", "restore_id": "bad id"}, "--id 'bad id'"),
    ],
)
def test_restore_refuses_what_the_crd_would_naming_the_flag(kwargs: dict[str, Any], said: str) -> None:
    kwargs.setdefault("restore_id", "r")
    with pytest.raises(views.UsageError, match=said):
        views.state_restore_patch(**kwargs)
    with pytest.raises(SystemExit):  # argparse: one source or the other, not both
        args.parse(["restore", "orders", "--snapshot", "s", "--location", "s3a://b/x"])


# -- status ------------------------------------------------------------------------------------


def _pod(name: str, *, phase: str = "Running", ready: bool = True, restarts: int = 0, deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": [
        {"name": "app", "ready": ready, "restartCount": restarts}]}}


APP = {
    "metadata": {"name": "orders", "namespace": "team-a", "generation": 4},
    "spec": {"replicas": 3, "suspend": False},
    "status": {
        "appId": "team-a-orders-0123456789", "observedGeneration": 4, "replicas": 2, "readyReplicas": 1,
        "updatedReplicas": 2, "availableReplicas": 1,
        "conditions": [{"type": "Ready", "status": "False", "reason": "RolloutInProgress",
                        "message": "1 of 2\n replicas   ready", "lastTransitionTime": "t"}],
        "lag": {"records": 120, "seconds": 3, "updateTime": "2026-01-01T00:00:00Z"},
    },
}
ROWS = [
    {"stage": "main", "topic": "orders", "partition": 0, "next_offset": 10, "end_offset": 130, "lag": 120,
     "owner": "orders-abc", "committed_at": "2026-01-01T00:00:00.000Z", "in_flight": False, "stopped_at": None,
     "stopped_error": None, "held_until": None},
    {"stage": "main", "topic": "orders", "partition": 1, "next_offset": 5, "end_offset": 5, "lag": 0,
     "owner": "orders-def", "committed_at": None, "in_flight": True, "stopped_at": None, "stopped_error": None,
     "held_until": None},
    {"stage": "main", "topic": "orders", "partition": 2, "next_offset": 7, "end_offset": 9, "lag": 2,
     "owner": "orders-def", "committed_at": "2026-01-01T00:00:01.000Z", "in_flight": False, "stopped_at": None,
     "stopped_error": None, "held_until": "2026-01-01T00:00:06.000Z"},
]


def test_status_view_gathers_conditions_replicas_pods_and_partitions() -> None:
    view = views.status_view(APP, deployment={"spec": {"replicas": 3}}, pods=[_pod("orders-abc", restarts=2)],
                             partitions=ROWS, partitions_from="pod/orders-abc", partitions_error=None)
    assert view["replicas"] == {"desired": 3, "deployment": 3, "current": 2, "ready": 1, "updated": 2, "available": 1}
    assert view["conditions"][0]["reason"] == "RolloutInProgress"
    assert view["pods"] == [{"name": "orders-abc", "phase": "Running", "ready": True, "restarts": 2, "deleting": False}]
    assert view["partitions"] == ROWS
    assert view["appId"] == "team-a-orders-0123456789"
    assert view["suspended"] is False


def test_status_table_shows_each_partitions_owner_lag_and_last_commit() -> None:
    view = views.status_view(APP, deployment=None, pods=[], partitions=ROWS, partitions_from="pod/orders-abc",
                             partitions_error=None)
    text = views.render_status(view)
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("TOPIC"))
    assert header.split() == ["TOPIC", "PARTITION", "STAGE", "OWNER", "NEXT", "OFFSET", "END", "OFFSET", "LAG",
                              "LAST", "COMMIT", "NOTE"]
    row0 = next(ln for ln in lines if ln.startswith("orders ") and "orders-abc" in ln).split()
    assert row0 == ["orders", "0", "main", "orders-abc", "10", "130", "120", "2026-01-01T00:00:00.000Z", "-"]
    row1 = next(ln for ln in lines if ln.startswith("orders ") and ln.split()[1] == "1")
    assert row1.endswith("batch in flight")
    row2 = next(ln for ln in lines if ln.startswith("orders ") and ln.split()[1] == "2")
    assert row2.endswith("held by a snapshot until 2026-01-01T00:00:06.000Z")
    assert "Ready       False    RolloutInProgress   1 of 2 replicas ready" in text
    assert "Lag:        120 records, 3 s at 2026-01-01T00:00:00Z" in text
    assert "deployment -" in text


def test_status_table_says_why_partitions_are_not_shown() -> None:
    view = views.status_view(APP, deployment=None, pods=[], partitions=None, partitions_from=None,
                             partitions_error="no running pod to read them in (suspended, or not started)")
    assert views.render_status(view).endswith("Partitions: not shown: no running pod to read them in "
                                              "(suspended, or not started)")


def test_table_pads_columns_and_shows_none_as_dash() -> None:
    assert views.table(("A", "BB"), [("xyz", None), ("q", 1)]).splitlines() == ["A     BB", "xyz   -", "q     1"]


def test_exec_pod_prefers_a_ready_running_pod_not_being_deleted() -> None:
    pods = [_pod("a", deleting=True), _pod("b", ready=False), _pod("c"), _pod("d", phase="Pending")]
    assert views.exec_pod(pods, "app") == "c"
    assert views.exec_pod([_pod("b", ready=False)], "app") == "b"
    assert views.exec_pod([_pod("d", phase="Pending")], "app") is None


# -- the offsets report's lag --------------------------------------------------------------------


def test_report_lag_is_end_minus_next_and_unknown_without_an_end() -> None:
    rows = [{"topic": "t", "partition": 0, "next_offset": 7}, {"topic": "t", "partition": 1, "next_offset": 9},
            {"topic": "u", "partition": 0, "next_offset": 3}]
    out = report.with_lag(rows, {("t", 0): 10, ("t", 1): 5, ("u", 0): None})
    assert [(r["end_offset"], r["lag"]) for r in out] == [(10, 3), (5, 0), (None, None)]


# -- validate's runtime check ------------------------------------------------------------------


def test_validate_passes_an_example_app() -> None:
    assert checks.problems(example()) == []


def test_validate_names_the_spec_field_the_runtime_refuses() -> None:
    body = example()
    body["spec"]["kafka"]["topics"] = ["bad topic"]
    found = checks.problems(body)
    assert len(found) == 1
    assert found[0].startswith("spec.kafka (floe.yaml kafka.topics):")
    assert "'bad topic' is not a Kafka topic name" in found[0]


def test_validate_names_the_spec_field_the_operator_model_refuses() -> None:
    body = copy.deepcopy(example())
    body["spec"]["kafka"]["maxRecordsPerBatch"] = "many"
    assert checks.problems(body) == ["spec.kafka.maxRecordsPerBatch: Input should be a valid integer, "
                                     "unable to parse string as an integer"]


def test_spec_field_leaves_a_line_of_unknown_form_as_it_is() -> None:
    assert checks.spec_field("something odd") == "something odd"
    assert checks.spec_field("stores.1.name: bad") == "spec.state.stores (floe.yaml stores.1.name): bad"


def test_validate_names_the_pod_template_field_the_operator_refuses() -> None:
    # the schema cannot know Floe's ports: the operator would make the app Degraded (InvalidPodTemplate)
    body = example()
    body["spec"]["podTemplate"] = {"spec": {"containers": [
        {"name": "side", "image": "busybox", "ports": [{"containerPort": 9400}]}]}}
    assert checks.problems(body) == [
        "spec.podTemplate.spec.containers[0].ports[0].containerPort: 9400 is a port of Floe's container"
    ]
