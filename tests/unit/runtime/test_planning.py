"""Batch planning: replays, caps, fair sharing, starting policy."""

from __future__ import annotations

from floe_jobs import planning
from floe_jobs.planning import OffsetRow, Watermarks

T = "lines"
NOW = 1_700_000_000_000_000


def marks(**parts: tuple[int, int]) -> dict[tuple[str, int], Watermarks]:
    return {(T, int(p[1:])): Watermarks(*v) for p, v in parts.items()}


def two_partitions(
    rows: dict[tuple[str, int], OffsetRow], watermarks: dict[tuple[str, int], Watermarks], *, budget: int
) -> list[tuple[int, int, int, int]]:
    """(partition, seq, start, end) of each plan of a batch over partitions 0 and 1."""
    plan = planning.plan_batch(
        owned=[(T, 0), (T, 1)], rows=rows, watermarks=watermarks, starting_offsets="earliest", budget=budget,
        now_us=NOW,
    )
    return [(p.partition, p.seq, p.start, p.end) for p in plan.partitions]


def test_new_partition_starts_by_policy_and_is_stored() -> None:
    for policy, start in (("earliest", 5), ("latest", 50)):
        plan = planning.plan_batch(
            owned=[(T, 0)], rows={}, watermarks=marks(p0=(5, 50)), starting_offsets=policy, budget=1000, now_us=NOW
        )
        # the row is created below every plan's stamp, and records that stamp for the next planner
        assert plan.new_rows == [OffsetRow(T, 0, next_offset=start, planned_ts=NOW - 1)]
        if policy == "earliest":
            assert [(p.seq, p.start, p.end, p.replay, p.stamp) for p in plan.partitions] == [(1, 5, 50, False, NOW)]
        else:
            assert plan.partitions == []


def test_in_flight_plan_is_replayed_exactly_whatever_the_cap() -> None:
    row = OffsetRow(T, 0, next_offset=100, committed_seq=7, planned_seq=8, planned_from=100, planned_to=900)
    plan = planning.plan_batch(
        owned=[(T, 0)],
        rows={(T, 0): row},
        watermarks=marks(p0=(0, 5000)),
        starting_offsets="earliest",
        budget=10,
        now_us=NOW,
    )
    assert [(p.seq, p.start, p.end, p.replay) for p in plan.partitions] == [(8, 100, 900, True)]
    assert plan.fresh == []


def test_committed_plan_is_not_replayed() -> None:
    row = OffsetRow(T, 0, next_offset=900, committed_seq=8, planned_seq=8, planned_from=100, planned_to=900)
    plan = planning.plan_batch(
        owned=[(T, 0)],
        rows={(T, 0): row},
        watermarks=marks(p0=(0, 1000)),
        starting_offsets="earliest",
        budget=50,
        now_us=NOW,
    )
    assert [(p.seq, p.start, p.end, p.replay) for p in plan.partitions] == [(9, 900, 950, False)]


def test_replays_use_up_budget_first() -> None:
    rows = {
        (T, 0): OffsetRow(T, 0, 0, committed_seq=1, planned_seq=2, planned_from=0, planned_to=80),
        (T, 1): OffsetRow(T, 1, 0, committed_seq=3),
    }
    assert two_partitions(rows, marks(p0=(0, 100), p1=(0, 100)), budget=100) == [(0, 2, 0, 80), (1, 4, 0, 20)]


def test_budget_is_shared_fairly_and_small_backlogs_give_back() -> None:
    grants = planning.share_budget({(T, 0): 10, (T, 1): 1000, (T, 2): 1000}, 300)
    assert grants == {(T, 0): 10, (T, 1): 145, (T, 2): 145}
    assert sum(planning.share_budget({(T, i): 7 for i in range(5)}, 3).values()) == 3
    assert planning.share_budget({(T, 0): 0}, 100) == {(T, 0): 0}
    assert planning.share_budget({(T, 0): 5}, 0) == {(T, 0): 0}


def test_ranges_are_capped_by_total_budget() -> None:
    rows = {(T, p): OffsetRow(T, p, next_offset=10) for p in range(6)}
    plan = planning.plan_batch(
        owned=[(T, p) for p in range(6)],
        rows=rows,
        watermarks={(T, p): Watermarks(0, 10_000) for p in range(6)},
        starting_offsets="earliest",
        budget=600,
        now_us=NOW,
    )
    assert plan.records == 600
    assert all(p.start == 10 and p.end == 110 for p in plan.partitions)


def test_unowned_and_caught_up_partitions_are_not_planned() -> None:
    rows = {(T, 0): OffsetRow(T, 0, next_offset=50), (T, 1): OffsetRow(T, 1, next_offset=0)}
    plan = planning.plan_batch(
        owned=[(T, 0)],
        rows=rows,
        watermarks=marks(p0=(0, 50), p1=(0, 99)),
        starting_offsets="earliest",
        budget=10,
        now_us=NOW,
    )
    assert plan.partitions == [] and plan.new_rows == []


