"""Typed messages of the group coordinator's calls (``GroupCoordinatorActor``), as Kafka's generated
``JoinGroupRequestData`` & co: frozen, slotted dataclasses with Kafka's field names and a ``METHOD`` each. A
request travels as the dataclass (a wrong type answers INVALID_REQUEST), a response as its dict. Built by
rafka/ and serve/, served by actors/group_coordinator.py; nested shapes in docs/internals.md (protocol/).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from protocol import errors as E

INVALID_REQUEST = E.InvalidRequestError.code

__all__ = [
    "JoinGroupRequest",
    "JoinGroupResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetDeleteRequest",
    "ListGroupsRequest",
    "DescribeGroupsRequest",
    "DeleteGroupsRequest",
    "GroupRequest",
    "wrong_type",
]


class _Response:
    """``to_dict`` / ``from_dict`` shared by the responses (each a frozen, slotted dataclass)."""

    __slots__ = ()

    def to_dict(self) -> dict:
        """The dict the response travels as (``error_message`` only when there is one)."""
        d = asdict(self)  # type: ignore[call-overload]
        if d.get("error_message", "") is None:
            del d["error_message"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Any:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})  # type: ignore[arg-type]


# ============================================================================== membership
@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """JoinGroup. ``member_id=""`` for a new member (MEMBER_ID_REQUIRED hands one out);
    ``rebalance_timeout_ms=-1``: the session timeout (JoinGroup v0)."""

    METHOD: ClassVar[str] = "join_group"
    group_id: str
    member_id: str
    protocol_type: str
    protocols: Any
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    supports_skip_assignment: bool = True

    def effective_rebalance_timeout_ms(self) -> int:
        r = self.rebalance_timeout_ms
        return r if isinstance(r, int) and r >= 0 else self.session_timeout_ms

    def member_options(self) -> dict:
        """The optional member fields, as the shard's ``join_group`` takes them (keywords)."""
        return {
            "group_instance_id": self.group_instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "require_known_member_id": self.require_known_member_id,
            "supports_skip_assignment": self.supports_skip_assignment,
        }


@dataclass(frozen=True, slots=True)
class JoinGroupResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list = field(default_factory=list)  # the leader's: [{"member_id", "group_instance_id", "metadata"}]


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    """SyncGroup: the leader passes every member's assignment; everyone gets their own."""

    METHOD: ClassVar[str] = "sync_group"
    group_id: str
    member_id: str
    generation_id: int
    assignments: Any = None
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    METHOD: ClassVar[str] = "heartbeat"
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse(_Response):
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """LeaveGroup v3+ (batch); ``member_id=""`` with an instance id removes that static member."""

    METHOD: ClassVar[str] = "leave_group"
    group_id: str
    members: Any


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    members: list = field(default_factory=list)  # [{"member_id", "group_instance_id", "error_code"}]


# ============================================================================== offsets
@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    """OffsetCommit: members pass their member id and generation; simple consumers and admin changes
    pass generation -1 (accepted for an unknown or Empty group)."""

    METHOD: ClassVar[str] = "offset_commit"
    group_id: str
    topics: Any
    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None
    api_version: int = -1  # the wire request's version (v9+: GROUP_ID_NOT_FOUND for an unknown group); -1: rafka's


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse(_Response):
    """Per-partition error codes; ``error_code`` is set only when the request itself is refused."""

    topics: list = field(default_factory=list)  # [{"name", "partitions": [{"partition_index", "error_code"}]}]
    error_code: int = 0
    error_message: str | None = None

    @classmethod
    def for_every_partition(cls, topics: Any, code: int, msg: str | None) -> OffsetCommitResponse:
        """Every partition of the request answers ``code``; a malformed request: the top-level error."""
        try:
            per_topic = [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code} for p in t.get("partitions", [])
                    ],
                }
                for t in topics
            ]
        except (TypeError, KeyError, AttributeError):
            return cls([], code, msg)
        return cls(per_topic, 0, msg)


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    METHOD: ClassVar[str] = "offset_fetch"
    group_id: str
    topics: Any = None  # None: every committed offset of the group
    require_stable: bool = False  # KIP-447: UNSTABLE_OFFSET_COMMIT while a transaction commits an offset


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse(_Response):
    """``committed_offset`` -1: nothing committed for that partition."""

    error_code: int = 0
    error_message: str | None = None
    topics: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    """OffsetDelete (KIP-496)."""

    METHOD: ClassVar[str] = "offset_delete"
    group_id: str
    topics: Any


# ============================================================================== admin
@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    """ListGroups over every partition the coordinator leads; filters are case-insensitive."""

    METHOD: ClassVar[str] = "list_groups"
    states_filter: Any = None
    types_filter: Any = None


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    METHOD: ClassVar[str] = "describe_groups"
    group_ids: Any


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    """DeleteGroups: Empty groups only (NON_EMPTY_GROUP otherwise); their offsets go too."""

    METHOD: ClassVar[str] = "delete_groups"
    group_ids: Any


GroupRequest = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | OffsetDeleteRequest
    | ListGroupsRequest
    | DescribeGroupsRequest
    | DeleteGroupsRequest
)


def wrong_type(request: object, expected: type) -> str | None:
    """The INVALID_REQUEST message for a call whose argument is not an ``expected`` request (or whose
    ``group_ids`` is not a list), else None."""
    if not isinstance(request, expected):
        method = getattr(expected, "METHOD", expected.__name__)
        return f"{method} takes one {expected.__name__}, not {type(request).__name__}"
    ids = getattr(request, "group_ids", [])
    if not isinstance(ids, (list, tuple)):
        return f"group_ids must be a list, not {type(ids).__name__}"
    return None
