"""Group coordinator actors on a real Ray cluster, driven through actor calls as a client would.

FindCoordinator -> JoinGroup / SyncGroup / Heartbeat / LeaveGroup and rebalances, session expiry,
OffsetCommit / OffsetFetch, List/Describe/DeleteGroups, and the coordinator's broker killed (ray.kill):
the ``__consumer_offsets`` partition gets a new leader, the group moves, and its offsets and metadata
survive.
"""

from __future__ import annotations

import time
import uuid

import pytest
import ray
from ray.exceptions import RayActorError

from actors.bootstrap import start_cluster
from actors.group.records import partition_for
from actors.group.service import OFFSETS_TOPIC, is_retriable_coordinator_error
from protocol import group_messages as M

pytestmark = pytest.mark.cluster

CONFIG = {
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 10000,
    "replica.fetch.wait.max.ms": 100,
    "leader.imbalance.check.interval.seconds": 3600,
    "offsets.topic.num.partitions": 2,
    "group.min.session.timeout.ms": 500,
    "group.initial.rebalance.delay.ms": 200,
}

MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID = 79, 27, 25
NOT_COORDINATOR, GROUP_ID_NOT_FOUND, INVALID_REQUEST, INVALID_GROUP_ID = 16, 69, 42, 24
COORDINATOR_NOT_AVAILABLE = 15
PROTOCOLS = [("range", b"subscription: orders")]


@pytest.fixture(scope="module")
def shared(ray_cluster, tmp_path_factory):
    """One 2-broker cluster for the tests that do not kill anything."""
    t0 = time.monotonic()
    ch = start_cluster("g" + uuid.uuid4().hex[:10], 2, str(tmp_path_factory.mktemp("groups")), CONFIG)
    print(f"cluster start {time.monotonic() - t0:.2f}s")
    # the topics the tests commit offsets for (a partition the cluster lacks answers UNKNOWN_TOPIC_OR_PARTITION)
    ch.create_topic("orders", 3, 1)
    ch.create_topic("t", 1, 1)
    yield ch
    ch.shutdown()


def _code(res: dict) -> int:
    if res.get("error_code"):
        return res["error_code"]
    for t in res.get("topics", []):
        for p in t.get("partitions", []):
            if p.get("error_code"):
                return p["error_code"]
    return 0


REQUESTS = {
    cls.METHOD: cls
    for cls in (
        M.JoinGroupRequest,
        M.SyncGroupRequest,
        M.HeartbeatRequest,
        M.LeaveGroupRequest,
        M.OffsetCommitRequest,
        M.OffsetFetchRequest,
        M.OffsetDeleteRequest,
        M.DescribeGroupsRequest,
        M.DeleteGroupsRequest,
    )
}


def call(ch, group: str, method: str, *args, timeout_s: float = 30.0, **kw) -> dict:
    """What a client does: find the coordinator, send it the typed request of ``method`` (built from
    ``args``/``kw``), and on a retriable coordinator error (or a dead coordinator) find it again and retry."""
    request = REQUESTS[method](*args, **kw)
    deadline = time.monotonic() + timeout_s
    while True:
        h, _ = ch.group_coordinator(group, timeout_s)
        try:
            res = ray.get(getattr(h, request.METHOD).remote(request), timeout=timeout_s)
        except RayActorError:
            res = {"error_code": NOT_COORDINATOR}
        if not is_retriable_coordinator_error(_code(res)) or time.monotonic() > deadline:
            return res
        time.sleep(0.05)


def join_new(ch, group: str, session_timeout_ms: int = 6000) -> str:
    """A new member's first JoinGroup: MEMBER_ID_REQUIRED hands out its member id."""
    res = call(ch, group, "join_group", group, "", "consumer", PROTOCOLS, session_timeout_ms, 5000, client_id="c-test")
    assert res["error_code"] == MEMBER_ID_REQUIRED and res["member_id"], res
    return res["member_id"]


