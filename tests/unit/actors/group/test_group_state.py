"""Classic group coordinator state machine: transitions, JoinGroup/SyncGroup/Heartbeat/LeaveGroup flows,
session and rebalance timeouts, static membership (KIP-345). Explicit ``now_ms`` everywhere."""

from __future__ import annotations

import itertools

import pytest
from group_harness import REBALANCE, SESSION, Harness

from actors.group.records import GroupMetadataKey
from actors.group.shard import (
    VALID_PREVIOUS_STATES,
    ClassicGroup,
    GroupSnapshotRecord,
    GroupState,
    InvalidGroupTransition,
    Pending,
)

S = GroupState


# ------------------------------------------------------------------------------ transitions


def test_valid_previous_states_are_kafkas():
    assert VALID_PREVIOUS_STATES == {
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
        S.EMPTY: {S.PREPARING_REBALANCE},
    }


@pytest.mark.parametrize("source,target", list(itertools.product(GroupState, GroupState)))
def test_every_transition_is_asserted(source, target):
    g = ClassicGroup("g", state=source)
    if source in VALID_PREVIOUS_STATES[target]:
        g.transition_to(target, 123)
        assert (g.state, g.previous_state, g.state_timestamp_ms) == (target, source, 123)
    else:
        with pytest.raises(InvalidGroupTransition):
            g.transition_to(target, 123)
        assert g.state is source


def test_installed_groups_are_sealed_and_clones_are_not():
    h = Harness()
    h.new_member()
    installed = h.group()
    with pytest.raises(InvalidGroupTransition):
        installed.transition_to(S.DEAD, 1)
    with pytest.raises(InvalidGroupTransition):
        installed.remove(next(iter(installed.members)))
    copy = installed.clone()
    copy.transition_to(S.DEAD, 1)
    assert h.group().state is S.PREPARING_REBALANCE  # the installed one is untouched
    with pytest.raises(InvalidGroupTransition):
        h.shard.replay(GroupSnapshotRecord("g", copy))  # unsealed snapshot refused


# ------------------------------------------------------------------------------ join / sync


def test_first_join_requires_member_id_then_initial_delay_then_generation_1():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    resp = h.join("", client="app")
    assert resp["error_code"] == 79 and resp["member_id"] == "app-u0"
    assert h.group().state is S.EMPTY and h.group().is_pending_member("app-u0")
    assert h.join("app-u0", client="app") == Pending("join", "g", "app-u0")
    assert h.group().state is S.PREPARING_REBALANCE and h.shard.next_deadline() == 3000
    h.now = 1000
    b = h.new_member(client="b")
    assert isinstance(h.last_response, Pending)
    h.poll(3000)  # a member arrived during the delay: InitialDelayedJoin extends by another delay
    assert h.group().state is S.PREPARING_REBALANCE and h.shard.next_deadline() == 6000
    h.poll(6000)
    g = h.group()
    assert (g.state, g.generation_id, g.leader_id, g.protocol_name) == (S.COMPLETING_REBALANCE, 1, "app-u0", "range")
    leader, follower = h.take("join", "app-u0"), h.take("join", b)
    assert leader["leader"] == follower["leader"] == "app-u0"
    assert [m["member_id"] for m in leader["members"]] == ["app-u0", b] and follower["members"] == []
    assert leader["generation_id"] == follower["generation_id"] == 1
    assert leader["protocol_type"] == "consumer" and leader["members"][0]["metadata"] == b"sub"


