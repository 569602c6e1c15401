"""The controller's metadata delta -> per-broker requests (actors/metadata/controller_requests.py), its broker
heartbeat bookkeeping and read handlers: pure, no Ray."""

from __future__ import annotations

import random

from actors.metadata.broker_heartbeats import BrokerHeartbeats
from actors.metadata.controller_config import ControllerConfig
from actors.metadata.controller_logic import ControllerLogic
from actors.metadata.controller_requests import (
    FENCE,
    REGISTER,
    LeaderAcks,
    derive_requests,
    dirty_keys,
    full_state,
    partition_state,
    prior_state,
)
from actors.metadata.image import MetadataImage
from protocol.control_messages import FULL, INCREMENTAL, StopReplicaRequest
from protocol.errors import BrokerIdNotRegisteredError, StaleBrokerEpochError, UnknownTopicOrPartitionError

EPOCH = 7


def make(n_brokers=3) -> ControllerLogic:
    logic = ControllerLogic(MetadataImage(), ControllerConfig(), random.Random(7))
    for b in range(n_brokers):
        commit(logic, logic.register_broker(b, {"log_dir": f"/d/{b}"})[0])
    return logic


def commit(logic: ControllerLogic, records: list[dict]):
    """What the actor's commit does, without I/O: prior state, replay, derive."""
    prior = prior_state(logic.image, records)
    for r in records:
        logic.image.replay(r)
    return derive_requests(logic.image, records, prior, EPOCH)


def create(logic, name="t", assignment=None, **configs):
    req = {"name": name, "replica_assignment": assignment, "configs": configs}
    recs, res = logic.create_topics([req])
    assert res[0]["error_code"] == 0, res
    return commit(logic, recs)


def test_register_broker_opens_a_channel_and_fences_the_old_incarnation_first():
    logic = make(1)
    old = logic.image.brokers[0].broker_epoch
    batch = commit(logic, logic.register_broker(0, {})[0])
    assert batch.channel_events == [(FENCE, 0, old), (REGISTER, 0, logic.image.brokers[0].broker_epoch)]
    assert batch.metadata_version == logic.image.version


def test_new_topic_sends_leader_and_isr_to_every_replica():
    logic = make(3)
    batch = create(logic, assignment=[[0, 1], [1, 2]], **{"retention.ms": 1000})
    assert sorted(batch.leader_and_isr) == [0, 1, 2]
    req = batch.leader_and_isr[1]
    assert (req.controller_epoch, req.type, req.full) == (EPOCH, INCREMENTAL, False)
    assert [s.partition for s in req.partition_states] == [0, 1]
    s = batch.leader_and_isr[0].partition_states[0]
    assert s == partition_state(logic.image, "t", 0, EPOCH, is_new=True) and s.is_new
    assert (s.leader, s.isr, s.replicas, s.controller_epoch) == (0, (0, 1), (0, 1), EPOCH)
    assert s.configs == {"retention.ms": "1000"} and s.topic_id == logic.image.topics["t"].topic_id
    # the topic's ConfigRecord reaches the hosting brokers too
    assert batch.topic_configs == {b: [("t", {"retention.ms": "1000"})] for b in (0, 1, 2)}
    assert batch.stop_replica == {} and batch.channel_events == []


def test_isr_only_change_is_not_sent_but_a_leader_change_is():
    logic = make(3)
    create(logic, assignment=[[0, 1, 2]])
    s = logic.image.partition("t", 0)
    recs, resp = logic.alter_partition("t", 0, 0, s.leader_epoch, [0, 1], s.partition_epoch)
    assert resp["error_code"] == 0 and recs
    assert commit(logic, recs).leader_and_isr == {}  # the leader asked for it
    epoch = logic.image.brokers[0].broker_epoch
    batch = commit(logic, logic.fence_broker(0, epoch))
    assert batch.channel_events == [(FENCE, 0, epoch)]
    assert sorted(batch.leader_and_isr) == [0, 1, 2]
    s = batch.leader_and_isr[1].partition_states[0]
    assert s.leader == 1 and not s.is_new  # an existing partition's new leader


def test_reassignment_stops_the_dropped_replica():
    logic = make(3)
    create(logic, assignment=[[0, 1]])
    recs, res = logic.alter_partition_reassignments([{"topic": "t", "partition": 0, "replicas": [1, 2]}])
    assert res[0]["error_code"] == 0
    batch = commit(logic, recs)
    assert sorted(batch.leader_and_isr) == [0, 1, 2] and batch.stop_replica == {}
    s = logic.image.partition("t", 0)
    recs, _ = logic.alter_partition("t", 0, s.leader, s.leader_epoch, sorted({s.leader, *s.isr, 2}), s.partition_epoch)
    batch = commit(logic, recs)
    assert batch.stop_replica == {0: StopReplicaRequest(EPOCH, (("t", 0),), delete_partitions=True)}
    assert logic.image.partition("t", 0).replicas == [1, 2]


def test_remove_topic_stops_every_replica_and_sends_nothing_else():
    logic = make(3)
    create(logic, assignment=[[0, 1], [2, 0]])
    recs, res = logic.delete_topics(["t"])
    assert res[0]["error_code"] == 0
    prior = prior_state(logic.image, recs)
    assert set(prior) == {"t"}
    batch = commit(logic, recs)
    assert {b: r.partitions for b, r in batch.stop_replica.items()} == {
        0: (("t", 0), ("t", 1)),
        1: (("t", 0),),
        2: (("t", 1),),
    }
    assert all(r.delete_partitions and r.controller_epoch == EPOCH for r in batch.stop_replica.values())
    assert batch.leader_and_isr == {} and batch.topic_configs == {}


