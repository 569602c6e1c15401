"""The classic consumer-group model (Kafka's ClassicGroupState / ClassicGroupMember / ClassicGroup) and the
coordinator's result types: pure data, copy-on-write groups (``clone`` / ``seal``), every state move through
``transition_to`` against ``VALID_PREVIOUS_STATES``. Used by the shard and its managers (actors/group/);
no Ray, no clock. The state machine: docs/internals.md ("Group coordinator").
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from actors.group.records import CoordinatorRecord, GroupMetadataValue, MemberMetadata
from protocol.group_messages import JoinGroupResponse, SyncGroupResponse

log = logging.getLogger("rafka.group_coordinator")

__all__ = [
    "GroupState",
    "VALID_PREVIOUS_STATES",
    "InvalidGroupTransition",
    "ClassicGroupMember",
    "ClassicGroup",
    "GroupSnapshotRecord",
    "Pending",
    "CoordinatorResult",
    "GroupCoordinatorConfig",
    "CONSUMER_PROTOCOL_TYPE",
    "join_response",
    "sync_response",
    "subscription_topics",
]

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


S = GroupState
#: state -> the states it may be entered from (Kafka's ClassicGroupState.validPreviousStates)
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset({S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
}


class InvalidGroupTransition(RuntimeError):
    """A coordinator bug: a transition Kafka's state machine does not allow."""


# the coordinator log's line for each move (Kafka's GroupCoordinator wording)
_TRANSITION_LINES = {
    GroupState.PREPARING_REBALANCE: (
        "Preparing to rebalance group {g.group_id} in state PreparingRebalance with old generation "
        "{g.generation_id} ({g.previous_state} before, {g.member_count} member(s))"
    ),
    GroupState.COMPLETING_REBALANCE: (
        "Stabilized group {g.group_id} generation {g.generation_id} with {g.member_count} member(s), "
        "protocol {g.protocol_name}: awaiting the leader's assignment"
    ),
    GroupState.STABLE: (
        "Assignment received from leader {g.leader_id} for group {g.group_id} for generation "
        "{g.generation_id}. The group has {g.member_count} member(s): Stable"
    ),
    GroupState.EMPTY: "Group {g.group_id} with generation {g.generation_id} is now empty",
    GroupState.DEAD: "Group {g.group_id} with generation {g.generation_id} is now dead",
}


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """Kafka's broker-side group settings (``group.*``, ``offsets.*``)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300_000  # Kafka's classic.group.new.member.join.timeout.ms
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


@dataclass(frozen=True)
class ClassicGroupMember:
    """One member (Kafka's ClassicGroupMember). ``protocols`` keeps the member's preference order."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def matches(self, protocols: Iterable[tuple[str, bytes]]) -> bool:
        return tuple((n, bytes(m)) for n, m in protocols) == self.protocols

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka: new members must heartbeat (join); members parked in a join or sync are excused."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass(frozen=True)
class Pending:
    """The request is parked (DelayedJoin / DelayedSync); its answer arrives later as a completion."""

    kind: str  # "join" | "sync"
    group_id: str
    member_id: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.group_id, self.member_id)


@dataclass
class CoordinatorResult:
    """What a handler returns: records to append (durable) and replay (all), this request's response
    (or a ``Pending``), and responses for previously parked requests keyed by ``Pending.key``."""

    records: list = field(default_factory=list)
    response: Any = None
    completions: list[tuple[tuple[str, str, str], dict]] = field(default_factory=list)

    def __iter__(self):  # ``records, response = shard.join_group(...)``
        return iter((self.records, self.response))

    @property
    def durable_records(self) -> list[CoordinatorRecord]:
        return [r for r in self.records if r.durable]


@dataclass(frozen=True)
class GroupSnapshotRecord:
    """In-memory record: install this sealed group (``group=None`` removes it). Never written to the log;
    Kafka keeps the same state in memory only (rebalance progress, parked requests, timers)."""

    group_id: str
    group: "ClassicGroup | None"
    durable: bool = field(default=False, init=False, compare=False)


