"""The partition balancer's plans over real metadata images built by ControllerLogic: heal (racks, loads,
min.insync.replicas, the last in-sync replica, too few brokers, the concurrency bound, a broker returning) and
balance on join (replicas, then preferred leaders, into the tolerance band), each plan applied through the
reassignment protocol the controller uses."""

from __future__ import annotations

import random
from collections import Counter

import msgpack
import pytest

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.image import MetadataImage
from actors.metadata.partition_balancer import DowntimeClock, _within, plan, tolerance_band, underloaded
from actors.metadata.partition_change import ELECT_PREFERRED, NO_LEADER
from protocol.errors import InvalidConfigError, NewLeaderElectedError

DELAY = 5000
LOST = DELAY + 1


def make(n=4, racks=None, **cfg) -> ControllerLogic:
    cfg.setdefault("heal_delay_ms", DELAY)
    logic = ControllerLogic(MetadataImage(), ControllerConfig(**cfg), random.Random(3))
    for b in range(n):
        register(logic, b, racks[b] if racks else None)
    return logic


def register(logic, b, rack=None):
    apply(logic, logic.register_broker(b, {"rack": rack, "log_dir": f"/d/{b}", "node_id": f"node{b}"})[0])


def apply(logic, records):
    for r in records:
        logic.image.replay(msgpack.unpackb(msgpack.packb(r), strict_map_key=False))


def create(logic, name="t", n=4, rf=3, assignment=None, **configs):
    req = {"name": name, "configs": {k.replace("_", "."): str(v) for k, v in configs.items()}}
    if assignment is not None:
        req["replica_assignment"] = assignment
    else:
        req.update(num_partitions=n, replication_factor=rf)
    recs, res = logic.create_topics([req])
    assert res[0]["error_code"] == 0, res
    apply(logic, recs)


def fence(logic, b):
    apply(logic, logic.fence_broker(b))


def execute(logic, p):
    """The plan's moves through alter_partition_reassignments (and a preferred election for leader moves)."""
    recs, res = logic.alter_partition_reassignments([{**m.to_dict(), "replicas": m.target} for m in p.moves])
    assert all(r["error_code"] == 0 for r in res), res
    apply(logic, recs)
    leaders = [(m.topic, m.partition) for m in p.moves if m.reason == "leaders"] + p.elections
    if leaders:
        apply(logic, logic.elect_leaders(leaders, ELECT_PREFERRED)[0])


def catch_up(logic):
    """Every live replica joins its ISR, as the leaders' AlterPartition does once the followers caught up."""
    alive = logic.image.alive_brokers()
    for t in list(logic.image.topics.values()):
        for p, s in list(t.partitions.items()):
            want = [r for r in s.replicas if r in alive]
            if s.leader == NO_LEADER or set(want) == set(s.isr):
                continue
            recs, res = logic.alter_partition(t.name, p, s.leader, s.leader_epoch, want, s.partition_epoch)
            # NEW_LEADER_ELECTED: the ISR completed a move that dropped the leader, and a target replica leads now
            assert res["error_code"] in (0, NewLeaderElectedError.code), res
            apply(logic, recs)


def parts(logic, topic="t"):
    return logic.image.topics[topic].partitions


def replica_counts(logic):
    alive = logic.image.alive_brokers()
    c = Counter({b: 0 for b in alive})
    for t in logic.image.topics.values():
        for s in t.partitions.values():
            c.update(r for r in s.replicas if r in alive)
    return c


def leader_counts(logic):
    c = Counter({b: 0 for b in logic.image.alive_brokers()})
    for t in logic.image.topics.values():
        for s in t.partitions.values():
            if s.leader != NO_LEADER:
                c[s.leader] += 1
    return c


