"""Pure replication logic: follower progress, HW, ISR decisions, epoch truncation, byte marks."""

from __future__ import annotations

import pytest

from actors.replication.partition_state import (
    FOLLOWER,
    LEADER,
    NEW,
    STOPPED,
    ByteMarks,
    FollowerProgress,
    LeaderState,
    check_transition,
    truncation_offset,
)


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
    ls.on_follower_fetch(2, 10, 20, 1100)  # asked for 10, leader had 20: not caught up now
    ls.on_follower_fetch(2, 20, 20, 1200)  # caught up
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
    assert not ls.can_join_isr(3, 40)  # below the epoch start offset
    ls.on_follower_fetch(3, 55, 60, 1002)
    assert not ls.can_join_isr(3, 58)  # below the HW
    assert ls.can_join_isr(3, 55)
    assert not ls.can_join_isr(2, 0)  # already in the ISR
    assert not ls.can_join_isr(4, 0)  # not assigned
    ls.propose((1, 2, 3))
    assert not ls.can_join_isr(3, 55)  # already being added
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


# ---- Partition: the replication core over a real Log on a temp dir, no Ray ----------------------------
from actors.replication.partition import Partition  # noqa: E402
from actors.replication.partition_state import AlterPartitionProposal, LeaderHwChange  # noqa: E402
from protocol import errors as E  # noqa: E402
from protocol.control_messages import AlterPartitionResponse, LeaderAndIsrPartitionState  # noqa: E402
from storage.log import Log, LogConfig  # noqa: E402
from storage.records import RecordBatchBuilder  # noqa: E402


def batch(n=1, pid=-1, seq=-1, epoch=-1):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
    for i in range(n):
        b.append(1000 + i, b"k", b"v%d" % i)
    return b.build()


def state(leader_id=1, epoch=1, isr=(1, 2, 3), replicas=(1, 2, 3), pe=1):
    return LeaderAndIsrPartitionState(
        topic="t",
        partition=0,
        controller_epoch=1,
        leader=leader_id,
        leader_epoch=epoch,
        isr=isr,
        partition_epoch=pe,
        replicas=replicas,
        topic_id="tid",
    )


@pytest.fixture
def part(tmp_path):
    made = []

    def make(broker_id=1, min_isr=1, name=None):
        lg = Log(str(tmp_path / (name or f"b{broker_id}") / "t-0"), LogConfig(min_insync_replicas=min_isr), now_ms=0)
        p = Partition(broker_id, lg, "t", 0)
        made.append(lg)
        return p

    yield make
    for lg in made:
        lg.close()


def test_partition_leader_and_isr_application(part):
    p = part()
    assert p.stale_reason(state()) is None
    new_epoch, change = p.make_leader(state(), 0)
    assert new_epoch and change is LeaderHwChange.NONE and p.generation == 1
    assert p.topic_id == "tid" and p.isr == (1, 2, 3) and p.log.latest_epoch == 1
    assert p.stale_reason(state()) == "leader epoch 1 is not newer than the current one"
    assert "< current" in p.stale_reason(state(epoch=0, pe=9))
    # same epoch, newer partition epoch: an ISR update, follower progress and generation kept
    new_epoch, _ = p.make_leader(state(isr=(1, 2), pe=2), 10)
    assert not new_epoch and p.generation == 1 and p.isr == (1, 2)
    assert p.make_follower(state(leader_id=2, epoch=2, pe=3)) and p.generation == 2
    assert p.leader_state is None
    assert not p.make_follower(state(leader_id=2, epoch=2, pe=4))  # partition epoch only
    assert p.stop() and not p.stop()
    assert p.stale_reason(state(epoch=9, pe=9)) == "replica is stopped"


def test_partition_check_leader(part):
    p = part()
    assert isinstance(p.check_leader(-1), E.NotLeaderOrFollowerError)
    p.make_leader(state(epoch=3), 0)
    assert p.check_leader(-1) is None and p.check_leader(3) is None
    assert isinstance(p.check_leader(2), E.FencedLeaderEpochError)
    assert isinstance(p.check_leader(4), E.UnknownLeaderEpochError)


