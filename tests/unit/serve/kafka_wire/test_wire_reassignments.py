"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) without Ray: KafkaApis in front of
test_wire_admin's in-memory backend running the controller's real logic, requests encoded as a client sends them
and responses decoded from the listener's bytes."""

from __future__ import annotations

import datetime

from kio.schema.alter_partition_reassignments.v0 import request as apr0
from kio.schema.alter_partition_reassignments.v1 import request as apr1
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.list_partition_reassignments.v0 import request as lpr0
from test_wire_admin import AdminBackend, call, create, topic

T = datetime.timedelta
UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT, INVALID_REPLICATION_FACTOR = 3, 7, 38
INVALID_REPLICA_ASSIGNMENT, NOT_CONTROLLER, NO_REASSIGNMENT_IN_PROGRESS = 39, 41, 85


class ReassignBackend(AdminBackend):
    """AdminBackend with the two reassignment calls (as BrokerBackend makes them of the controller), and a
    controller that can be made not to answer."""

    def __init__(self):
        super().__init__()
        self.down: dict | None = None
        self.timeouts: list[int] = []

    async def alter_partition_reassignments(self, assignments, timeout_ms):
        self.timeouts.append(timeout_ms)
        if self.down:
            return self.down
        return self._write(self.logic.alter_partition_reassignments, assignments)

    async def list_partition_reassignments(self, timeout_ms):
        self.timeouts.append(timeout_ms)
        if self.down:
            return self.down
        return self.logic.list_partition_reassignments()