def run_until_quiet(logic, down=None, rounds=50, check=None):
    """Plan, execute, catch up, until a round plans nothing; ``check(logic)`` after every step."""
    for _ in range(rounds):
        p = plan(logic.image, logic.config, down or {})
        if not p.moves and not p.deferred and not p.elections:
            return p
        execute(logic, p)
        if check:
            check(logic)
        catch_up(logic)
        if check:
            check(logic)
    raise AssertionError("the balancer never settled")


def no_duplicates(logic):
    for t in logic.image.topics.values():
        for s in t.partitions.values():
            assert len(set(s.replicas)) == len(s.replicas), s


# ---- heal -----------------------------------------------------------------------------------------


def test_a_lost_broker_is_healed_onto_the_live_broker_through_the_reassignment_protocol():
    logic = make(4)
    create(logic, assignment=[[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 0, 1]])
    fence(logic, 3)
    p = plan(logic.image, logic.config, {3: LOST})
    assert p.lost_brokers == [3] and not p.unhealable
    assert {(m.partition, tuple(m.target)) for m in p.moves} == {(1, (1, 2, 0)), (2, (2, 1, 0)), (3, (2, 0, 1))}
    assert all(m.reason == "heal" for m in p.moves)
    execute(logic, p)
    s = parts(logic)[1]
    assert s.adding == [0] and s.removing == [3] and s.replicas == [1, 2, 0, 3]  # add first, drop later
    assert plan(logic.image, logic.config, {3: LOST}).moves == []  # nothing started twice
    catch_up(logic)
    for q, s in parts(logic).items():
        assert 3 not in s.replicas and not s.reassigning and len(s.isr) == 3 and s.leader in s.isr, (q, s)
    assert replica_counts(logic) == {0: 4, 1: 4, 2: 4}


def test_nothing_moves_before_the_heal_delay_and_never_with_a_negative_delay():
    logic = make(4)
    create(logic, n=4, rf=3)
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: DELAY - 1})
    assert p.moves == [] and p.down_brokers == [0] and p.lost_brokers == []
    assert "down" in p.balance_skipped
    logic.config.heal_delay_ms = -1
    assert plan(logic.image, logic.config, {0: 10**9}).moves == []


def test_heal_keeps_the_partition_across_racks_before_load():
    # racks a: 0,1  b: 2,3  c: 4,5; broker 5 holds little, broker 1 nothing at all
    logic = make(6, racks=["a", "a", "b", "b", "c", "c"])
    create(logic, "t", assignment=[[0, 2, 4]])
    create(logic, "busy", assignment=[[5, 2, 0], [5, 3, 0], [5, 2, 0]])
    fence(logic, 4)
    (m,) = plan(logic.image, logic.config, {4: LOST}).moves
    # broker 1 is the least loaded, but in rack a with broker 0: rack c's broker 5 keeps three racks
    assert m.target == [0, 2, 5]


def test_heal_prefers_the_least_loaded_brokers():
    logic = make(5)
    create(logic, "t", assignment=[[0, 1, 2]])
    create(logic, "other", assignment=[[3, 1], [3, 2], [3, 1]])
    fence(logic, 0)
    (m,) = plan(logic.image, logic.config, {0: LOST}).moves
    assert m.target == [4, 1, 2]  # 4 holds nothing, 3 holds three


def test_each_heal_target_counts_the_moves_planned_before_it():
    logic = make(5)
    create(logic, "t", assignment=[[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1, 2]])
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: LOST})
    assert Counter(m.target[0] for m in p.moves) == {3: 2, 4: 2}


def test_two_lost_replicas_of_one_partition_go_to_two_brokers():
    logic = make(5)
    create(logic, "t", assignment=[[0, 1, 2]], min_insync_replicas=1)
    fence(logic, 0)
    fence(logic, 1)
    (m,) = plan(logic.image, logic.config, {0: LOST, 1: LOST}).moves
    assert sorted(m.target) == [2, 3, 4]
    execute(logic, plan(logic.image, logic.config, {0: LOST, 1: LOST}))
    catch_up(logic)
    assert sorted(parts(logic)[0].replicas) == [2, 3, 4] and len(parts(logic)[0].isr) == 3


