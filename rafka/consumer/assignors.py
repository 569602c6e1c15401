"""Client-side partition assignors and Kafka's ConsumerProtocol, byte-compatible with the Java client.

The group leader runs an assignor over every member's Subscription and hands the coordinator one
Assignment per member (SyncGroup); the coordinator only relays bytes. Names and algorithms are Kafka's:

- ``range``: per topic, members (static first by instance id, then by member id) get consecutive ranges;
  the first ``partitions % members`` get one extra.
- ``roundrobin``: every subscribed topic-partition, sorted, dealt round robin over the sorted members,
  skipping members not subscribed to the topic.
- ``sticky``: balanced (partition counts differ by at most one among members that could take them) and
  sticky: previously owned partitions stay put unless balance needs them elsewhere. Equal subscriptions
  take Kafka's constrained path (keep up to quota, fill round robin); different subscriptions the general
  path (fewest-potential-consumers first, then move partitions while a member exceeds an eligible one by
  two or more). Ownership comes from the user data of the previous assignment (eager protocol).
- ``cooperative-sticky`` (KIP-429): the sticky assignment, minus every partition that changes owner; the
  previous owner revokes it, rejoins, and the partition is assigned in the follow-up rebalance. Ownership
  comes from the Subscription's ``owned_partitions``.

ConsumerProtocol grammar (big-endian, ``string`` = int16 length + UTF-8, ``[T]`` = int32 count + items,
``bytes?`` = int32 length or -1 for null)::

    Subscription := version:int16 topics:[string] user_data:bytes?
                    [v1+ owned_partitions:[topic:string partitions:[int32]]]
                    [v2+ generation_id:int32] [v3+ rack_id:string?]
    Assignment   := version:int16 assigned_partitions:[topic:string partitions:[int32]] user_data:bytes?
    StickyAssignorUserData v1 := previous_assignment:[topic:string partitions:[int32]] generation:int32
    CooperativeStickyAssignor user data := generation:int32

Decoders accept any version and read the fields they know (Kafka: newer versions only append fields).
Pure Python, no Ray; safe to call from any thread (assignors keep only their own last assignment).
"""

from __future__ import annotations

import abc
import struct
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

__all__ = [
    "TopicPartition",
    "Subscription",
    "Assignment",
    "encode_subscription",
    "decode_subscription",
    "encode_assignment",
    "decode_assignment",
    "encode_sticky_user_data",
    "decode_sticky_user_data",
    "AbstractPartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "CooperativeStickyAssignor",
    "ASSIGNORS",
    "get_assignor",
    "perform_assignment",
    "validate_cooperative_assignment",
    "EAGER",
    "COOPERATIVE",
]

EAGER = "EAGER"
COOPERATIVE = "COOPERATIVE"
DEFAULT_GENERATION = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None
    group_instance_id: str | None = None  # not serialized: comes from the JoinGroup member list


@dataclass
class Assignment:
    partitions: list[TopicPartition]
    user_data: bytes | None = None


# ============================================================================== ConsumerProtocol codec