def join_response(
    error_code: int = 0,
    member_id: str = "",
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    members: list | None = None,
    skip_assignment: bool = False,
) -> dict:
    return JoinGroupResponse(
        error_code,
        None,
        generation_id,
        protocol_type,
        protocol_name,
        leader,
        skip_assignment,
        member_id,
        members or [],
    ).to_dict()


def sync_response(
    error_code: int = 0, protocol_type: str | None = None, protocol_name: str | None = None, assignment: bytes = b""
) -> dict:
    return SyncGroupResponse(error_code, None, protocol_type, protocol_name, assignment).to_dict()


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """Topics of a ConsumerProtocol Subscription (any version), or None when it does not parse."""
    try:
        buf = memoryview(metadata)
        if len(buf) < 6:
            return None
        pos = 2  # int16 version
        n = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        pos += 4
        if n < 0 or n > len(buf):
            return None
        topics = []
        for _ in range(n):
            ln = int.from_bytes(buf[pos : pos + 2], "big", signed=True)
            pos += 2
            if ln < 0 or pos + ln > len(buf):
                return None
            topics.append(bytes(buf[pos : pos + ln]).decode("utf-8"))
            pos += ln
        return frozenset(topics)
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass(eq=True)
class ClassicGroup:
    """Kafka's ClassicGroup plus its timers as deadlines (heartbeat per member, pending members, join,
    sync). ``members`` keeps join order: the leader is the first member, and on removal of the leader the
    next one in order takes over."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_join_members: dict[str, int] = field(default_factory=dict)  # member id -> session deadline
    pending_sync_members: dict[str, None] = field(default_factory=dict)  # ordered set
    new_member_added: bool = False
    join_deadline_ms: int | None = None
    join_timer: tuple | None = None  # ("initial", delay_ms, remaining_ms) | ("join",)
    sync_deadline_ms: int | None = None
    sync_generation: int = -1
    subscribed_topics: frozenset[str] | None = None
    _sealed: bool = field(default=False, compare=False, repr=False)

    # ------------------------------------------------------------------ copy-on-write
    def clone(self) -> "ClassicGroup":
        g = replace(
            self,
            members=dict(self.members),
            static_members=dict(self.static_members),
            pending_join_members=dict(self.pending_join_members),
            pending_sync_members=dict(self.pending_sync_members),
        )
        g._sealed = False
        return g

    def seal(self) -> "ClassicGroup":
        self._sealed = True
        return self

    def _mutable(self) -> None:
        if self._sealed:
            raise InvalidGroupTransition(f"group {self.group_id} is installed state; clone() it before editing")

    # ------------------------------------------------------------------ state
    def in_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        self._mutable()
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise InvalidGroupTransition(
                f"group {self.group_id} should be in one of {sorted(map(str, VALID_PREVIOUS_STATES[target]))} "
                f"before moving to {target}, but is in {self.state}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms
        if log.isEnabledFor(logging.INFO):
            log.info(_TRANSITION_LINES[target].format(g=self))

    @property
    def member_count(self) -> int:
        return len(self.members)

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------------ members
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_empty(self) -> bool:
        return not self.members

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_join_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def put_member(self, member: ClassicGroupMember) -> None:
        """Replace an existing member's fields (keeps its position)."""
        self._mutable()
        if member.member_id not in self.members:
            raise KeyError(member.member_id)
        self.members[member.member_id] = member

    def update_member(self, member_id: str, **changes: Any) -> ClassicGroupMember:
        m = replace(self.members[member_id], **changes)
        self.put_member(m)
        return m

    def add(self, member: ClassicGroupMember) -> None:
        self._mutable()
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise InvalidGroupTransition(f"static member {member.group_instance_id} is already in the group")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if member.protocol_type != self.protocol_type:
            raise InvalidGroupTransition("the group and member's protocol type must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_join_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        self._mutable()
        removed = self.members.pop(member_id, None)
        if removed is not None and removed.group_instance_id is not None:
            self.static_members.pop(removed.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.pop(member_id, None)
        self.pending_sync_members.pop(member_id, None)
        return removed

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """The static member rejoined with a new member id: same metadata and assignment, new id (appended
        at the end of the join order, as Kafka does). The caller fences the old id's parked requests."""
        self._mutable()
        old = self.members.pop(old_member_id)
        new = replace(
            old, member_id=new_member_id, awaiting_join=False, awaiting_sync=False, heartbeat_deadline_ms=None
        )
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        self.pending_sync_members.pop(old_member_id, None)
        return new

    # ------------------------------------------------------------------ protocols
    def _protocol_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in m.protocol_names():
                counts[name] = counts.get(name, 0) + 1
        return counts

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, c in self._protocol_counts().items() if c == n}

    def supports_protocols(self, protocol_type: str, protocol_names: Iterable[str]) -> bool:
        names = list(protocol_names)
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        counts, n = self._protocol_counts(), len(self.members)
        return self.protocol_type == protocol_type and any(counts.get(name, 0) == n for name in names)

    def select_protocol(self) -> str:
        """The protocol all members support with the most votes (each member votes for its most preferred
        candidate). Ties go to the candidate the leader prefers (Kafka leaves ties to hash order)."""
        if not self.members:
            raise InvalidGroupTransition("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = (self.members.get(self.leader_id) if self.leader_id is not None else None) or next(
            iter(self.members.values())
        )
        for name in leader.protocol_names():
            if votes.get(name) == best:
                return name
        return sorted(n for n, v in votes.items() if v == best)[0]

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Union of the members' subscribed topics for the consumer protocol (None if unknown)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka: an Empty group is subscribed to nothing; unknown subscriptions count as subscribed."""
        if self.state is GroupState.EMPTY:
            return False
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self._mutable()
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_members_for_leader(self) -> list[dict]:
        return [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata(self.protocol_name),
            }
            for m in self.members.values()
        ]

    # ------------------------------------------------------------------ timers
    def timers(self) -> list[tuple[int, int, str, str]]:
        """All armed timers as (deadline, priority, kind, member id), in firing order."""
        out = []
        if self.join_deadline_ms is not None:
            out.append((self.join_deadline_ms, 0, "join", ""))
        if self.sync_deadline_ms is not None:
            out.append((self.sync_deadline_ms, 1, "sync", ""))
        for mid, deadline in self.pending_join_members.items():
            out.append((deadline, 2, "pending", mid))
        for m in self.members.values():
            if m.heartbeat_deadline_ms is not None:
                out.append((m.heartbeat_deadline_ms, 3, "heartbeat", m.member_id))
        out.sort()
        return out

    def next_deadline(self) -> int | None:
        t = self.timers()
        return t[0][0] if t else None

    # ------------------------------------------------------------------ persistence
    def to_metadata_value(self) -> GroupMetadataValue:
        """Kafka's GroupMetadataValue for this group (members' metadata for the selected protocol)."""
        members = tuple(
            MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(self.protocol_name) if self.protocol_name is not None else b"",
                m.assignment,
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            -1 if self.state_timestamp_ms is None else self.state_timestamp_ms,
            members,
        )

    @classmethod
    def from_metadata_value(cls, group_id: str, value: GroupMetadataValue) -> "ClassicGroup":
        """The group as loaded from its latest GroupMetadataValue: Stable with members, else Empty."""
        g = cls(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=None if value.current_state_timestamp < 0 else value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for mm in value.members:
            g.members[mm.member_id] = ClassicGroupMember(
                mm.member_id,
                mm.group_instance_id,
                mm.client_id,
                mm.client_host,
                mm.rebalance_timeout,
                mm.session_timeout,
                value.protocol_type,
                ((value.protocol or "", mm.subscription),),
                mm.assignment,
            )
            if mm.group_instance_id is not None:
                g.static_members[mm.group_instance_id] = mm.member_id
        if g.members and g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.subscribed_topics = g.compute_subscribed_topics()
        return g

    def durable_view(self) -> GroupMetadataValue:
        """What the log must hold for a Stable or Empty group (replay/load equivalence checks)."""
        return self.to_metadata_value()

    def describe(self) -> dict:
        """Kafka's DescribeGroups entry: metadata and assignments only when Stable."""
        stable = self.state is GroupState.STABLE
        return {
            "error_code": 0,
            "group_id": self.group_id,
            "group_state": str(self.state),
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in self.members.values()
            ],
        }