def test_partition_append_returns_leader_hw_change(part):
    p = part()
    p.make_leader(state(isr=(1,), replicas=(1, 2)), 0)
    info, change = p.append_records_to_leader(batch(3), 1, 5)
    assert change is LeaderHwChange.INCREASED and p.log.high_watermark == 3 and info.first_offset == 0
    q = part(broker_id=1, name="q")
    q.make_leader(state(), 0)  # followers unknown: the HW cannot move
    _, change = q.append_records_to_leader(batch(2), 1, 5)
    assert change is LeaderHwChange.SAME and q.log.high_watermark == 0
    # an idempotent retry writes nothing
    _, change = q.append_records_to_leader(batch(1, pid=7, seq=0), 1, 6)
    assert change is LeaderHwChange.SAME
    info, change = q.append_records_to_leader(batch(1, pid=7, seq=0), 1, 7)
    assert info.duplicate and change is LeaderHwChange.NONE


def test_partition_acks_all_needs_min_isr(part):
    p = part(min_isr=2)
    p.make_leader(state(isr=(1,)), 0)
    with pytest.raises(E.NotEnoughReplicasError):
        p.append_records_to_leader(batch(), -1, 0)
    _, change = p.append_records_to_leader(batch(), 1, 0)  # acks=1 still appends
    assert change is LeaderHwChange.INCREASED


def test_partition_follower_fetches_move_hw_and_expand_isr(part):
    p = part()
    p.make_leader(state(isr=(1, 2), replicas=(1, 2, 3)), 0)
    p.append_records_to_leader(batch(4), 1, 0)
    assert p.update_follower_fetch_state(2, 2, 10) == (LeaderHwChange.INCREASED, None)
    assert p.log.high_watermark == 2
    assert p.update_follower_fetch_state(2, 2, 11) == (LeaderHwChange.NONE, None)
    change, proposal = p.update_follower_fetch_state(3, 4, 12)  # b3 caught up past the HW
    assert change is LeaderHwChange.NONE
    assert proposal == AlterPartitionProposal((1, 2, 3), 1, 1, "b3 caught up")
    assert p.leader_state.pending_isr == (1, 2, 3)
    # HW uses the maximal ISR: b2 moves to 4 but b3 (pending) is at 4 too
    change, proposal = p.update_follower_fetch_state(2, 4, 13)
    assert change is LeaderHwChange.INCREASED and proposal is None and p.log.high_watermark == 4
    assert p.apply_isr((1, 2, 3), 2, 14) is LeaderHwChange.NONE
    assert p.isr == (1, 2, 3) and p.partition_epoch == 2 and p.leader_state.pending_isr is None
    with pytest.raises(E.OffsetOutOfRangeError):
        p.update_follower_fetch_state(2, 5, 15)


def test_partition_shrink_apply_and_refusal(part):
    p = part()
    p.make_leader(state(), 0)
    p.append_records_to_leader(batch(2), 1, 0)
    p.update_follower_fetch_state(2, 2, 100)
    assert p.maybe_shrink_isr(200, 500) is None  # b3 gets one lag period from the election
    proposal = p.maybe_shrink_isr(600, 500)
    assert proposal.new_isr == (1, 2) and "[3]" in proposal.reason
    assert p.maybe_shrink_isr(700, 500) is None  # one change in flight at a time
    # the maximal ISR (committed | pending) still holds b3, so the HW waits for it
    assert p.log.high_watermark == 0
    assert p.apply_isr((1, 2), 0, 800) is None  # older partition epoch: dropped
    assert p.leader_state.pending_isr is None and p.isr == (1, 2, 3)
    p.maybe_shrink_isr(900, 500)
    assert p.apply_isr((1, 2), 2, 900) is LeaderHwChange.INCREASED and p.log.high_watermark == 2
    # a refusal carrying a newer ISR for this epoch is adopted; one without is just dropped
    p.leader_state.propose((1,))
    assert p.alter_partition_refused(AlterPartitionResponse(error_code=1), 950) is None
    assert p.leader_state.pending_isr is None
    p.leader_state.propose((1,))
    refusal = AlterPartitionResponse(error_code=1, leader=1, leader_epoch=1, isr=(1, 2, 3), partition_epoch=5)
    change = p.alter_partition_refused(refusal, 960)
    assert change is LeaderHwChange.NONE and p.isr == (1, 2, 3) and p.partition_epoch == 5


