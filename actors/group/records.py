"""``__consumer_offsets`` records: Kafka's key/value schemas, byte for byte, plus coordinator partitioning.

No Ray, no I/O. The group coordinator's durable state is a compacted log of (key, value) records; a key
names what is stored (one committed offset, or one group's metadata), the latest value wins, and a
``None`` value (a tombstone) deletes it. Encodings are Kafka's non-flexible coordinator schemas
(``group-coordinator/src/main/resources/common/message/*.json``), so a real Kafka broker or
``kafka-console-consumer --formatter OffsetsMessageFormatter`` reads rafka's partitions and vice versa.

Grammar (big-endian; ``string`` = int16 length + UTF-8, ``nullable_string`` = int16 length or -1;
``bytes`` = int32 length + raw; ``[T]`` = int32 count + items)::

    key    := record_type:int16 body
      record_type 0|1  OffsetCommitKey     group:string topic:string partition:int32
      record_type 2    GroupMetadataKey    group:string
    value  := version:int16 body                       (absent = tombstone)
      OffsetCommitValue v0  offset:int64 metadata:string commit_timestamp:int64
                        v1  offset:int64 metadata:string commit_timestamp:int64 expire_timestamp:int64
                        v2  offset:int64 metadata:string commit_timestamp:int64
                        v3  offset:int64 leader_epoch:int32 metadata:string commit_timestamp:int64
      GroupMetadataValue v0..v3
            protocol_type:string generation:int32 protocol:nullable_string leader:nullable_string
            [v2+ current_state_timestamp:int64] members:[MemberMetadata]
      MemberMetadata  member_id:string [v3+ group_instance_id:nullable_string] client_id:string
            client_host:string [v1+ rebalance_timeout:int32] session_timeout:int32
            subscription:bytes assignment:bytes

rafka writes OffsetCommitKey with record type 1 (Kafka's current key version), OffsetCommitValue v3
(v1 only when an explicit expire timestamp is set, as Kafka does), GroupMetadataKey 2 and
GroupMetadataValue v3, and reads every version above.

Coordinator partitioning: ``partition_for(group_id, n) = Utils.abs(group_id.hashCode()) % n`` with Java's
``String.hashCode`` over UTF-16 code units (int32 overflow) and Kafka's ``Utils.abs`` (the absolute value,
except ``Integer.MIN_VALUE -> 0``; note this is *not* ``toPositive``'s ``& 0x7fffffff``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Union

from protocol.errors import CorruptMessageError

__all__ = [
    "OFFSET_COMMIT_KEY_VERSION",
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_VALUE_VERSION",
    "GROUP_METADATA_VALUE_VERSION",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "CoordinatorRecord",
    "encode_key",
    "encode_value",
    "decode_key",
    "decode_value",
    "decode_record",
    "decode_records",
    "offset_commit_record",
    "group_metadata_record",
    "java_string_hashcode",
    "kafka_abs",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True)
class OffsetCommitValue:
    """One committed offset (Kafka's OffsetAndMetadata). ``expire_timestamp`` -1 = none (v3)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


Key = Union[OffsetCommitKey, GroupMetadataKey]
Value = Union[OffsetCommitValue, GroupMetadataValue, None]


@dataclass(frozen=True)
class CoordinatorRecord:
    """A durable ``__consumer_offsets`` record: the actor appends ``key_bytes()``/``value_bytes()``."""

    key: Key
    value: Value
    durable: bool = field(default=True, init=False, compare=False)
    # a TxnOffsetCommit's record: written in a transactional batch of this producer, pending until the
    # transaction's marker (-1: an ordinary commit)
    producer_id: int = field(default=-1, compare=False)

    def key_bytes(self) -> bytes:
        return encode_key(self.key)

    def value_bytes(self) -> bytes | None:
        return encode_value(self.value)


@dataclass(frozen=True)
class EndTxnMarker:
    """A transaction marker on this ``__consumer_offsets`` partition (written by the transaction
    coordinator, not by the group coordinator): the producer's pending offsets become committed
    (``committed``) or are dropped."""

    producer_id: int
    committed: bool
    durable: bool = field(default=False, init=False, compare=False)


def offset_commit_record(
    group: str, topic: str, partition: int, value: OffsetCommitValue | None, producer_id: int = -1
) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group, topic, partition), value, producer_id)


def group_metadata_record(group: str, value: GroupMetadataValue | None) -> CoordinatorRecord:
    return CoordinatorRecord(GroupMetadataKey(group), value)


# ---------------------------------------------------------------------------------------------- writer


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


