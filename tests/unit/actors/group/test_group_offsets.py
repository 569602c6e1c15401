"""Committed offsets, DeleteGroups, offsets retention, and rebuilding a shard from __consumer_offsets."""

from __future__ import annotations

from group_harness import SESSION, Harness, config
from test_group_state import stable_group

from actors.group.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from actors.group.shard import GroupCoordinatorShard, GroupState, Pending

S = GroupState
DAY = 24 * 3600 * 1000


def fetch(h: Harness, group="g", topics=None) -> dict:
    resp = h.shard.offset_fetch(group, topics)
    assert resp["error_code"] == 0
    return {
        (t["name"], p["partition_index"]): (p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
        for t in resp["topics"]
        for p in t["partitions"]
    }


def test_member_commits_and_fetches():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.now = 777
    assert h.commit({("t", 0): 10, ("t", 1): 20, ("u", 0): 5}, member_id=a, generation=1) == {
        ("t", 0): 0,
        ("t", 1): 0,
        ("u", 0): 0,
    }
    assert fetch(h) == {("t", 0): (10, 3, "m10"), ("t", 1): (20, 3, "m20"), ("u", 0): (5, 3, "m5")}
    assert fetch(h, topics=[{"name": "t", "partition_indexes": [1, 7]}]) == {
        ("t", 1): (20, 3, "m20"),
        ("t", 7): (-1, -1, ""),
    }
    assert fetch(h, "unknown-group", [{"name": "t", "partition_indexes": [0]}]) == {("t", 0): (-1, -1, "")}
    assert h.shard.committed_offsets("g")[("t", 0)] == OffsetCommitValue(10, 3, "m10", 777)
    # Records are keyed per (group, topic, partition): the latest commit wins, as compaction keeps it.
    h.commit({("t", 0): 11}, member_id=b, generation=1)
    keys = [r.key for r in h.log if r.durable and isinstance(r.key, OffsetCommitKey)]
    assert keys.count(OffsetCommitKey("g", "t", 0)) == 2
    assert fetch(h)[("t", 0)][0] == 11
    h.check_replay_equivalence()


def test_commit_validation_follows_kafka():
    h = Harness()
    assert h.commit({("t", 0): 1}, member_id="m", generation=3, group="ghost") == {("t", 0): 22}
    a, b = stable_group(h, "a", "b")
    assert h.commit({("t", 0): 1}, member_id=a, generation=0) == {("t", 0): 22}
    assert h.commit({("t", 0): 1}, member_id="ghost", generation=1) == {("t", 0): 25}
    assert h.commit({("t", 0): 1}) == {("t", 0): 25}  # no member id/generation into a live group
    assert h.commit({("t", 0): 1}, member_id=a, generation=1, group_instance_id="x") == {("t", 0): 25}
    h.join(a, protocols=(("range", b"v2"),))  # PreparingRebalance: the old generation may still commit
    assert h.commit({("t", 0): 2}, member_id=b, generation=1) == {("t", 0): 0}
    h.join(b)
    assert h.group().state is S.COMPLETING_REBALANCE
    assert h.commit({("t", 0): 3}, member_id=b, generation=2) == {("t", 0): 27}
    big = Harness(offset_metadata_max_bytes=3)
    resp = big.apply(
        big.shard.offset_commit(
            "g",
            [
                {
                    "name": "t",
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": "four"},
                        {"partition_index": 1, "committed_offset": 1, "committed_metadata": "ok"},
                    ],
                }
            ],
            0,
        )
    )
    assert [p["error_code"] for p in resp["topics"][0]["partitions"]] == [12, 0]
    assert fetch(big) == {("t", 1): (1, -1, "ok")}