def test_offset_below_log_start_moves_up_with_warning() -> None:
    rows = {(T, 0): OffsetRow(T, 0, next_offset=3, committed_seq=2)}
    plan = planning.plan_batch(
        owned=[(T, 0)], rows=rows, watermarks=marks(p0=(10, 20)), starting_offsets="earliest", budget=100, now_us=NOW
    )
    assert [(p.start, p.end, p.seq) for p in plan.partitions] == [(10, 20, 3)]
    assert "retention" in plan.warnings[0] and "continuing from 10 (7 records lost)" in plan.warnings[0]


def test_a_replay_whose_head_retention_deleted_replays_the_rest_with_a_warning() -> None:
    """Records of an in-flight plan that retention deleted cannot be read by any owner: the replay
    keeps its sequence and end and starts at the log start (a full replay fails on every owner)."""
    row = OffsetRow(T, 0, next_offset=100, committed_seq=7, planned_seq=8, planned_from=100, planned_to=900)
    for low, start in ((400, 400), (900, 900), (1200, 900)):
        plan = planning.plan_batch(
            owned=[(T, 0)], rows={(T, 0): row}, watermarks=marks(p0=(low, 5000)), starting_offsets="earliest",
            budget=10, now_us=NOW,
        )
        assert [(p.seq, p.start, p.end, p.replay) for p in plan.partitions] == [(8, start, 900, True)]
        assert len(plan.warnings) == 1 and "deleted by retention" in plan.warnings[0]
        assert f"replaying [{start}, 900) ({start - 100} records lost)" in plan.warnings[0]
    # a replay whose range is all still there is exact, and says nothing
    plan = planning.plan_batch(
        owned=[(T, 0)], rows={(T, 0): row}, watermarks=marks(p0=(100, 5000)), starting_offsets="earliest",
        budget=10, now_us=NOW,
    )
    assert [(p.start, p.end) for p in plan.partitions] == [(100, 900)] and plan.warnings == []


def test_record_budget_from_bytes() -> None:
    assert planning.record_budget(max_records=1000, max_bytes=10_000, avg_record_bytes=None) == 1000
    assert planning.record_budget(max_records=1000, max_bytes=10_000, avg_record_bytes=100) == 100
    assert planning.record_budget(max_records=1000, max_bytes=10, avg_record_bytes=100) == 1


def test_advance_positions_keeps_maximum() -> None:
    before = {"lines:0": (10, 2), "lines:1": (5, 0)}
    seen = {"lines:0": (10, 1), "lines:1": (6, 0), "lines:2": (0, 0)}
    assert planning.advance_positions(before, seen) == {"lines:0": (10, 2), "lines:1": (6, 0), "lines:2": (0, 0)}


def test_a_table_being_created_is_told_from_other_failures() -> None:
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import ServerError
    from floe_jobs import offsets

    message = "java.lang.IllegalArgumentException: Unknown CF c1de82e0-e857-11f1-9379-b74e6de35468"
    assert offsets.being_created(ServerError(0, message, None))
    assert not offsets.being_created(ServerError(0, "java.lang.NullPointerException", None))
    assert not offsets.being_created(NoHostAvailable("Unable to connect", {"127.0.0.1:9042": ConnectionRefusedError()}))
    assert not offsets.being_created(ValueError("Unknown CF"))


def test_a_read_racing_the_tables_creation_is_not_retried_elsewhere() -> None:
    """The "Unknown CF" answer is raised as it is, so the caller sees it; other request errors
    still move on to the next host."""
    from cassandra.policies import RetryPolicy
    from cassandra.protocol import ServerError
    from floe_jobs import offsets

    policy = offsets._WHILE_CREATED
    racing = ServerError(0, "java.lang.IllegalArgumentException: Unknown CF c1de82e0", None)
    assert policy.on_request_error(None, None, racing, 0) == (RetryPolicy.RETHROW, None)
    other = ServerError(0, "java.lang.NullPointerException", None)
    assert policy.on_request_error(None, None, other, 0)[0] == RetryPolicy.RETRY_NEXT_HOST


def test_record_budget_divides_by_rows_per_record() -> None:
    assert planning.record_budget(max_records=1000, max_bytes=10**9, avg_record_bytes=10, rows_per_record=250) == 4
    assert planning.record_budget(max_records=1000, max_bytes=10**9, avg_record_bytes=10, rows_per_record=1) == 1000
    assert planning.record_budget(max_records=1000, max_bytes=10**9, avg_record_bytes=10, rows_per_record=5000) == 1
    # the byte cap still applies on top
    assert planning.record_budget(max_records=1000, max_bytes=300, avg_record_bytes=100, rows_per_record=10) == 3


def test_row_limits_share_the_cap_between_fresh_plans_only() -> None:
    plans = [
        planning.PartitionPlan("rp", 0, 4, 0, 30, replay=False),
        planning.PartitionPlan("rp", 1, 2, 0, 10, replay=False),
        planning.PartitionPlan("rp", 2, 9, 5, 500, replay=True),
        planning.PartitionPlan("rp", 3, 1, 7, 7, replay=False),
    ]
    assert planning.row_limits(plans, 1000) == {("rp", 0): 750, ("rp", 1): 250}
    assert planning.row_limits(plans, 2) == {("rp", 0): 1, ("rp", 1): 1}, "each reads at least one record"