def test_sync_relays_the_leaders_assignment_to_every_member():
    h = Harness()
    a = h.new_member(client="a")
    b = h.new_member(client="b")
    c = h.new_member(client="c")
    h.poll(0)
    for m in (a, b, c):
        h.take("join", m)
    assert h.sync(b, 1) == Pending("sync", "g", b)
    assert h.sync(c, 1) == Pending("sync", "g", c)
    n_records = len(h.log)
    resp = h.sync(a, 1, {a: b"A", b: b"B", "not-a-member": b"X"})  # c left out: empty assignment
    assert resp == {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range", "assignment": b"A"}
    assert h.take("sync", b)["assignment"] == b"B" and h.take("sync", c)["assignment"] == b""
    assert h.group().state is S.STABLE
    durable = [r for r in h.log[n_records:] if r.durable]
    assert len(durable) == 1 and durable[0].key == GroupMetadataKey("g")
    value = durable[0].value
    assert (value.generation, value.protocol, value.leader, value.protocol_type) == (1, "range", a, "consumer")
    assert [(m.member_id, m.assignment, m.subscription) for m in value.members] == [
        (a, b"A", b"sub"),
        (b, b"B", b"sub"),
        (c, b"", b"sub"),
    ]
    assert h.sync(c, 1) == {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range", "assignment": b""}
    h.check_replay_equivalence()


def stable_group(h: Harness, *clients, instances=None, **kw):
    instances = instances or [None] * len(clients)
    ids = []
    for c, i in zip(clients, instances):
        if i is None:
            ids.append(h.new_member(client=c, **kw))
        else:
            resp = h.join("", client=c, instance=i, **kw)
            assert isinstance(resp, Pending)
            ids.append(resp.member_id)
    h.poll(h.now)
    gen = h.group().generation_id
    for m in ids:
        assert h.take("join", m)["generation_id"] == gen
    for m in ids[1:]:
        h.sync(m, gen)
    h.sync(ids[0], gen, {m: m.encode() for m in ids})
    for m in ids[1:]:
        assert h.take("sync", m)["assignment"] == m.encode()
    assert h.group().state is S.STABLE
    return ids


def test_sync_errors_follow_kafka():
    h = Harness()
    assert h.sync("x", 0)["error_code"] == 25  # unknown group
    a, b = stable_group(h, "a", "b")
    assert h.sync(a, 0)["error_code"] == 22  # ILLEGAL_GENERATION
    assert h.sync("ghost", 1)["error_code"] == 25
    assert h.sync(a, 1, protocol_name="roundrobin")["error_code"] == 23
    assert h.sync(a, 1, protocol_type="connect")["error_code"] == 23
    assert h.sync(a, 1, protocol_name="range", protocol_type="consumer")["error_code"] == 0
    h.join(a)  # the leader rejoins: rebalance
    assert h.group().state is S.PREPARING_REBALANCE
    assert h.sync(b, 1)["error_code"] == 27


def test_heartbeat_responses():
    h = Harness()
    assert h.heartbeat("x", 0) == 25
    a, b = stable_group(h, "a", "b")
    assert h.heartbeat(a, 1) == 0
    assert h.heartbeat(a, 2) == 22
    assert h.heartbeat("ghost", 1) == 25
    assert h.heartbeat(a, 1, group_instance_id="nope") == 25
    h.join(a, protocols=(("range", b"changed"),))
    assert h.heartbeat(b, 1) == 27  # rebalancing: rejoin
    assert h.join(b)["generation_id"] == 2  # the last member in completes the join at once
    assert h.take("join", a)["generation_id"] == 2
    assert h.group().state is S.COMPLETING_REBALANCE
    assert h.heartbeat(b, 2) == 0  # heartbeats are fine between JoinGroup and SyncGroup


def test_heartbeats_keep_a_member_and_silence_expires_it():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    assert h.advance_beating(9000, (a, 1), (b, 1)) == [0] * 6
    assert h.group().member(b).heartbeat_deadline_ms == 9000 + SESSION
    # b falls silent after 9000: its session runs out at 19000 and the group rebalances without it.
    assert h.advance_beating(9000, (a, 1)) == [0, 0, 0]
    assert b in h.group().members
    h.advance(1000)
    assert b not in h.group().members and h.group().state is S.PREPARING_REBALANCE
    assert h.heartbeat(a, 1) == 27
    assert h.join(a)["generation_id"] == 2 and h.group().state is S.COMPLETING_REBALANCE


def test_session_expiry_removes_member_and_survivors_rebalance():
    h = Harness()
    a, b, c = stable_group(h, "a", "b", "c")
    h.now = 5000
    assert h.heartbeat(b, 1) == 0 and h.heartbeat(c, 1) == 0
    h.poll(SESSION)  # a (the leader) never heartbeated: its session ends at 10000
    g = h.group()
    assert a not in g.members and g.state is S.PREPARING_REBALANCE and g.leader_id == b
    assert h.heartbeat(b, 1) == 27 and h.heartbeat(c, 1) == 27
    assert isinstance(h.join(b), Pending)
    assert h.join(c)["generation_id"] == 2  # the last one in completes the join
    g = h.group()
    assert (g.state, g.generation_id, g.leader_id) == (S.COMPLETING_REBALANCE, 2, b)
    resp_b = h.take("join", b)
    assert [m["member_id"] for m in resp_b["members"]] == [b, c]
    h.check_replay_equivalence()


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.now = 1000
    h.join(a, protocols=(("range", b"v2"),), rebalance=5000)  # a changes metadata -> rebalance
    assert h.group().join_deadline_ms == 1000 + REBALANCE  # max rebalance timeout of the members (b: 30 s)
    # b keeps heartbeating (so its session holds) but never rejoins: the rebalance timeout drops it.
    assert set(h.advance_beating(REBALANCE - 1, (b, 1))) == {27}
    assert h.group().state is S.PREPARING_REBALANCE
    h.advance(1)
    g = h.group()
    assert set(g.members) == {a} and g.state is S.COMPLETING_REBALANCE and g.generation_id == 2
    assert h.take("join", a)["members"] == [{"member_id": a, "group_instance_id": None, "metadata": b"v2"}]


def test_join_during_completing_rebalance_same_metadata_gets_current_generation():
    h = Harness()
    a = h.new_member(client="a")
    b = h.new_member(client="b")
    h.poll(0)
    h.take("join", a), h.take("join", b)
    resp = h.join(b)  # b missed its response and asks again
    assert resp["error_code"] == 0 and resp["generation_id"] == 1 and resp["members"] == []
    assert resp["leader"] == a
    assert h.join(a)["members"] != []  # the leader gets the member list again
    assert h.sync(b, 1) == Pending("sync", "g", b)
    resp = h.join(a, protocols=(("range", b"new"),))  # changed metadata: parked syncs told to rejoin
    assert resp == Pending("join", "g", a)
    assert h.take("sync", b)["error_code"] == 27
    assert h.group().state is S.PREPARING_REBALANCE


def test_stable_follower_rejoin_without_change_keeps_generation_and_leader_rejoin_rebalances():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    resp = h.join(b)
    assert resp["error_code"] == 0 and resp["generation_id"] == 1 and h.group().state is S.STABLE
    assert isinstance(h.join(a), Pending) and h.group().state is S.PREPARING_REBALANCE


def test_protocol_selection_by_votes_and_inconsistent_protocol():
    h = Harness()
    a = h.new_member(client="a", protocols=(("range", b"1"), ("roundrobin", b"2")))
    b = h.new_member(client="b", protocols=(("roundrobin", b"3"), ("range", b"4")))
    c = h.new_member(client="c", protocols=(("roundrobin", b"5"), ("sticky", b"6")))
    h.poll(0)
    assert len({a, b, c}) == 3  # three distinct members joined
    assert h.group().protocol_name == "roundrobin"  # the only protocol all support
    assert [m["metadata"] for m in h.take("join", a)["members"]] == [b"2", b"3", b"5"]
    resp = h.join("", client="d", protocols=(("sticky", b"x"),))
    assert resp["error_code"] == 23
    assert h.join("", client="e", ptype="connect")["error_code"] == 23
    assert h.join("", client="f", protocols=())["error_code"] == 23
    h2 = Harness()
    assert h2.join("", protocols=())["error_code"] == 23  # a new group needs protocols
    assert h2.group() is None  # and is not left behind


def test_protocol_votes_break_ties_by_leader_preference():
    h = Harness()
    h.new_member(client="a", protocols=(("range", b""), ("roundrobin", b"")))
    h.new_member(client="b", protocols=(("roundrobin", b""), ("range", b"")))
    h.poll(0)
    assert h.group().protocol_name == "range"  # 1 vote each: the leader's preference wins


def test_join_validation_errors():
    h = Harness(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=60_000)
    assert h.join("", session=5999)["error_code"] == 26
    assert h.join("", session=60_001)["error_code"] == 26
    assert h.join("", group="")["error_code"] == 24
    assert h.join("someone")["error_code"] == 25  # known id, unknown group
    assert h.shard.group_ids() == []


def test_group_max_size():
    h = Harness(group_max_size=2)
    a, b = stable_group(h, "a", "b")
    assert h.join("", client="c")["error_code"] == 81
    assert h.join(b)["error_code"] == 0  # members may always rejoin
    assert isinstance(h.join(a), Pending)
    assert h.join("", client="d")["error_code"] == 79  # 1 of 2 seats awaiting: a new member may come
    assert isinstance(h.join(b), Pending)  # the rebalance also waits for the pending member d
    h.poll(SESSION)  # d never completes its join: its pending id expires and the join completes
    assert h.take("join", b)["generation_id"] == 2 and set(h.group().members) == {a, b}


def test_join_without_member_id_requirement():
    h = Harness()
    resp = h.join("", client="old", require_known_member_id=False)
    assert resp == Pending("join", "g", "old-u0")
    assert h.group().state is S.PREPARING_REBALANCE


def test_pending_member_that_never_returns_is_dropped():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    resp = h.join("", client="late")
    pending = resp["member_id"]
    assert h.group().is_pending_member(pending)
    h.join(a, protocols=(("range", b"v2"),))  # a rebalance starts: it waits for the pending member too
    h.join(b)
    assert h.group().state is S.PREPARING_REBALANCE
    h.poll(SESSION)  # the pending id's session runs out: the join completes without it
    assert not h.group().is_pending_member(pending) and h.group().state is S.COMPLETING_REBALANCE


def test_new_member_join_times_out():
    h = Harness(new_member_join_timeout_ms=50_000)
    a, b = stable_group(h, "a", "b", rebalance=200_000)
    h.join(a, protocols=(("range", b"v2"),), rebalance=200_000)
    c = h.new_member(client="c")
    # b heartbeats but never rejoins, so the rebalance stays open; c is new and parked, and a new
    # member's JoinGroup times out after new.member.join.timeout (it cannot heartbeat while parked).
    assert set(h.advance_beating(49_999, (a, 1), (b, 1))) == {27}
    assert c in h.group().members
    h.advance(1)
    assert c not in h.group().members and h.take("join", c)["error_code"] == 25
    assert a in h.group().members and h.group().state is S.PREPARING_REBALANCE


def test_leave_group_batch():
    h = Harness()
    a, b, c = stable_group(h, "a", "b", "c")
    resp = h.leave(
        {"member_id": b, "group_instance_id": None},
        {"member_id": "ghost", "group_instance_id": None},
        {"member_id": "", "group_instance_id": "nope"},
    )
    assert resp["error_code"] == 0
    assert [m["error_code"] for m in resp["members"]] == [0, 25, 25]
    g = h.group()
    assert b not in g.members and g.state is S.PREPARING_REBALANCE
    assert h.leave({"member_id": "x", "group_instance_id": None}, group="nope")["members"][0]["error_code"] == 25


def test_last_members_leaving_empty_the_group_and_persist_it():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.now = 500
    h.leave((a, None), (b, None))
    g = h.group()
    assert (g.state, g.generation_id, g.leader_id, g.protocol_type) == (S.EMPTY, 2, None, "consumer")
    last = [r for r in h.log if r.durable][-1]
    assert last.key == GroupMetadataKey("g") and last.value.members == () and last.value.generation == 2
    assert last.value.protocol is None and last.value.current_state_timestamp == 500
    h.check_replay_equivalence()


def test_member_leaving_during_rebalance_completes_the_join():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.join(a, protocols=(("range", b"v2"),))
    h.leave((b, None))
    assert h.group().state is S.COMPLETING_REBALANCE and set(h.group().members) == {a}
    assert h.take("join", a)["generation_id"] == 2


def test_pending_sync_expiry_removes_members_that_never_sync():
    h = Harness()
    a = h.new_member(client="a", rebalance=5000)
    b = h.new_member(client="b", rebalance=5000)
    h.poll(0)
    h.take("join", a), h.take("join", b)
    h.sync(a, 1, {a: b"A", b: b"B"})  # the leader syncs, b never does
    assert h.group().state is S.STABLE and h.group().sync_deadline_ms == 5000
    h.now = 4000
    h.heartbeat(a, 1)
    h.poll(5000)
    g = h.group()
    assert set(g.members) == {a} and g.state is S.PREPARING_REBALANCE  # a must rejoin
    assert h.heartbeat(a, 1) == 27
    assert h.join(a)["generation_id"] == 2


def test_removed_member_parked_requests_are_answered():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    h.join(a, protocols=(("range", b"v2"),))
    assert h.join(b)["generation_id"] == 2  # completes the join
    h.take("join", a)
    assert h.sync(b, 2) == Pending("sync", "g", b)
    h.leave((b, None))
    assert h.take("sync", b)["error_code"] == 25


# ------------------------------------------------------------------------------ static membership


def test_static_member_restart_does_not_rebalance():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=["ia", "ib"])
    assert a.startswith("ia-u") and b.startswith("ib-u")
    before = len([r for r in h.log if r.durable])
    h.now = 2000
    resp = h.join("", client="b", instance="ib")  # b restarts: same instance id, no member id
    new_b = resp["member_id"]
    assert resp["error_code"] == 0 and new_b != b and new_b.startswith("ib-u")
    assert resp["generation_id"] == 1 and resp["leader"] == a and resp["members"] == []
    g = h.group()
    assert g.state is S.STABLE and g.generation_id == 1 and g.static_members["ib"] == new_b
    durable = [r for r in h.log if r.durable][before:]
    assert len(durable) == 1 and [m.member_id for m in durable[0].value.members] == [a, new_b]
    assert h.heartbeat(b, 1, group_instance_id="ib") == 82  # the old incarnation is fenced
    assert h.sync(b, 1, group_instance_id="ib")["error_code"] == 82
    assert h.sync(new_b, 1, group_instance_id="ib")["assignment"] == b.encode()  # keeps its assignment
    assert h.heartbeat(new_b, 1, group_instance_id="ib") == 0
    assert h.commit({("t", 0): 1}, member_id=b, generation=1, group_instance_id="ib") == {("t", 0): 82}
    h.check_replay_equivalence()


def test_static_leader_restart_gets_skip_assignment():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=["ia", "ib"])
    resp = h.join("", client="a", instance="ia")
    assert resp["skip_assignment"] is True and resp["leader"] == resp["member_id"]
    assert [m["member_id"] for m in resp["members"]] == [b, resp["member_id"]]
    old_client = h.join("", client="a", instance="ia", supports_skip_assignment=False)
    assert (
        old_client["skip_assignment"] is False
        and old_client["leader"] == resp["member_id"] != old_client["member_id"]
        and old_client["members"] == []
    )
    assert h.group().state is S.STABLE


