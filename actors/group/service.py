"""The group coordinator's request-level rules, pure (Kafka's GroupCoordinatorService and the offsets topic's
configs): the ``__consumer_offsets`` spec and config mapping, append error normalization, input checks,
routing codes, each API's error answer, and ``group_kind`` (the groups' kind on the coordinator runtime).
Called by actors/group_coordinator.py and the broker's coordinator host; no Ray, no I/O.
"""

from __future__ import annotations

from actors.coordinator.context import ACTIVE, LOADING, CoordinatorContext
from actors.coordinator.context import FAILED as FAILED  # the runtime's states and routing, re-exported
from actors.coordinator.context import route_code as route_code
from actors.coordinator.shard import CoordinatorKind
from actors.group.classic_group import GroupCoordinatorConfig
from actors.group.records import CoordinatorRecord, EndTxnMarker, decode_record, partition_for
from actors.group.shard import GroupCoordinatorShard
from protocol import errors as E
from protocol.group_messages import JoinGroupResponse, OffsetCommitResponse, SyncGroupResponse
from protocol.names import OFFSETS_TOPIC

DEFAULT_OFFSETS_PARTITIONS = 5
DEFAULT_OFFSETS_REPLICATION = 3
DEFAULT_OFFSETS_SEGMENT_BYTES = 104857600
DEFAULT_COMMIT_TIMEOUT_MS = 5000

NONE = E.NoError.code
UNKNOWN_SERVER_ERROR = E.for_name("UNKNOWN_SERVER_ERROR").code
COORDINATOR_LOAD_IN_PROGRESS = E.for_name("COORDINATOR_LOAD_IN_PROGRESS").code
COORDINATOR_NOT_AVAILABLE = E.for_name("COORDINATOR_NOT_AVAILABLE").code
NOT_COORDINATOR = E.for_name("NOT_COORDINATOR").code
INVALID_GROUP_ID = E.for_name("INVALID_GROUP_ID").code
INVALID_REQUEST = E.for_name("INVALID_REQUEST").code
INVALID_COMMIT_OFFSET_SIZE = E.for_name("INVALID_COMMIT_OFFSET_SIZE").code
UNKNOWN_TOPIC_OR_PARTITION = E.UnknownTopicOrPartitionError.code
_RETRIABLE = (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)

# Kafka's GroupCoordinatorService.normalizeException for append failures.
APPEND_ERRORS = {
    **{
        E.for_name(n).code: COORDINATOR_NOT_AVAILABLE
        for n in (
            "NOT_ENOUGH_REPLICAS",
            "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
            "REQUEST_TIMED_OUT",
            "UNKNOWN_TOPIC_OR_PARTITION",
        )
    },
    **{
        E.for_name(n).code: NOT_COORDINATOR
        for n in ("NOT_LEADER_OR_FOLLOWER", "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH")
    },
    **{
        E.for_name(n).code: UNKNOWN_SERVER_ERROR
        for n in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")
    },
}
TOO_LARGE = {E.for_name(n).code for n in ("MESSAGE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_FETCH_SIZE")}


def coordinator_config(props: dict | None) -> GroupCoordinatorConfig:
    """``GroupCoordinatorConfig`` from Kafka's broker config names (missing keys keep Kafka's defaults)."""
    props = props or {}
    names = {
        "group.min.session.timeout.ms": "group_min_session_timeout_ms",
        "group.max.session.timeout.ms": "group_max_session_timeout_ms",
        "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
        "group.max.size": "group_max_size",
        "offsets.retention.minutes": "offsets_retention_minutes",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    }
    return GroupCoordinatorConfig(**{field: int(props[k]) for k, field in names.items() if k in props})


def offsets_partitions(props: dict | None) -> int:
    return int((props or {}).get("offsets.topic.num.partitions", DEFAULT_OFFSETS_PARTITIONS))


def offsets_topic_spec(props: dict | None, alive_brokers: int) -> dict:
    """The CreateTopics request for ``__consumer_offsets`` (Kafka's auto-creation of the internal topic)."""
    props = props or {}
    rf = int(props.get("offsets.topic.replication.factor", DEFAULT_OFFSETS_REPLICATION))
    return {
        "name": OFFSETS_TOPIC,
        "num_partitions": offsets_partitions(props),
        "replication_factor": max(1, min(rf, alive_brokers)),
        "configs": {
            "cleanup.policy": "compact",
            "segment.bytes": int(props.get("offsets.topic.segment.bytes", DEFAULT_OFFSETS_SEGMENT_BYTES)),
        },
    }


