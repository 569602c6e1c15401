"""protocol.control_messages: typed LeaderAndIsr / StopReplica / AlterPartition messages, frozen and slotted."""

import dataclasses
import pickle

import pytest

from protocol.control_messages import (
    FULL,
    INCREMENTAL,
    NO_LEADER,
    AlterPartitionRequest,
    AlterPartitionResponse,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
)


def state(**kw) -> LeaderAndIsrPartitionState:
    fields = dict(topic="t", partition=3, controller_epoch=2, leader=1, leader_epoch=4, isr=[1, 2], partition_epoch=9)
    return LeaderAndIsrPartitionState(**{**fields, "replicas": [1, 2, 3], **kw})


def test_partition_state_normalises_lists_to_int_tuples_and_is_frozen_and_slotted():
    s = state(adding_replicas=[3], isr=["2", 1])
    assert s.isr == (2, 1) and s.replicas == (1, 2, 3) and s.adding_replicas == (3,) and s.removing_replicas == ()
    assert (s.is_new, s.topic_id, s.configs, s.key) == (False, None, {}, ("t", 3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.leader = 2
    assert not hasattr(s, "__dict__")
    assert hash(state(configs={"a": "1"})) == hash(state())  # hashable despite its configs dict
    newer = dataclasses.replace(s, leader_epoch=5, isr=[1])
    assert newer.leader_epoch == 5 and newer.isr == (1,) and s.leader_epoch == 4


def test_messages_survive_pickling_as_ray_sends_them():
    s = state(topic_id="id", configs={"retention.ms": "5"}, is_new=True)
    req = LeaderAndIsrRequest(2, [s], FULL)
    back = pickle.loads(pickle.dumps(req))
    assert back == req and back.partition_states[0].configs == {"retention.ms": "5"}
    ap = AlterPartitionRequest("t", 0, 1, 4, [1, 2], 9)
    assert pickle.loads(pickle.dumps(ap)) == ap and ap.new_isr == (1, 2)


def test_leader_and_isr_request_type():
    assert LeaderAndIsrRequest(1).type == INCREMENTAL and not LeaderAndIsrRequest(1).full
    assert LeaderAndIsrRequest(1, (), FULL).full
    assert LeaderAndIsrRequest(1, [state()]).partition_states == (state(),)
    with pytest.raises(ValueError):
        LeaderAndIsrRequest(1, (), 7)


def test_leader_and_isr_response_to_dict():
    ok = LeaderAndIsrPartitionError("t", 0, 1, 4)
    ignored = LeaderAndIsrPartitionError("t", 1, 2, 4, 0, "stale", ignored=True)
    d = LeaderAndIsrResponse(partitions=(ok, ignored)).to_dict()
    assert d == {
        "error_code": 0,
        "error_message": None,
        "partitions": [
            {"topic": "t", "partition": 0, "leader": 1, "leader_epoch": 4, "error_code": 0, "error_message": None},
            {
                "topic": "t",
                "partition": 1,
                "leader": 2,
                "leader_epoch": 4,
                "error_code": 0,
                "error_message": "stale",
                "ignored": True,
            },
        ],
    }


def test_stop_replica_request_normalises_partitions():
    r = StopReplicaRequest(3, [["t", "0"], ("u", 2)], True)
    assert r.partitions == (("t", 0), ("u", 2)) and r.delete_partitions and r.controller_epoch == 3
    assert not StopReplicaRequest(3).delete_partitions


def test_alter_partition_response_from_and_to_dict():
    d = {"error_code": 0, "error_message": None, "leader": 1, "leader_epoch": 4, "isr": [1, 2], "partition_epoch": 10}
    r = AlterPartitionResponse.from_dict(d)
    assert r.isr == (1, 2) and r.partition_epoch == 10
    assert r.to_dict() == d
    err = AlterPartitionResponse.from_dict({"error_code": 3, "error_message": "gone", "isr": []})
    assert (err.error_code, err.leader, err.leader_epoch, err.isr, err.partition_epoch) == (3, NO_LEADER, -1, (), -1)