def test_partition_reads_and_list_offsets(part):
    p = part()
    p.make_leader(state(isr=(1, 2)), 0)
    for _ in range(3):  # one-record batches: reads and truncation work in whole batches
        p.append_records_to_leader(batch(1), 1, 0)
    p.update_follower_fetch_state(2, 1, 1)
    consumer = p.read(0, 1 << 20, -1, 0, -1)
    assert consumer.high_watermark == 1 and consumer.next_offset == 1 and consumer.records
    assert consumer.log_end_offset is None
    empty = p.read(1, 1 << 20, -1, 0, -1)  # at the HW: nothing for a consumer
    assert empty.records == b"" and empty.next_offset == 1
    follower = p.read(1, 1 << 20, 2, 0, 1)
    assert follower.records and follower.next_offset == 3 and follower.log_end_offset == 3
    assert follower.leader_epoch == 1
    # minOneMessage: the first batch goes whole over max_bytes (and nothing after it); without it, nothing
    assert p.read(1, 1, 2, 0, 1).next_offset == 2
    over = p.read(1, 1, 2, 0, 1, one=False)
    assert over.records == b"" and over.next_offset == 1 and over.high_watermark == 1
    with pytest.raises(E.OffsetOutOfRangeError):
        p.read(4, 100, -1, 0, -1)
    with pytest.raises(E.FencedLeaderEpochError):
        p.read(0, 100, -1, 0, 0)
    assert p.list_offset(-2, 0) == (0, -1, 1)
    assert p.list_offset(-1, 0) == (1, -1, 1)
    assert p.list_offset(1001, 0) == (-1, -1, -1)  # no record stamped 1001 or later
    assert p.list_offset(1000, 0)[0] == 0
    # a new leader whose HW is below its epoch start offset cannot answer LATEST
    q = part(broker_id=1, name="q")
    q.make_leader(state(), 0)
    q.append_records_to_leader(batch(2), 1, 0)
    q.make_leader(state(epoch=2, pe=2), 0)
    with pytest.raises(E.OffsetNotAvailableError):
        q.list_offset(-1, 0)


def test_partition_follower_side(part):
    leader, follower = part(1), part(2)
    leader.make_leader(state(), 0)
    follower.make_follower(state())
    for _ in range(3):
        leader.append_records_to_leader(batch(1), 1, 0)
    resp = leader.read(0, 1 << 20, 2, 0, 1)
    follower.append_as_follower(resp.records, 10, 0)  # the leader's HW is capped at our LEO
    assert follower.log.log_end_offset == 3 and follower.log.high_watermark == 3
    assert follower.offset_out_of_range_truncation(2, 0) == (2, False)
    assert follower.offset_out_of_range_truncation(5, 0) is None
    assert follower.offset_out_of_range_truncation(5, 7) == (7, True)
    assert follower.truncate_to(2) and not follower.truncate_to(2)
    assert follower.log.log_end_offset == 2 and follower.marks.bytes_between(2, 2) == 0
    follower.restart_log_at(7)
    assert follower.log.log_start_offset == follower.log.log_end_offset == 7


def test_partition_truncation_after_leader_change(part):
    # b1 leads epoch 1 and writes 3 records, b2 copies 2; b2 leads epoch 2 and writes 2 more
    b1, b2 = part(1), part(2)
    b1.make_leader(state(), 0)
    b2.make_follower(state())
    for _ in range(3):
        b1.append_records_to_leader(batch(1), 1, 0)
    b2.append_as_follower(b1.read(0, 1 << 20, 2, 0, 1).records, 0, 0)
    b2.truncate_to(2)
    b2.make_leader(state(leader_id=2, epoch=2, pe=2), 0)
    b2.append_records_to_leader(batch(2), 1, 0)
    b1.make_follower(state(leader_id=2, epoch=2, pe=2))
    requested = b1.log.latest_epoch
    epoch, end = b2.log.end_offset_for_epoch(requested)
    assert (epoch, end) == (1, 2)
    offset, done = b1.truncation_after_epoch(requested, epoch, end)
    assert (offset, done) == (2, True)
    assert b1.truncate_to(offset) and b1.log.log_end_offset == 2


def test_follower_drops_an_empty_epoch_it_led_so_truncation_converges(part):
    # b0 led epoch 1 (one record), then epoch 5 without appending; b1 led epoch 4 and then 7.
    b0, b1 = part(0), part(1)
    b0.make_leader(state(leader_id=0, epoch=1), 0)
    b0.append_records_to_leader(batch(1), 1, 0)
    b0.make_leader(state(leader_id=0, epoch=5, pe=2), 0)  # epoch 5 starts at 1, nothing appended
    b1.make_leader(state(leader_id=1, epoch=4, pe=3), 0)
    b1.append_records_to_leader(batch(1), 1, 0)
    b1.make_leader(state(leader_id=1, epoch=7, pe=4), 0)
    b0.make_follower(state(leader_id=1, epoch=7, pe=4))
    assert b0.log.latest_epoch == 5
    for _ in range(5):  # the ReplicaFetcher's OffsetForLeaderEpoch loop
        requested = b0.log.latest_epoch
        offset, done = b0.truncation_after_epoch(requested, *b1.log.end_offset_for_epoch(requested))
        b0.truncate_to(offset)
        if done:
            break
    assert done and b0.log.log_end_offset == 0  # b0's epoch-1 record was never on b1: it goes