def test_simple_consumer_commit_creates_an_empty_group():
    h = Harness()
    assert h.commit({("t", 0): 42}, group="simple") == {("t", 0): 0}
    g = h.shard.group("simple")
    assert g.state is S.EMPTY and g.protocol_type is None and g.generation_id == 0
    assert h.commit({("t", 0): 43}, group="simple") == {("t", 0): 0}
    # A consumer group can later form over it.
    h.join("", group="simple")
    assert h.shard.group("simple").is_pending_member("c-u0")
    h.check_replay_equivalence()


def test_admin_reset_into_an_empty_group_with_generation_minus_one():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    assert h.commit({("t", 0): 0}) == {("t", 0): 25}  # not while members are active
    h.leave((a, None), (b, None))
    assert h.group().state is S.EMPTY
    assert h.commit({("t", 0): 0}) == {("t", 0): 0}


def test_offset_delete():
    h = Harness()
    assert h.shard.offset_delete("nope", [{"name": "t", "partitions": [0]}]).response["error_code"] == 69
    a, b = stable_group(h, "a", "b")
    h.commit({("t", 0): 1, ("u", 0): 2}, member_id=a, generation=1)
    # subscriptions here are not ConsumerProtocol bytes: the coordinator treats every topic as subscribed
    r = h.shard.offset_delete("g", [{"name": "t", "partitions": [{"partition_index": 0}]}])
    assert r.response["topics"][0]["partitions"][0]["error_code"] == 86 and r.records == []
    h.leave((a, None), (b, None))
    r = h.shard.offset_delete("g", [{"name": "t", "partitions": [0, 9]}])
    assert [p["error_code"] for p in r.response["topics"][0]["partitions"]] == [0, 0]
    assert [(x.key, x.value) for x in r.records] == [(OffsetCommitKey("g", "t", 0), None)]
    h.apply(r)
    assert fetch(h) == {("u", 0): (2, 3, "m2")}


def test_delete_groups():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.commit({("t", 0): 1, ("t", 1): 2}, member_id=a, generation=1)
    h.commit({("x", 0): 9}, group="simple")
    r = h.shard.delete_groups(["g", "nope", "simple", "simple"], h.now)
    assert r.response == {
        "results": [
            {"group_id": "g", "error_code": 68},
            {"group_id": "nope", "error_code": 69},
            {"group_id": "simple", "error_code": 0},
        ]
    }
    assert [(x.key, x.value) for x in r.records] == [
        (OffsetCommitKey("simple", "x", 0), None),
        (GroupMetadataKey("simple"), None),
    ]
    h.apply(r)
    assert h.shard.group("simple") is None and fetch(h, "simple") == {}
    h.leave((a, None), (b, None))
    h.apply(h.shard.delete_groups(["g"], h.now))
    assert h.shard.group_ids() == [] and h.shard.committed_offsets("g") == {}
    h.check_replay_equivalence()


def test_offsets_of_an_active_group_never_expire_and_of_an_empty_group_expire_after_retention():
    h = Harness(offsets_retention_minutes=24 * 60, group_max_session_timeout_ms=4 * DAY)
    a, b = stable_group(h, "a", "b", session=3 * DAY)
    h.commit({("t", 0): 5}, member_id=a, generation=1)
    h.now = 2 * DAY
    assert h.shard.cleanup_expired_offsets(h.now).records == []  # Stable: kept however old
    h.now = 2 * DAY + 1
    h.leave((a, None), (b, None))  # Empty from here: the retention clock starts now
    assert h.shard.cleanup_expired_offsets(3 * DAY).records == []
    r = h.shard.cleanup_expired_offsets(3 * DAY + 1)
    assert [(x.key, x.value) for x in r.records] == [
        (OffsetCommitKey("g", "t", 0), None),
        (GroupMetadataKey("g"), None),
    ]
    h.apply(r)
    assert h.shard.group_ids() == []
    h.check_replay_equivalence()