def join_all(ch, group: str, members: list[str], session_timeout_ms: int = 6000) -> list[dict]:
    """Concurrent JoinGroups (each parks until the rebalance completes)."""
    h, _ = ch.group_coordinator(group)
    refs = [
        h.join_group.remote(
            M.JoinGroupRequest(group, m, "consumer", PROTOCOLS, session_timeout_ms, 5000, client_id="c-test")
        )
        for m in members
    ]
    out = ray.get(refs, timeout=30)
    for r in out:
        assert r["error_code"] == 0, r
    return out


def sync_all(ch, group: str, joins: list[dict]) -> dict[str, bytes]:
    """SyncGroup for every member; the leader's assignment is relayed to all (followers park until it)."""
    h, _ = ch.group_coordinator(group)
    leader = joins[0]["leader"]
    refs = {}
    for j in sorted(joins, key=lambda j: j["member_id"] == leader):  # followers first: they park
        assignments = {m["member_id"]: f"parts-of-{m['member_id'][:8]}".encode() for m in j["members"]}
        refs[j["member_id"]] = h.sync_group.remote(
            M.SyncGroupRequest(group, j["member_id"], j["generation_id"], assignments)
        )
    out = {}
    for mid, ref in refs.items():
        r = ray.get(ref, timeout=30)
        assert r["error_code"] == 0 and r["protocol_name"] == "range", r
        out[mid] = r["assignment"]
    return out


def heartbeat(ch, group: str, member: str, generation: int) -> int:
    return call(ch, group, "heartbeat", group, member, generation)["error_code"]


def describe(ch, group: str) -> dict:
    res = call(ch, group, "describe_groups", [group])
    assert len(res["groups"]) == 1 and res["groups"][0]["error_code"] == 0, res
    return res["groups"][0]


def test_join_sync_heartbeat_leave_rebalance(shared):
    ch = shared
    t0 = time.monotonic()
    info = ch.find_coordinator("g-orders")
    print(f"first FindCoordinator (creates {OFFSETS_TOPIC}) {time.monotonic() - t0:.2f}s")
    assert info["partition"] == partition_for("g-orders", 2)
    d = ch.describe(OFFSETS_TOPIC)
    assert d["configs"].get("cleanup.policy") == "compact" and len(d["partitions"]) == 2
    assert info["broker_id"] == d["partitions"][info["partition"]]["leader"]
    assert all(len(p["replicas"]) == 2 for p in d["partitions"])  # min(3, brokers)

    m1, m2 = join_new(ch, "g-orders"), join_new(ch, "g-orders")
    t0 = time.monotonic()
    joins = join_all(ch, "g-orders", [m1, m2])
    print(f"join of 2 members (initial delay 200 ms) {time.monotonic() - t0:.2f}s")
    assert {j["generation_id"] for j in joins} == {1}
    leader = joins[0]["leader"]
    assert leader in (m1, m2) and {j["leader"] for j in joins} == {leader}
    lead_join = next(j for j in joins if j["member_id"] == leader)
    assert sorted(m["member_id"] for m in lead_join["members"]) == sorted([m1, m2])
    assert all(j["members"] == [] for j in joins if j["member_id"] != leader)  # only the leader gets them

    got = sync_all(ch, "g-orders", joins)
    assert got == {m1: f"parts-of-{m1[:8]}".encode(), m2: f"parts-of-{m2[:8]}".encode()}
    assert heartbeat(ch, "g-orders", m1, 1) == 0 and heartbeat(ch, "g-orders", m2, 1) == 0
    assert heartbeat(ch, "g-orders", m1, 0) == 22  # ILLEGAL_GENERATION
    assert heartbeat(ch, "g-orders", "nobody", 1) == UNKNOWN_MEMBER_ID
    g = describe(ch, "g-orders")
    assert g["group_state"] == "Stable" and len(g["members"]) == 2
    assert {m["member_assignment"] for m in g["members"]} == set(got.values())

    res = call(ch, "g-orders", "leave_group", "g-orders", [{"member_id": m2}])
    assert res["error_code"] == 0 and res["members"][0]["error_code"] == 0, res
    assert heartbeat(ch, "g-orders", m1, 1) == REBALANCE_IN_PROGRESS
    t0 = time.monotonic()
    rejoin = join_all(ch, "g-orders", [m1])[0]
    print(f"rebalance after a leave {time.monotonic() - t0:.2f}s")
    assert rejoin["generation_id"] == 2 and rejoin["leader"] == m1 and len(rejoin["members"]) == 1
    assert sync_all(ch, "g-orders", [rejoin]) == {m1: f"parts-of-{m1[:8]}".encode()}
    assert heartbeat(ch, "g-orders", m1, 2) == 0
    g = describe(ch, "g-orders")
    assert g["group_state"] == "Stable" and [m["member_id"] for m in g["members"]] == [m1]


