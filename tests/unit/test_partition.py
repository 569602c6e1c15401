"""Pure replication logic: follower progress, HW, ISR decisions, epoch truncation, byte marks."""
from __future__ import annotations

import pytest

from actors.partition import (FOLLOWER, LEADER, NEW, STOPPED, ByteMarks, FollowerProgress, LeaderState,
                              check_transition, truncation_offset)


def leader(isr=(1, 2, 3), replicas=(1, 2, 3), leo=0, now=1000, epoch=5):
    return LeaderState.start(1, epoch, 7, isr, replicas, leo, now)


def test_transitions():
    check_transition(NEW, LEADER)
    check_transition(LEADER, FOLLOWER)
    check_transition(FOLLOWER, LEADER)
    check_transition(FOLLOWER, STOPPED)
    with pytest.raises(AssertionError):
        check_transition(STOPPED, LEADER)


def test_hw_is_min_leo_over_isr_and_waits_for_unknown_followers():
    ls = leader(leo=10)
    # followers' LEOs are unknown until they fetch in this epoch: the HW cannot move
    assert ls.high_watermark(10, 0) == 0
    ls.on_follower_fetch(2, 10, 10, 1001)
    assert ls.high_watermark(10, 0) == 0
    ls.on_follower_fetch(3, 7, 10, 1001)
    assert ls.high_watermark(10, 0) == 7
    ls.on_follower_fetch(3, 10, 10, 1002)
    assert ls.high_watermark(12, 7) == 10
    # never backwards
    assert ls.high_watermark(12, 11) == 11


def test_hw_ignores_replicas_outside_isr_and_counts_pending_additions():
    ls = leader(isr=(1, 2), leo=10)
    ls.on_follower_fetch(2, 10, 10, 1001)
    ls.on_follower_fetch(3, 4, 10, 1001)  # not in ISR: does not hold the HW back
    assert ls.high_watermark(10, 0) == 10
    ls.propose((1, 2, 3))
    assert ls.maximal_isr == (1, 2, 3)
    assert ls.high_watermark(12, 10) == 10
    ls.on_follower_fetch(2, 12, 12, 1002)
    assert ls.high_watermark(12, 10) == 10  # b3 (pending) still at 4, HW held
    ls.commit((1, 2, 3), 8, 1003)
    assert ls.pending_isr is None and ls.partition_epoch == 8


def test_shrink_after_lag_time_and_caught_up_rules():
    ls = leader(leo=10, now=1000)
    ls.on_follower_fetch(2, 10, 10, 1000)
    ls.on_follower_fetch(3, 10, 10, 1000)
    # no new data: an idle follower equal to the LEO is in sync forever
    assert ls.out_of_sync_replicas(10, 100000, 500) == []
    # data arrives; b2 keeps fetching, b3 stops
    ls.on_follower_fetch(2, 10, 20, 1100)   # asked for 10, leader had 20: not caught up now
    ls.on_follower_fetch(2, 20, 20, 1200)   # caught up
    assert ls.out_of_sync_replicas(20, 1400, 500) == []
    assert ls.out_of_sync_replicas(20, 1600, 500) == [3]
    # Kafka's rule: reaching the LEO the leader had at the previous fetch counts as caught up then
    ls.on_follower_fetch(2, 20, 30, 1900)
    ls.on_follower_fetch(2, 30, 40, 2300)
    assert ls.follower(2).last_caught_up_time_ms == 1900


def test_new_leader_gives_isr_members_one_lag_period():
    ls = leader(isr=(1, 2), replicas=(1, 2, 3), leo=10, now=1000)
    assert ls.out_of_sync_replicas(10, 1400, 500) == []
    assert ls.out_of_sync_replicas(10, 1600, 500) == [2]


def test_expand_requires_hw_and_epoch_start():
    ls = leader(isr=(1, 2), replicas=(1, 2, 3), leo=50)
    assert ls.leader_epoch_start_offset == 50
    ls.on_follower_fetch(3, 40, 60, 1001)
    assert not ls.can_join_isr(3, 40)      # below the epoch start offset
    ls.on_follower_fetch(3, 55, 60, 1002)
    assert not ls.can_join_isr(3, 58)      # below the HW
    assert ls.can_join_isr(3, 55)
    assert not ls.can_join_isr(2, 0)       # already in the ISR
    assert not ls.can_join_isr(4, 0)       # not assigned
    ls.propose((1, 2, 3))
    assert not ls.can_join_isr(3, 55)      # already being added
    with pytest.raises(AssertionError):
        ls.propose((1, 2))