def test_partition_created_and_removed_in_one_commit_is_not_sent():
    logic = make(1)
    recs, _ = logic.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 1}])
    topic_id = next(r["topic_id"] for r in recs if r["type"] == "Topic")
    recs.append({"type": "RemoveTopic", "name": "t", "topic_id": topic_id})
    batch = derive_requests(
        MetadataImage.from_records(logic.image.snapshot_records() + recs), recs, {"t": {"partitions": {}}}, EPOCH
    )
    assert batch.leader_and_isr == {}


def test_full_state_is_every_partition_the_broker_hosts():
    logic = make(3)
    create(logic, "a", assignment=[[0, 1], [1, 2]])
    create(logic, "b", assignment=[[2, 0]])
    req = full_state(logic.image, 0, EPOCH)
    assert req.type == FULL and req.full and req.controller_epoch == EPOCH
    assert [s.key for s in req.partition_states] == [("a", 0), ("b", 0)]
    assert [s.key for s in full_state(logic.image, 1, EPOCH).partition_states] == [("a", 0), ("a", 1)]


def test_dirty_keys():
    logic = make(2)
    recs, _ = logic.create_topics([{"name": "t", "num_partitions": 1, "replication_factor": 2}])
    recs += logic.register_broker(1, {})[0][:1]  # the FenceBroker of broker 1's old incarnation
    topics, brokers, pids = dirty_keys(recs + [{"type": "ProducerIds", "next_producer_id": 1}])
    assert (topics, brokers, pids) == ({"t"}, {1}, True)
    assert dirty_keys([]) == (set(), set(), False)


def test_dirty_keys_of_a_config_change_name_its_topic_not_the_config_key():
    """An alter_configs-only commit republishes topics/<topic> in KV (it used to name the config key, so
    readers kept the old configs and a topic called like the key would have been dropped from KV)."""
    logic = make(2)
    create(logic, "t", assignment=[[0, 1]])
    recs, res = logic.alter_configs("t", {"retention.ms": "1000"}, [])
    assert res.get("error_code", 0) == 0, res
    assert recs and all(r["type"] == "ConfigRecord" for r in recs)
    assert dirty_keys(recs) == ({"t"}, set(), False)


def test_leader_acks():
    logic = make(2)
    create(logic, assignment=[[0, 1]])
    acks = LeaderAcks()
    assert not acks.ready(logic.image, [("t", 0)])
    le = logic.image.partition("t", 0).leader_epoch
    # a follower's answer, or an error, does not count
    assert not acks.on_response(
        1, {"partitions": [{"topic": "t", "partition": 0, "error_code": 0, "leader": 0, "leader_epoch": le}]}
    )
    assert not acks.on_response(
        0, {"partitions": [{"topic": "t", "partition": 0, "error_code": 6, "leader": 0, "leader_epoch": le}]}
    )
    assert not acks.on_response(0, None)
    ok = {"partitions": [{"topic": "t", "partition": 0, "error_code": 0, "leader": 0, "leader_epoch": le}]}
    assert acks.on_response(0, ok) and not acks.on_response(0, ok)
    assert acks.ready(logic.image, [("t", 0), ("gone", 3)])
    commit(logic, logic.delete_topics(["t"])[0])
    acks.forget_removed(logic.image)
    assert acks.acked == {}


def test_heartbeat_error_and_sessions():
    logic = make(1)
    epoch = logic.image.brokers[0].broker_epoch
    assert logic.heartbeat_error(0, epoch) is None
    assert isinstance(logic.heartbeat_error(0, epoch - 1), StaleBrokerEpochError)
    assert isinstance(logic.heartbeat_error(5, 0), BrokerIdNotRegisteredError)
    commit(logic, logic.fence_broker(0, epoch))
    assert isinstance(logic.heartbeat_error(0, epoch), StaleBrokerEpochError)

    hb = BrokerHeartbeats(9.0)
    hb.seen(1, 100.0)
    assert not hb.expired(1, hb.deadline(105.0)) and hb.expired(1, hb.deadline(110.0))
    assert not hb.expired(2, hb.deadline(1000.0))  # never heard from: no session to time out
    hb.extend(110.0)
    assert not hb.expired(1, hb.deadline(110.0))


def test_read_handlers():
    logic = make(2)
    create(logic, assignment=[[0, 1]], **{"retention.ms": "5"})
    cfg = logic.describe_configs("t")
    assert cfg["error_code"] == 0 and cfg["overrides"] == {"retention.ms": "5"}
    assert cfg["configs"]["retention.ms"] == "5" and "segment.bytes" in cfg["configs"]
    assert logic.describe_configs("nope")["error_code"] == UnknownTopicOrPartitionError.code
    topics = logic.describe_topics(["t", "nope"])
    assert topics[0]["name"] == "t" and topics[0]["error_code"] == 0
    assert topics[1] == {
        "name": "nope",
        "topic_id": None,
        "error_code": UnknownTopicOrPartitionError.code,
        "error_message": "Topic 'nope' does not exist.",
        "configs": {},
        "partitions": [],
    }
    md = logic.cluster_metadata()
    assert md["version"] == logic.image.version and [b["id"] for b in md["brokers"]] == [0, 1]
    assert [t["name"] for t in md["topics"]] == ["t"]