def test_silent_member_expires_after_session_timeout(shared):
    ch = shared
    m1, m2 = join_new(ch, "g-expire", 1000), join_new(ch, "g-expire", 1000)
    joins = join_all(ch, "g-expire", [m1, m2], 1000)
    sync_all(ch, "g-expire", joins)
    t0 = time.monotonic()
    code = 0
    while code == 0:  # only m1 keeps heartbeating
        assert time.monotonic() - t0 < 10, "m2 was never expired"
        time.sleep(0.2)
        code = heartbeat(ch, "g-expire", m1, 1)
    expired_after = time.monotonic() - t0
    print(f"silent member expired after {expired_after:.2f}s (session.timeout.ms=1000)")
    assert code == REBALANCE_IN_PROGRESS and expired_after >= 0.8
    rejoin = join_all(ch, "g-expire", [m1], 1000)[0]
    assert rejoin["generation_id"] == 2 and [m["member_id"] for m in rejoin["members"]] == [m1]
    sync_all(ch, "g-expire", [rejoin])
    assert heartbeat(ch, "g-expire", m2, 2) == UNKNOWN_MEMBER_ID
    assert [m["member_id"] for m in describe(ch, "g-expire")["members"]] == [m1]


def test_offsets_list_describe_delete_and_bad_input(shared):
    ch = shared
    group = "g-offsets"
    commit = [
        {
            "name": "orders",
            "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_metadata": "m0"},
                {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": 3},
            ],
        }
    ]
    t0 = time.monotonic()
    res = call(ch, group, "offset_commit", group, commit)  # a simple consumer (generation -1)
    print(f"offset commit (acks=all append) {time.monotonic() - t0:.3f}s")
    assert [p["error_code"] for p in res["topics"][0]["partitions"]] == [0, 0], res
    res = call(ch, group, "offset_fetch", group, [{"name": "orders", "partition_indexes": [0, 1, 2]}])
    assert [
        (p["committed_offset"], p["committed_leader_epoch"], p["metadata"]) for p in res["topics"][0]["partitions"]
    ] == [(42, -1, "m0"), (7, 3, ""), (-1, -1, "")]
    res = call(
        ch,
        group,
        "offset_commit",
        group,
        [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 50}]}],
    )
    assert _code(res) == 0
    res = call(ch, group, "offset_fetch", group)  # everything committed
    assert {p["partition_index"]: p["committed_offset"] for p in res["topics"][0]["partitions"]} == {0: 50, 1: 7}

    h, info = ch.group_coordinator(group)
    listed = ray.get(h.list_groups.remote(M.ListGroupsRequest()))
    assert listed["error_code"] == 0
    assert {"group_id": group, "protocol_type": "", "group_state": "Empty", "group_type": "classic"} in listed["groups"]
    assert describe(ch, group)["group_state"] == "Empty"
    stable = ray.get(h.list_groups.remote(M.ListGroupsRequest(states_filter=["Stable"])))["groups"]
    assert group not in [g["group_id"] for g in stable]

    # A group of the other offsets partition is not this coordinator's.
    other = next(f"g-other-{i}" for i in range(100) if partition_for(f"g-other-{i}", 2) != info["partition"])
    if ch.find_coordinator(other)["broker_id"] != info["broker_id"]:
        assert ray.get(h.offset_fetch.remote(M.OffsetFetchRequest(other)))["error_code"] == NOT_COORDINATOR

    # Bad input answers an error code and the actor keeps serving.
    assert ray.get(h.offset_commit.remote(M.OffsetCommitRequest(group, "not-a-list")))["error_code"] == INVALID_REQUEST
    assert (
        ray.get(
            h.offset_commit.remote(
                M.OffsetCommitRequest(group, [{"name": "orders", "partitions": [{"partition_index": 0}]}])
            )
        )["topics"][0]["partitions"][0]["error_code"]
        == INVALID_REQUEST
    )
    assert (
        ray.get(h.join_group.remote(M.JoinGroupRequest(None, "", "consumer", PROTOCOLS, 6000)))["error_code"]
        == INVALID_GROUP_ID
    )
    assert (
        ray.get(h.join_group.remote(M.JoinGroupRequest(group, "", "consumer", PROTOCOLS, 10)))["error_code"] == 26
    )  # session
    assert ray.get(h.describe_groups.remote(M.DescribeGroupsRequest("not-a-list")))["error_code"] == INVALID_REQUEST
    # a call whose argument is not the method's typed request: INVALID_REQUEST with a message, no crash
    for method in ("join_group", "heartbeat", "offset_commit", "offset_fetch", "delete_groups", "list_groups"):
        res = ray.get(getattr(h, method).remote({"group_id": group}))
        assert res["error_code"] == INVALID_REQUEST and "not dict" in res["error_message"], (method, res)
    assert ray.get(h.heartbeat.remote(M.OffsetFetchRequest(group)))["error_code"] == INVALID_REQUEST
    assert ray.get(h.ping.remote()) == info["broker_id"]

    res = call(ch, group, "delete_groups", [group])
    assert res["results"] == [{"group_id": group, "error_code": 0}]
    res = call(ch, group, "offset_fetch", group, [{"name": "orders", "partition_indexes": [0]}])
    assert res["topics"][0]["partitions"][0]["committed_offset"] == -1
    assert call(ch, group, "delete_groups", [group])["results"][0]["error_code"] == GROUP_ID_NOT_FOUND
    assert group not in [g["group_id"] for g in ray.get(h.list_groups.remote(M.ListGroupsRequest()))["groups"]]

    # A group with members is not deletable.
    m = join_new(ch, "g-busy")
    sync_all(ch, "g-busy", join_all(ch, "g-busy", [m]))
    assert call(ch, "g-busy", "delete_groups", ["g-busy"])["results"][0]["error_code"] == 68  # NON_EMPTY_GROUP