def bad_input(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, E.KafkaError):
        return E.error_response(exc)
    if isinstance(exc, (TypeError, ValueError, KeyError, AttributeError, IndexError)):
        return INVALID_REQUEST, f"malformed request: {type(exc).__name__}: {exc}"
    return UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"


def valid_group(group_id) -> bool:
    """Kafka's isGroupIdValid: a non-empty string."""
    return isinstance(group_id, str) and bool(group_id)


def message(code: int) -> str:
    return E.for_code(code).default_message if code else ""


def is_retriable_coordinator_error(code: int) -> bool:
    """A client answers these by finding the coordinator again and retrying (Kafka's consumer does)."""
    return code in _RETRIABLE


def append_error(raw: int, too_large: int = UNKNOWN_SERVER_ERROR) -> int:
    """The error a request answers for a failed append of its records (``raw``: the replica's code)."""
    return too_large if raw in TOO_LARGE else APPEND_ERRORS.get(raw, raw)


def decode(key: bytes | None, value: bytes | None, producer_id: int) -> CoordinatorRecord:
    """A ``__consumer_offsets`` record read back (``producer_id`` >= 0: of a transactional batch)."""
    rec = decode_record(key, value)  # type: ignore[arg-type]  # a null key is corrupt: it raises
    return CoordinatorRecord(rec.key, rec.value, producer_id) if producer_id >= 0 else rec


def group_kind(config: GroupCoordinatorConfig) -> CoordinatorKind:
    """Consumer groups on the coordinator runtime (actors/coordinator/)."""
    return CoordinatorKind(
        topic=OFFSETS_TOPIC,
        new_shard=lambda epoch: GroupCoordinatorShard(config),
        decode=decode,
        end_txn=EndTxnMarker,
        append_error=append_error,
        summary=lambda shard: f"{len(shard.group_ids())} groups",
    )


def list_groups(parts: dict[int, CoordinatorContext], states_filter=None, types_filter=None):
    """ListGroups over the partitions led here -> ``(groups, code, tails)``: the loaded partitions' groups,
    COORDINATOR_LOAD_IN_PROGRESS while one is still loading, and the pending appends the answer waits for."""
    groups: list = []
    code, tails = NONE, []
    for p in sorted(parts):
        part = parts[p]
        if part.state == LOADING:
            code = COORDINATOR_LOAD_IN_PROGRESS
        elif part.state == ACTIVE:
            groups += part.shard.list_groups(states_filter, types_filter)["groups"]
            if part.tail is not None:
                tails.append(part.tail)
    return groups, code, tails


def group_ids_by_partition(group_ids, num_partitions: int) -> tuple[dict[int, list], dict]:
    """DeleteGroups' split: valid group ids by offsets partition; invalid ones answered INVALID_GROUP_ID."""
    by_part: dict[int, list] = {}
    results: dict = {}
    for gid in group_ids:
        if not valid_group(gid):
            results[gid] = {"group_id": gid, "error_code": INVALID_GROUP_ID}
        else:
            by_part.setdefault(partition_for(gid, num_partitions), []).append(gid)
    return by_part, results


# ---- each API's error answer (code, message) -> response ------------------------------------------------
def join_error(member_id, code: int, msg: str | None) -> dict:
    return JoinGroupResponse(code, msg, member_id=member_id if isinstance(member_id, str) else "").to_dict()


def sync_error(code: int, msg: str | None) -> dict:
    return SyncGroupResponse(code, msg).to_dict()


def offset_commit_error(topics, code: int, msg: str | None, existing=None) -> dict:
    """Every partition of the request gets the error (a malformed request: the top-level error), except, with
    ``existing`` (the partitions the cluster has), the unknown ones: UNKNOWN_TOPIC_OR_PARTITION whatever the
    coordinator's error, as Kafka's KafkaApis answers them before the coordinator is asked."""
    out = OffsetCommitResponse.for_every_partition(topics, code, msg).to_dict()
    if existing is not None:
        for t in out["topics"]:
            for p in t["partitions"]:
                if (t["name"], int(p["partition_index"])) not in existing:
                    p["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
    return out


def describe_group_error(group_id, code: int, msg: str | None) -> dict:
    return {
        "error_code": code,
        "error_message": msg,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