def test_simple_group_offsets_expire_by_commit_time():
    h = Harness(offsets_retention_minutes=1)
    h.now = 1000
    h.commit({("t", 0): 1}, group="s")
    h.now = 30_000
    h.commit({("t", 1): 1}, group="s")
    r = h.shard.cleanup_expired_offsets(61_000)
    assert [(x.key, x.value) for x in r.records] == [(OffsetCommitKey("s", "t", 0), None)]
    h.apply(r)
    r = h.shard.cleanup_expired_offsets(90_000)
    assert [x.key for x in r.records] == [OffsetCommitKey("s", "t", 1), GroupMetadataKey("s")]


def test_stable_consumer_group_expires_offsets_of_topics_it_no_longer_subscribes():
    from rafka.consumer.assignors import Subscription, encode_subscription

    h = Harness(offsets_retention_minutes=1)
    meta = encode_subscription(Subscription(["t"]))
    a = h.new_member(client="a", protocols=(("range", meta),), session=600_000)
    h.poll(0)
    h.take("join", a)
    assert h.group().subscribed_topics == frozenset({"t"})
    h.sync(a, 1, {a: b""})
    h.commit({("t", 0): 1, ("old", 0): 1}, member_id=a, generation=1)
    r = h.shard.cleanup_expired_offsets(60_000)
    assert [x.key for x in r.records] == [OffsetCommitKey("g", "old", 0)]
    d = h.shard.offset_delete("g", [{"name": "old", "partitions": [0]}, {"name": "t", "partitions": [0]}])
    assert [t["partitions"][0]["error_code"] for t in d.response["topics"]] == [0, 86]


def test_load_rebuilds_stable_group_offsets_and_arms_session_timers():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=[None, "ib"])
    h.commit({("t", 0): 100}, member_id=a, generation=1)
    h.commit({("s", 3): 7}, group="simple")
    loaded = h.check_replay_equivalence()
    g = loaded.group("g")
    assert (g.state, g.generation_id, g.leader_id, g.protocol_name) == (S.STABLE, 1, a, "range")
    assert g.member(b).assignment == b.encode() and g.static_members == {"ib": b}
    assert all(m.heartbeat_deadline_ms == h.now + SESSION for m in g.members.values())
    assert loaded.group("simple").state is S.EMPTY
    # The loaded coordinator serves the same members: heartbeats work, sync returns the assignment,
    # and a member that stays silent is expired.
    later = Harness()
    later.shard = loaded
    later.now = h.now + 5000
    assert later.heartbeat(a, 1) == 0
    assert later.sync(b, 1, group_instance_id="ib")["assignment"] == b.encode()
    later.poll(h.now + SESSION)
    assert b not in loaded.group("g").members and loaded.group("g").state is S.PREPARING_REBALANCE


def test_load_replays_tombstones_and_takes_latest_values():
    h = Harness()
    h.commit({("t", 0): 1}, group="x")
    h.commit({("t", 0): 2}, group="x")
    h.commit({("t", 1): 3}, group="x")
    h.apply(h.shard.offset_delete("x", [{"name": "t", "partitions": [1]}]))
    loaded = h.check_replay_equivalence()
    assert {k: v.offset for k, v in loaded.committed_offsets("x").items()} == {("t", 0): 2}
    # load() starts from scratch: state from an earlier load does not leak into the next one
    loaded.load([], 0)
    assert loaded.group_ids() == [] and loaded.committed_offsets("x") == {}


def test_loaded_group_rebalances_normally():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    shard = GroupCoordinatorShard(config(), new_uuid=lambda: "u9")
    shard.load([(r.key_bytes(), r.value_bytes()) for r in h.log if r.durable], 0)
    h2 = Harness()
    h2.shard = shard
    c = h2.new_member(client="c")
    assert h2.last_response == Pending("join", "g", c), h2.last_response
    assert shard.group("g").state is S.PREPARING_REBALANCE
    assert h2.heartbeat(a, 1) == 27
    h2.join(a)
    assert h2.join(b)["generation_id"] == 2
    assert [m["member_id"] for m in h2.take("join", a)["members"]] == [a, b, c]