def _w_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def _w_nullable_string(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _w_string(s)


def _w_nullable_bytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + bytes(b)


def _w_topic_partitions(tps: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp[0], []).append(int(tp[1]))
    parts = [_I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        ps = by_topic[topic]
        parts += [_w_string(topic), _I32.pack(len(ps))] + [_I32.pack(p) for p in ps]
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes):
        self.buf = bytes(data)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"consumer protocol data truncated at byte {self.pos}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def at_end(self) -> bool:
        return self.pos >= len(self.buf)

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def count(self) -> int:
        n = self.i32()
        if n < -1 or n > len(self.buf):
            raise ValueError(f"impossible array length {n}")
        return max(n, 0)

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise ValueError("null in a non-nullable string")
        return self._take(n).decode("utf-8")

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode("utf-8")

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def topic_partitions(self) -> list[TopicPartition]:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out += [TopicPartition(topic, self.i32()) for _ in range(self.count())]
        return out


def encode_subscription(sub: Subscription, version: int = 1) -> bytes:
    """ConsumerProtocolSubscription bytes (version 0..3; rafka clients send v1, KIP-429's format)."""
    if not 0 <= version <= 3:
        raise ValueError(f"unsupported subscription version {version}")
    parts = [_I16.pack(version), _I32.pack(len(sub.topics))] + [_w_string(t) for t in sub.topics]
    parts.append(_w_nullable_bytes(sub.user_data))
    if version >= 1:
        parts.append(_w_topic_partitions(sub.owned_partitions))
    if version >= 2:
        parts.append(_I32.pack(sub.generation_id))
    if version >= 3:
        parts.append(_w_nullable_string(sub.rack_id))
    return b"".join(parts)


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise ValueError(f"negative subscription version {version}")
    topics = [r.string() for _ in range(r.count())]
    sub = Subscription(topics, r.nullable_bytes(), group_instance_id=group_instance_id)
    if version >= 1 and not r.at_end():
        sub.owned_partitions = r.topic_partitions()
    if version >= 2 and not r.at_end():
        sub.generation_id = r.i32()
    if version >= 3 and not r.at_end():
        sub.rack_id = r.nullable_string()
    return sub


def encode_assignment(assignment: Assignment, version: int = 1) -> bytes:
    if not 0 <= version <= 3:
        raise ValueError(f"unsupported assignment version {version}")
    return _I16.pack(version) + _w_topic_partitions(assignment.partitions) + _w_nullable_bytes(assignment.user_data)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment([])  # the coordinator's empty assignment for members the leader left out
    r = _Reader(data)
    if r.i16() < 0:
        raise ValueError("negative assignment version")
    partitions = r.topic_partitions()
    return Assignment(partitions, None if r.at_end() else r.nullable_bytes())


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData v1 (Kafka's StickyAssignor always writes v1)."""
    return _w_topic_partitions(partitions) + _I32.pack(generation)


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation); tries v1 then v0 like Kafka; garbage -> ([], -1)."""
    if not data:
        return [], DEFAULT_GENERATION
    try:
        r = _Reader(data)
        parts = r.topic_partitions()
        generation = r.i32()
        if r.at_end():
            return parts, generation
    except ValueError:
        pass
    try:
        r = _Reader(data)
        parts = r.topic_partitions()
        if r.at_end():
            return parts, DEFAULT_GENERATION
    except ValueError:
        pass
    return [], DEFAULT_GENERATION


# ============================================================================== assignors


def _member_order(subscriptions: dict[str, Subscription]) -> list[str]:
    """Kafka's MemberInfo order: static members by instance id first, then dynamic ones by member id."""

    def key(mid: str):
        iid = subscriptions[mid].group_instance_id
        return (0, iid, mid) if iid is not None else (1, mid, mid)

    return sorted(subscriptions, key=key)


def _partitions(partitions_per_topic: dict[str, int], topics: Iterable[str]) -> list[TopicPartition]:
    return [
        TopicPartition(t, p)
        for t in sorted(set(topics))
        if t in partitions_per_topic
        for p in range(partitions_per_topic[t])
    ]


class AbstractPartitionAssignor(abc.ABC):
    """Kafka's ConsumerPartitionAssignor: ``assign(partitions_per_topic, subscriptions)`` maps each member id
    to an Assignment; topics absent from ``partitions_per_topic`` (unknown to metadata) are ignored."""

    name = ""
    supported_protocols: tuple[str, ...] = (EAGER,)

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        return None

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called by the consumer with its own assignment after SyncGroup."""

    @abc.abstractmethod
    def assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> dict[str, Assignment]:
        """Each member's assignment, from every member's subscription."""


class RangeAssignor(AbstractPartitionAssignor):
    name = "range"

    def assign(self, partitions_per_topic, subscriptions):
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        order = _member_order(subscriptions)
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            if topic not in partitions_per_topic:
                continue
            members = [m for m in order if topic in subscriptions[m].topics]
            n = partitions_per_topic[topic]
            per, extra = divmod(n, len(members))
            for i, m in enumerate(members):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                out[m] += [TopicPartition(topic, p) for p in range(start, start + length)]
        return {m: Assignment(ps) for m, ps in out.items()}


class RoundRobinAssignor(AbstractPartitionAssignor):
    name = "roundrobin"

    def assign(self, partitions_per_topic, subscriptions):
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        order = _member_order(subscriptions)
        if not order:
            return {}
        all_topics = {t for s in subscriptions.values() for t in s.topics}
        i = 0
        for tp in _partitions(partitions_per_topic, all_topics):
            if not any(tp.topic in subscriptions[m].topics for m in order):
                continue
            while tp.topic not in subscriptions[order[i % len(order)]].topics:
                i += 1
            out[order[i % len(order)]].append(tp)
            i += 1
        return {m: Assignment(ps) for m, ps in out.items()}


class _AbstractSticky(AbstractPartitionAssignor):
    """Kafka's AbstractStickyAssignor (both paths); subclasses say where ownership comes from."""

    @abc.abstractmethod
    def member_data(self, sub: Subscription) -> tuple[list[TopicPartition], int]:
        """(partitions the member owned, generation they were owned in)."""

    def _owned(self, partitions_per_topic, subscriptions):
        """Valid prior ownership: per partition the claim of the highest generation wins; claims tied at
        that generation are invalidated (Kafka's partitionsWithMultiplePreviousOwners). Returns
        (member -> owned partitions, partition -> set of all claiming members, invalidated partitions)."""
        best: dict[TopicPartition, tuple[int, list[str]]] = {}
        claimants: dict[TopicPartition, set[str]] = {}
        for mid in sorted(subscriptions):
            parts, generation = self.member_data(subscriptions[mid])
            for tp in dict.fromkeys(TopicPartition(*tp) for tp in parts):
                if tp.topic not in partitions_per_topic or not 0 <= tp.partition < partitions_per_topic[tp.topic]:
                    continue
                claimants.setdefault(tp, set()).add(mid)
                current = best.get(tp)
                if current is None or generation > current[0]:
                    best[tp] = (generation, [mid])
                elif generation == current[0]:
                    current[1].append(mid)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        contested = set()
        for tp in sorted(best):
            _, owners = best[tp]
            if len(owners) == 1:
                owned[owners[0]].append(tp)
            else:
                contested.add(tp)
        return owned, claimants, contested

    def assign(self, partitions_per_topic, subscriptions):
        return self._assign_with_claims(partitions_per_topic, subscriptions)[0]

    def _assign_with_claims(self, partitions_per_topic, subscriptions):
        if not subscriptions:
            return {}, {}, set()
        owned, claimants, contested = self._owned(partitions_per_topic, subscriptions)
        # A member keeps only partitions of topics it still subscribes to.
        for mid, parts in owned.items():
            topics = set(subscriptions[mid].topics)
            owned[mid] = [tp for tp in parts if tp.topic in topics]
        topic_sets = {frozenset(t for t in s.topics if t in partitions_per_topic) for s in subscriptions.values()}
        if len(topic_sets) == 1:
            result = self._constrained(partitions_per_topic, sorted(subscriptions), owned, next(iter(topic_sets)))
        else:
            result = self._general(partitions_per_topic, subscriptions, owned)
        return {m: Assignment(ps) for m, ps in result.items()}, claimants, contested

    @staticmethod
    def _constrained(
        partitions_per_topic, members: list[str], owned: dict[str, list[TopicPartition]], topics: frozenset[str]
    ) -> dict[str, list[TopicPartition]]:
        """Kafka's constrainedAssign: every member subscribes to the same topics."""
        all_partitions = _partitions(partitions_per_topic, topics)
        n = len(members)
        total = len(all_partitions)
        min_quota, max_quota = total // n, -(-total // n)
        expected_over = total % n
        current_over = 0
        assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
        under_min: list[str] = []
        exactly_min: list[str] = []
        for m in members:
            mine = owned[m]
            if len(mine) < min_quota:
                assignment[m] = list(mine)
                under_min.append(m)
            elif len(mine) >= max_quota and current_over < expected_over:
                assignment[m] = mine[:max_quota]
                current_over += 1
                if current_over == expected_over:
                    exactly_min.clear()
            else:
                assignment[m] = mine[:min_quota]
                if current_over < expected_over:
                    exactly_min.append(m)
        taken = {tp for ps in assignment.values() for tp in ps}
        unassigned = [tp for tp in all_partitions if tp not in taken]
        under_min.sort()
        exactly_min.sort()
        cursor = 0  # Kafka walks under_min with an iterator, removing members as they reach min_quota
        for tp in unassigned:
            from_under = True
            if cursor < len(under_min):
                m = under_min[cursor]
            elif under_min:  # iterator exhausted: start another round over the still-unfilled members
                cursor, m = 0, under_min[0]
            elif exactly_min:  # everyone has min_quota: hand out the remaining +1 slots
                m, from_under = exactly_min.pop(0), False
            else:
                raise RuntimeError("sticky assignor: no member left to take a partition (algorithm bug)")
            assignment[m].append(tp)
            if from_under:
                if len(assignment[m]) == min_quota:
                    under_min.pop(cursor)
                    exactly_min.append(m)
                else:
                    cursor += 1
        return assignment

    @staticmethod
    def _general(
        partitions_per_topic, subscriptions: dict[str, Subscription], owned: dict[str, list[TopicPartition]]
    ) -> dict[str, list[TopicPartition]]:
        """Kafka's generalAssign: members subscribe to different topics."""
        potential = {m: set(_partitions(partitions_per_topic, s.topics)) for m, s in subscriptions.items()}
        consumers_of: dict[TopicPartition, list[str]] = {}
        for m in sorted(subscriptions):
            for tp in potential[m]:
                consumers_of.setdefault(tp, []).append(m)
        current = {m: [tp for tp in owned[m] if tp in potential[m]] for m in subscriptions}
        taken = {tp for ps in current.values() for tp in ps}
        unassigned = sorted((tp for tp in consumers_of if tp not in taken), key=lambda tp: (len(consumers_of[tp]), tp))
        for tp in unassigned:
            m = min(consumers_of[tp], key=lambda c: (len(current[c]), c))
            current[m].append(tp)
        # Balance: move a partition while its owner has 2+ more than another member able to take it. Each
        # move lowers the sum of squared counts, so this ends; only partitions balance needs are moved,
        # newest (not previously owned) first.
        moved = True
        while moved:
            moved = False
            for m in sorted(current, key=lambda c: (-len(current[c]), c)):
                for tp in reversed(current[m]):
                    others = [c for c in consumers_of[tp] if c != m]
                    if not others:
                        continue
                    target = min(others, key=lambda c: (len(current[c]), c))
                    if len(current[m]) > len(current[target]) + 1:
                        current[m].remove(tp)
                        current[target].append(tp)
                        moved = True
                        break
                if moved:
                    break
        return current


class StickyAssignor(_AbstractSticky):
    """Eager sticky: the previous assignment travels in the subscription's user data."""

    name = "sticky"

    def __init__(self):
        self._member_assignment: list[TopicPartition] | None = None
        self._generation = DEFAULT_GENERATION

    def member_data(self, sub):
        return decode_sticky_user_data(sub.user_data)

    def on_assignment(self, assignment, generation):
        self._member_assignment = list(assignment.partitions)
        self._generation = generation

    def subscription_user_data(self, topics):
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)


