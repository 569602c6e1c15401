"""Who may commit offsets, OffsetCommit and TxnOffsetCommit side by side (Kafka 4's OffsetMetadataManager
validateOffsetCommit / validateTransactionalOffsetCommit over ClassicGroup.validateOffsetCommit), and the
leader epoch a transactional commit keeps through its marker and a reload."""

from __future__ import annotations

from group_harness import Harness
from test_group_state import stable_group

from actors.group.offsets import OffsetManager
from actors.group.records import EndTxnMarker
from actors.group.shard import GroupCoordinatorShard, GroupState
from protocol import errors as E

S = GroupState
NONE = 0
ILLEGAL_GENERATION = E.IllegalGenerationError.code  # 22
UNKNOWN_MEMBER_ID = E.for_name("UNKNOWN_MEMBER_ID").code  # 25
REBALANCE_IN_PROGRESS = E.for_name("REBALANCE_IN_PROGRESS").code  # 27
FENCED_INSTANCE_ID = E.for_name("FENCED_INSTANCE_ID").code  # 82
GROUP_ID_NOT_FOUND = E.for_name("GROUP_ID_NOT_FOUND").code  # 69
COORDINATOR_NOT_AVAILABLE = E.for_name("COORDINATOR_NOT_AVAILABLE").code  # 15
PID = 7


def txn_commit(h: Harness, offsets: dict, producer_id: int = PID, group: str = "g", epoch: int = 3, **kw) -> dict:
    topics: dict[str, list] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": epoch, "committed_metadata": ""}
        )
    resp = h.apply(
        h.shard.txn_offset_commit(
            group, [{"name": t, "partitions": ps} for t, ps in topics.items()], producer_id, 0, **kw
        )
    )
    return {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}


def fetch(h: Harness, group: str = "g") -> dict:
    resp = h.shard.offset_fetch(group, None)
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["committed_leader_epoch"])
        for t in resp["topics"]
        for p in t["partitions"]
    }


def test_a_transactional_commit_without_member_fields_is_accepted_while_the_group_has_members():
    """aiokafka's TxnOffsetCommit v0 (and kafkajs's v1) carry no member id or generation: Kafka accepts them
    into a Stable group; a plain OffsetCommit without them is refused (only members commit into a live group)."""
    h = Harness()
    a, b = stable_group(h, "a", "b")
    assert h.commit({("t", 0): 1}) == {("t", 0): UNKNOWN_MEMBER_ID}
    assert txn_commit(h, {("t", 0): 5, ("t", 1): 6}) == {("t", 0): NONE, ("t", 1): NONE}
    assert h.shard.pending_transactions() == {PID: 2} and fetch(h) == {}
    h.apply(h.shard.complete_transaction(PID, committed=True))
    assert fetch(h) == {("t", 0): (5, 3), ("t", 1): (6, 3)}
    assert set(h.group().members) == {a, b} and h.group().state is S.STABLE  # the group is left as it was


def test_a_transactional_commit_with_member_fields_is_validated_kip_447():
    """TxnOffsetCommit v3+ names the member: an unknown member, a stale generation and a fenced static
    instance are refused as for OffsetCommit; the current member's commit is accepted."""
    h = Harness()
    a, _b = stable_group(h, "a", "b")
    gen = h.group().generation_id
    assert txn_commit(h, {("t", 0): 1}, member_id="ghost", generation_id=gen) == {("t", 0): UNKNOWN_MEMBER_ID}
    assert txn_commit(h, {("t", 0): 1}, member_id=a, generation_id=gen - 1) == {("t", 0): ILLEGAL_GENERATION}
    assert txn_commit(h, {("t", 0): 1}, member_id=a, generation_id=-1) == {("t", 0): ILLEGAL_GENERATION}
    assert txn_commit(h, {("t", 0): 1}, member_id=a, generation_id=gen, group_instance_id="x") == {
        ("t", 0): UNKNOWN_MEMBER_ID
    }
    assert h.shard.pending_transactions() == {}
    assert txn_commit(h, {("t", 0): 1}, member_id=a, generation_id=gen) == {("t", 0): NONE}

    s = Harness()
    (static,) = stable_group(s, "s", instances=["inst-1"])
    sgen = s.group().generation_id
    assert txn_commit(s, {("t", 0): 1}, member_id="other", generation_id=sgen, group_instance_id="inst-1") == {
        ("t", 0): FENCED_INSTANCE_ID
    }
    assert txn_commit(s, {("t", 0): 1}, member_id=static, generation_id=sgen, group_instance_id="inst-1") == {
        ("t", 0): NONE
    }