def test_a_session_watch_wakes_its_session_on_data_on_a_move_and_on_shutdown_never_by_itself(part):
    """``SessionWatch`` (a follower session's wait on one partition, actors/replication/replica_manager.py): no timer, nothing
    read; it resolves the session's future when data comes past the follower's offset, when the partition moves on
    (a LeaderAndIsr: ``role_changed``) and when the replica stops (``stop_partition``), as a DelayedFetch answers."""
    import asyncio

    from actors.replication.replica_manager import ReplicaManager, SessionWatch
    from protocol.messages import FetchRequest

    async def go():
        p = part()
        p.make_leader(state(isr=(1,), replicas=(1, 2)), 0)
        rm = ReplicaManager(1)
        loop = asyncio.get_running_loop()
        out = {}
        for case in ("data", "move", "shutdown"):
            wake = loop.create_future()
            op = rm.watch_fetch(SessionWatch(p, FetchRequest(p.log.log_end_offset, 1 << 20, 500, 1, 2, -1), wake))
            await asyncio.sleep(0.6)  # past its max wait: no timer completes it
            waited = wake.done()
            if case == "data":
                _, change = p.append_records_to_leader(batch(2), 1, 5)
                rm.complete_delayed_requests(p, change)
            elif case == "move":
                p.make_leader(state(isr=(1,), replicas=(1, 2), epoch=2, pe=2), 0)
                rm.role_changed(p)
            else:
                rm.stop_partition(p)
            out[case] = (waited, wake.done(), op.completed, op._timer is None)
        return out

    out = asyncio.run(go())
    assert out == {c: (False, True, True, True) for c in ("data", "move", "shutdown")}


def test_one_replica_manager_holds_a_brokers_partitions_and_keys_their_delayed_operations_by_partition(tmp_path):
    """The ReplicaManager is the broker's (one per process, as a ReplicaHost holds many of its replicas): an
    acks=all produce waits under its own partition, a HW move on another partition completes nothing of it, and
    StopReplica of one partition answers only that partition's waits."""
    import asyncio

    from actors.replication.replica_manager import DelayedProduce, ReplicaManager

    async def go():
        rm = ReplicaManager(1)
        parts = []
        for n in (0, 1):
            lg = Log(str(tmp_path / f"t-{n}"), LogConfig(min_insync_replicas=1), now_ms=0)
            p = Partition(1, lg, "t", n)
            p.make_leader(state(isr=(1, 2), replicas=(1, 2)), 0)
            rm.add_partition(p)
            parts.append(p)
        p0, p1 = parts
        waits = []
        for p in parts:
            info, change = p.append_records_to_leader(batch(1), -1, 5)
            rm.complete_delayed_requests(p, change)
            op = DelayedProduce(p, 30000, info.last_offset + 1, {"error_code": 0})
            waits.append(asyncio.ensure_future(rm.wait_produce(op)))
        await asyncio.sleep(0)
        counted = (rm.delayed(p0), rm.delayed(p1))
        # b2 catches up on p1 only: p1's HW moves, p0's produce keeps waiting
        change, _ = p1.update_follower_fetch_state(2, p1.log.log_end_offset, 10)
        rm.complete_delayed_requests(p1, change)
        await asyncio.sleep(0)
        after_hw = (waits[0].done(), waits[1].done() and waits[1].result()["error_code"])
        p0.stop()
        rm.stop_partition(p0)
        await asyncio.sleep(0)
        stopped = waits[0].result()["error_code"]
        for p in parts:
            p.log.close()
        return counted, after_hw, stopped, sorted(rm.partitions)

    counted, after_hw, stopped, left = asyncio.run(go())
    assert counted == ((1, 0), (1, 0))
    assert after_hw == (False, 0)
    assert stopped == E.NotLeaderOrFollowerError.code
    assert left == [("t", 1)]
