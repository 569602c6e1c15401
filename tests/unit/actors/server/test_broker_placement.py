"""Which node each broker runs on (actors/server/broker_placement.py) and the per-broker config lines."""

from __future__ import annotations

import pytest

from actors.server.broker_config import broker_overrides
from actors.server.broker_placement import BrokerPlacement, RayNode, node_indexes, place_brokers, returned_nodes
from protocol.errors import InvalidConfigError


def _nodes(*specs):
    return [RayNode(f"id{i}", addr, labels or {}, res or {}) for i, (addr, labels, res) in enumerate(specs)]


FOUR = _nodes(("10.0.0.10", {}, {}), ("10.0.0.9", {}, {}), ("10.0.0.11", {}, {}), ("10.0.0.2", {}, {}))


def test_no_two_brokers_share_a_node_while_a_node_has_none():
    placed = place_brokers(FOUR, 3, BrokerPlacement())
    assert len({n.node_id for n in placed}) == 3
    # a stable order, by address numerically: 10.0.0.2, .9, .10, .11
    assert [n.address for n in placed] == ["10.0.0.2", "10.0.0.9", "10.0.0.10"]
    assert place_brokers(list(reversed(FOUR)), 3, BrokerPlacement()) == placed  # Ray's node order does not matter
    six = place_brokers(FOUR, 6, BrokerPlacement())
    counts = sorted([sum(1 for n in six if n.node_id == m.node_id) for m in FOUR])
    assert counts == [1, 1, 2, 2]  # spread evenly once every node has one


def test_brokers_per_node_caps_and_refuses_what_does_not_fit():
    two = FOUR[:2]
    placed = place_brokers(two, 4, BrokerPlacement(brokers_per_node=2))
    assert node_indexes(placed) == [0, 0, 1, 1]
    with pytest.raises(InvalidConfigError, match="5 brokers do not fit on 2 node"):
        place_brokers(two, 5, BrokerPlacement(brokers_per_node=2))
    with pytest.raises(InvalidConfigError, match="at least 1"):
        place_brokers(two, 1, BrokerPlacement(brokers_per_node=0))


def test_nodes_chosen_by_label_value_label_key_or_resource():
    nodes = _nodes(
        ("10.0.0.1", {"rafka.io/broker": "yes", "zone": "a"}, {}),
        ("10.0.0.2", {"zone": "b"}, {"rafka.io/broker": 1.0}),
        ("10.0.0.3", {"rafka.io/broker": "no"}, {}),
    )
    assert [n.address for n in place_brokers(nodes, 2, BrokerPlacement(node_label="rafka.io/broker=yes"))] == [
        "10.0.0.1",
        "10.0.0.1",
    ]
    assert {n.address for n in place_brokers(nodes, 2, BrokerPlacement(node_label="rafka.io/broker"))} == {
        "10.0.0.1",
        "10.0.0.3",
    }
    assert [n.address for n in place_brokers(nodes, 1, BrokerPlacement(node_resource="rafka.io/broker"))] == [
        "10.0.0.2"
    ]
    with pytest.raises(InvalidConfigError, match="no alive Ray node matches label 'gpu=yes'"):
        place_brokers(nodes, 1, BrokerPlacement(node_label="gpu=yes"))


def test_node_indexes_count_brokers_per_node():
    a, b = FOUR[0], FOUR[1]
    assert node_indexes([a, b, a, a, b]) == [0, 0, 1, 2, 1]


def test_a_brokers_own_lines_win_over_the_shared_config():
    shared = {"broker.rack": "r0", "broker.1.broker.rack": "r1", "broker.10.x": "y", "log.dirs": "/d"}
    assert broker_overrides(shared, 1)["broker.rack"] == "r1"
    assert broker_overrides(shared, 0)["broker.rack"] == "r0"
    assert "x" not in broker_overrides(shared, 1)  # broker.10.* is broker 10's, not broker 1's
    assert broker_overrides(shared, 10)["x"] == "y"


def test_a_broker_is_started_again_only_when_its_machine_is_back_as_a_new_ray_node():
    homes = {0: RayNode("old0", "10.0.0.1"), 1: RayNode("id1", "10.0.0.2"), 2: RayNode("old2", "10.0.0.3")}
    nodes = [RayNode("new0", "10.0.0.1"), RayNode("id1", "10.0.0.2"), RayNode("id9", "10.0.0.9")]
    got = returned_nodes(homes, nodes, running={2})
    # broker 0: its machine is back (same address, new node): again there. Broker 1: its node never went away (it
    # was stopped on purpose): left alone. Broker 2: its machine has not come back (10.0.0.3 is gone), and it runs.
    assert got == {0: RayNode("new0", "10.0.0.1")}
    assert returned_nodes(homes, nodes, running={0, 1, 2}) == {}  # running brokers are never touched


def test_a_broker_refuses_a_default_segment_size_under_kafka_4s_floor():
    from actors.server.broker_config import validate

    validate({"log.segment.bytes": 1 << 20})
    validate({})
    with pytest.raises(InvalidConfigError, match="log.segment.bytes: Value must be at least 1048576"):
        validate({"log.segment.bytes": 1024})
    with pytest.raises(InvalidConfigError, match="Not a number"):
        validate({"log.segment.bytes": "big"})
