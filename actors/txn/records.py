"""``__transaction_state`` records: Kafka's key/value schemas, byte for byte, plus coordinator partitioning.

No Ray, no I/O. The transaction coordinator's durable state is a compacted log keyed by transactional id;
the latest value wins and a ``None`` value (a tombstone) removes an expired id. Encodings are Kafka's
``TransactionLogKey`` / ``TransactionLogValue`` v0 (``transaction-coordinator/src/main/resources/common/
message/TransactionLog*.json``), so Kafka's ``TransactionLogMessageFormatter`` reads rafka's partitions.

Grammar (big-endian; ``string`` = int16 length + UTF-8; ``[T]`` = int32 count + items, -1 = null)::

    key    := version:int16 (0) transactional_id:string
    value  := version:int16 (0) producer_id:int64 producer_epoch:int16 transaction_timeout_ms:int32
              transaction_status:int8 partitions:[topic:string partition_ids:[int32]]
              last_update_timestamp_ms:int64 start_timestamp_ms:int64

``transaction_status`` is Kafka's TransactionState id: Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3,
CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7 (never written).

Coordinator partitioning: ``partition_for(transactional_id, n)`` is Kafka's
``Utils.abs(transactionalId.hashCode) % n`` (the same rule as groups, actors/group/records.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from actors.group.records import partition_for
from protocol.errors import CorruptMessageError

__all__ = [
    "TXN_KEY_VERSION",
    "TXN_VALUE_VERSION",
    "TxnLogValue",
    "TxnRecord",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]

TXN_KEY_VERSION = 0
TXN_VALUE_VERSION = 0
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, producer epoch, timeout ms, status
_VALUE_TAIL = struct.Struct(">qq")  # last update, start timestamp


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One transactional id's durable metadata (Kafka's TxnTransitMetadata as written)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, int], ...] = ()
    last_update_ms: int = -1
    start_ms: int = -1


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A durable ``__transaction_state`` record: the actor appends ``key_bytes()``/``value_bytes()``."""

    transactional_id: str
    value: TxnLogValue | None  # None: tombstone (the id expired)

    def key_bytes(self) -> bytes:
        return encode_key(self.transactional_id)

    def value_bytes(self) -> bytes | None:
        return None if self.value is None else encode_value(self.value)


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(TXN_KEY_VERSION) + _string(transactional_id)


def encode_value(v: TxnLogValue) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in v.partitions:
        by_topic.setdefault(topic, []).append(p)
    out = [
        _VALUE_HEAD.pack(TXN_VALUE_VERSION, v.producer_id, v.producer_epoch, v.timeout_ms, v.status),
        _I32.pack(len(by_topic)),
    ]
    for topic in sorted(by_topic):
        ps = sorted(by_topic[topic])
        out.append(_string(topic) + _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps))
    out.append(_VALUE_TAIL.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str):
        self.buf, self.pos, self.what = buf, 0, what

    def take(self, s: struct.Struct) -> tuple:
        if self.pos + s.size > len(self.buf):
            raise CorruptMessageError(f"{self.what}: truncated at byte {self.pos} of {len(self.buf)}")
        out = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return out

    def string(self) -> str:
        (n,) = self.take(_I16)
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptMessageError(f"{self.what}: bad string length {n} at byte {self.pos}")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptMessageError(f"{self.what}: string is not UTF-8") from e

    def count(self) -> int:
        (n,) = self.take(_I32)
        if n < -1 or n > len(self.buf):
            raise CorruptMessageError(f"{self.what}: bad array length {n}")
        return max(n, 0)


def decode_key(buf: bytes) -> str:
    r = _Reader(bytes(buf), "__transaction_state key")
    (version,) = r.take(_I16)
    if version != TXN_KEY_VERSION:
        raise CorruptMessageError(f"__transaction_state key: unknown version {version}")
    return r.string()


def decode_value(buf: bytes | None) -> TxnLogValue | None:
    if buf is None:
        return None
    r = _Reader(bytes(buf), "__transaction_state value")
    version, pid, epoch, timeout, status = r.take(_VALUE_HEAD)
    if version != TXN_VALUE_VERSION:
        raise CorruptMessageError(f"__transaction_state value: unsupported version {version}")
    parts: list[tuple[str, int]] = []
    for _ in range(r.count()):
        topic = r.string()
        for _ in range(r.count()):
            parts.append((topic, r.take(_I32)[0]))
    last, start = r.take(_VALUE_TAIL)
    if r.pos != len(r.buf):
        raise CorruptMessageError(f"__transaction_state value: {len(r.buf) - r.pos} trailing bytes")
    return TxnLogValue(pid, epoch, timeout, status, tuple(sorted(parts)), last, start)
