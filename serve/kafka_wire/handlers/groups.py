"""Consumer groups over the wire: JoinGroup (11, v2-9), SyncGroup (14, v0-5), Heartbeat (12, v0-4),
LeaveGroup (13, v0-5), OffsetCommit (8, v2-9), OffsetFetch (9, v1-9), ListGroups (16, v0-5), DescribeGroups
(15, v0-5), DeleteGroups (42, v0-2) and OffsetDelete (47, v0).

Each handler translates the kio request into the group coordinator's typed message
(protocol/group_messages.py), sends it through ``backend.group_call`` to this broker's group coordinator
actor (the same actor rafka's Python clients use, so a Python member and a wire member share one group)
and turns its answer dict into the kio response of the request's version. The coordinator owns the rules:
NOT_COORDINATOR (16) for a group whose ``__consumer_offsets`` partition this broker does not lead,
COORDINATOR_LOAD_IN_PROGRESS (14) while that partition loads, MEMBER_ID_REQUIRED (79) once for a JoinGroup
v4+ without a member id (KIP-394), static membership (``group.instance.id``, KIP-345), OffsetCommit
accepted from the current generation while a rebalance is prepared and refused only while awaiting sync.
OffsetCommit checks the topics first, as KafkaApis does: a partition not in the metadata answers
UNKNOWN_TOPIC_OR_PARTITION (3) and is not stored.

Version notes: OffsetCommit v0-1 are gone in Kafka 4.0 (KIP-896) and not served; JoinGroup v0-1 are kept, as
in Kafka 4 (v0 has no rebalance timeout: the session timeout stands for it);
LeaveGroup v0-2 name one member (answered with that member's error); OffsetFetch v1 has no top-level
error (a group error goes on every partition), v8+ asks for several groups (KIP-709), each asked of the
coordinator on its own; OffsetCommit v2-4's ``retention_time`` is ignored (the broker's
``offsets.retention.minutes`` applies, as in Kafka since KIP-211). JoinGroup is a long call (it waits for
the rebalance): it parks only its own connection; Heartbeat on the client's other connection goes on.
"""

from __future__ import annotations

import asyncio

from protocol import errors as E
from protocol import group_messages as M
from serve.kafka_wire import responses
from serve.kafka_wire.network import CLIENT_HOST

NOT_COORDINATOR = E.NotCoordinatorError.code
UNKNOWN_SERVER_ERROR = E.UnknownServerError.code
UNKNOWN_TOPIC_OR_PARTITION = E.for_name("UNKNOWN_TOPIC_OR_PARTITION").code
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # Kafka's INT32_MIN: no ACLs, nothing to report


def _client() -> tuple[str, str]:
    host = CLIENT_HOST.get()
    return responses.CLIENT_ID.get() or "", f"/{host}" if host else ""


async def join_group(backend, request, version: int):
    mod = responses.response_module(11, version)
    client_id, client_host = _client()
    req = M.JoinGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=round(request.session_timeout.total_seconds() * 1000),
        rebalance_timeout_ms=round(request.rebalance_timeout.total_seconds() * 1000)
        if hasattr(request, "rebalance_timeout")
        else -1,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=client_id,
        client_host=client_host,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    r = await backend.group_call(req)
    members = tuple(
        responses.make(
            mod,
            "JoinGroupResponseMember",
            member_id=m["member_id"],
            group_instance_id=m.get("group_instance_id"),
            metadata=bytes(m.get("metadata") or b""),
        )
        for m in r.get("members") or ()
    )
    return responses.make(
        mod,
        "JoinGroupResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(r.get("error_code", 0)),
        generation_id=r.get("generation_id", -1),
        protocol_type=r.get("protocol_type"),
        # v0-6: a non-nullable string ("" until a protocol is chosen); v7+: nullable
        protocol_name=r.get("protocol_name") if version >= 7 else (r.get("protocol_name") or ""),
        leader=r.get("leader") or "",
        skip_assignment=bool(r.get("skip_assignment", False)),
        member_id=r.get("member_id") or "",
        members=members,
    )


async def sync_group(backend, request, version: int):
    mod = responses.response_module(14, version)
    req = M.SyncGroupRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        assignments=[{"member_id": a.member_id, "assignment": bytes(a.assignment)} for a in request.assignments],
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
    )
    r = await backend.group_call(req)
    return responses.make(
        mod,
        "SyncGroupResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(r.get("error_code", 0)),
        protocol_type=r.get("protocol_type"),
        protocol_name=r.get("protocol_name"),
        assignment=bytes(r.get("assignment") or b""),  # never null: an empty assignment is valid
    )


async def heartbeat(backend, request, version: int):
    mod = responses.response_module(12, version)
    req = M.HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        generation_id=request.generation_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    r = await backend.group_call(req)
    return responses.make(
        mod, "HeartbeatResponse", throttle_time=responses.ZERO, error_code=responses.error_code(r.get("error_code", 0))
    )


