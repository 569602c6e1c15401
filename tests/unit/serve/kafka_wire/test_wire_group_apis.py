"""The group APIs of the Kafka wire listener (serve/kafka_wire/handlers/groups.py) without Ray: real localhost
socket, kio request/response types, an in-memory Backend whose ``group_call`` records the typed coordinator
messages (protocol/group_messages.py) and answers what the test sets. Each API at a low and a high version:
the kio request becomes the coordinator's message, and the coordinator's answer comes back in that version's
shape (request-level errors spread where the version has no top-level error). JoinGroup parks its own
connection only: a Heartbeat on another connection is answered meanwhile."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid

import pytest
from kio.schema.delete_groups.v0 import request as dg0
from kio.schema.delete_groups.v0 import response as dg0r
from kio.schema.delete_groups.v2 import request as dg2
from kio.schema.delete_groups.v2 import response as dg2r
from kio.schema.describe_groups.v0 import request as ds0
from kio.schema.describe_groups.v0 import response as ds0r
from kio.schema.describe_groups.v5 import request as ds5
from kio.schema.describe_groups.v5 import response as ds5r
from kio.schema.heartbeat.v0 import request as hb0
from kio.schema.heartbeat.v0 import response as hb0r
from kio.schema.heartbeat.v4 import request as hb4
from kio.schema.heartbeat.v4 import response as hb4r
from kio.schema.join_group.v2 import request as jg2
from kio.schema.join_group.v2 import response as jg2r
from kio.schema.join_group.v5 import request as jg5
from kio.schema.join_group.v5 import response as jg5r
from kio.schema.join_group.v9 import request as jg9
from kio.schema.join_group.v9 import response as jg9r
from kio.schema.leave_group.v0 import request as lg0
from kio.schema.leave_group.v0 import response as lg0r
from kio.schema.leave_group.v5 import request as lg5
from kio.schema.leave_group.v5 import response as lg5r
from kio.schema.list_groups.v0 import request as li0
from kio.schema.list_groups.v0 import response as li0r
from kio.schema.list_groups.v5 import request as li5
from kio.schema.list_groups.v5 import response as li5r
from kio.schema.offset_commit.v2 import request as oc2
from kio.schema.offset_commit.v2 import response as oc2r
from kio.schema.offset_commit.v9 import request as oc9
from kio.schema.offset_commit.v9 import response as oc9r
from kio.schema.offset_delete.v0 import request as od0
from kio.schema.offset_delete.v0 import response as od0r
from kio.schema.offset_fetch.v1 import request as of1
from kio.schema.offset_fetch.v1 import response as of1r
from kio.schema.offset_fetch.v7 import request as of7
from kio.schema.offset_fetch.v7 import response as of7r
from kio.schema.offset_fetch.v9 import request as of9
from kio.schema.offset_fetch.v9 import response as of9r
from kio.schema.sync_group.v0 import request as sg0
from kio.schema.sync_group.v0 import response as sg0r
from kio.schema.sync_group.v5 import request as sg5
from kio.schema.sync_group.v5 import response as sg5r
from test_wire_listener import Client, FakeBackend, listening

from protocol import group_messages as M
from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis
from serve.kafka_wire.topic_ids import topic_id_str

S = datetime.timedelta(seconds=1)
U_TID = topic_id_str(uuid.UUID("87654321-4321-8765-4321-876543218765"))


class GroupBackend(FakeBackend):
    """FakeBackend plus ``group_call``: records each typed request; answers ``answers[METHOD]`` (a dict, or a
    callable of the request, possibly async)."""

    def __init__(self):
        super().__init__()
        self.calls: list = []
        self.answers: dict = {}

    async def metadata(self, fresh=False):
        """FakeBackend's topic ``t`` (2 partitions) and ``u`` (3): OffsetCommit checks the partitions exist."""
        md = await super().metadata()
        parts = {p: {"leader": 0, "leader_epoch": 1, "replicas": [0], "isr": [0]} for p in range(3)}
        return {**md, "topics": {**md["topics"], "u": {"name": "u", "topic_id": U_TID, "partitions": parts}}}

    async def group_call(self, request) -> dict:
        self.calls.append(request)
        a = self.answers[request.METHOD]
        if callable(a):
            a = a(request)
            if asyncio.iscoroutine(a):
                a = await a
        return a