def test_static_member_restart_with_other_protocol_rebalances():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=["ia", "ib"])
    resp = h.join("", client="b", instance="ib", protocols=(("roundrobin", b""), ("range", b"x")))
    assert resp["error_code"] == 0 and h.group().state is S.STABLE  # range is still selected: no rebalance
    h2 = Harness()
    a, b = stable_group(h2, "a", "b", instances=["ia", "ib"])
    h2.join(a, instance="ia", protocols=(("roundrobin", b""), ("range", b"")))  # leader: rebalance
    assert h2.group().state is S.PREPARING_REBALANCE


def test_static_member_fenced_while_parked_and_kept_through_a_rebalance():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=["ia", "ib"])
    h.join(a, instance="ia", protocols=(("range", b"v2"),))  # rebalance; b (static) does not rejoin
    assert set(h.advance_beating(REBALANCE - 1, (b, 1, "ib"))) == {27}
    h.advance(1)
    g = h.group()
    assert b in g.members and g.state is S.COMPLETING_REBALANCE  # static members keep their seat
    assert h.take("join", a)["members"][1]["member_id"] == b
    resp = h.join("", client="b", instance="ib")  # b comes back with a new id during CompletingRebalance
    assert isinstance(resp, Pending) and h.group().state is S.PREPARING_REBALANCE
    assert h.join(b, instance="ib")["error_code"] == 82  # the old id is fenced
    again = h.join("", client="b", instance="ib")  # a third incarnation fences the parked second one
    assert h.take("join", resp.member_id)["error_code"] == 82
    assert isinstance(again, Pending)


