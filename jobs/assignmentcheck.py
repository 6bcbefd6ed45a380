"""Whether this member's assignment agrees with the group coordinator's, under KIP-848.

Under the consumer protocol a member learns its assignment only from heartbeat responses.
librdkafka gives a heartbeat request the heartbeat interval as its timeout, and after a
timeout its next heartbeat is not a full request (it lists no owned partitions), so the
coordinator does not send the assignment again. A response lost that way, as happens to a
starved process, leaves the member out of step with no error raised: the coordinator counts
partitions as this member's that it never heard of (nobody reads them), or waits for it to give
up partitions it was never told to (their next owner waits up to the member's rebalance
timeout, `max.poll.interval.ms`). `floe_jobs.membership` compares both views after a heartbeat
timed out and now and then otherwise, and rejoins when they stay apart; this module holds the
pure parts of that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TP = tuple[str, int]

# librdkafka's log facility and request name for a heartbeat that got no answer in time
_TIMEOUT_FACILITY = "REQTMOUT"
_HEARTBEAT_REQUEST = "ConsumerGroupHeartbeat"


def heartbeat_timed_out(facility: str, message: str) -> bool:
    """Whether a librdkafka log line says a consumer-group heartbeat request timed out."""
    return facility == _TIMEOUT_FACILITY and _HEARTBEAT_REQUEST in message


def out_of_step(local: Iterable[TP], current: Iterable[TP], target: Iterable[TP] | None) -> set[TP]:
    """The partitions on which the consumer's assignment (`local`) and the coordinator's view of
    this member disagree: held on one side only (`current`: what the coordinator counts as the
    member's), or held here though the coordinator's `target` for the member leaves them out
    (a revocation the member has not made). Partitions in the target that are not current yet
    are no disagreement: they wait for their previous owner to give them up."""
    here, there = set(local), set(current)
    gap = here ^ there
    if target is not None:
        gap |= here - set(target)
    return gap


@dataclass
class Watch:
    """When to ask the coordinator for its view, and when a disagreement has lasted long enough
    to rejoin over. A disagreement is normal for up to a heartbeat while an assignment change
    travels, and while a revocation waits for a running batch (the membership's poll thread is
    then inside the callback and asks nothing); an assignment change seen here (`rebalances`)
    starts the count again."""

    every_s: float
    # how soon to look after a heartbeat timed out, and again while the views disagree
    soon_s: float
    # how long the same member may disagree, with no assignment change here, before it rejoins
    tolerance_s: float
    next_at: float = 0.0
    since: float | None = None
    seen_rebalances: int = -1

    def start(self, now: float) -> None:
        self.next_at = now + self.every_s

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def heartbeat_timed_out(self, now: float) -> None:
        self.next_at = min(self.next_at, now + self.soon_s)

    def unanswered(self, now: float) -> None:
        """The coordinator's view could not be had (no answer, or the member is not listed while
        it joins): look again soon, keeping any disagreement's start."""
        self.next_at = now + self.soon_s

    def saw(self, now: float, gap: set[TP], rebalances: int) -> float | None:
        """Record a comparison's result. Returns how long the views have disagreed when that is
        `tolerance_s` or more with no assignment change here (the member should rejoin), else
        None."""
        if not gap:
            self.since = None
            self.next_at = now + self.every_s
            return None
        if self.since is None or rebalances != self.seen_rebalances:
            self.since, self.seen_rebalances = now, rebalances
        lasted = now - self.since
        if lasted >= self.tolerance_s:
            self.since = None
            self.next_at = now + self.every_s
            return lasted
        self.next_at = now + self.soon_s
        return None