@pytest.fixture
def gserver():
    backend = GroupBackend()
    with listening(backend) as (port, _acc, _run, loop):
        yield port, backend, loop


def ask(port, request, response_cls, client_id="cli-1"):
    c = Client(port)
    c.send(codec.encode_request(7, request, client_id=client_id))
    cid, resp = c.recv(response_cls)
    assert cid == 7
    return resp


JOINED = {
    "error_code": 0,
    "generation_id": 3,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "leader": "m-1",
    "skip_assignment": False,
    "member_id": "m-1",
    "members": [
        {"member_id": "m-1", "group_instance_id": None, "metadata": b"meta-1"},
        {"member_id": "m-2", "group_instance_id": "i-2", "metadata": b"meta-2"},
    ],
}


def test_versions_cover_what_the_clients_send():
    # wire-notes: JoinGroup 5/7/9, SyncGroup 3/5, Heartbeat 3/4, LeaveGroup 1/3/5, OffsetCommit 3..9,
    # OffsetFetch 3..9; the non-flexible caps (JoinGroup <=5, ...) and Kafka 4.0's floors
    want = {11: (0, 9), 14: (0, 5), 12: (0, 4), 13: (0, 5), 8: (2, 9), 9: (1, 9), 16: (0, 5), 15: (0, 5), 42: (0, 2)}
    for key, rng in want.items():
        assert versions.SUPPORTED[key] == rng
    assert versions.SUPPORTED[47] == (0, 0)
    assert set(KafkaApis.HANDLERS) >= set(want) | {47}


def test_join_group_v2_and_v9(gserver):
    port, backend, _ = gserver
    backend.answers["join_group"] = JOINED
    proto = (jg2.JoinGroupRequestProtocol(name="range", metadata=b"sub"),)
    r = ask(
        port,
        jg2.JoinGroupRequest(
            group_id="g",
            session_timeout=10 * S,
            rebalance_timeout=20 * S,
            member_id="",
            protocol_type="consumer",
            protocols=proto,
        ),
        jg2r.JoinGroupResponse,
    )
    req = backend.calls[-1]
    assert isinstance(req, M.JoinGroupRequest)
    assert (req.group_id, req.member_id, req.protocol_type, req.protocols) == ("g", "", "consumer", [("range", b"sub")])
    assert (req.session_timeout_ms, req.rebalance_timeout_ms, req.group_instance_id) == (10000, 20000, None)
    assert (req.require_known_member_id, req.supports_skip_assignment) == (False, False)  # v0-3: no KIP-394
    assert (req.client_id, req.client_host) == ("cli-1", "/127.0.0.1")
    assert (r.error_code, r.generation_id, r.protocol_name, r.leader, r.member_id) == (0, 3, "range", "m-1", "m-1")
    assert [(m.member_id, m.metadata) for m in r.members] == [("m-1", b"meta-1"), ("m-2", b"meta-2")]

    backend.answers["join_group"] = {**JOINED, "skip_assignment": True}
    proto9 = (jg9.JoinGroupRequestProtocol(name="roundrobin", metadata=b"s9"),)
    r = ask(
        port,
        jg9.JoinGroupRequest(
            group_id="g",
            session_timeout=10 * S,
            rebalance_timeout=30 * S,
            member_id="m-2",
            group_instance_id="i-2",
            protocol_type="consumer",
            protocols=proto9,
            reason="test",
        ),
        jg9r.JoinGroupResponse,
    )
    req = backend.calls[-1]
    assert (req.member_id, req.group_instance_id, req.rebalance_timeout_ms) == ("m-2", "i-2", 30000)
    assert (req.require_known_member_id, req.supports_skip_assignment) == (True, True)
    assert (r.protocol_type, r.protocol_name, r.skip_assignment) == ("consumer", "range", True)
    assert [(m.member_id, m.group_instance_id) for m in r.members] == [("m-1", None), ("m-2", "i-2")]