def test_coordinator_broker_killed_group_moves_offsets_survive(ray_cluster, cluster_name, tmp_path):
    t0 = time.monotonic()
    ch = start_cluster(cluster_name, 2, str(tmp_path), {**CONFIG, "offsets.topic.num.partitions": 1})
    try:
        print(f"cluster start {time.monotonic() - t0:.2f}s")
        ch.create_topic("orders", 3, 2)
        group = "g-failover"
        m = join_new(ch, group)
        (j,) = join_all(ch, group, [m])
        sync_all(ch, group, [j])
        commit = [
            {"name": "orders", "partitions": [{"partition_index": p, "committed_offset": 100 + p} for p in range(3)]}
        ]
        res = call(ch, group, "offset_commit", group, commit, member_id=m, generation_id=j["generation_id"])
        assert _code(res) == 0, res
        old = ch.find_coordinator(group)
        ray.get(ch.replica(OFFSETS_TOPIC, 0, 1 - old["broker_id"]).ping.remote())

        ch.kill_broker(old["broker_id"])
        t0 = time.monotonic()
        new = ch.find_coordinator(group)
        while new["broker_id"] == old["broker_id"]:
            assert time.monotonic() - t0 < 30, "the offsets partition never got a new leader"
            time.sleep(0.05)
            new = ch.find_coordinator(group)
        res = call(ch, group, "offset_fetch", group)
        print(
            f"coordinator moved b{old['broker_id']} -> b{new['broker_id']} and loaded in {time.monotonic() - t0:.2f}s"
        )
        assert {p["partition_index"]: p["committed_offset"] for p in res["topics"][0]["partitions"]} == {
            0: 100,
            1: 101,
            2: 102,
        }
        g = describe(ch, group)  # the group itself was loaded from its GroupMetadata record
        assert g["group_state"] == "Stable" and [x["member_id"] for x in g["members"]] == [m]
        assert heartbeat(ch, group, m, j["generation_id"]) == 0
        res = call(
            ch,
            group,
            "offset_commit",
            group,
            [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": 200}]}],
            member_id=m,
            generation_id=j["generation_id"],
        )
        assert _code(res) == 0
        st = ray.get(ch.group_coordinator(group)[0].describe_coordinator.remote())
        assert st["partitions"][0]["state"] == "active" and st["partitions"][0]["loaded_records"] >= 4
    finally:
        ch.shutdown()


def test_failed_append_answers_retriable_error_and_reloads(shared):
    """min.insync.replicas above the ISR makes the acks=all append fail: the commit answers
    COORDINATOR_NOT_AVAILABLE, the shard reloads from the log (the failed commit is not visible), and
    once the config is back commits work again.

    The commit is sent only after the leader replica of the group's ``__consumer_offsets`` partition
    reports the new min.insync.replicas, so the append is refused before it is written
    (NOT_ENOUGH_REPLICAS). A commit that races the config change may instead be appended and then fail
    its acks=all wait (NOT_ENOUGH_REPLICAS_AFTER_APPEND): as in Kafka, that record is in the log and may
    become visible later, so such a commit's outcome is not something to assert."""
    ch = shared
    group = "g-append-fail"
    assert (
        _code(
            call(
                ch,
                group,
                "offset_commit",
                group,
                [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
            )
        )
        == 0
    )
    ctl = ch.controller()
    res = ray.get(ctl.alter_configs.remote(OFFSETS_TOPIC, set={"min.insync.replicas": "3"}))
    assert res["error_code"] == 0, res
    try:
        part = partition_for(group, CONFIG["offsets.topic.num.partitions"])
        t0 = time.monotonic()
        while True:  # until the new config reaches the leader replica
            assert time.monotonic() - t0 < 15, "min.insync.replicas never applied"
            leader = ch.leader_replica(OFFSETS_TOPIC, part)
            if leader is not None and ray.get(leader.metrics.remote())["min_isr"] == 3:
                break
            time.sleep(0.05)
        h, _ = ch.group_coordinator(group)
        res = ray.get(
            h.offset_commit.remote(
                M.OffsetCommitRequest(
                    group, [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 101}]}]
                )
            )
        )
        assert _code(res) == 15, res  # NOT_ENOUGH_REPLICAS -> COORDINATOR_NOT_AVAILABLE (retriable)
        res = call(ch, group, "offset_fetch", group)
        assert res["error_code"] == 0 and res["topics"][0]["partitions"][0]["committed_offset"] == 5, res
    finally:
        assert ray.get(ctl.alter_configs.remote(OFFSETS_TOPIC, delete=["min.insync.replicas"]))["error_code"] == 0
    res = call(
        ch,
        group,
        "offset_commit",
        group,
        [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7}]}],
        timeout_s=15,
    )
    assert _code(res) == 0, res
    assert call(ch, group, "offset_fetch", group)["topics"][0]["partitions"][0]["committed_offset"] == 7


