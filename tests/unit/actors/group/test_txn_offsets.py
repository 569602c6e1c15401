"""TxnOffsetCommit in the group shard: offsets pending per producer until the transaction's marker."""

from __future__ import annotations

import pytest

from actors.group.classic_group import GroupCoordinatorConfig
from actors.group.records import EndTxnMarker
from actors.group.shard import GroupCoordinatorShard
from protocol import errors as E

T = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42}]}]
T2 = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 50}]}]


def offset(shard, group="g") -> int:
    res = shard.offset_fetch(group, [{"name": "t", "partition_indexes": [0]}])
    return res["topics"][0]["partitions"][0]["committed_offset"]


def apply(shard, result):
    shard.replay_all(result.records)
    return result.response


def test_pending_offsets_appear_only_on_commit():
    s = GroupCoordinatorShard(GroupCoordinatorConfig())
    res = s.txn_offset_commit("g", T, 7, 1000)
    assert res.response["topics"][0]["partitions"][0]["error_code"] == 0
    assert all(r.producer_id == 7 and r.durable for r in res.records)
    apply(s, res)
    assert offset(s) == -1 and s.pending_transactions() == {7: 1}
    apply(s, s.complete_transaction(7, committed=True))
    assert offset(s) == 42 and s.pending_transactions() == {}
    assert "g" in s.group_ids()  # committing offsets creates the (simple) group, as a plain commit does


def test_abort_drops_pending_offsets_and_other_producers_are_independent():
    s = GroupCoordinatorShard(GroupCoordinatorConfig())
    apply(s, s.offset_commit("g", T, 1000))
    apply(s, s.txn_offset_commit("g", T2, 7, 1000))
    apply(s, s.txn_offset_commit("h", T2, 8, 1000))
    apply(s, s.complete_transaction(7, committed=False))
    assert offset(s) == 42 and offset(s, "h") == -1
    apply(s, s.complete_transaction(8, committed=True))
    assert offset(s, "h") == 50
    apply(s, s.complete_transaction(9, committed=True))  # a marker for a producer with nothing pending
    assert offset(s) == 42


def test_load_replays_transactional_records_and_markers_in_log_order():
    s = GroupCoordinatorShard(GroupCoordinatorConfig())
    committed = s.txn_offset_commit("g", T, 7, 1000).records
    aborted = s.txn_offset_commit("g", T2, 8, 1000).records
    log = [
        *[(r.key_bytes(), r.value_bytes(), 7) for r in committed],
        *[(r.key_bytes(), r.value_bytes(), 8) for r in aborted],
        EndTxnMarker(8, False),
        EndTxnMarker(7, True),
    ]
    fresh = GroupCoordinatorShard(GroupCoordinatorConfig())
    fresh.load(log, 2000)
    assert offset(fresh) == 42 and fresh.pending_transactions() == {}
    open_only = GroupCoordinatorShard(GroupCoordinatorConfig())
    open_only.load(log[:1], 2000)
    assert offset(open_only) == -1 and open_only.pending_transactions() == {7: 1}


def test_txn_offset_commit_needs_a_producer_and_validates_the_generation():
    s = GroupCoordinatorShard(GroupCoordinatorConfig())
    with pytest.raises(E.InvalidRequestError):
        s.txn_offset_commit("g", T, -1, 1000)
    res = s.txn_offset_commit("g", T, 7, 1000, member_id="m", generation_id=3)
    assert res.response["topics"][0]["partitions"][0]["error_code"] == E.IllegalGenerationError.code
    assert res.records == []


def test_require_stable_answers_unstable_offset_commit_while_a_transaction_is_open():
    s = GroupCoordinatorShard(GroupCoordinatorConfig())
    apply(s, s.offset_commit("g", T, 1000))
    apply(s, s.txn_offset_commit("g", T2, 7, 1000))
    want = [{"name": "t", "partition_indexes": [0]}]
    part = s.offset_fetch("g", want, require_stable=True)["topics"][0]["partitions"][0]
    assert part["error_code"] == E.UnstableOffsetCommitError.code and E.UnstableOffsetCommitError.retriable
    assert offset(s) == 42  # without require_stable: the last stable commit
    assert s.offset_fetch("h", want, require_stable=True)["topics"][0]["partitions"][0]["error_code"] == 0
    apply(s, s.complete_transaction(7, committed=True))
    part = s.offset_fetch("g", want, require_stable=True)["topics"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["committed_offset"] == 50