def test_the_last_in_sync_replica_on_a_lost_broker_is_never_removed():
    logic = make(6)
    create(logic, "t", assignment=[[0, 1, 2]], min_insync_replicas=1)
    for b in (0, 1, 2):  # the fence keeps the last member: ISR [2], no leader
        fence(logic, b)
    s = parts(logic)[0]
    assert s.isr == [2] and s.leader == NO_LEADER
    p = plan(logic.image, logic.config, {0: LOST, 1: LOST, 2: LOST})
    assert p.moves == []
    (u,) = p.unhealable
    assert u["topic"] == "t" and u["lost"] == [0, 1, 2] and "no live in-sync replica" in u["reason"]


def test_too_few_live_brokers_for_the_replication_factor_is_reported_not_half_done():
    logic = make(3)
    create(logic, n=3, rf=3)
    fence(logic, 2)
    p = plan(logic.image, logic.config, {2: LOST})
    assert p.moves == [] and len(p.unhealable) == 3
    assert all("too few live brokers (2) for replication factor 3" in u["reason"] for u in p.unhealable)
    assert p.balance_skipped


def test_a_partition_below_min_insync_by_its_replication_factor_is_not_moved():
    logic = make(4)
    create(logic, "t", assignment=[[0, 1]], min_insync_replicas=3)
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: LOST})
    assert p.moves == [] and "below min.insync.replicas" in p.unhealable[0]["reason"]


def test_heal_never_removes_a_live_replica_and_the_isr_never_shrinks_through_a_move():
    logic = make(5)
    create(logic, n=8, rf=3, min_insync_replicas=2)
    fence(logic, 1)
    before = {q: (list(s.isr), [r for r in s.replicas if r != 1]) for q, s in parts(logic).items()}
    p = plan(logic.image, logic.config, {1: LOST})
    for m in p.moves:
        assert set(m.replicas) - set(m.target) == {1}
    execute(logic, p)
    for q, s in parts(logic).items():  # mid-move: the ISR and the live replicas are all still there
        assert set(before[q][0]) <= set(s.isr) and set(before[q][1]) <= set(s.replicas)
        assert len(s.isr) >= 2


def test_the_concurrency_bound_holds_back_moves_and_counts_the_running_ones():
    logic = make(4, movements_per_broker=2)
    create(logic, "t", assignment=[[0, 1, 2]] * 6)
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: LOST})
    # every move adds broker 3 (the only free broker): two at a time
    assert len(p.moves) == 2 and p.deferred == 4
    execute(logic, p)
    p2 = plan(logic.image, logic.config, {0: LOST})
    assert p2.moves == [] and p2.deferred == 4 and p2.in_progress == 2
    catch_up(logic)
    p3 = plan(logic.image, logic.config, {0: LOST})
    assert len(p3.moves) == 2
    run_until_quiet(logic, {0: LOST}, check=no_duplicates)
    assert all(sorted(s.replicas) == [1, 2, 3] and len(s.isr) == 3 for s in parts(logic).values())


def test_leaders_count_against_the_bound_too():
    logic = make(6, movements_per_broker=1)
    create(logic, "t", assignment=[[1, 0, 2], [1, 0, 3]])
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: LOST})
    assert len(p.moves) == 1 and p.deferred == 1  # both would copy from leader 1


def test_a_move_onto_a_broker_that_is_then_lost_is_healed_again():
    logic = make(5)
    create(logic, "t", assignment=[[0, 1, 2]])
    fence(logic, 0)
    execute(logic, plan(logic.image, logic.config, {0: LOST}))
    s = parts(logic)[0]
    (new,) = s.adding
    fence(logic, new)
    (m,) = plan(logic.image, logic.config, {0: LOST, new: LOST}).moves
    assert new not in m.target and 0 not in m.target and len(set(m.target)) == 3
    execute(logic, plan(logic.image, logic.config, {0: LOST, new: LOST}))
    catch_up(logic)
    s = parts(logic)[0]
    assert not s.reassigning and len(s.isr) == 3 and 0 not in s.replicas and new not in s.replicas