class CooperativeStickyAssignor(_AbstractSticky):
    """KIP-429: ownership from ``owned_partitions``; partitions changing owner are held back a round."""

    name = "cooperative-sticky"
    supported_protocols = (COOPERATIVE, EAGER)

    def __init__(self):
        self._generation = DEFAULT_GENERATION

    def member_data(self, sub):
        if sub.generation_id >= 0:
            generation = sub.generation_id
        elif sub.user_data is not None and len(sub.user_data) >= 4:
            generation = _I32.unpack(sub.user_data[:4])[0]
        else:
            generation = DEFAULT_GENERATION
        return list(sub.owned_partitions), generation

    def on_assignment(self, assignment, generation):
        self._generation = generation

    def subscription_user_data(self, topics):
        return _I32.pack(self._generation)

    def assign(self, partitions_per_topic, subscriptions):
        result, claimants, contested = self._assign_with_claims(partitions_per_topic, subscriptions)
        # Kafka's partitionsTransferringOwnership: a partition another member still claims is not handed
        # over yet (that member revokes it first); nor is one several members claimed in the same
        # generation, even to one of them.
        for mid, a in result.items():
            a.partitions = [
                tp
                for tp in a.partitions
                if tp not in contested and (mid in claimants.get(tp, ()) or not claimants.get(tp))
            ]
        return result