async def leave_group(backend, request, version: int):
    mod = responses.response_module(13, version)
    if version < 3:
        idents = [{"member_id": request.member_id, "group_instance_id": None}]
    else:
        idents = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id} for m in request.members]
    r = await backend.group_call(M.LeaveGroupRequest(group_id=request.group_id, members=idents))
    code = r.get("error_code", 0)
    answers = r.get("members") or []
    if version < 3:  # one member: its error is the answer
        if not code and answers:
            code = answers[0].get("error_code", 0)
        return responses.make(
            mod, "LeaveGroupResponse", throttle_time=responses.ZERO, error_code=responses.error_code(code)
        )
    members = tuple(
        responses.make(
            mod,
            "MemberResponse",
            member_id=m.get("member_id", ""),
            group_instance_id=m.get("group_instance_id"),
            error_code=responses.error_code(m.get("error_code", 0)),
        )
        for m in answers
    )
    return responses.make(
        mod, "LeaveGroupResponse", throttle_time=responses.ZERO, error_code=responses.error_code(code), members=members
    )


async def offset_commit(backend, request, version: int):
    mod = responses.response_module(8, version)
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "committed_offset": p.committed_offset,
                    "committed_leader_epoch": getattr(p, "committed_leader_epoch", -1),
                    "committed_metadata": p.committed_metadata,
                }
                for p in t.partitions
            ],
        }
        for t in request.topics
    ]
    # KafkaApis.handleOffsetCommitRequest: a topic or partition not in the metadata answers
    # UNKNOWN_TOPIC_OR_PARTITION and is not committed; only the others go to the coordinator
    known = await existing_partitions(
        backend, [(t["name"], p["partition_index"]) for t in topics for p in t["partitions"]]
    )
    valid = [
        {"name": t["name"], "partitions": ps}
        for t in topics
        if (ps := [p for p in t["partitions"] if (t["name"], p["partition_index"]) in known])
    ]
    top, answered = 0, {}
    if valid:
        req = M.OffsetCommitRequest(
            group_id=request.group_id,
            topics=valid,
            member_id=request.member_id,
            generation_id=request.generation_id_or_member_epoch,
            group_instance_id=getattr(request, "group_instance_id", None),
            api_version=version,
        )
        r = await backend.group_call(req)
        top = r.get("error_code", 0)
        answered = {
            (t["name"], p["partition_index"]): p.get("error_code", 0)
            for t in r.get("topics") or ()
            for p in t.get("partitions") or ()
        }

    def code(name: str, index: int) -> int:
        if (name, index) not in known:
            return UNKNOWN_TOPIC_OR_PARTITION
        # every partition asked gets an answer: a request-level error (e.g. NOT_COORDINATOR) goes on each
        return top or answered.get((name, index), UNKNOWN_SERVER_ERROR)

    per_topic = responses.by_topic(
        (
            t["name"],
            responses.make(
                mod,
                "OffsetCommitResponsePartition",
                partition_index=p["partition_index"],
                error_code=responses.error_code(code(t["name"], p["partition_index"])),
            ),
        )
        for t in topics
        for p in t["partitions"]
    )
    out = tuple(responses.make(mod, "OffsetCommitResponseTopic", name=n, partitions=ps) for n, ps in per_topic.items())
    return responses.make(mod, "OffsetCommitResponse", throttle_time=responses.ZERO, topics=out)


async def existing_partitions(backend, asked) -> set[tuple[str, int]]:
    """Those of the (topic, partition)s ``asked`` that the broker's metadata holds (Kafka's
    metadataCache.getPartitionInfo), for the offset commits' checks and AddPartitionsToTxn's (handlers/txn.py).
    When one is missing the cache is checked against KV first: the topic may be just created."""
    asked = {(t, int(p)) for t, p in asked}

    def held(md) -> set[tuple[str, int]]:
        topics = md["topics"]
        return {(t, p) for t, p in asked if p in {int(q) for q in (topics.get(t) or {}).get("partitions") or ()}}

    known = held(await backend.metadata())
    return known if known == asked else held(await backend.metadata(fresh=True))


def _fetch_topics(mod, r: dict, asked, suffix: str, fill_error: bool) -> tuple:
    """The per-topic answers of one group's OffsetFetch; with ``fill_error`` (v1, and a group-level error)
    every asked partition carries the group's error. ``suffix``: kio's class names end in "s" from v8."""
    code = r.get("error_code", 0)
    topics = r.get("topics") or []
    if fill_error and code and asked is not None:
        topics = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p, "committed_offset": -1, "error_code": code} for p in t.partition_indexes
                ],
            }
            for t in asked
        ]
    return tuple(
        responses.make(
            mod,
            f"OffsetFetchResponseTopic{suffix}",
            name=t["name"],
            partitions=tuple(
                responses.make(
                    mod,
                    f"OffsetFetchResponsePartition{suffix}",
                    partition_index=p["partition_index"],
                    committed_offset=p.get("committed_offset", -1),
                    committed_leader_epoch=p.get("committed_leader_epoch", -1),
                    metadata=p.get("metadata") or "",
                    error_code=responses.error_code(p.get("error_code", 0)),
                )
                for p in t.get("partitions") or ()
            ),
        )
        for t in topics
    )


