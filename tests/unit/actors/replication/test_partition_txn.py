"""The leader Partition's transaction side: markers (WriteTxnMarkers), producers, read_committed reads."""

from __future__ import annotations

from actors.replication.partition import Partition
from actors.replication.partition_state import LeaderHwChange
from protocol.control_messages import LeaderAndIsrPartitionState
from protocol.messages import READ_COMMITTED, READ_UNCOMMITTED
from storage.log import Log, LogConfig
from storage.records import RecordBatchBuilder


def leader(tmp_path, isr=(1, 2)) -> Partition:
    p = Partition(1, Log(str(tmp_path / "t-0"), LogConfig(), now_ms=0), "t", 0)
    state = LeaderAndIsrPartitionState(
        topic="t", partition=0, controller_epoch=1, leader=1, leader_epoch=3, isr=isr, partition_epoch=0, replicas=isr
    )
    p.make_leader(state, 0)
    return p


def txn_batch(pid: int, seq: int, values) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
    for v in values:
        b.append(1000, None, v)
    return b.build()


def test_a_marker_wakes_followers_even_when_the_hw_does_not_move(tmp_path):
    p = leader(tmp_path)  # a follower in the ISR: the HW cannot move before it fetches
    p.append_records_to_leader(txn_batch(7, 0, [b"a", b"b"]), -1, 1000)
    assert p.in_open_transaction(7)
    info, change = p.append_txn_marker(7, 0, True, 0, 1001)
    assert change is LeaderHwChange.SAME  # new data: the fetch purgatory must be told (NONE would not)
    assert info.first_offset == 2 and not p.in_open_transaction(7)
    assert [d["current_txn_start_offset"] for d in p.describe_producers()] == [-1]


def test_read_committed_stops_at_the_lso_and_lists_aborted_transactions(tmp_path):
    p = leader(tmp_path, isr=(1,))  # alone in the ISR: the HW follows the LEO
    p.append_records_to_leader(txn_batch(7, 0, [b"x"]), -1, 1000)  # offset 0, aborted below
    p.append_txn_marker(7, 0, False, 0, 1001)  # offset 1
    p.append_records_to_leader(txn_batch(8, 0, [b"open"]), -1, 1002)  # offset 2, still open
    committed = p.read(0, 1 << 20, -1, READ_COMMITTED, -1)
    assert committed.last_stable_offset == 2 and committed.next_offset == 2
    assert committed.aborted_transactions == ((7, 0),)
    uncommitted = p.read(0, 1 << 20, -1, READ_UNCOMMITTED, -1)
    assert uncommitted.next_offset == 3 and uncommitted.aborted_transactions is None
    assert p.describe_producers()[1]["current_txn_start_offset"] == 2