def test_a_broker_back_mid_heal_and_after_it_loses_nothing_and_then_receives_replicas():
    logic = make(4)
    create(logic, n=4, rf=3)
    fence(logic, 3)
    execute(logic, plan(logic.image, logic.config, {3: LOST}))
    register(logic, 3)  # back mid-move: it is still a replica (removing) and rejoins as a follower
    clock = DowntimeClock()
    assert clock.observe(logic.image, 100) == {}
    p = plan(logic.image, logic.config, {})
    assert p.moves == [] and p.balance_skipped == "reassignments in progress"
    catch_up(logic)
    assert all(3 not in s.replicas and len(s.isr) == 3 for s in parts(logic).values())
    assert replica_counts(logic)[3] == 0
    # the returned broker holds nothing now: balancing gives it its share, then leaderships
    final = run_until_quiet(logic, check=no_duplicates)
    assert final.balanced and replica_counts(logic) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert sorted(leader_counts(logic).values()) == [1, 1, 1, 1]


# ---- balance --------------------------------------------------------------------------------------


def test_tolerance_band():
    assert tolerance_band(12, 4, 10) == (3, 3)
    assert tolerance_band(18, 4, 10) == (4, 5)
    assert tolerance_band(400, 4, 10) == (90, 110)
    assert tolerance_band(7, 3, 0) == (2, 3)
    assert tolerance_band(0, 0, 10) == (0, 0)


def test_a_joining_broker_receives_replicas_then_leaders_within_the_tolerance():
    logic = make(3)
    create(logic, "a", n=6, rf=3)
    create(logic, "b", n=6, rf=2)
    register(logic, 3)
    assert replica_counts(logic)[3] == 0
    p = plan(logic.image, logic.config, {})
    assert p.moves and all(m.reason == "replicas" for m in p.moves)
    assert all(3 in m.target and len(set(m.target)) == len(m.target) for m in p.moves)
    final = run_until_quiet(logic, check=no_duplicates)
    counts = replica_counts(logic)
    lo, hi = tolerance_band(30, 4, 10)
    assert final.balanced and all(lo <= n <= hi for n in counts.values()), counts
    leaders = leader_counts(logic)
    assert max(leaders.values()) - min(leaders.values()) <= 1, leaders
    for t in logic.image.topics.values():
        for s in t.partitions.values():
            assert len(s.isr) == len(s.replicas) and s.leader == s.replicas[0]


def test_balance_keeps_racks_and_brokers_distinct():
    logic = make(4, racks=["a", "a", "b", "b"])
    create(logic, "t", n=8, rf=2)
    register(logic, 4, "c")
    register(logic, 5, "c")

    def racks_kept(lg):
        no_duplicates(lg)
        for s in parts(lg).values():
            racks = {lg.image.brokers[r].rack for r in s.replicas}
            assert len(racks) == len(s.replicas), s

    final = run_until_quiet(logic, check=racks_kept)
    assert final.balanced, final.to_dict()
    assert min(replica_counts(logic).values()) >= 2


def test_balance_waits_for_a_healthy_cluster():
    logic = make(3)
    create(logic, n=6, rf=2)
    register(logic, 3)
    fence(logic, 0)
    p = plan(logic.image, logic.config, {0: 10})
    assert p.moves == [] and "down" in p.balance_skipped
    register(logic, 0)  # back: its partitions are behind until it catches up
    p = plan(logic.image, logic.config, {})
    assert p.moves == [] and "under-replicated" in p.balance_skipped
    catch_up(logic)
    assert plan(logic.image, logic.config, {}).moves


