"""The pure bookkeeping a :class:`~actors.replication.partition.Partition` is built from (no Ray, no I/O): replica roles
and their transitions, the leader's view of each follower (``FollowerProgress``), the ISR and high
watermark rules (``LeaderState``), follower truncation by leader epoch (``truncation_offset``, KIP-101 /
KIP-279), ``ByteMarks`` for DelayedFetch min_bytes, and what a Partition call returns (``LeaderHwChange``,
``AlterPartitionProposal``). Time is passed in (``now_ms``)."""

from __future__ import annotations

import bisect
import enum
from collections import deque
from dataclasses import dataclass, field

UNKNOWN_OFFSET = -1

# Replica roles. Transitions (asserted by ``check_transition``):
#   NEW -> LEADER | FOLLOWER | STOPPED;  LEADER <-> FOLLOWER;  LEADER | FOLLOWER -> STOPPED.
NEW, LEADER, FOLLOWER, STOPPED = "new", "leader", "follower", "stopped"
_VALID = {
    NEW: {LEADER, FOLLOWER, STOPPED},
    LEADER: {LEADER, FOLLOWER, STOPPED},
    FOLLOWER: {LEADER, FOLLOWER, STOPPED},
    STOPPED: {STOPPED},
}


def check_transition(old: str, new: str) -> None:
    if new not in _VALID[old]:
        raise AssertionError(f"illegal replica transition {old} -> {new}")


@dataclass
class FollowerProgress:
    """What the leader knows of a remote replica (Kafka's Replica/ReplicaState)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0

    def reset(self, now_ms: int, in_isr: bool) -> None:
        """On becoming leader: LEO unknown until its first fetch in this epoch; ISR members get the
        benefit of the doubt for one lag period."""
        self.log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
        self.last_fetch_time_ms = 0
        self.last_caught_up_time_ms = now_ms if in_isr else 0

    def update_fetch_state(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        """Kafka's Replica.updateFetchState: the follower is caught up at this fetch if it asked for
        the leader's LEO; it was caught up at its previous fetch if it now asks for at least the LEO
        the leader had then."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset >= 0:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms


@dataclass
class LeaderState:
    """The leader's replication state for one leader epoch.

    ``isr`` is the committed ISR (what the controller has); ``pending_isr`` the ISR proposed by the
    one in-flight AlterPartition (None when none is). The high watermark uses the *maximal* ISR
    (committed plus pending additions) so it never advances past a replica that may already count as
    in sync; ``min.insync.replicas`` checks use the committed ISR.
    """

    broker_id: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    leader_epoch_start_offset: int
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None

    @classmethod
    def start(
        cls,
        broker_id: int,
        leader_epoch: int,
        partition_epoch: int,
        isr,
        replicas,
        log_end_offset: int,
        now_ms: int,
        previous: "LeaderState | None" = None,
    ) -> "LeaderState":
        st = cls(broker_id, leader_epoch, partition_epoch, tuple(isr), tuple(replicas), log_end_offset)
        for r in st.replicas:
            if r == broker_id:
                continue
            if previous is not None and previous.leader_epoch == leader_epoch and r in previous.followers:
                st.followers[r] = previous.followers[r]  # same epoch (ISR update): keep progress
            else:
                fp = FollowerProgress(r)
                fp.reset(now_ms, r in st.isr)
                st.followers[r] = fp
        if previous is not None and previous.leader_epoch == leader_epoch:
            st.leader_epoch_start_offset = previous.leader_epoch_start_offset
        return st

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(sorted(set(self.isr) | set(self.pending_isr)))

    def follower(self, replica_id: int) -> FollowerProgress:
        fp = self.followers.get(replica_id)
        if fp is None:  # a replica not in the assignment (e.g. mid-reassignment): track it anyway
            fp = self.followers[replica_id] = FollowerProgress(replica_id)
        return fp

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        self.follower(replica_id).update_fetch_state(fetch_offset, leader_end_offset, now_ms)

    def high_watermark(self, leader_end_offset: int, current_hw: int) -> int:
        """min LEO over the maximal ISR (the leader counts with its own LEO); never moves back."""
        hw = leader_end_offset
        for r in self.maximal_isr:
            if r == self.broker_id:
                continue
            leo = self.follower(r).log_end_offset
            if leo < hw:
                hw = leo
        return max(hw, current_hw)

    def out_of_sync_replicas(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not been caught up for more than ``max_lag_ms``."""
        return [
            r
            for r in self.isr
            if r != self.broker_id and not self.follower(r).is_caught_up(leader_end_offset, now_ms, max_lag_ms)
        ]

    def can_join_isr(self, replica_id: int, high_watermark: int) -> bool:
        """Kafka's isFollowerInSync: a non-ISR assigned replica whose LEO reached both the HW and the
        start offset of this leader epoch (so it holds everything this leader may have committed)."""
        if replica_id == self.broker_id or replica_id in self.isr or replica_id not in self.replicas:
            return False
        if self.pending_isr is not None and replica_id in self.pending_isr:
            return False
        leo = self.follower(replica_id).log_end_offset
        return leo >= high_watermark and leo >= self.leader_epoch_start_offset

    def propose(self, new_isr) -> tuple[int, ...]:
        """Mark an AlterPartition in flight (only one at a time)."""
        if self.pending_isr is not None:
            raise AssertionError("an ISR change is already in flight")
        new_isr = tuple(sorted(set(new_isr)))
        if self.broker_id not in new_isr:
            raise AssertionError("the leader cannot leave its own ISR")
        self.pending_isr = new_isr
        return new_isr

    def commit(self, isr, partition_epoch: int, now_ms: int) -> None:
        """Adopt the controller's answer (or a newer LeaderAndIsr) and clear the in-flight change."""
        added = set(isr) - set(self.isr)
        self.isr = tuple(sorted(isr))
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        for r in added:
            if r in self.followers:
                fp = self.followers[r]
                fp.last_caught_up_time_ms = max(fp.last_caught_up_time_ms, now_ms)

    def abort(self) -> None:
        self.pending_isr = None


def truncation_offset(
    requested_epoch: int,
    leader_epoch: int,
    leader_end_offset: int,
    follower_end_offset_for,
    follower_leo: int,
    follower_hw: int,
) -> tuple[int, bool]:
    """Where a follower truncates after OffsetForLeaderEpoch (Kafka's getOffsetTruncationState).

    ``requested_epoch``: the follower's latest epoch it asked about; ``(leader_epoch,
    leader_end_offset)``: the leader's answer; ``follower_end_offset_for(epoch) -> (epoch, end)``:
    the follower's own epoch cache. Returns ``(offset, done)``; when not done the follower truncates
    to ``offset`` and asks again with its (now lower) latest epoch (KIP-279).
    """
    if leader_end_offset < 0:
        # the leader has no epoch information at or below ours: fall back to the high watermark
        return min(follower_hw, follower_leo), True
    if leader_epoch < 0:
        return min(leader_end_offset, follower_leo), True
    if leader_epoch == requested_epoch:
        return min(leader_end_offset, follower_leo), True
    f_epoch, f_end = follower_end_offset_for(leader_epoch)
    if f_epoch < 0 or f_end < 0:
        return min(leader_end_offset, follower_leo), True
    if f_epoch != leader_epoch:
        # the follower lacks the leader's epoch: cut to our end of the largest epoch below it, retry
        return min(f_end, follower_leo), False
    return min(f_end, leader_end_offset, follower_leo), True


class ByteMarks:
    """Cumulative appended bytes at the end of recent appends: ``bytes_between(a, b)`` estimates the
    bytes a fetch from ``a`` up to ``b`` would return, for DelayedFetch ``min_bytes`` checks.

    ``reset(log_end_offset)`` sets the baseline (on open, truncation, role change); ``record`` follows
    every append. Only the last ``capacity`` appends are kept: a fetch from before the oldest mark
    counts as having plenty of bytes (it is that far behind).
    """

    PLENTY = 1 << 62

    def __init__(self, capacity: int = 4096):
        self._offsets: deque[int] = deque(maxlen=capacity)  # next offset after each append
        self._cum: deque[int] = deque(maxlen=capacity)  # cumulative bytes at that point
        self._total = 0

    def reset(self, log_end_offset: int) -> None:
        self._offsets.clear()
        self._cum.clear()
        self._offsets.append(log_end_offset)
        self._cum.append(self._total)

    def record(self, next_offset: int, nbytes: int) -> None:
        self._total += nbytes
        self._offsets.append(next_offset)
        self._cum.append(self._total)

    def _cum_at(self, offset: int) -> int | None:
        i = bisect.bisect_right(self._offsets, offset)
        return None if i == 0 else self._cum[i - 1]

    def bytes_between(self, start: int, end: int) -> int:
        if end <= start:
            return 0
        a = self._cum_at(start)
        if a is None:
            return self.PLENTY
        b = self._cum_at(end)
        return max(0, b - a) if b is not None else 0


class LeaderHwChange(enum.Enum):
    """What an operation did to the leader's high watermark (Kafka's ``LeaderHwChange``). The
    ReplicaManager dispatches on it: INCREASED -> produce and fetch purgatories, SAME (the LEO moved,
    the HW did not) -> fetch purgatory (followers waiting for data), NONE -> nothing."""

    INCREASED = "increased"
    SAME = "same"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """An ISR change the leader proposes to the controller (AlterPartition); marked in flight."""

    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    reason: str
