"""Group membership against the real broker: partitions change hands only at batch boundaries.

Two members of one group over a 2-partition topic (KIP-848). The first holds a batch over both
partitions when the second joins: the partition that moves must stay with the first until the
batch ends, must not be handed to a batch that starts meanwhile, and must then go.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from floe_jobs import config, membership
from floe_stack import localrun

pytestmark = [pytest.mark.kafka]


def _config(bootstrap: str, app_id: str, topic: str, **extra: str) -> config.FloeConfig:
    return config.load(
        environ={
            "FLOE_APP_ID": app_id,
            "FLOE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "FLOE_KAFKA_TOPICS": topic,
            "FLOE_CASSANDRA_KEYSPACE": "unused",
            "FLOE_JOB_ENTRYPOINT": "unused:job",
            **extra,
        }
    )


def _member(bootstrap: str, app_id: str, topic: str, name: str) -> membership.Membership:
    cfg = _config(bootstrap, app_id, topic)
    return membership.Membership(cfg, topics=[topic], client_id=f"{app_id}-{name}", protocol="consumer")


class _Group:
    """A 2-partition topic whose first member owns both partitions; `join` adds the second."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.app_id = localrun.unique("mb")
        self.topic = f"{self.app_id}-in"
        localrun.create_topic(bootstrap, self.topic, 2)
        self.first = _member(bootstrap, self.app_id, self.topic, "first")
        self.second: membership.Membership | None = None

    def join(self) -> membership.Membership:
        self.second = _member(self.bootstrap, self.app_id, self.topic, "second")
        return self.second

    def close(self) -> None:
        self.first.close(leave=True)
        if self.second is not None:
            self.second.close(leave=True)


@contextlib.contextmanager
def _group(bootstrap: str) -> Iterator[_Group]:
    group = _Group(bootstrap)
    try:
        _until(lambda: len(group.first.owned) == 2, 60, "the first member to own both partitions")
        yield group
    finally:
        group.close()


def _waiting(member: membership.Membership, seconds: float) -> tuple[threading.Thread, float, list[float]]:
    """A lane's thread in `member.wait(seconds)`, once the wait has begun: the thread, about when
    the wait began, and a list that gets the monotonic time it ended."""
    ended: list[float] = []
    registered = threading.Event()

    def lane() -> None:
        member.wait(0.01)  # the thread's waker exists from here on
        registered.set()
        member.wait(seconds)
        ended.append(time.monotonic())

    thread = threading.Thread(target=lane)
    thread.start()
    assert registered.wait(10)
    return thread, time.monotonic(), ended


def _until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(180)
def test_revocation_waits_for_the_batch_holding_the_partition(kafka_bootstrap: str) -> None:
    with _group(kafka_bootstrap) as group:
        first, topic = group.first, group.topic
        release = threading.Event()
        held: list[list[tuple[str, int]]] = []
        ended_at: list[float] = []

        def hold() -> None:
            with first.batch([topic]) as owned:
                held.append(owned)
                release.wait(60)
                ended_at.append(time.time())

        holder = threading.Thread(target=hold)
        holder.start()
        _until(lambda: bool(held), 10, "the batch to start")
        assert held[0] == [(topic, 0), (topic, 1)]

        second = group.join()

        def batch_now() -> list[tuple[str, int]]:
            with first.batch([topic]) as owned:
                return owned

        # the revocation is pending: a batch starting now leaves the moving partition out,
        # while the member still owns it (the running batch may commit it)
        _until(lambda: len(batch_now()) == 1, 60, "a revocation to be pending")
        assert len(first.owned) == 2
        assert not first.revoked_log
        time.sleep(1.0)
        assert len(first.owned) == 2, "a partition was revoked while a batch held it"
        release.set()
        holder.join(10)
        _until(lambda: bool(first.revoked_log), 30, "the revocation to complete")
        revoked_at, revoked = first.revoked_log[0]
        assert revoked_at >= ended_at[0]
        assert len(revoked) == 1 and revoked[0] not in first.owned
        _until(lambda: second.owned == revoked, 30, "the second member to get it")