def test_balance_is_bounded_per_broker():
    logic = make(2, movements_per_broker=3)
    create(logic, "t", n=20, rf=1)
    register(logic, 2)
    p = plan(logic.image, logic.config, {})
    assert len(p.moves) == 3 and p.deferred >= 1
    assert plan(logic.image, logic.config, {}, balance=False).moves == []


def test_a_balanced_cluster_plans_nothing():
    logic = make(4)
    create(logic, n=8, rf=3)
    p = plan(logic.image, logic.config, {})
    assert p.moves == [] and p.balanced and not p.balance_skipped
    assert p.to_dict()["balanced"] is True


def test_the_downtime_clock():
    logic = make(3)
    create(logic, "t", n=1, rf=1)
    clock = DowntimeClock()
    assert clock.observe(logic.image, 1000) == {}
    fence(logic, 1)
    assert clock.observe(logic.image, 2000) == {1: 0}
    assert clock.observe(logic.image, 9000) == {1: 7000}
    register(logic, 1)
    assert clock.observe(logic.image, 9500) == {}
    fence(logic, 1)
    assert clock.observe(logic.image, 10000) == {1: 0}  # a new absence starts a new clock


def test_a_replica_on_a_never_registered_broker_counts_as_down():
    img = MetadataImage.from_records(
        [
            {"type": "RegisterBroker", "broker_id": 0, "broker_epoch": 1, "rack": None, "log_dir": ""},
            {"type": "RegisterBroker", "broker_id": 1, "broker_epoch": 2, "rack": None, "log_dir": ""},
            {"type": "Topic", "name": "t", "topic_id": "x"},
            {
                "type": "Partition",
                "topic": "t",
                "topic_id": "x",
                "partition": 0,
                "replicas": [0, 7],
                "isr": [0],
                "leader": 0,
                "leader_epoch": 0,
                "partition_epoch": 0,
            },
        ]
    )
    clock = DowntimeClock()
    clock.observe(img, 0)
    down = clock.observe(img, LOST)
    assert down == {7: LOST}
    (m,) = plan(img, ControllerConfig(heal_delay_ms=DELAY), down).moves
    assert m.target == [0, 1]


def test_config_keys_and_refusals():
    c = ControllerConfig.from_props(
        {
            "replica.auto.heal.delay.ms": "3000",
            "replica.auto.balance.enable": "false",
            "num.concurrent.partition.movements.per.broker": "2",
            "replica.balance.tolerance.percentage": "20",
            "replica.balance.check.interval.ms": "500",
            "min.insync.replicas": "2",
        }
    )
    assert (c.heal_delay_ms, c.auto_balance, c.movements_per_broker) == (3000, False, 2)
    assert (c.balance_tolerance_pct, c.balance_check_interval_ms, c.min_insync_replicas) == (20, 500, 2)
    d = ControllerConfig.from_props({})
    assert (d.heal_delay_ms, d.auto_balance, d.movements_per_broker, d.balance_tolerance_pct) == (600000, True, 5, 10)
    with pytest.raises(InvalidConfigError, match="num.concurrent.partition.movements.per.broker"):
        ControllerConfig.from_props({"num.concurrent.partition.movements.per.broker": "0"})
    with pytest.raises(InvalidConfigError):
        ControllerConfig.from_props({"replica.auto.heal.delay.ms": "soon"})


def test_underloaded_marks_a_joining_broker_not_a_returning_one():
    logic = make(3)
    create(logic, n=6, rf=2)
    assert not any(underloaded(logic.image, b, 10) for b in range(3))
    register(logic, 3)
    assert underloaded(logic.image, 3, 10)
    fence(logic, 0)
    register(logic, 0)  # back with its replicas still assigned: nothing to give it
    assert not underloaded(logic.image, 0, 10)
    assert not underloaded(logic.image, 9, 10)  # not a live broker