def test_first_find_coordinator_answers_at_once_while_the_topic_is_created(ray_cluster, cluster_name, tmp_path):
    """Kafka's auto-creation of its internal topic: the first FindCoordinator starts the creation in the
    background and answers COORDINATOR_NOT_AVAILABLE (the client retries) instead of holding the request, and
    the connection carrying it, for the seconds a creation takes; concurrent finders start one creation."""
    ch = start_cluster(cluster_name, 2, str(tmp_path), CONFIG)
    try:
        b0, b1 = ch.brokers[0], ch.brokers[1]
        assert OFFSETS_TOPIC not in ch.metadata()["topics"]
        first = ray.get([b0.find_coordinator.remote("g-new"), b0.find_coordinator.remote("g-other")], timeout=30)
        for a in first:
            assert a["error_code"] == COORDINATOR_NOT_AVAILABLE and "being created" in a["error_message"], a
        info = ch.find_coordinator("g-new")  # retries until the partition has a leader
        assert info["error_code"] == 0 and info["partition"] == partition_for("g-new", 2)
        d = ch.describe(OFFSETS_TOPIC)
        assert len(d["partitions"]) == 2 and d["configs"].get("cleanup.policy") == "compact"
        assert ray.get(b1.find_coordinator.remote("g-new"), timeout=30)["broker_id"] == info["broker_id"]
    finally:
        ch.shutdown()