def alter(backend, moves: dict, mod=apr1, timeout_ms=5000, **kw):
    """``{(topic, partition): replicas | None}`` -> ({(topic, partition): (code, message)}, response)."""
    by_topic: dict = {}
    for (t, p), r in moves.items():
        by_topic.setdefault(t, []).append(
            mod.ReassignablePartition(partition_index=p, replicas=None if r is None else tuple(r))
        )
    req = mod.AlterPartitionReassignmentsRequest(
        timeout=T(milliseconds=timeout_ms),
        topics=tuple(mod.ReassignableTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        **kw,
    )
    resp = call(backend, req)
    out = {(t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions}
    return out, resp


def listed(backend, topics=None, timeout_ms=5000):
    """``{(topic, partition): (replicas, adding, removing)}`` and the response."""
    req = lpr0.ListPartitionReassignmentsRequest(
        timeout=T(milliseconds=timeout_ms),
        topics=None
        if topics is None
        else tuple(
            lpr0.ListPartitionReassignmentsTopics(name=n, partition_indexes=tuple(ps)) for n, ps in topics.items()
        ),
    )
    resp = call(backend, req)
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
        for t in resp.topics
        for p in t.partitions
    }, resp


def test_api_versions_advertise_both():
    resp = call(ReassignBackend(), ApiVersionsRequest(client_software_name="unit", client_software_version="1"))
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert (got[45], got[46]) == ((0, 1), (0, 0))


def test_a_move_is_listed_with_adding_and_removing_then_completes_when_the_new_replica_is_in_sync():
    b = ReassignBackend()
    create(b, topic("m", assignments=[(0, [0, 1]), (1, [1, 2])]))
    res, resp = alter(b, {("m", 0): [2, 1]})
    assert (resp.error_code, resp.error_message) == (0, None)
    assert res == {("m", 0): (0, None)}
    assert b.timeouts == [5000]
    s = b.logic.image.partition("m", 0)
    assert (list(s.replicas), list(s.adding), list(s.removing)) == ([2, 1, 0], [2], [0])
    assert listed(b)[0] == {("m", 0): ([2, 1, 0], [2], [0])}
    assert listed(b, {"m": [0, 1]})[0] == {("m", 0): ([2, 1, 0], [2], [0])}
    assert listed(b, {"m": [1], "nope": [0]})[0] == {}  # not moving / no such topic: left out, no error
    # the new replica catches up: the leader adds it to the ISR and the controller completes the move
    s = b.logic.image.partition("m", 0)
    records, _ = b.logic.alter_partition("m", 0, s.leader, s.leader_epoch, [0, 1, 2], s.partition_epoch)
    b._apply(records)  # (the leader's answer says the move took its leadership: broker 0 is being removed)
    s = b.logic.image.partition("m", 0)
    assert (sorted(s.replicas), list(s.adding), list(s.removing)) == ([1, 2], [], [])
    assert listed(b)[0] == {}


def test_a_null_replica_list_cancels_back_to_the_original_replicas():
    b = ReassignBackend()
    create(b, topic("c", assignments=[(0, [0, 1])]))
    alter(b, {("c", 0): [1, 2]})
    assert listed(b)[0] == {("c", 0): ([1, 2, 0], [2], [0])}
    res, resp = alter(b, {("c", 0): None})
    assert res == {("c", 0): (0, None)} and resp.error_code == 0
    s = b.logic.image.partition("c", 0)
    # Kafka's PartitionReassignmentRevert: the merged replicas less the adding ones
    assert (list(s.replicas), list(s.adding), list(s.removing)) == ([1, 0], [], [])
    assert listed(b)[0] == {}
    # cancelling again: nothing in progress
    res, _ = alter(b, {("c", 0): None}, mod=apr0)
    assert res[("c", 0)][0] == NO_REASSIGNMENT_IN_PROGRESS
    assert "No reassignment" in res[("c", 0)][1]


def test_bad_input_gets_each_partition_its_error_and_leaves_the_others_moving():
    b = ReassignBackend()
    create(b, topic("x", assignments=[(0, [0, 1]), (1, [0, 1])]))
    res, resp = alter(
        b,
        {
            ("x", 0): [1, 2],  # fine
            ("x", 1): [1, 1],  # a broker twice
            ("x", 7): [0, 1],  # no such partition
            ("nope", 0): [0],  # no such topic
            ("x", 2): [0, 9],  # never mind the partition: unknown first
        },
    )
    assert resp.error_code == 0
    assert res[("x", 0)] == (0, None)
    assert res[("x", 1)][0] == INVALID_REPLICA_ASSIGNMENT and "Duplicate" in res[("x", 1)][1]
    assert res[("x", 7)][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert res[("nope", 0)][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert res[("x", 2)][0] == UNKNOWN_TOPIC_OR_PARTITION
    res, _ = alter(b, {("x", 1): [0, 9]})  # broker 9 is not registered
    assert res[("x", 1)][0] == INVALID_REPLICA_ASSIGNMENT and "9" in res[("x", 1)][1]
    res, _ = alter(b, {("x", 1): []})  # empty: only null cancels
    assert res[("x", 1)][0] == INVALID_REPLICA_ASSIGNMENT
    assert listed(b)[0] == {("x", 0): ([1, 2, 0], [2], [0])}  # only the good one moves


def test_v1_refuses_a_replication_factor_change_when_asked_to():
    b = ReassignBackend()
    create(b, topic("rf", assignments=[(0, [0, 1]), (1, [0, 1])]))
    res, resp = alter(b, {("rf", 0): [0, 1, 2], ("rf", 1): [2, 1]}, allow_replication_factor_change=False)
    assert resp.allow_replication_factor_change is False
    assert res[("rf", 0)] == (INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 3")
    assert res[("rf", 1)] == (0, None)  # same length: a move
    # while moving, the factor it is headed for (2) is what counts, not the merged replicas (3)
    res, _ = alter(b, {("rf", 1): [0, 2]}, allow_replication_factor_change=False)
    assert res[("rf", 1)] == (0, None)
    res, _ = alter(b, {("rf", 0): [0, 1, 2]})  # v1's default and v0 allow it
    assert res[("rf", 0)] == (0, None)
    res, _ = alter(b, {("rf", 0): [2]}, mod=apr0)
    assert res[("rf", 0)] == (0, None)


def test_a_controller_that_does_not_answer_gives_its_error_at_the_top_and_to_every_partition():
    b = ReassignBackend()
    create(b, topic("t", assignments=[(0, [0, 1])]))
    b.down = {
        "error_code": REQUEST_TIMED_OUT,
        "error_message": "the controller's alter_partition_reassignments timed out",
    }
    res, resp = alter(b, {("t", 0): [1, 2], ("t", 1): None}, timeout_ms=1500)
    assert (resp.error_code, resp.error_message) == (REQUEST_TIMED_OUT, b.down["error_message"])
    assert res == {
        ("t", 0): (REQUEST_TIMED_OUT, b.down["error_message"]),
        ("t", 1): (REQUEST_TIMED_OUT, b.down["error_message"]),
    }
    assert b.timeouts == [1500]
    b.down = {"error_code": NOT_CONTROLLER, "error_message": "no controller: gone"}
    got, resp = listed(b, timeout_ms=0)
    assert (resp.error_code, resp.error_message, got) == (NOT_CONTROLLER, "no controller: gone", {})
    assert b.timeouts[-1] == 60_000  # a non-positive timeout takes Kafka's default


def test_an_empty_request_answers_empty_without_the_controller():
    b = ReassignBackend()
    res, resp = alter(b, {})
    assert (res, resp.error_code, b.timeouts) == ({}, 0, [])