def test_join_group_v5_member_id_required_and_a_null_protocol(gserver):
    port, backend, _ = gserver
    backend.answers["join_group"] = {"error_code": 79, "member_id": "new-id", "protocol_name": None}
    proto = (jg5.JoinGroupRequestProtocol(name="range", metadata=b""),)
    r = ask(
        port,
        jg5.JoinGroupRequest(
            group_id="g",
            session_timeout=10 * S,
            rebalance_timeout=10 * S,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=proto,
        ),
        jg5r.JoinGroupResponse,
    )
    assert backend.calls[-1].require_known_member_id is True
    assert (r.error_code, r.member_id, r.generation_id, r.protocol_name, r.members) == (79, "new-id", -1, "", ())


def test_sync_group_v0_and_v5(gserver):
    port, backend, _ = gserver
    backend.answers["sync_group"] = {"error_code": 0, "assignment": b""}  # a member with nothing assigned
    r = ask(
        port,
        sg0.SyncGroupRequest(
            group_id="g",
            generation_id=3,
            member_id="m-1",
            assignments=(
                sg0.SyncGroupRequestAssignment(member_id="m-1", assignment=b"a1"),
                sg0.SyncGroupRequestAssignment(member_id="m-2", assignment=b""),
            ),
        ),
        sg0r.SyncGroupResponse,
    )
    req = backend.calls[-1]
    assert isinstance(req, M.SyncGroupRequest)
    assert (req.group_id, req.member_id, req.generation_id) == ("g", "m-1", 3)
    assert req.assignments == [{"member_id": "m-1", "assignment": b"a1"}, {"member_id": "m-2", "assignment": b""}]
    assert (r.error_code, r.assignment) == (0, b"")

    backend.answers["sync_group"] = {
        "error_code": 0,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignment": b"mine",
    }
    r = ask(
        port,
        sg5.SyncGroupRequest(
            group_id="g",
            generation_id=4,
            member_id="m-2",
            group_instance_id="i-2",
            protocol_type="consumer",
            protocol_name="range",
            assignments=(),
        ),
        sg5r.SyncGroupResponse,
    )
    req = backend.calls[-1]
    assert (req.group_instance_id, req.protocol_type, req.protocol_name, req.assignments) == (
        "i-2",
        "consumer",
        "range",
        [],
    )
    assert (r.error_code, r.protocol_type, r.protocol_name, r.assignment) == (0, "consumer", "range", b"mine")


def test_heartbeat_v0_and_v4(gserver):
    port, backend, _ = gserver
    backend.answers["heartbeat"] = {"error_code": 27}
    r = ask(port, hb0.HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1"), hb0r.HeartbeatResponse)
    assert r.error_code == 27  # REBALANCE_IN_PROGRESS: the member joins again
    assert backend.calls[-1] == M.HeartbeatRequest("g", "m-1", 3, None)
    backend.answers["heartbeat"] = {"error_code": 0}
    r = ask(
        port,
        hb4.HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1", group_instance_id="i"),
        hb4r.HeartbeatResponse,
    )
    assert r.error_code == 0 and backend.calls[-1] == M.HeartbeatRequest("g", "m-1", 3, "i")


def test_leave_group_v0_one_member_and_v5_batch(gserver):
    port, backend, _ = gserver
    backend.answers["leave_group"] = {
        "error_code": 0,
        "members": [{"member_id": "gone", "group_instance_id": None, "error_code": 25}],
    }
    r = ask(port, lg0.LeaveGroupRequest(group_id="g", member_id="gone"), lg0r.LeaveGroupResponse)
    assert backend.calls[-1] == M.LeaveGroupRequest("g", [{"member_id": "gone", "group_instance_id": None}])
    assert r.error_code == 25  # UNKNOWN_MEMBER_ID: v0-2 answer with the one member's error

    backend.answers["leave_group"] = lambda req: {
        "error_code": 0,
        "members": [{**m, "error_code": 0 if m["member_id"] else 25} for m in req.members],
    }
    r = ask(
        port,
        lg5.LeaveGroupRequest(
            group_id="g",
            members=(
                lg5.MemberIdentity(member_id="m-1", group_instance_id=None, reason="bye"),
                lg5.MemberIdentity(member_id="", group_instance_id="i-9", reason=None),
            ),
        ),
        lg5r.LeaveGroupResponse,
    )
    assert r.error_code == 0
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in r.members] == [("m-1", None, 0), ("", "i-9", 25)]