def test_cut_shortens_fresh_plans_and_never_a_replay() -> None:
    fresh = planning.PartitionPlan("rp", 0, 4, 10, 30, replay=False)
    replay = planning.PartitionPlan("rp", 1, 2, 0, 10, replay=True)
    assert planning.cut([fresh, replay], {("rp", 0): 12, ("rp", 1): 3}) == [
        planning.PartitionPlan("rp", 0, 4, 10, 12, replay=False),
        replay,
    ]


def test_every_attempt_is_stamped_above_the_last_one_of_its_partition() -> None:
    """Write timestamps grow with sequences and attempts even when the next owner's clock is
    behind the last one's: a new batch and a replay both go above the stored stamp, so an earlier
    attempt's late write loses to the replay's instead of tying with it."""
    ahead = NOW + 5_000_000  # the previous owner's clock ran 5 s ahead of ours
    rows = {
        (T, 0): OffsetRow(T, 0, 100, committed_seq=4, planned_seq=4, planned_from=0, planned_to=100, planned_ts=ahead),
        (T, 1): OffsetRow(T, 1, 0, committed_seq=2, planned_seq=3, planned_from=0, planned_to=50, planned_ts=NOW - 9),
        (T, 2): OffsetRow(T, 2, 0, committed_seq=1, planned_seq=1, planned_from=0, planned_to=0, planned_ts=NOW - 9),
        (T, 3): OffsetRow(T, 3, 0, committed_seq=6, planned_seq=7, planned_from=0, planned_to=9, planned_ts=ahead),
        # a plan stored by a release without stamps
        (T, 4): OffsetRow(T, 4, 0, committed_seq=1, planned_seq=2, planned_from=0, planned_to=9),
    }
    plan = planning.plan_batch(
        owned=sorted(rows),
        rows=rows,
        watermarks=marks(p0=(0, 200), p1=(0, 200), p2=(0, 200), p3=(0, 200), p4=(0, 200)),
        starting_offsets="earliest",
        budget=1000,
        now_us=NOW,
    )
    stamps = {p.partition: (p.seq, p.replay, p.stamp) for p in plan.partitions}
    assert stamps == {
        0: (5, False, ahead + 1),
        1: (3, True, NOW),
        2: (2, False, NOW),
        3: (7, True, ahead + 1),
        4: (2, True, NOW),
    }


def test_stamps_grow_when_the_clock_is_set_back() -> None:
    """The planner's clock an hour behind the stored stamp: each next stamp is still the last + 1."""
    row = OffsetRow(T, 0, 0, planned_ts=NOW)
    back = NOW - 3_600_000_000
    first = planning.stamp_for(row, now_us=back)
    second = planning.stamp_for(OffsetRow(T, 0, 0, planned_ts=first), now_us=back + 1_000)
    assert (first, second) == (NOW + 1, NOW + 2)
    assert planning.stamp_for(None, now_us=back) == back
    assert planning.stamp_for(OffsetRow(T, 0, 0), now_us=back) == back


def test_a_row_stamped_at_or_above_the_batch_is_written_just_above_its_cells() -> None:
    assert planning.row_stamp(NOW, None) == NOW  # no cell: the batch's stamp
    assert planning.row_stamp(NOW, NOW - 1) == NOW  # an older batch's cell
    assert planning.row_stamp(NOW, NOW) == NOW + 1  # a tie would be broken by value, not by writer
    hour = 3_600_000_000
    assert planning.row_stamp(NOW, NOW + hour) == NOW + hour + 1  # a writer an hour ahead
    # a later batch reads what this one wrote and goes above it, whatever its own stamp
    written = planning.row_stamp(NOW, NOW + hour)
    assert planning.row_stamp(NOW + 1, written) == written + 1
    # two attempts that read the same cell write under the same timestamp
    assert planning.row_stamp(NOW, NOW + hour) == planning.row_stamp(NOW + 7, NOW + hour)


def test_a_partition_a_snapshot_holds_gets_no_new_plan_until_the_hold_is_released_or_runs_out() -> None:
    held = OffsetRow(T, 0, next_offset=900, committed_seq=8, planned_seq=8, held_until=NOW + 1)
    free = OffsetRow(T, 1, next_offset=10, committed_seq=3, planned_seq=3)

    def planned(rows: dict[tuple[str, int], OffsetRow]) -> list[tuple[int, int, int, int]]:
        return two_partitions(rows, marks(p0=(0, 1000), p1=(0, 20)), budget=1000)

    # held: only the other partition is planned, and the held one's budget goes to it
    assert planned({(T, 0): held, (T, 1): free}) == [(1, 4, 10, 20)]
    # released (null) or run out (at or before now): planned again from where it stood
    for until in (None, NOW):
        row = OffsetRow(T, 0, next_offset=900, committed_seq=8, planned_seq=8, held_until=until)
        assert planned({(T, 0): row, (T, 1): free}) == [(0, 9, 900, 1000), (1, 4, 10, 20)]
