"""The group coordinator's request-level rules (actors/group/service.py) and its per-partition context
(actors/coordinator/context.py), without Ray."""

from __future__ import annotations

import asyncio

from actors.coordinator.context import CoordinatorContext
from actors.coordinator.writer import records_batch
from actors.group import service as svc
from actors.group.classic_group import GroupCoordinatorConfig
from actors.group.records import partition_for
from actors.group.service import list_groups
from actors.group.shard import GroupCoordinatorShard
from protocol import errors as E
from storage.records import decode_records


def test_offsets_topic_spec_and_config():
    spec = svc.offsets_topic_spec({"offsets.topic.num.partitions": 7, "offsets.topic.replication.factor": 3}, 2)
    assert spec == {
        "name": "__consumer_offsets",
        "num_partitions": 7,
        "replication_factor": 2,
        "configs": {"cleanup.policy": "compact", "segment.bytes": 104857600},
    }
    assert svc.offsets_topic_spec(None, 0)["replication_factor"] == 1
    assert svc.offsets_partitions(None) == 5
    cfg = svc.coordinator_config({"group.max.size": "3", "unrelated": 1})
    assert cfg.group_max_size == 3 and cfg == GroupCoordinatorConfig(group_max_size=3)


def test_append_error_normalization():
    code = lambda n: E.for_name(n).code  # noqa: E731
    assert svc.append_error(code("NOT_ENOUGH_REPLICAS")) == svc.COORDINATOR_NOT_AVAILABLE
    assert svc.append_error(code("REQUEST_TIMED_OUT")) == svc.COORDINATOR_NOT_AVAILABLE
    assert svc.append_error(code("FENCED_LEADER_EPOCH")) == svc.NOT_COORDINATOR
    assert svc.append_error(code("MESSAGE_TOO_LARGE")) == svc.UNKNOWN_SERVER_ERROR
    assert svc.append_error(code("MESSAGE_TOO_LARGE"), svc.INVALID_COMMIT_OFFSET_SIZE) == svc.INVALID_COMMIT_OFFSET_SIZE
    assert svc.append_error(code("CORRUPT_MESSAGE")) == code("CORRUPT_MESSAGE")
    assert all(svc.is_retriable_coordinator_error(c) for c in (14, 15, 16))
    assert not svc.is_retriable_coordinator_error(svc.UNKNOWN_SERVER_ERROR)


def test_route_code_and_input_checks():
    assert svc.route_code(None) == svc.NOT_COORDINATOR
    assert svc.route_code(svc.LOADING) == svc.COORDINATOR_LOAD_IN_PROGRESS
    assert svc.route_code(svc.FAILED) == svc.COORDINATOR_NOT_AVAILABLE
    assert svc.route_code(svc.ACTIVE) == svc.NONE
    assert svc.valid_group("g") and not svc.valid_group("") and not svc.valid_group(None)
    assert svc.bad_input(KeyError("x"))[0] == svc.INVALID_REQUEST
    assert svc.bad_input(E.InvalidGroupIdError("no"))[0] == svc.INVALID_GROUP_ID
    assert svc.bad_input(RuntimeError("bug"))[0] == svc.UNKNOWN_SERVER_ERROR
    by_part, results = svc.group_ids_by_partition(["a", "", "b", "a"], 5)
    assert results == {"": {"group_id": "", "error_code": svc.INVALID_GROUP_ID}}
    assert sorted(g for gs in by_part.values() for g in gs) == ["a", "a", "b"]
    assert all(partition_for(g, 5) == p for p, gs in by_part.items() for g in gs)


def test_error_answers():
    assert svc.join_error(None, 16, "m")["member_id"] == "" and svc.join_error("m1", 16, "m")["error_code"] == 16
    assert svc.sync_error(27, "r")["error_message"] == "r"
    topics = [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 2}]}]
    assert svc.offset_commit_error(topics, 16, None) == {
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "error_code": 16}, {"partition_index": 2, "error_code": 16}],
            }
        ],
        "error_code": 0,
    }
    assert svc.offset_commit_error("junk", 42, "bad") == {"error_code": 42, "error_message": "bad", "topics": []}
    assert svc.describe_group_error("g", 16, None)["group_id"] == "g"


class _Rec:
    def __init__(self, k, v):
        self.k, self.v = k, v

    def key_bytes(self):
        return self.k

    def value_bytes(self):
        return self.v


def test_records_batch_and_context():
    buf = records_batch([_Rec(b"k1", b"v1"), _Rec(b"k2", None)], 1234)
    recs = list(decode_records(buf))
    assert [(r.key, r.value, r.timestamp) for r in recs] == [(b"k1", b"v1", 1234), (b"k2", None, 1234)]

    async def run():
        ctx = CoordinatorContext(0, 3, None, GroupCoordinatorShard(GroupCoordinatorConfig()))
        assert ctx.state == svc.LOADING
        f1, f2, f3 = ctx.park(("join", "g")), ctx.park(("join", "g")), ctx.park(("sync", "g"))
        ctx.complete([(("join", "g"), "first"), (("nobody", "x"), "dropped")])
        assert f1.result() == "first" and not f2.done()
        ctx.fail_parked(16)
        assert f2.result() == 16 and f3.result() == 16 and ctx.parked == {}
        d = ctx.describe()
        assert d["state"] == svc.LOADING and d["leader_epoch"] == 3 and d["parked"] == 0
        other = CoordinatorContext(1, 0, None, GroupCoordinatorShard(GroupCoordinatorConfig()))
        other.state = svc.ACTIVE
        assert list_groups({1: other, 0: ctx}) == ([], svc.COORDINATOR_LOAD_IN_PROGRESS, [])

    asyncio.run(run())
