"""Consumer-group admin operations behind ``Admin.list_groups / describe_groups / delete_groups /
alter_consumer_group_offsets / reset_consumer_group_offsets`` (Kafka's kafka-consumer-groups.sh).

Each group lives on the coordinator of its ``__consumer_offsets`` partition; ``list_groups`` asks every
broker's coordinator (each answers for its own groups). Offsets are changed with an OffsetCommit without
member id / generation, which the coordinator accepts only while the group has no members (Kafka's rule
for admin offset changes).
"""

from __future__ import annotations

from typing import Any, Iterable

from protocol.errors import UnknownTopicOrPartitionError, for_code
from protocol.group_messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from protocol.names import RAY_NAMESPACE, group_coordinator_name
from rafka.consumer.assignors import decode_assignment
from rafka.coordinator_client import GroupCoordinatorClient, _first_code
from rafka.structs import TopicPartition


def _client(admin, group_id: str) -> GroupCoordinatorClient:
    return GroupCoordinatorClient(admin.cluster_name, admin.metadata, group_id, admin.config.retry_backoff_ms)


def list_groups(admin) -> list[dict]:
    """``[{group_id, protocol_type, group_state}]`` from every live broker's coordinator."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    seen: dict[str, dict] = {}
    for bid in sorted(admin.metadata.brokers()):
        try:
            gc = ray.get_actor(group_coordinator_name(admin.cluster_name, bid), namespace=RAY_NAMESPACE)
            res = ray.get(gc.list_groups.remote(ListGroupsRequest()), timeout=admin.config.request_timeout_ms / 1000.0)
        except (ValueError, RayActorError, GetTimeoutError):
            continue  # no coordinator on that broker (yet), or it is gone: it serves no group
        if res.get("error_code"):
            continue  # still loading: its groups show up once it has loaded
        for g in res["groups"]:
            seen[g["group_id"]] = {
                "group_id": g["group_id"],
                "protocol_type": g["protocol_type"],
                "group_state": g["group_state"],
            }
    return sorted(seen.values(), key=lambda g: g["group_id"])


def committed_offsets(admin, group_id: str) -> dict[TopicPartition, int]:
    res = _client(admin, group_id).call(OffsetFetchRequest(group_id), timeout_ms=admin.config.default_api_timeout_ms)
    if res.get("error_code"):
        raise for_code(res["error_code"])(f"OffsetFetch for group {group_id!r} failed")
    return {
        TopicPartition(t["name"], p["partition_index"]): p["committed_offset"]
        for t in res["topics"]
        for p in t["partitions"]
        if p["committed_offset"] >= 0
    }


def describe_group(admin, group_id: str) -> dict:
    """``{group_id, state, protocol_type, protocol, members: [{member_id, group_instance_id, client_id,
    client_host, assignment: [TopicPartition]}], offsets: [{topic, partition, committed, log_end, lag,
    member_id}]}``."""
    res = _client(admin, group_id).call(
        DescribeGroupsRequest([group_id]), timeout_ms=admin.config.default_api_timeout_ms
    )
    g = res["groups"][0]
    if g["error_code"]:
        raise for_code(g["error_code"])(f"describe group {group_id!r} failed")
    owner: dict[TopicPartition, str] = {}
    members = []
    for m in g["members"]:
        parts = []
        if g["protocol_type"] == "consumer" and m.get("member_assignment"):
            parts = sorted(TopicPartition(*tp) for tp in decode_assignment(m["member_assignment"]).partitions)
        for tp in parts:
            owner[tp] = m["member_id"]
        members.append(
            {
                "member_id": m["member_id"],
                "group_instance_id": m.get("group_instance_id"),
                "client_id": m.get("client_id"),
                "client_host": m.get("client_host"),
                "assignment": parts,
            }
        )
    committed = committed_offsets(admin, group_id)
    tps = sorted(set(committed) | set(owner))
    # offsets the group committed for a topic deleted since (or a partition it no longer has) have no log end:
    # shown with log_end and lag None, as kafka-consumer-groups shows "-", not retried until a timeout
    admin.metadata.refresh(sorted({tp.topic for tp in tps}), force=True)
    live = [tp for tp in tps if (tm := admin.metadata.topic(tp.topic)) is not None and tp.partition in tm.partitions]
    ends = {tp: o.offset for tp, o in admin.list_offsets({tp: "latest" for tp in live}).items()} if live else {}
    offsets = []
    for tp in tps:
        c, end = committed.get(tp), ends.get(tp)
        offsets.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "committed": c,
                "log_end": end,
                "lag": None if c is None or end is None else max(0, end - c),
                "member_id": owner.get(tp),
            }
        )
    return {
        "group_id": group_id,
        "state": g["group_state"],
        "protocol_type": g["protocol_type"],
        "protocol": g.get("protocol_data"),
        "members": members,
        "offsets": offsets,
    }


def delete_groups(admin, group_ids: Iterable[str]) -> None:
    """Delete empty groups (their committed offsets go too); NON_EMPTY_GROUP / GROUP_ID_NOT_FOUND raise."""
    for gid in group_ids:
        res = _client(admin, gid).call(DeleteGroupsRequest([gid]), timeout_ms=admin.config.default_api_timeout_ms)
        for r in res["results"]:
            if r["error_code"]:
                raise for_code(r["error_code"])(f"delete group {r['group_id']!r} failed")


def alter_offsets(admin, group_id: str, offsets: dict[Any, int]) -> None:
    """Set the group's committed offsets (the group must have no active members)."""
    by_topic: dict[str, list[dict]] = {}
    for tp, off in offsets.items():
        tp = TopicPartition(*tp)
        if int(off) < 0:
            raise ValueError(f"offset for {tp} must be >= 0, got {off}")
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": int(off)})
    res = _client(admin, group_id).call(
        OffsetCommitRequest(group_id, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]),
        timeout_ms=admin.config.default_api_timeout_ms,
    )
    code = _first_code(res)
    if code == UnknownTopicOrPartitionError.code:  # nothing stored for a partition the cluster does not have
        missing = sorted(
            f"{t['name']}-{p['partition_index']}"
            for t in res.get("topics") or ()
            for p in t.get("partitions") or ()
            if p.get("error_code") == code
        )
        raise UnknownTopicOrPartitionError(f"altering offsets of group {group_id!r} failed for {', '.join(missing)}")
    if code:
        raise for_code(code)(
            f"altering offsets of group {group_id!r} failed (a group with active members "
            "cannot have its offsets changed)"
        )


