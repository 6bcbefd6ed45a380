"""Which locations `floe-job delete-snapshot` deletes (`floe_jobs.snapshots.delete.refusal`):
a snapshot of the app the configuration runs, or what a failed one left; nothing else."""

from __future__ import annotations

from floe_jobs.snapshots import delete


def test_a_snapshot_of_this_app_is_deleted() -> None:
    assert delete.refusal("s3a://b/s1", "wc", entries=["manifest", "stores"], manifest_app="wc") is None


def test_a_snapshot_of_another_app_is_refused_naming_it() -> None:
    why = delete.refusal("s3a://b/s1", "wc", entries=["manifest", "stores"], manifest_app="orders")
    assert why is not None and "app id orders, not of wc" in why and "left in place" in why


def test_what_a_failed_snapshot_left_is_deleted() -> None:
    assert delete.refusal("s3a://b/s1", "wc", entries=["stores", "repartition"], manifest_app=None) is None
    assert delete.refusal("s3a://b/s1", "wc", entries=[], manifest_app=None) is None


def test_a_location_holding_anything_a_snapshot_never_writes_is_refused_naming_it() -> None:
    why = delete.refusal("file:///snapshots/x", "wc", entries=["stores", "payroll.csv"], manifest_app=None)
    assert why is not None and "payroll.csv" in why
