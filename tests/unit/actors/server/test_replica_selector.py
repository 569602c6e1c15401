"""KIP-392's replica selectors (Kafka's RackAwareReplicaSelector and LeaderSelector) and replica.selector.class."""

from __future__ import annotations

import pytest

from actors.replication.replica_config import split_config
from actors.server.broker_config import validate
from actors.server.replica_selector import (
    ClientMetadata,
    LeaderSelector,
    PartitionView,
    RackAwareReplicaSelector,
    ReplicaView,
    selector_for,
)
from protocol.errors import InvalidConfigError

LEADER = ReplicaView(1, "a", 100, 0)


def view(*followers: ReplicaView, leader: ReplicaView = LEADER) -> PartitionView:
    return PartitionView((leader, *followers), leader)


def pick(rack: str, partition: PartitionView) -> int | None:
    chosen = RackAwareReplicaSelector().select(ClientMetadata(rack), partition)
    return None if chosen is None else chosen.broker_id


def test_rack_aware_prefers_the_leader_in_the_clients_rack():
    assert pick("a", view(ReplicaView(2, "a", 100, 0), ReplicaView(3, "b", 100, 0))) == 1


def test_rack_aware_picks_the_follower_in_the_clients_rack():
    assert pick("b", view(ReplicaView(2, "c", 100, 0), ReplicaView(3, "b", 90, 50))) == 3


def test_among_followers_the_most_caught_up_then_the_most_recently_caught_up():
    behind, ahead = ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 100, 400)
    assert pick("b", view(behind, ahead)) == 3  # the higher LEO wins over the fresher catch-up
    older, fresher = ReplicaView(2, "b", 100, 400), ReplicaView(3, "b", 100, 10)
    assert pick("b", view(older, fresher)) == 3
    assert pick("b", view(fresher, older)) == 3


def test_no_rack_or_no_replica_in_it_means_the_leader():
    p = view(ReplicaView(2, "b", 100, 0))
    assert pick("", p) == 1
    assert pick("z", p) == 1
    assert pick("b", view(ReplicaView(2, None, 100, 0))) == 1  # a broker without broker.rack is in no rack


def test_leader_selector_always_names_the_leader():
    assert LeaderSelector().select(ClientMetadata("b"), view(ReplicaView(2, "b", 100, 0))) is LEADER


def test_replica_selector_class_takes_kafkas_names():
    assert selector_for(None) is None and selector_for("") is None and selector_for("  ") is None
    assert isinstance(
        selector_for("org.apache.kafka.common.replica.RackAwareReplicaSelector"), RackAwareReplicaSelector
    )
    assert isinstance(selector_for("RackAwareReplicaSelector"), RackAwareReplicaSelector)
    assert isinstance(selector_for("org.apache.kafka.common.replica.LeaderSelector"), LeaderSelector)
    for bad in ("com.example.RackAwareReplicaSelector", "Nearest", "org.apache.kafka.common.replica.Nope"):
        with pytest.raises(InvalidConfigError, match="replica.selector.class"):
            selector_for(bad)


def test_a_broker_does_not_start_with_an_unknown_selector_and_replicas_get_the_class():
    validate({"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"})
    with pytest.raises(InvalidConfigError, match="is not a replica selector"):
        validate({"replica.selector.class": "com.example.Nearest"})
    replica, topic = split_config({"replica.selector.class": "RackAwareReplicaSelector", "retention.ms": "5"})
    assert replica["replica.selector.class"] == "RackAwareReplicaSelector" and topic == {"retention.ms": "5"}
    assert split_config({})[0]["replica.selector.class"] == ""
