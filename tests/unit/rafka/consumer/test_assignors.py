"""Client-side assignors (Kafka's javadoc examples, balance, stickiness, KIP-429) and ConsumerProtocol bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_sticky_user_data,
    encode_subscription,
    get_assignor,
    perform_assignment,
    validate_cooperative_assignment,
)

TP = TopicPartition


def tps(spec: str) -> set[TopicPartition]:
    """'t0p0 t1p2' -> {TP('t0', 0), TP('t1', 2)}"""
    out = set()
    for item in spec.split():
        topic, p = item.rsplit("p", 1)
        out.add(TP(topic, int(p)))
    return out


def as_sets(result: dict[str, Assignment]) -> dict[str, set]:
    return {m: set(a.partitions) for m, a in result.items()}


def sub(*topics, **kw) -> Subscription:
    return Subscription(list(topics), **kw)


# ------------------------------------------------------------------------------ ConsumerProtocol bytes


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def s(x):
    return i16(len(x)) + x.encode()


def test_subscription_v1_golden_bytes():
    data = encode_subscription(Subscription(["a", "bc"], b"UD", [TP("a", 0), TP("a", 2), TP("bc", 1)]))
    assert data == (
        i16(1)
        + i32(2)
        + s("a")
        + s("bc")
        + i32(2)
        + b"UD"
        + i32(2)
        + s("a")
        + i32(2)
        + i32(0)
        + i32(2)
        + s("bc")
        + i32(1)
        + i32(1)
    )
    assert encode_subscription(Subscription(["a"]), version=0) == i16(0) + i32(1) + s("a") + i32(-1)
    v3 = encode_subscription(Subscription(["a"], None, [], 7, "rack-1"), version=3)
    assert v3 == i16(3) + i32(1) + s("a") + i32(-1) + i32(0) + i32(7) + s("rack-1")
    assert decode_subscription(v3) == Subscription(["a"], None, [], 7, "rack-1")


def test_assignment_golden_bytes_and_empty():
    data = encode_assignment(Assignment([TP("t", 1), TP("t", 0)], None))
    assert data == i16(1) + i32(1) + s("t") + i32(2) + i32(1) + i32(0) + i32(-1)
    assert decode_assignment(data) == Assignment([TP("t", 1), TP("t", 0)], None)
    assert decode_assignment(b"") == Assignment([])  # the coordinator's empty assignment


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's schema loader
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_bytes_match_kafka_python(version):
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    ours = Subscription(["t1", "t2"], b"\x00\x01", [TP("t1", 0), TP("t1", 3), TP("t2", 1)], 5, "r")
    theirs = ConsumerProtocolSubscription(
        version,
        topics=["t1", "t2"],
        user_data=b"\x00\x01",
        owned_partitions=[("t1", [0, 3]), ("t2", [1])],
        generation_id=5,
        rack_id="r",
    )
    assert encode_subscription(ours, version) == theirs.encode(version=version)
    decoded = decode_subscription(theirs.encode(version=version))
    assert decoded.topics == ours.topics and decoded.user_data == ours.user_data
    if version >= 1:
        assert decoded.owned_partitions == ours.owned_partitions


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_assignment_bytes_match_kafka_python():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

    theirs = ConsumerProtocolAssignment(1, assigned_partitions=[("a", [0, 1]), ("b", [2])], user_data=b"x")
    ours = Assignment([TP("a", 0), TP("a", 1), TP("b", 2)], b"x")
    assert encode_assignment(ours) == theirs.encode(version=1)
    assert decode_assignment(theirs.encode(version=3)) == ours


def test_decoders_accept_newer_versions_and_reject_garbage():
    future = encode_subscription(Subscription(["x"], None, [TP("x", 1)], 3, None), version=3)
    future = i16(9) + future[2:] + b"extra-field-bytes"
    assert decode_subscription(future).topics == ["x"]
    with pytest.raises(ValueError):
        decode_subscription(b"\x00\x01\x00\x00\x00\x05")


def test_sticky_user_data_v1_and_v0():
    data = encode_sticky_user_data([TP("t", 0), TP("u", 2)], 4)
    assert data == i32(2) + s("t") + i32(1) + i32(0) + s("u") + i32(1) + i32(2) + i32(4)
    assert decode_sticky_user_data(data) == ([TP("t", 0), TP("u", 2)], 4)
    assert decode_sticky_user_data(data[:-4]) == ([TP("t", 0), TP("u", 2)], -1)  # v0: no generation
    assert decode_sticky_user_data(b"\xff") == ([], -1)
    assert decode_sticky_user_data(None) == ([], -1)


# ------------------------------------------------------------------------------ Kafka javadoc examples


def test_range_javadoc_example():
    r = RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert as_sets(r) == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_range_orders_static_members_first_by_instance_id():
    subs = {
        "a-dyn": sub("t"),
        "z-static": sub("t", group_instance_id="i1"),
        "b-static": sub("t", group_instance_id="i2"),
    }
    r = RangeAssignor().assign({"t": 5}, subs)
    assert as_sets(r) == {"z-static": tps("tp0 tp1"), "b-static": tps("tp2 tp3"), "a-dyn": tps("tp4")}


def test_roundrobin_javadoc_examples():
    r = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert as_sets(r) == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}
    r = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3}, {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")}
    )
    assert as_sets(r) == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1 t2p0 t2p1 t2p2")}


def sticky_round(assignor_cls, partitions, subs_topics: dict, previous: dict | None = None, generation=1):
    """One rebalance: members report ``previous`` ownership the way their protocol does."""
    subs = {}
    for m, topics in subs_topics.items():
        owned = sorted(previous.get(m, ())) if previous else []
        if assignor_cls is StickyAssignor:
            subs[m] = Subscription(list(topics), encode_sticky_user_data(owned, generation) if previous else None)
        else:
            subs[m] = Subscription(list(topics), None, owned, generation if previous else -1)
    return as_sets(assignor_cls().assign(partitions, subs))


def test_sticky_javadoc_example_1():
    parts = {f"t{i}": 2 for i in range(4)}
    everyone = ["t0", "t1", "t2", "t3"]
    first = sticky_round(StickyAssignor, parts, {"C0": everyone, "C1": everyone, "C2": everyone})
    assert first == {"C0": tps("t0p0 t1p1 t3p0"), "C1": tps("t0p1 t2p0 t3p1"), "C2": tps("t1p0 t2p1")}
    second = sticky_round(StickyAssignor, parts, {"C0": everyone, "C2": everyone}, first)
    # C1 left: C0 and C2 keep everything they had and split C1's three partitions 1/2 (balanced 4/4).
    assert first["C0"] <= second["C0"] and first["C2"] <= second["C2"]
    assert len(second["C0"]) == len(second["C2"]) == 4 and second["C0"] | second["C2"] == tps(
        "t0p0 t0p1 t1p0 t1p1 t2p0 t2p1 t3p0 t3p1"
    )


def test_sticky_javadoc_example_2_different_subscriptions():
    parts = {"t0": 1, "t1": 2, "t2": 3}
    topics = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    first = sticky_round(StickyAssignor, parts, topics)
    assert first == {"C0": tps("t0p0"), "C1": tps("t1p0 t1p1"), "C2": tps("t2p0 t2p1 t2p2")}
    del topics["C0"]
    second = sticky_round(StickyAssignor, parts, topics, first)
    assert second == {"C1": tps("t1p0 t1p1 t0p0"), "C2": tps("t2p0 t2p1 t2p2")}  # roundrobin would move 3


def test_sticky_eager_user_data_round_trip_through_on_assignment():
    a = StickyAssignor()
    assert a.subscription_user_data(["t"]) is None
    a.on_assignment(Assignment([TP("t", 1)]), 6)
    assert decode_sticky_user_data(a.subscription_user_data(["t"])) == ([TP("t", 1)], 6)
    c = CooperativeStickyAssignor()
    c.on_assignment(Assignment([TP("t", 1)]), 6)
    assert c.subscription_user_data(["t"]) == i32(6)
    owned, gen = c.member_data(Subscription(["t"], i32(6), [TP("t", 1)]))
    assert (owned, gen) == ([TP("t", 1)], 6)


def test_sticky_ownership_resolution_by_generation():
    parts = {"t": 4}
    subs = {
        "A": Subscription(["t"], None, [TP("t", 0), TP("t", 1)], 5),
        "B": Subscription(["t"], None, [TP("t", 1), TP("t", 2)], 5),  # t1 double-claimed in gen 5
        "C": Subscription(["t"], None, [TP("t", 3), TP("t", 0)], 4),  # stale claim on t0
    }
    owned, claimants, contested = CooperativeStickyAssignor()._owned(parts, subs)
    assert contested == {TP("t", 1)} and claimants[TP("t", 0)] == {"A", "C"}
    assert owned == {"A": [TP("t", 0)], "B": [TP("t", 2)], "C": [TP("t", 3)]}
    result = as_sets(CooperativeStickyAssignor().assign(parts, subs))
    # t1 is claimed by A and B, t0 also by C: nobody receives them while another claimant holds them
    assert all(TP("t", 1) not in ps for ps in result.values())
    assert result["A"] == {TP("t", 0)} and TP("t", 0) not in result["C"]


# ------------------------------------------------------------------------------ cooperative (KIP-429)


def test_cooperative_two_phase_rebalance():
    parts = {"t": 6}
    first = sticky_round(CooperativeStickyAssignor, parts, {"A": ["t"], "B": ["t"]})
    assert first == {"A": tps("tp0 tp2 tp4"), "B": tps("tp1 tp3 tp5")}
    # C joins. Round 1: A and B each give up one partition, but C gets nothing yet.
    round1 = sticky_round(CooperativeStickyAssignor, parts, {"A": ["t"], "B": ["t"], "C": ["t"]}, first, 1)
    assert round1["C"] == set() and len(round1["A"]) == len(round1["B"]) == 2
    assert round1["A"] < first["A"] and round1["B"] < first["B"]
    validate_cooperative_assignment(first, round1)
    eager = sticky_round(StickyAssignor, parts, {"A": ["t"], "B": ["t"], "C": ["t"]}, first, 1)
    assert eager["C"] == (first["A"] - round1["A"]) | (first["B"] - round1["B"])  # the same target
    # A and B revoked; they rejoin with what they still own. Round 2 hands the freed partitions to C.
    round2 = sticky_round(CooperativeStickyAssignor, parts, {"A": ["t"], "B": ["t"], "C": ["t"]}, round1, 2)
    assert round2 == eager
    validate_cooperative_assignment(round1, round2)


def test_validate_cooperative_assignment_rejects_handing_over_an_owned_partition():
    with pytest.raises(ValueError, match="still own"):
        validate_cooperative_assignment({"A": [TP("t", 0)]}, {"B": [TP("t", 0)], "A": []})


def test_perform_assignment_from_join_members():
    members = [
        {"member_id": "m1", "group_instance_id": None, "metadata": encode_subscription(Subscription(["t"]))},
        {"member_id": "m2", "group_instance_id": None, "metadata": encode_subscription(Subscription(["t", "gone"]))},
    ]
    out = perform_assignment(get_assignor("range"), members, {"t": 3})
    assert {m: decode_assignment(b).partitions for m, b in out.items()} == {
        "m1": [TP("t", 0), TP("t", 1)],
        "m2": [TP("t", 2)],
    }
    with pytest.raises(ValueError):
        get_assignor("nope")


# ------------------------------------------------------------------------------ properties


@st.composite
def scenario(draw, same_subscriptions=False):
    n_topics = draw(st.integers(1, 4))
    partitions = {f"t{i}": draw(st.integers(1, 6)) for i in range(n_topics)}
    n_members = draw(st.integers(1, 6))
    all_topics = sorted(partitions) + ["missing"]
    if same_subscriptions:
        topics = draw(st.lists(st.sampled_from(all_topics), min_size=1, unique=True))
        subs = {f"m{i}": list(topics) for i in range(n_members)}
    else:
        subs = {f"m{i}": draw(st.lists(st.sampled_from(all_topics), min_size=1, unique=True)) for i in range(n_members)}
    return partitions, subs


def eligible(partitions, topics):
    return {TP(t, p) for t in topics if t in partitions for p in range(partitions[t])}


def check_valid(partitions, subs, result, complete=True):
    seen = [tp for ps in result.values() for tp in ps]
    assert len(seen) == len(set(seen)), "a partition has two owners"
    for m, ps in result.items():
        assert ps <= eligible(partitions, subs[m])
    if complete:
        assert set(seen) == set().union(*(eligible(partitions, t) for t in subs.values()))


def check_sticky_balanced(partitions, subs, result):
    """No partition could move to an eligible member with at least two fewer partitions."""
    for m, ps in result.items():
        for tp in ps:
            for o in result:
                if o != m and tp.topic in subs[o]:
                    assert len(ps) <= len(result[o]) + 1, (m, o, tp)


@settings(max_examples=60, deadline=None)
@given(scenario(), st.sampled_from(["range", "roundrobin", "sticky"]))
def test_every_partition_exactly_once(sc, name):
    partitions, subs = sc
    result = as_sets(get_assignor(name).assign(partitions, {m: Subscription(t) for m, t in subs.items()}))
    check_valid(partitions, subs, result)
    if name == "sticky":
        check_sticky_balanced(partitions, subs, result)


@settings(max_examples=60, deadline=None)
@given(scenario(), st.data())
def test_sticky_stays_valid_balanced_and_keeps_what_it_can(sc, data):
    partitions, subs = sc
    first = sticky_round(StickyAssignor, partitions, subs)
    # membership changes: some members leave, some join (possibly with other subscriptions)
    leavers = data.draw(st.sets(st.sampled_from(sorted(subs))))
    subs2 = {m: t for m, t in subs.items() if m not in leavers}
    for i in range(data.draw(st.integers(0 if subs2 else 1, 3))):
        subs2[f"new{i}"] = data.draw(st.lists(st.sampled_from(sorted(partitions)), min_size=1, unique=True))
    second = sticky_round(StickyAssignor, partitions, subs2, first, 1)
    check_valid(partitions, subs2, second)
    check_sticky_balanced(partitions, subs2, second)
    # a member keeps a partition unless balance needs it elsewhere: a partition moving between two
    # staying members never leaves the giver worse off than the receiver by more than one
    for m in subs2:
        for tp in second[m] - first.get(m, set()):
            owner = next((o for o, ps in first.items() if tp in ps and o in subs2), None)
            if owner is not None:
                assert len(second[owner]) >= len(second[m]) - 1, (tp, owner, m)
    # nothing changed -> nothing moves
    assert sticky_round(StickyAssignor, partitions, subs2, second, 2) == second


@settings(max_examples=50, deadline=None)
@given(scenario(same_subscriptions=True), st.data())
def test_sticky_moves_the_minimum_with_equal_subscriptions(sc, data):
    partitions, subs = sc
    topics = next(iter(subs.values()))
    first = sticky_round(StickyAssignor, partitions, subs)
    members = sorted(subs) + [f"new{i}" for i in range(data.draw(st.integers(0, 3)))]
    members = data.draw(st.lists(st.sampled_from(members), min_size=1, unique=True))
    second = sticky_round(StickyAssignor, partitions, {m: topics for m in members}, first, 1)
    check_valid(partitions, {m: topics for m in members}, second)
    total = len(eligible(partitions, topics))
    lo, hi = total // len(members), -(-total // len(members))
    assert max(map(len, second.values())) - min(map(len, second.values())) <= 1
    owned = [len(first.get(m, ())) for m in members]
    # the most a balanced assignment can keep: min(owned, lo) each, plus one more for up to total % n
    # members that owned at least hi
    best_kept = sum(min(o, lo) for o in owned) + min(total % len(members), sum(o >= hi for o in owned)) * (hi - lo)
    kept = sum(len(second[m] & first.get(m, set())) for m in members)
    assert kept == best_kept


@settings(max_examples=50, deadline=None)
@given(scenario(), st.data())
def test_cooperative_never_hands_over_an_owned_partition_and_converges(sc, data):
    partitions, subs = sc
    owned = sticky_round(CooperativeStickyAssignor, partitions, subs)
    leavers = data.draw(st.sets(st.sampled_from(sorted(subs))))
    subs2 = {m: t for m, t in subs.items() if m not in leavers}
    for i in range(data.draw(st.integers(0 if subs2 else 1, 2))):
        subs2[f"new{i}"] = data.draw(st.lists(st.sampled_from(sorted(partitions)), min_size=1, unique=True))
    owned = {m: ps for m, ps in owned.items() if m in subs2}  # leavers released theirs
    for generation in range(1, 5):
        result = sticky_round(CooperativeStickyAssignor, partitions, subs2, owned, generation)
        check_valid(partitions, subs2, result, complete=False)
        validate_cooperative_assignment(owned, result)
        if result == {m: owned.get(m, set()) for m in subs2}:
            break
        owned = result  # members revoke what they lost and keep the rest
    else:
        raise AssertionError("cooperative rebalancing did not converge")
    check_valid(partitions, subs2, result)
    check_sticky_balanced(partitions, subs2, result)