def reset_plan(
    admin,
    group_id: str,
    to: Any,
    topics: Iterable[str] | None = None,
    partitions: dict[str, list[int]] | None = None,
) -> list[dict]:
    """Kafka's ``kafka-consumer-groups --reset-offsets`` plan, without changing anything: one row per partition
    ``{topic, partition, current, log_start, log_end, new}``. ``to``: ``"earliest"``, ``"latest"``,
    ``{"timestamp": ms}`` (the first offset at or after it; the log end when none), an offset, or
    ``{"shift_by": n}`` (from the committed offset, which must exist). The new offset is clamped to
    ``[log start, log end]``, as Kafka does. Partitions: every partition of ``topics`` (``partitions`` narrows a
    topic to some), default the ones the group has committed offsets for."""
    committed = committed_offsets(admin, group_id)
    if topics is None:
        tps = sorted(committed)
    else:
        tps = []
        for t in topics:
            tm = admin.metadata.topic(t)
            if tm is None:
                raise UnknownTopicOrPartitionError(f"topic {t!r} does not exist")
            want = (partitions or {}).get(t)
            for p in want or []:
                if p not in tm.partitions:
                    raise UnknownTopicOrPartitionError(f"topic {t!r} has no partition {p}")
            tps.extend(TopicPartition(t, p) for p in sorted(tm.partitions) if not want or p in want)
    if not tps:
        return []
    starts = {tp: o.offset for tp, o in admin.list_offsets({tp: "earliest" for tp in tps}).items()}
    ends = {tp: o.offset for tp, o in admin.list_offsets({tp: "latest" for tp in tps}).items()}
    if to == "earliest":
        target = dict(starts)
    elif to == "latest":
        target = dict(ends)
    elif isinstance(to, dict) and "timestamp" in to:
        found = admin.list_offsets({tp: int(to["timestamp"]) for tp in tps})
        target = {tp: (o.offset if o.offset >= 0 else ends[tp]) for tp, o in found.items()}
    elif isinstance(to, dict) and "shift_by" in to:
        missing = [str(tp) for tp in tps if tp not in committed]
        if missing:
            raise ValueError(f"cannot shift {', '.join(missing)}: group {group_id!r} has no committed offset there")
        target = {tp: committed[tp] + int(to["shift_by"]) for tp in tps}
    elif isinstance(to, int) and not isinstance(to, bool):
        target = {tp: to for tp in tps}
    else:
        raise ValueError(
            f"reset target must be 'earliest', 'latest', {{'timestamp': ms}}, {{'shift_by': n}} or an offset, not {to!r}"
        )
    return [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "current": committed.get(tp),
            "log_start": starts[tp],
            "log_end": ends[tp],
            "new": min(max(target[tp], starts[tp]), ends[tp]),
        }
        for tp in tps
    ]


def reset_offsets(admin, group_id: str, to: Any, topics: Iterable[str] | None = None) -> dict[TopicPartition, int]:
    """``reset_plan`` carried out (the group must have no active members); returns the new offsets."""
    plan = reset_plan(admin, group_id, to, topics)
    target = {TopicPartition(r["topic"], r["partition"]): r["new"] for r in plan}
    if target:
        alter_offsets(admin, group_id, target)
    return target