def test_offset_commit_v2_and_v9(gserver):
    port, backend, _ = gserver
    backend.answers["offset_commit"] = lambda req: {
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]],
            }
            for t in req.topics
        ]
    }
    r = ask(
        port,
        oc2.OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time=datetime.timedelta(milliseconds=-1),
            topics=(
                oc2.OffsetCommitRequestTopic(
                    name="t",
                    partitions=(
                        oc2.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=5, committed_metadata="md"
                        ),
                        oc2.OffsetCommitRequestPartition(
                            partition_index=1, committed_offset=9, committed_metadata=None
                        ),
                    ),
                ),
            ),
        ),
        oc2r.OffsetCommitResponse,
    )
    req = backend.calls[-1]
    assert isinstance(req, M.OffsetCommitRequest) and (req.group_id, req.generation_id, req.member_id) == ("g", -1, "")
    assert req.topics == [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": "md"},
                {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": -1, "committed_metadata": None},
            ],
        }
    ]
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("t", [(0, 0), (1, 0)])
    ]

    # a request-level error (this broker is not the coordinator): every partition carries it
    backend.answers["offset_commit"] = {"error_code": 16, "error_message": "not here", "topics": []}
    part = oc9.OffsetCommitRequestPartition(
        partition_index=2, committed_offset=1, committed_leader_epoch=4, committed_metadata=""
    )
    r = ask(
        port,
        oc9.OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=3,
            member_id="m-1",
            group_instance_id="i-1",
            topics=(oc9.OffsetCommitRequestTopic(name="u", partitions=(part,)),),
        ),
        oc9r.OffsetCommitResponse,
    )
    req = backend.calls[-1]
    assert (req.generation_id, req.member_id, req.group_instance_id) == (3, "m-1", "i-1")
    assert req.topics[0]["partitions"][0]["committed_leader_epoch"] == 4
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [("u", [(2, 16)])]


def test_offset_commit_to_an_unknown_topic_or_partition(gserver):
    """KafkaApis.handleOffsetCommitRequest: a topic not in the metadata, or a partition index past the topic's
    partitions, answers UNKNOWN_TOPIC_OR_PARTITION (3) and does not reach the coordinator; the request's other
    partitions are committed (and carry the request's version, for the coordinator's v9 rule)."""
    port, backend, _ = gserver
    backend.answers["offset_commit"] = lambda req: {
        "topics": [
            {
                "name": t["name"],
                "partitions": [{"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]],
            }
            for t in req.topics
        ]
    }

    def part(i: int):
        return oc9.OffsetCommitRequestPartition(
            partition_index=i, committed_offset=10 + i, committed_leader_epoch=1, committed_metadata=""
        )

    def commit(*topics):
        return ask(
            port,
            oc9.OffsetCommitRequest(
                group_id="g",
                generation_id_or_member_epoch=-1,
                member_id="",
                topics=tuple(oc9.OffsetCommitRequestTopic(name=n, partitions=tuple(map(part, ps))) for n, ps in topics),
            ),
            oc9r.OffsetCommitResponse,
        )

    r = commit(("t", (0, 1, 2)), ("nope", (0,)))
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("t", [(0, 0), (1, 0), (2, 3)]),
        ("nope", [(0, 3)]),
    ]
    req = backend.calls[-1]
    assert req.api_version == 9
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in req.topics] == [("t", [0, 1])]
    calls = len(backend.calls)
    r = commit(("nope", (0, 1)), ("t", (5,)))  # nothing left to commit: the coordinator is not asked
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        ("nope", [(0, 3), (1, 3)]),
        ("t", [(5, 3)]),
    ]
    assert len(backend.calls) == calls