@pytest.mark.timeout(180)
def test_a_partition_that_comes_back_has_a_new_assignment_number(kafka_bootstrap: str) -> None:
    """What the state cache relies on: a kept partition keeps its number, and one that went to
    another member and came back has a new one."""
    with _group(kafka_bootstrap) as group:
        first = group.first
        tps = [(group.topic, 0), (group.topic, 1)]
        before = first.assignments(tps)
        assert sorted(before) == tps and len(set(before.values())) == 2
        second = group.join()
        _until(lambda: len(first.owned) == 1, 60, "the second member to take a partition")
        kept, moved = first.owned[0], next(tp for tp in tps if tp not in first.owned)
        assert first.assignments(tps) == {kept: before[kept]}
        second.close(leave=True)
        _until(lambda: len(first.owned) == 2, 60, "the partition to come back")
        after = first.assignments(tps)
        assert after[kept] == before[kept]
        assert after[moved] not in (before[moved], before[kept])


@pytest.mark.timeout(120)
def test_wake_ends_an_idle_wait_at_once(kafka_bootstrap: str) -> None:
    """What a drain relies on: a lane idle between batches stops when SIGTERM comes, not after
    its poll interval (`stopping.on_signal` wakes it)."""
    with _group(kafka_bootstrap) as group:
        first = group.first
        thread, started, ended = _waiting(first, 30)
        time.sleep(0.3)
        first.wake()
        thread.join(10)
        assert ended and ended[0] - started < 2.0



@pytest.mark.timeout(180)
def test_an_assignment_change_ends_a_wait_at_once(kafka_bootstrap: str) -> None:
    """What a lingering lane relies on (`lanes.pause_after`): a member that gives up or gets a
    partition stops waiting when its assignment changes, not after the linger or poll interval."""
    with _group(kafka_bootstrap) as group:
        first = group.first
        thread, _started, ended = _waiting(first, 60)
        group.join()
        _until(lambda: len(first.owned) == 1, 60, "the second member to take a partition")
        changed = time.monotonic()
        thread.join(10)
        assert ended, "the wait did not end within 10 s of the assignment change"
        assert ended[0] - changed < 2.0


@contextlib.contextmanager
def _checked_member(bootstrap: str) -> Iterator[tuple[membership.Membership, list[tuple[str, int]]]]:
    """One member of a new group over a 2-partition topic, owning both, that compares its
    assignment with the coordinator's every second (heartbeat 1 s, as a StreamingApp's default)."""
    app_id = localrun.unique("mbc")
    topic = f"{app_id}-in"
    localrun.create_topic(bootstrap, topic, 2)
    cfg = _config(
        bootstrap, app_id, topic, FLOE_KAFKA_HEARTBEAT_INTERVAL_MS="1000", FLOE_KAFKA_SESSION_TIMEOUT_MS="10000"
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    membership.apply_group_configs(admin, cfg)
    member = membership.Membership(
        cfg, topics=[topic], client_id=f"{app_id}-only", protocol="consumer", admin=admin, check_every_s=1.0
    )
    try:
        tps = [(topic, 0), (topic, 1)]
        _until(lambda: member.owned == tps, 60, "the member to own both partitions")
        yield member, tps
    finally:
        member.close(leave=True)


@pytest.mark.timeout(120)
def test_a_member_in_step_with_the_coordinator_is_compared_and_left_alone(kafka_bootstrap: str) -> None:
    with _checked_member(kafka_bootstrap) as (member, tps):
        numbers = member.assignments(tps)
        _until(lambda: member.comparisons >= 5, 30, "five comparisons with the coordinator")
        assert member.rejoins == 0
        assert member.assignments(tps) == numbers


@pytest.mark.timeout(120)
def test_a_partition_the_coordinator_counts_as_the_members_but_it_never_heard_of_is_taken_up(
    kafka_bootstrap: str,
) -> None:
    """What a heartbeat answer lost to its 1 s timeout leaves behind (`floe_jobs.assignmentcheck`):
    made here by the consumer dropping a partition on its side only. The member rejoins within
    the tolerance (3 heartbeats, at least 5 s) and owns the partition again, under a new number."""
    with _checked_member(kafka_bootstrap) as (member, tps):
        numbers = member.assignments(tps)
        dropped = tps[0]
        member._consumer.incremental_unassign([TopicPartition(*dropped)])
        dropped_at = time.monotonic()

        def held() -> list[tuple[str, int]]:
            return sorted((tp.topic, tp.partition) for tp in member._consumer.assignment())

        _until(lambda: held() == tps, 40, "the consumer to hold both partitions again")
        assert time.monotonic() - dropped_at >= 5.0, "rejoined before the views stayed apart for the tolerance"
        assert member.rejoins == 1
        _until(lambda: member.owned == tps and len(member.assignments(tps)) == 2, 10, "both partitions owned")
        assert member.assignments(tps)[dropped] != numbers[dropped]
        time.sleep(3)
        assert member.rejoins == 1