def test_completing_rebalance_holds_back_plain_commits_only():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.join(a, protocols=(("range", b"v2"),))
    h.join(b)
    g = h.group()
    assert g.state is S.COMPLETING_REBALANCE
    assert h.commit({("t", 0): 3}, member_id=b, generation=g.generation_id) == {("t", 0): REBALANCE_IN_PROGRESS}
    assert txn_commit(h, {("t", 0): 3}, member_id=b, generation_id=g.generation_id) == {("t", 0): NONE}
    assert txn_commit(h, {("t", 1): 4}, producer_id=PID + 1) == {("t", 1): NONE}


def test_unknown_groups_and_dead_groups():
    """An unknown group: generation -1 commits into a new simple group (both APIs); a generation is refused
    with ILLEGAL_GENERATION, or GROUP_ID_NOT_FOUND for OffsetCommit v9+ (TxnOffsetCommit always 22)."""
    v = OffsetManager.validate_commit
    assert v(None, "", -1, None) == NONE
    assert v(None, "", -1, None, transactional=True) == NONE
    assert v(None, "m", 3, None, api_version=8) == ILLEGAL_GENERATION
    assert v(None, "m", 3, None, api_version=9) == GROUP_ID_NOT_FOUND
    assert v(None, "m", 3, None) == ILLEGAL_GENERATION  # rafka's own clients (no wire version)
    assert v(None, "m", 3, None, transactional=True, api_version=9) == ILLEGAL_GENERATION

    h = Harness()
    assert txn_commit(h, {("t", 0): 9}, group="fresh") == {("t", 0): NONE}
    h.apply(h.shard.complete_transaction(PID, committed=True))
    assert fetch(h, "fresh") == {("t", 0): (9, 3)}
    empty = h.group("fresh")
    assert empty is not None and empty.state is S.EMPTY
    for transactional in (False, True):
        assert v(empty, "", -1, None, transactional=transactional) == NONE
        assert v(empty, "m", 0, None, transactional=transactional) == UNKNOWN_MEMBER_ID
    dead = empty.clone()
    dead.transition_to(S.DEAD, 0)
    for transactional in (False, True):
        assert v(dead, "", -1, None, transactional=transactional) == COORDINATOR_NOT_AVAILABLE


def test_the_committed_leader_epoch_survives_the_marker_and_a_reload():
    """TxnOffsetCommit's committed_leader_epoch is stored as OffsetCommit's is: in the pending record, applied
    by the COMMIT marker, and read back from the partition's bytes by a new coordinator."""
    h = Harness()
    res = h.shard.txn_offset_commit(
        "g",
        [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 60, "committed_leader_epoch": 4}]}],
        PID,
        1000,
    )
    h.apply(res)
    h.apply(h.shard.complete_transaction(PID, committed=True))
    assert fetch(h) == {("t", 0): (60, 4)}
    fresh = GroupCoordinatorShard(h.shard.config)
    fresh.load([*((r.key_bytes(), r.value_bytes(), PID) for r in res.records), EndTxnMarker(PID, True)], 2000)
    part = fresh.offset_fetch("g", [{"name": "t", "partition_indexes": [0]}])["topics"][0]["partitions"][0]
    assert (part["committed_offset"], part["committed_leader_epoch"]) == (60, 4)