FETCHED = {
    "error_code": 0,
    "topics": [
        {
            "name": "t",
            "partitions": [
                {
                    "partition_index": 0,
                    "committed_offset": 5,
                    "committed_leader_epoch": 2,
                    "metadata": "md",
                    "error_code": 0,
                },
                {
                    "partition_index": 1,
                    "committed_offset": -1,
                    "committed_leader_epoch": -1,
                    "metadata": "",
                    "error_code": 0,
                },
            ],
        }
    ],
}


def test_offset_fetch_v1_v7_and_v9_groups(gserver):
    port, backend, _ = gserver
    backend.answers["offset_fetch"] = FETCHED
    asked = (of1.OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),)
    r = ask(port, of1.OffsetFetchRequest(group_id="g", topics=asked), of1r.OffsetFetchResponse)
    assert backend.calls[-1] == M.OffsetFetchRequest("g", [{"name": "t", "partition_indexes": [0, 1]}], False)
    got = [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in r.topics[0].partitions]
    assert got == [(0, 5, "md", 0), (1, -1, "", 0)]

    backend.answers["offset_fetch"] = {"error_code": 14, "topics": []}  # COORDINATOR_LOAD_IN_PROGRESS
    r = ask(port, of1.OffsetFetchRequest(group_id="g", topics=asked), of1r.OffsetFetchResponse)
    assert [(p.partition_index, p.error_code) for p in r.topics[0].partitions] == [
        (0, 14),
        (1, 14),
    ]  # v1: per partition

    r = ask(port, of7.OffsetFetchRequest(group_id="g", topics=None, require_stable=True), of7r.OffsetFetchResponse)
    assert backend.calls[-1] == M.OffsetFetchRequest("g", None, True)
    assert (r.error_code, r.topics) == (14, ())

    backend.answers["offset_fetch"] = lambda req: FETCHED if req.group_id == "g" else {"error_code": 16, "topics": []}
    r = ask(
        port,
        of9.OffsetFetchRequest(
            groups=(
                of9.OffsetFetchRequestGroup(group_id="g", member_id=None, member_epoch=-1, topics=None),
                of9.OffsetFetchRequestGroup(
                    group_id="h",
                    member_id=None,
                    member_epoch=-1,
                    topics=(of9.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),),
                ),
            ),
            require_stable=False,
        ),
        of9r.OffsetFetchResponse,
    )
    assert [(c.group_id, c.topics) for c in backend.calls[-2:]] == [
        ("g", None),
        ("h", [{"name": "t", "partition_indexes": [0]}]),
    ]
    g, h = r.groups
    assert (g.group_id, g.error_code, h.group_id, h.error_code) == ("g", 0, "h", 16)
    p0 = g.topics[0].partitions[0]
    assert (p0.partition_index, p0.committed_offset, p0.committed_leader_epoch, p0.metadata) == (0, 5, 2, "md")


LISTED = {
    "error_code": 0,
    "groups": [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}],
}


def test_list_groups_v0_and_v5(gserver):
    port, backend, _ = gserver
    backend.answers["list_groups"] = LISTED
    r = ask(port, li0.ListGroupsRequest(), li0r.ListGroupsResponse)
    assert backend.calls[-1] == M.ListGroupsRequest(None, None)
    assert (r.error_code, [(g.group_id, g.protocol_type) for g in r.groups]) == (0, [("g", "consumer")])
    r = ask(port, li5.ListGroupsRequest(states_filter=("Stable",), types_filter=("classic",)), li5r.ListGroupsResponse)
    assert backend.calls[-1] == M.ListGroupsRequest(["Stable"], ["classic"])
    assert [(g.group_id, g.group_state, g.group_type) for g in r.groups] == [("g", "Stable", "classic")]


DESCRIBED = {
    "groups": [
        {
            "error_code": 0,
            "group_id": "g",
            "group_state": "Stable",
            "protocol_type": "consumer",
            "protocol_data": "range",
            "members": [
                {
                    "member_id": "m-1",
                    "group_instance_id": "i-1",
                    "client_id": "cli-1",
                    "client_host": "/127.0.0.1",
                    "member_metadata": b"md",
                    "member_assignment": b"as",
                }
            ],
        },
        {
            "error_code": 16,
            "group_id": "elsewhere",
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        },
    ]
}