ASSIGNORS = {cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)}


def get_assignor(name: str) -> AbstractPartitionAssignor:
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown partition.assignment.strategy {name!r}; known: {sorted(ASSIGNORS)}") from None


def perform_assignment(
    assignor: AbstractPartitionAssignor, members: Iterable[dict], partitions_per_topic: dict[str, int], version: int = 1
) -> dict[str, bytes]:
    """The leader's step (Kafka's ConsumerCoordinator.onLeaderElected): JoinGroup ``members``
    (``{"member_id", "group_instance_id", "metadata"}``) -> SyncGroup assignments ``{member_id: bytes}``."""
    subs = {m["member_id"]: decode_subscription(m["metadata"], m.get("group_instance_id")) for m in members}
    result = assignor.assign(partitions_per_topic, subs)
    if COOPERATIVE in assignor.supported_protocols:
        validate_cooperative_assignment(
            {m: s.owned_partitions for m, s in subs.items()}, {m: a.partitions for m, a in result.items()}
        )
    return {m: encode_assignment(result.get(m, Assignment([])), version) for m in subs}


def validate_cooperative_assignment(
    owned: dict[str, Iterable[TopicPartition]], assigned: dict[str, Iterable[TopicPartition]]
) -> None:
    """Kafka's check: no partition may be added to a member while another member still owns it."""
    owner = {}
    for m, ps in owned.items():
        for tp in ps:
            owner.setdefault(TopicPartition(*tp), set()).add(m)
    for m, ps in assigned.items():
        for tp in ps:
            others = owner.get(TopicPartition(*tp), set()) - {m}
            if others:
                raise ValueError(f"cooperative assignment gives {tp} to {m} while {sorted(others)} still own it")