def test_a_partition_without_a_leader_is_reported_not_moved():
    recs = [
        {"type": "RegisterBroker", "broker_id": b, "broker_epoch": b + 1, "rack": None, "log_dir": ""}
        for b in (0, 1, 2)
    ]
    recs += [
        {"type": "FenceBroker", "broker_id": 2, "broker_epoch": 3},
        {"type": "Topic", "name": "t", "topic_id": "x"},
        {
            "type": "Partition",
            "topic": "t",
            "topic_id": "x",
            "partition": 0,
            "replicas": [1, 2],
            "isr": [1],
            "leader": NO_LEADER,
            "leader_epoch": 0,
            "partition_epoch": 0,
        },
    ]
    p = plan(MetadataImage.from_records(recs), ControllerConfig(heal_delay_ms=0), {2: 1})
    assert p.moves == [] and p.unhealable[0]["reason"] == "no leader to copy from"


# ---- invariants over random clusters ---------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(3, 7),
    racks=st.integers(1, 3),
    topics=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 3)), min_size=1, max_size=3),
    lost=st.sets(st.integers(0, 6), max_size=2),
    bound=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_every_round_keeps_the_invariants_and_the_balancer_settles(n, racks, topics, lost, bound, seed):
    rack_names = [f"r{b % racks}" for b in range(n)]
    logic = ControllerLogic(
        MetadataImage(), ControllerConfig(heal_delay_ms=DELAY, movements_per_broker=bound), random.Random(seed)
    )
    for b in range(n):
        register(logic, b, rack_names[b])
    for i, (parts_n, rf) in enumerate(topics):
        create(logic, f"t{i}", n=parts_n, rf=min(rf, n), min_insync_replicas=1)
    lost = {b for b in lost if b < n}
    for b in sorted(lost):
        fence(logic, b)
    down = {b: LOST for b in lost}
    alive = logic.image.alive_brokers()

    def invariants(lg):
        no_duplicates(lg)
        for t in lg.image.topics.values():
            for s in t.partitions.values():
                assert s.leader == NO_LEADER or s.leader in s.isr

    for _ in range(60):
        p = plan(logic.image, logic.config, down)
        running = Counter()
        for t in logic.image.topics.values():
            for s in t.partitions.values():
                if s.reassigning:
                    running.update(r for r in {*s.adding, s.leader} if r in alive)
        for m in p.moves:
            s = logic.image.partition(m.topic, m.partition)
            assert len(set(m.target)) == len(m.target) == len(s.target_replicas)  # the RF is kept
            assert not set(m.target) & lost  # nothing moves onto a lost broker
            if m.reason == "heal":
                assert set(s.target_replicas) - set(m.target) <= lost  # heal removes lost replicas only
            adding = [r for r in m.target if r not in s.target_replicas]
            if m.reason != "leaders":
                running.update(r for r in {*adding, s.leader} if r in alive)
        assert all(v <= bound for v in running.values()), running  # the bound, with the running ones
        if not p.moves and not p.deferred and not p.elections:
            break
        execute(logic, p)
        invariants(logic)
        catch_up(logic)
        invariants(logic)
    else:
        raise AssertionError("the balancer never settled")
    final = plan(logic.image, logic.config, down)
    unhealable = {(u["topic"], u["partition"]) for u in final.unhealable}
    for t in logic.image.topics.values():
        for q, s in t.partitions.items():
            if (t.name, q) in unhealable:
                continue
            assert not set(s.replicas) & lost and not s.reassigning, (t.name, q, s)
            assert set(s.isr) == set(s.replicas)
    if not lost and racks == 1:  # nothing in the way: the replica band is reached
        assert final.balance_skipped == "" and _within(final.replicas_per_broker, final.replica_band), final
        if all(min(rf, n) >= 2 for _, rf in topics):  # leaders move by reorders only: RF 1 partitions cannot
            assert final.balanced, final.to_dict()
