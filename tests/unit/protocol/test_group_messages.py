"""protocol/group_messages.py: the typed group coordinator requests and responses, and the actor's answer
to an argument of the wrong type (INVALID_REQUEST, never an exception). No Ray cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle

import pytest
from ray import cloudpickle

from actors.group import service as svc
from actors.group.classic_group import join_response, sync_response
from actors.group_coordinator import GroupCoordinatorActor
from protocol import group_messages as M

REQUESTS = [
    M.JoinGroupRequest("g", "", "consumer", [("range", b"sub")], 6000, 5000, group_instance_id="i1"),
    M.SyncGroupRequest("g", "m1", 3, {"m1": b"a"}, protocol_type="consumer", protocol_name="range"),
    M.HeartbeatRequest("g", "m1", 3),
    M.LeaveGroupRequest("g", [{"member_id": "m1", "group_instance_id": None}]),
    M.OffsetCommitRequest("g", [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]),
    M.OffsetFetchRequest("g"),
    M.OffsetDeleteRequest("g", [{"name": "t", "partitions": [{"partition_index": 0}]}]),
    M.ListGroupsRequest(states_filter=["Stable"]),
    M.DescribeGroupsRequest(["g"]),
    M.DeleteGroupsRequest(["g"]),
]


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_are_frozen_slotted_and_travel(req):
    assert not hasattr(req, "__dict__")  # slotted
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(req, dataclasses.fields(req)[0].name, "other")
    assert pickle.loads(pickle.dumps(req)) == req
    assert cloudpickle.loads(cloudpickle.dumps(req)) == req  # what a Ray call does with it
    assert callable(getattr(GroupCoordinatorActor, req.METHOD))  # METHOD names the actor method


def test_join_request_defaults_and_options():
    r = M.JoinGroupRequest("g", "", "consumer", [], 6000)
    assert r.effective_rebalance_timeout_ms() == 6000  # v0: the session timeout
    assert dataclasses.replace(r, rebalance_timeout_ms=9000).effective_rebalance_timeout_ms() == 9000
    assert r.member_options() == {
        "group_instance_id": None,
        "client_id": "",
        "client_host": "",
        "require_known_member_id": True,
        "supports_skip_assignment": True,
    }


def test_responses_to_and_from_dict():
    j = M.JoinGroupResponse(0, None, 2, "consumer", "range", "m1", False, "m1", [{"member_id": "m1"}])
    d = j.to_dict()
    assert "error_message" not in d  # only when there is one
    assert d["generation_id"] == 2 and d["members"] == [{"member_id": "m1"}]
    assert M.JoinGroupResponse.from_dict(d) == j
    assert M.HeartbeatResponse(27, "rebalancing").to_dict() == {"error_code": 27, "error_message": "rebalancing"}
    assert M.SyncGroupResponse.from_dict({"error_code": 0, "assignment": b"x", "extra": 1}).assignment == b"x"
    # the shard's answers are built through the typed classes, shapes unchanged
    assert join_response(79, "m1") == M.JoinGroupResponse(79, member_id="m1").to_dict()
    assert sync_response(0, "consumer", "range", b"A") == {
        "error_code": 0,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignment": b"A",
    }


def test_offset_commit_error_for_every_partition():
    topics = [{"name": "t", "partitions": [{"partition_index": 1}, {"partition_index": 4}]}]
    r = M.OffsetCommitResponse.for_every_partition(topics, 16, None)
    assert r.error_code == 0 and [p["error_code"] for p in r.topics[0]["partitions"]] == [16, 16]
    junk = M.OffsetCommitResponse.for_every_partition("junk", 42, "bad")
    assert junk == M.OffsetCommitResponse([], 42, "bad")


def test_wrong_type_message():
    assert M.wrong_type(M.HeartbeatRequest("g", "m", 1), M.HeartbeatRequest) is None
    msg = M.wrong_type({"group_id": "g"}, M.HeartbeatRequest)
    assert msg == "heartbeat takes one HeartbeatRequest, not dict"
    assert M.wrong_type(M.OffsetFetchRequest("g"), M.HeartbeatRequest) == (
        "heartbeat takes one HeartbeatRequest, not OffsetFetchRequest"
    )
    assert "group_ids must be a list, not str" == M.wrong_type(M.DeleteGroupsRequest("g"), M.DeleteGroupsRequest)


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
@pytest.mark.parametrize("wrong", ["g", None, {"group_id": "g"}, ("g", "m", 1)], ids=["str", "none", "dict", "tuple"])
def test_actor_answers_invalid_request_to_a_wrong_argument(req, wrong):
    """Every API method of the actor answers a non-request argument with INVALID_REQUEST and its message,
    in the method's own response shape, without touching any partition."""
    actor = GroupCoordinatorActor("c", 0, {"offsets.topic.num.partitions": 1})
    res = asyncio.run(getattr(actor, req.METHOD)(wrong))
    assert res["error_code"] == svc.INVALID_REQUEST, res
    assert res["error_message"] == f"{req.METHOD} takes one {type(req).__name__}, not {type(wrong).__name__}"
    # a right-typed request for a group not led here is routed, not refused
    ok = asyncio.run(getattr(actor, req.METHOD)(req))
    assert svc.INVALID_REQUEST not in (ok.get("error_code"), *(g.get("error_code") for g in ok.get("groups", [])))