def _nullable_string(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else _string(s)


def _bytes(b: bytes | None) -> bytes:
    b = b or b""
    return _I32.pack(len(b)) + bytes(b)


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(key.group) + _string(key.topic) + _I32.pack(key.partition)
    if isinstance(key, GroupMetadataKey):
        return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(key.group)
    raise TypeError(f"not a __consumer_offsets key: {key!r}")


def encode_value(value: Value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        if value.expire_timestamp >= 0:  # Kafka writes v1 only to carry an explicit expire timestamp
            return (
                _I16.pack(OFFSET_COMMIT_VALUE_VERSION_EXPIRE)
                + _I64.pack(value.offset)
                + _string(value.metadata)
                + _I64.pack(value.commit_timestamp)
                + _I64.pack(value.expire_timestamp)
            )
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
            + _I64.pack(value.offset)
            + _I32.pack(value.leader_epoch)
            + _string(value.metadata)
            + _I64.pack(value.commit_timestamp)
        )
    if isinstance(value, GroupMetadataValue):
        parts = [
            _I16.pack(GROUP_METADATA_VALUE_VERSION),
            _string(value.protocol_type),
            _I32.pack(value.generation),
            _nullable_string(value.protocol),
            _nullable_string(value.leader),
            _I64.pack(value.current_state_timestamp),
            _I32.pack(len(value.members)),
        ]
        for m in value.members:
            parts += [
                _string(m.member_id),
                _nullable_string(m.group_instance_id),
                _string(m.client_id),
                _string(m.client_host),
                _I32.pack(m.rebalance_timeout),
                _I32.pack(m.session_timeout),
                _bytes(m.subscription),
                _bytes(m.assignment),
            ]
        return b"".join(parts)
    raise TypeError(f"not a __consumer_offsets value: {value!r}")


# ---------------------------------------------------------------------------------------------- reader


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = memoryview(bytes(buf))
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptMessageError(f"__consumer_offsets record truncated at byte {self.pos} (wanted {n})")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise CorruptMessageError("null in a non-nullable string field")
        return bytes(self._take(n)).decode("utf-8")

    def nullable_string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else bytes(self._take(n)).decode("utf-8")

    def bytes_(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else bytes(self._take(n))

    def count(self) -> int:
        n = self.i32()
        if n < 0 or n > len(self.buf):
            raise CorruptMessageError(f"impossible array length {n}")
        return n

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise CorruptMessageError(f"{len(self.buf) - self.pos} trailing bytes in __consumer_offsets record")


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        key: Key = OffsetCommitKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        raise CorruptMessageError(f"unknown __consumer_offsets record type {version}")
    r.done()
    return key


def decode_value(key: Key, data: bytes | None) -> Value:
    if data is None:
        return None
    r = _Reader(data)
    version = r.i16()
    if isinstance(key, OffsetCommitKey):
        if not 0 <= version <= 3:
            raise CorruptMessageError(f"unknown OffsetCommitValue version {version}")
        offset = r.i64()
        epoch = r.i32() if version >= 3 else -1
        metadata = r.string()
        commit_ts = r.i64()
        expire_ts = r.i64() if version == 1 else -1
        r.done()
        return OffsetCommitValue(offset, epoch, metadata, commit_ts, expire_ts)
    if not 0 <= version <= 3:
        raise CorruptMessageError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.count()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_or_rebalance = r.i32()
        if version >= 1:
            rebalance_timeout, session_timeout = session_or_rebalance, r.i32()
        else:  # v0 has no rebalance timeout: Kafka uses the session timeout
            rebalance_timeout = session_timeout = session_or_rebalance
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes_(),
                r.bytes_(),
            )
        )
    r.done()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """Decode one ``__consumer_offsets`` record; raises ``CorruptMessageError`` on malformed bytes."""
    k = decode_key(key)
    return CoordinatorRecord(k, decode_value(k, value))


def decode_records(pairs: Iterable[tuple[bytes, bytes | None]]) -> list[CoordinatorRecord]:
    return [decode_record(k, v) for k, v in pairs]


# ---------------------------------------------------------------------------------------------- partitioning


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as int32."""
    h = 0
    for (unit,) in struct.iter_unpack(">H", s.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except ``Integer.MIN_VALUE`` maps to 0."""
    return 0 if n == -0x80000000 else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition whose leader coordinates ``group_id`` (Kafka's partitionFor)."""
    if num_partitions <= 0:
        raise ValueError("offsets.topic.num.partitions must be positive")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
