"""What the group shard does around an offset commit beyond validating it:
- a partition the cluster does not have answers UNKNOWN_TOPIC_OR_PARTITION (3) and is not stored (Kafka's
  KafkaApis.handleOffsetCommitRequest / handleTxnOffsetCommitRequest check, done by rafka's coordinator for
  every client: ``existing``); nothing else left: the group is not looked at;
- an accepted OffsetCommit of a member of a Stable or PreparingRebalance group is its heartbeat (Kafka's
  OffsetMetadataManager.commitOffset -> GroupMetadataManager.rescheduleClassicGroupMemberHeartbeat);
- the coordinator's view of the existing partitions (actors/coordinator/partition_view.py) and the error answer
  that keeps UNKNOWN_TOPIC_OR_PARTITION on the unknown partitions."""

from __future__ import annotations

from group_harness import SESSION, Harness
from test_group_state import stable_group

from actors.coordinator.partition_view import PartitionView
from actors.group import service as svc
from actors.group.shard import GroupState

S = GroupState
UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, NOT_COORDINATOR = 3, 22, 16
EXISTING = {("t", 0), ("t", 1), ("u", 0)}


def committed(h: Harness, group: str = "g") -> dict:
    return {tp: v.offset for tp, v in h.shard.committed_offsets(group).items()}


def test_unknown_partitions_answer_unknown_topic_or_partition_and_are_not_stored():
    h = Harness()
    (a,) = stable_group(h, "a")
    got = h.commit({("t", 0): 5, ("t", 7): 6, ("nope", 0): 7}, member_id=a, generation=1, existing=EXISTING)
    assert got == {("t", 0): 0, ("t", 7): UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert committed(h) == {("t", 0): 5}
    # the group's own error goes on the known partitions only
    got = h.commit({("t", 1): 8, ("nope", 0): 9}, member_id=a, generation=0, existing=EXISTING)
    assert got == {("t", 1): ILLEGAL_GENERATION, ("nope", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert committed(h) == {("t", 0): 5}
    h.check_replay_equivalence()


def test_nothing_known_to_commit_leaves_the_group_alone():
    h = Harness()
    # a simple consumer's commit creates its group only when something is committed
    assert h.commit({("nope", 0): 1}, group="simple", existing=EXISTING) == {("nope", 0): 3}
    assert h.group("simple") is None and committed(h, "simple") == {}
    assert h.log == [] or all(not r.durable for r in h.log)
    # a stale member is not told ILLEGAL_GENERATION: the coordinator is not asked (Kafka's KafkaApis)
    (a,) = stable_group(h, "a")
    assert h.commit({("nope", 0): 1, ("t", 9): 2}, member_id=a, generation=0, existing=EXISTING) == {
        ("nope", 0): 3,
        ("t", 9): 3,
    }
    # without ``existing`` nothing is checked (the shard's own callers, e.g. tests and loads)
    assert h.commit({("nope", 0): 1}, group="simple") == {("nope", 0): 0}


def test_a_members_commits_keep_its_session_alive():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    for _ in range(4):  # 4 x 0.8 sessions: only b heartbeats, a only commits
        h.advance(SESSION * 8 // 10)
        assert h.heartbeat(b, 1) == 0
        assert h.commit({("t", 0): 1}, member_id=a, generation=1, existing=EXISTING) == {("t", 0): 0}
    g = h.group()
    assert g.state is S.STABLE and g.has_member(a) and g.has_member(b)
    # a's last commit counted as of its time: a full session later it is gone, as after a last heartbeat
    h.advance(SESSION * 8 // 10)
    assert h.heartbeat(b, 1) == 0 and h.group().has_member(a)
    h.advance(SESSION * 3 // 10)
    assert h.heartbeat(b, 1) == 27  # the group rebalances: a expired
    assert not h.group().has_member(a)


def test_only_an_accepted_commit_of_a_member_is_a_heartbeat():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.advance(SESSION * 8 // 10)
    h.heartbeat(b, 1)
    assert h.commit({("t", 0): 1}, member_id=a, generation=0, existing=EXISTING) == {("t", 0): ILLEGAL_GENERATION}
    assert h.commit({("nope", 0): 1}, member_id=a, generation=1, existing=EXISTING) == {("nope", 0): 3}
    h.advance(SESSION * 3 // 10)
    assert not h.group().has_member(a)  # neither the refused nor the unknown-only commit kept a


def test_a_commit_during_preparing_rebalance_keeps_the_session_but_a_txn_commit_does_not():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.join(b, protocols=(("range", b"v2"),))  # b rejoins: PreparingRebalance, a has not rejoined yet
    assert h.group().state is S.PREPARING_REBALANCE
    before = h.group().member(a).heartbeat_deadline_ms
    h.now += 1000
    assert h.commit({("t", 0): 3}, member_id=a, generation=1, existing=EXISTING) == {("t", 0): 0}
    assert h.group().member(a).heartbeat_deadline_ms == h.now + SESSION > before
    # TxnOffsetCommit: Kafka's commitTransactionalOffset reschedules nothing
    h.now += 1000
    deadline = h.group().member(a).heartbeat_deadline_ms
    resp = h.apply(
        h.shard.txn_offset_commit(
            "g",
            [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 4}]}],
            7,
            h.now,
            member_id=a,
            generation_id=1,
            existing=EXISTING,
        )
    )
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    assert h.group().member(a).heartbeat_deadline_ms == deadline


def test_a_txn_commit_to_an_unknown_partition_answers_unknown_and_is_not_pending():
    h = Harness()
    resp = h.apply(
        h.shard.txn_offset_commit(
            "g",
            [{"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 4}]}],
            7,
            h.now,
            existing=EXISTING,
        )
    )
    assert resp["topics"][0]["partitions"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert h.shard.pending_transactions() == {}


def test_the_error_answer_keeps_unknown_topic_or_partition_on_the_unknown_partitions():
    topics = [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 5}]}]
    out = svc.offset_commit_error(topics, NOT_COORDINATOR, "not here", EXISTING)
    assert [p["error_code"] for p in out["topics"][0]["partitions"]] == [NOT_COORDINATOR, UNKNOWN_TOPIC_OR_PARTITION]
    out = svc.offset_commit_error(topics, NOT_COORDINATOR, "not here")
    assert [p["error_code"] for p in out["topics"][0]["partitions"]] == [NOT_COORDINATOR] * 2


def test_partition_view_reads_unknown_and_stale_topics_and_caches_existing_ones():
    v = PartitionView(max_age_ms=1000)
    asked = {("t", 0), ("t", 2), ("gone", 0)}
    assert v.to_read(asked, 0) == ["gone", "t"]
    v.update(["gone", "t"], {"t": {"name": "t", "partitions": {"0": {}, "1": {}}}}, 0)
    assert v.existing(asked) == {("t", 0)}
    assert v.to_read({("t", 0), ("t", 1)}, 500) == []  # cached
    assert v.to_read({("t", 2)}, 500) == ["t"]  # a partition it lacks: read again (the topic may have grown)
    assert v.to_read({("gone", 0)}, 500) == ["gone"]  # an absent topic is not cached: it may be created
    assert v.to_read({("t", 0)}, 1000) == ["t"]  # stale
    v.update(["t"], {}, 1000)  # deleted since
    assert v.existing({("t", 0)}) == set()