def test_describe_groups_v0_and_v5(gserver):
    port, backend, _ = gserver
    backend.answers["describe_groups"] = DESCRIBED
    r = ask(port, ds0.DescribeGroupsRequest(groups=("g", "elsewhere")), ds0r.DescribeGroupsResponse)
    assert backend.calls[-1] == M.DescribeGroupsRequest(["g", "elsewhere"])
    g, e = r.groups
    assert (g.group_id, g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        "g",
        0,
        "Stable",
        "consumer",
        "range",
    )
    (m,) = g.members
    assert (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment) == (
        "m-1",
        "cli-1",
        "/127.0.0.1",
        b"md",
        b"as",
    )
    assert (e.group_id, e.error_code) == ("elsewhere", 16)
    r = ask(
        port, ds5.DescribeGroupsRequest(groups=("g",), include_authorized_operations=True), ds5r.DescribeGroupsResponse
    )
    (g,) = r.groups
    assert g.members[0].group_instance_id == "i-1" and g.authorized_operations == -(2**31)


def test_delete_groups_v0_and_v2(gserver):
    port, backend, _ = gserver
    backend.answers["delete_groups"] = {
        "results": [{"group_id": "a", "error_code": 0}, {"group_id": "b", "error_code": 68}]
    }
    r = ask(port, dg0.DeleteGroupsRequest(groups_names=("a", "b", "a")), dg0r.DeleteGroupsResponse)
    assert backend.calls[-1] == M.DeleteGroupsRequest(["a", "b"])
    assert [(x.group_id, x.error_code) for x in r.results] == [("a", 0), ("b", 68)]
    backend.answers["delete_groups"] = {"error_code": 16, "error_message": "not here"}
    r = ask(port, dg2.DeleteGroupsRequest(groups_names=("c",)), dg2r.DeleteGroupsResponse)
    assert [(x.group_id, x.error_code) for x in r.results] == [("c", 16)]


def test_offset_delete_v0(gserver):
    port, backend, _ = gserver
    backend.answers["offset_delete"] = {
        "error_code": 0,
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 86}],
            }
        ],
    }
    parts = (od0.OffsetDeleteRequestPartition(partition_index=0), od0.OffsetDeleteRequestPartition(partition_index=1))
    r = ask(
        port,
        od0.OffsetDeleteRequest(group_id="g", topics=(od0.OffsetDeleteRequestTopic(name="t", partitions=parts),)),
        od0r.OffsetDeleteResponse,
    )
    assert backend.calls[-1] == M.OffsetDeleteRequest(
        "g", [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]
    )
    assert r.error_code == 0
    assert [(p.partition_index, p.error_code) for p in r.topics[0].partitions] == [(0, 0), (1, 86)]


def test_a_parked_join_does_not_block_heartbeats_on_another_connection(gserver):
    port, backend, loop = gserver
    released = asyncio.Event()

    async def join(_req):
        await released.wait()  # the rebalance completes only after the heartbeat below
        return JOINED

    def beat(_req):
        loop.call_soon(released.set)
        return {"error_code": 27}

    backend.answers["join_group"] = join
    backend.answers["heartbeat"] = beat
    joiner = Client(port)
    proto = (jg5.JoinGroupRequestProtocol(name="range", metadata=b""),)
    joiner.send(
        codec.encode_request(
            1,
            jg5.JoinGroupRequest(
                group_id="g",
                session_timeout=10 * S,
                rebalance_timeout=10 * S,
                member_id="m-1",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=proto,
            ),
        )
    )
    deadline = time.monotonic() + 10
    while not backend.calls and time.monotonic() < deadline:  # the JoinGroup is parked in the backend
        time.sleep(0.01)
    assert isinstance(backend.calls[0], M.JoinGroupRequest) and not released.is_set()
    r = ask(
        port,
        hb4.HeartbeatRequest(group_id="g", generation_id=2, member_id="m-1", group_instance_id=None),
        hb4r.HeartbeatResponse,
    )
    assert r.error_code == 27
    cid, j = joiner.recv(jg5r.JoinGroupResponse)
    assert (cid, j.error_code, j.generation_id) == (1, 0, 3)
