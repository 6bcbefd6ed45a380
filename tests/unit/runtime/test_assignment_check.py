"""The pure parts of comparing a member's assignment with the coordinator's (KIP-848)."""

from __future__ import annotations

from floe_jobs import assignmentcheck as ac

A, B, C = ("in", 0), ("in", 1), ("in", 2)


def test_a_heartbeat_timeout_is_told_from_other_timeouts_and_lines() -> None:
    line = "[thrd:x]: Timed out ConsumerGroupHeartbeatRequest in flight (after 1184ms)"
    assert ac.heartbeat_timed_out("REQTMOUT", line)
    assert not ac.heartbeat_timed_out("REQTMOUT", "[thrd:x]: Timed out FetchRequest in flight (after 30000ms)")
    assert not ac.heartbeat_timed_out("HEARTBEAT", "ConsumerGroupHeartbeat sent")


def test_views_that_agree_have_no_gap() -> None:
    assert ac.out_of_step([A, B], [B, A], [A, B]) == set()
    # partitions of the target not current yet wait for their previous owner: no gap
    assert ac.out_of_step([A], [A], [A, B]) == set()
    assert ac.out_of_step([A, B], [A, B], None) == set()


def test_a_partition_counted_on_one_side_only_is_a_gap() -> None:
    # the coordinator counts C as this member's; the member never heard of it
    assert ac.out_of_step([A], [A, C], [A, C]) == {C}
    # held here, no longer current on the coordinator's side
    assert ac.out_of_step([A, B], [A], None) == {B}


def test_a_revocation_the_member_has_not_made_is_a_gap() -> None:
    assert ac.out_of_step([A, B], [A, B], [A]) == {B}


def _watch() -> ac.Watch:
    w = ac.Watch(every_s=30, soon_s=1, tolerance_s=5)
    w.start(100.0)
    return w


def test_the_coordinator_is_asked_every_period_and_soon_after_a_heartbeat_timed_out() -> None:
    w = _watch()
    assert not w.due(129.9) and w.due(130.0)
    w.heartbeat_timed_out(110.0)
    assert w.due(111.0) and not w.due(110.9)
    assert not w.saw(111.0, set(), rebalances=3)
    assert not w.due(140.9) and w.due(141.0)


def test_a_gap_that_lasts_the_tolerance_without_an_assignment_change_asks_to_rejoin() -> None:
    w = _watch()
    assert not w.saw(100.0, {B}, rebalances=3)
    assert w.due(101.0)  # looked at again soon while the views disagree
    assert not w.saw(103.0, {B}, rebalances=3)
    assert w.saw(105.0, {B}, rebalances=3)
    # counted afresh after a rejoin
    assert not w.saw(106.0, {B}, rebalances=3)


def test_an_assignment_change_here_or_agreement_starts_the_count_again() -> None:
    w = _watch()
    assert not w.saw(100.0, {B}, rebalances=3)
    assert not w.saw(104.0, {B}, rebalances=4)  # a callback ran in between
    assert not w.saw(108.0, {B}, rebalances=4)
    assert w.saw(109.0, {B}, rebalances=4)
    assert not w.saw(110.0, {B}, rebalances=4)
    assert not w.saw(111.0, set(), rebalances=4)
    assert not w.saw(114.0, {B}, rebalances=4)


def test_no_answer_keeps_the_gap_counting() -> None:
    w = _watch()
    assert not w.saw(100.0, {B}, rebalances=3)
    w.unanswered(102.0)
    assert w.due(103.0)
    assert w.saw(105.0, {B}, rebalances=3)