def test_admin_removes_static_member_by_instance_id():
    h = Harness()
    a, b = stable_group(h, "a", "b", instances=["ia", "ib"])
    resp = h.leave({"member_id": "", "group_instance_id": "ib"})
    assert resp["members"] == [{"member_id": "", "group_instance_id": "ib", "error_code": 0}]
    assert "ib" not in h.group().static_members and h.group().state is S.PREPARING_REBALANCE
    assert h.leave({"member_id": "wrong", "group_instance_id": "ia"})["members"][0]["error_code"] == 82


def test_describe_and_list_groups():
    h = Harness()
    a, b = stable_group(h, "a", "b")
    d = h.shard.describe_groups(["g", "nope"])["groups"]
    assert d[0]["group_state"] == "Stable" and d[0]["protocol_data"] == "range"
    assert [
        (m["member_id"], m["member_assignment"], m["member_metadata"], m["client_host"]) for m in d[0]["members"]
    ] == [(a, a.encode(), b"sub", "/10.0.0.1"), (b, b.encode(), b"sub", "/10.0.0.1")]
    assert d[1] == {
        "error_code": 0,
        "group_id": "nope",
        "group_state": "Dead",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
    h.join(a, protocols=(("range", b"v2"),))
    d = h.shard.describe_groups(["g"])["groups"][0]
    assert d["group_state"] == "PreparingRebalance" and d["members"][0]["member_assignment"] == b""
    h.commit({("t", 0): 5}, group="simple")
    listed = h.shard.list_groups()["groups"]
    assert listed == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "PreparingRebalance", "group_type": "classic"},
        {"group_id": "simple", "protocol_type": "", "group_state": "Empty", "group_type": "classic"},
    ]
    assert [x["group_id"] for x in h.shard.list_groups(states_filter=["empty"])["groups"]] == ["simple"]
    assert h.shard.list_groups(types_filter=["consumer"])["groups"] == []