def test_leader_cannot_drop_itself():
    ls = leader()
    with pytest.raises(AssertionError):
        ls.propose((2, 3))


def test_same_epoch_restart_keeps_progress():
    ls = leader(leo=10)
    ls.on_follower_fetch(2, 9, 10, 1001)
    again = LeaderState.start(1, 5, 8, (1, 2), (1, 2, 3), 12, 2000, previous=ls)
    assert again.follower(2).log_end_offset == 9
    assert again.leader_epoch_start_offset == 10
    newer = LeaderState.start(1, 6, 9, (1, 2), (1, 2, 3), 12, 2000, previous=ls)
    assert newer.follower(2).log_end_offset == -1


def test_follower_progress_reset():
    fp = FollowerProgress(2, 5, 100, 5, 100)
    fp.reset(300, in_isr=False)
    assert fp.log_end_offset == -1 and fp.last_caught_up_time_ms == 0


class Cache:
    """A follower epoch cache: entries (epoch, start) and a LEO (Kafka's endOffsetForEpoch)."""

    def __init__(self, entries, leo):
        self.entries, self.leo = entries, leo

    def end_offset_for_epoch(self, epoch):
        below = [(e, s) for e, s in self.entries if e <= epoch]
        if not below:
            return -1, -1
        e = below[-1][0]
        later = [s for e2, s in self.entries if e2 > e]
        return e, (later[0] if later else self.leo)


def test_truncation_same_epoch():
    f = Cache([(1, 0)], 10)
    assert truncation_offset(1, 1, 8, f.end_offset_for_epoch, 10, 5) == (8, True)
    assert truncation_offset(1, 1, 12, f.end_offset_for_epoch, 10, 5) == (10, True)


def test_truncation_kip279_iterates_when_leader_lacks_our_epoch():
    # follower: epoch 1 at 0, epoch 3 at 20 (a leadership the new leader never saw); LEO 30
    f = Cache([(1, 0), (3, 20)], 30)
    # leader knows epochs 1 and 2: asked about 3 it answers (2, 25)
    off, done = truncation_offset(3, 2, 25, f.end_offset_for_epoch, 30, 10)
    # we have no epoch 2: our largest epoch <= 2 is 1, which ends at 20 here
    assert (off, done) == (20, False)
    # after truncating to 20 our latest epoch is 1; the leader says epoch 1 ended at 18
    f2 = Cache([(1, 0)], 20)
    assert truncation_offset(1, 1, 18, f2.end_offset_for_epoch, 20, 10) == (18, True)


def test_truncation_leader_older_epoch_known_to_us():
    f = Cache([(1, 0), (2, 10), (4, 20)], 30)
    # leader answers epoch 2 ending at 15: we have epoch 2 ending at 20 -> min
    assert truncation_offset(4, 2, 15, f.end_offset_for_epoch, 30, 5) == (15, True)


def test_truncation_undefined_falls_back_to_hw():
    f = Cache([(1, 0)], 10)
    assert truncation_offset(1, -1, -1, f.end_offset_for_epoch, 10, 6) == (6, True)


def test_byte_marks():
    m = ByteMarks(capacity=8)
    m.reset(100)
    assert m.bytes_between(100, 100) == 0
    m.record(110, 1000)
    m.record(120, 500)
    assert m.bytes_between(100, 110) == 1000
    assert m.bytes_between(100, 120) == 1500
    assert m.bytes_between(110, 120) == 500
    assert m.bytes_between(115, 120) == 500  # a fetch from inside a batch counts from its start
    assert m.bytes_between(50, 120) == ByteMarks.PLENTY  # older than what we track
    for i in range(20):
        m.record(130 + i * 10, 10)
    assert m.bytes_between(100, 300) == ByteMarks.PLENTY  # fell out of the window