def _offset_fetch_request(group_id: str, topics, require_stable: bool) -> M.OffsetFetchRequest:
    wanted = (
        None if topics is None else [{"name": t.name, "partition_indexes": list(t.partition_indexes)} for t in topics]
    )
    return M.OffsetFetchRequest(group_id=group_id, topics=wanted, require_stable=require_stable)


async def offset_fetch(backend, request, version: int):
    mod = responses.response_module(9, version)
    stable = bool(getattr(request, "require_stable", False))
    if version >= 8:  # KIP-709: several groups in one request, each answered on its own
        groups = list(request.groups)
        results = await asyncio.gather(
            *(backend.group_call(_offset_fetch_request(g.group_id, g.topics, stable)) for g in groups)
        )
        out = tuple(
            responses.make(
                mod,
                "OffsetFetchResponseGroup",
                group_id=g.group_id,
                topics=_fetch_topics(mod, r, g.topics, "s", False),
                error_code=responses.error_code(r.get("error_code", 0)),
            )
            for g, r in zip(groups, results)
        )
        return responses.make(mod, "OffsetFetchResponse", throttle_time=responses.ZERO, groups=out)
    r = await backend.group_call(_offset_fetch_request(request.group_id, request.topics, stable))
    return responses.make(
        mod,
        "OffsetFetchResponse",
        throttle_time=responses.ZERO,
        topics=_fetch_topics(mod, r, request.topics, "", version < 2),
        error_code=responses.error_code(r.get("error_code", 0)),
    )


async def list_groups(backend, request, version: int):
    mod = responses.response_module(16, version)
    states = list(getattr(request, "states_filter", ()) or ()) or None
    types = list(getattr(request, "types_filter", ()) or ()) or None
    r = await backend.group_call(M.ListGroupsRequest(states_filter=states, types_filter=types))
    groups = tuple(
        responses.make(
            mod,
            "ListedGroup",
            group_id=g["group_id"],
            protocol_type=g.get("protocol_type", ""),
            group_state=g.get("group_state", ""),
            group_type=g.get("group_type", "classic"),
        )
        for g in r.get("groups") or ()
    )
    return responses.make(
        mod,
        "ListGroupsResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(r.get("error_code", 0)),
        groups=groups,
    )


async def describe_groups(backend, request, version: int):
    mod = responses.response_module(15, version)
    ids = list(request.groups)
    r = await backend.group_call(M.DescribeGroupsRequest(group_ids=ids))
    by_id = {g["group_id"]: g for g in r.get("groups") or ()}
    code = r.get("error_code", 0)

    def one(gid: str):
        g = by_id.get(gid) or {"error_code": code or UNKNOWN_SERVER_ERROR, "group_id": gid}
        members = tuple(
            responses.make(
                mod,
                "DescribedGroupMember",
                member_id=m["member_id"],
                group_instance_id=m.get("group_instance_id"),
                client_id=m.get("client_id") or "",
                client_host=m.get("client_host") or "",
                member_metadata=bytes(m.get("member_metadata") or b""),
                member_assignment=bytes(m.get("member_assignment") or b""),
            )
            for m in g.get("members") or ()
        )
        return responses.make(
            mod,
            "DescribedGroup",
            error_code=responses.error_code(g.get("error_code", 0)),
            group_id=gid,
            group_state=g.get("group_state") or "",
            protocol_type=g.get("protocol_type") or "",
            protocol_data=g.get("protocol_data") or "",
            members=members,
            authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )

    return responses.make(
        mod, "DescribeGroupsResponse", throttle_time=responses.ZERO, groups=tuple(one(g) for g in ids)
    )


async def delete_groups(backend, request, version: int):
    mod = responses.response_module(42, version)
    ids = list(dict.fromkeys(request.groups_names))
    r = await backend.group_call(M.DeleteGroupsRequest(group_ids=ids))
    by_id = {x["group_id"]: x.get("error_code", 0) for x in r.get("results") or ()}
    code = r.get("error_code", 0) or UNKNOWN_SERVER_ERROR
    results = tuple(
        responses.make(mod, "DeletableGroupResult", group_id=g, error_code=responses.error_code(by_id.get(g, code)))
        for g in ids
    )
    return responses.make(mod, "DeleteGroupsResponse", throttle_time=responses.ZERO, results=results)


async def offset_delete(backend, request, version: int):
    mod = responses.response_module(47, version)
    topics = [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index} for p in t.partitions]}
        for t in request.topics
    ]
    r = await backend.group_call(M.OffsetDeleteRequest(group_id=request.group_id, topics=topics))
    out = tuple(
        responses.make(
            mod,
            "OffsetDeleteResponseTopic",
            name=t["name"],
            partitions=tuple(
                responses.make(
                    mod,
                    "OffsetDeleteResponsePartition",
                    partition_index=p["partition_index"],
                    error_code=responses.error_code(p.get("error_code", 0)),
                )
                for p in t.get("partitions") or ()
            ),
        )
        for t in r.get("topics") or ()
    )
    return responses.make(
        mod,
        "OffsetDeleteResponse",
        error_code=responses.error_code(r.get("error_code", 0)),
        throttle_time=responses.ZERO,
        topics=out,
    )
