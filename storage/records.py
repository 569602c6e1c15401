"""Kafka's RecordBatch v2 (magic 2): the on-disk, replication and wire format, byte for byte.

Grammar (big-endian; ``varint``/``varlong`` are zigzag-encoded base-128, as protobuf)::

    RecordBatch =>
        BaseOffset => Int64                 \\
        Length => Int32                      |  LOG_OVERHEAD (12): offset + length of the rest
        PartitionLeaderEpoch => Int32        |  \\ outside the CRC: rewritten in place by the
        Magic => Int8          (= 2)         |  /  leader (offsets, epoch) without re-checksumming
        CRC => Uint32          CRC-32C (Castagnoli) of Attributes .. end of batch
        Attributes => Int16
            bit 0-2  compression: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
            bit 3    timestamp type: 0 CreateTime, 1 LogAppendTime
            bit 4    isTransactional
            bit 5    isControlBatch
            bit 6    hasDeleteHorizonMs (then BaseTimestamp is the delete horizon)
        LastOffsetDelta => Int32
        BaseTimestamp => Int64
        MaxTimestamp => Int64
        ProducerId => Int64
        ProducerEpoch => Int16
        BaseSequence => Int32
        RecordsCount => Int32              BATCH_OVERHEAD (61) bytes up to here
        Records => [Record]                compressed as one block when compression != 0

    Record =>
        Length => varint                   bytes from Attributes to the end of Headers
        Attributes => Int8                 unused, 0
        TimestampDelta => varlong          from BaseTimestamp
        OffsetDelta => varint              from BaseOffset
        KeyLength => varint                -1: null key
        Key => Bytes
        ValueLength => varint              -1: null value
        Value => Bytes
        HeadersCount => varint
        Headers => [Header]

    Header =>
        HeaderKeyLength => varint
        HeaderKey => String (utf-8)
        HeaderValueLength => varint        -1: null value
        HeaderValue => Bytes

    Control record (in a batch with isControlBatch set; one record):
        Key   => Version Int16 (0), Type Int16 (0 ABORT, 1 COMMIT)
        Value => Version Int16 (0), CoordinatorEpoch Int32

Under LogAppendTime every record's timestamp is the batch's MaxTimestamp (Kafka's rule). Every
malformed input raises ``CorruptMessageError`` (the batch frame or CRC) or ``InvalidRecordError`` (a
record inside a batch whose CRC was fine); no other exception type escapes this module's readers.

Thread safety: everything here is a pure function of its arguments; the builder is single-owner.
"""
from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c as _crc32c

from storage.codecs import compress, decompress
from storage.errors import CorruptMessageError, InvalidRecordError, KafkaError

__all__ = [
    "BATCH_HEADER", "BATCH_OVERHEAD", "LOG_OVERHEAD", "MAGIC",
    "NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD",
    "TIMESTAMP_CREATE_TIME", "TIMESTAMP_LOG_APPEND_TIME",
    "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "NO_SEQUENCE", "NO_TIMESTAMP",
    "CONTROL_ABORT", "CONTROL_COMMIT",
    "BatchHeader", "Record", "parse_header", "crc_ok", "validate_batch", "iter_batch_headers",
    "set_base_offset", "set_partition_leader_epoch", "set_log_append_time",
    "RecordBatchBuilder", "RecordBatch", "iter_batches", "iter_records", "decode_records",
    "build_control_batch", "parse_control_record",
]

# ---------------------------------------------------------------------------------------------
# Fixed headers

BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")
BATCH_OVERHEAD = 61  # BATCH_HEADER.size
LOG_OVERHEAD = 12  # base offset (8) + length (4)
MAGIC = 2
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch
assert BATCH_HEADER.size == BATCH_OVERHEAD

# byte positions inside a batch
BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
BASE_TIMESTAMP_POS = 27
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
RECORDS_COUNT_POS = 57
RECORDS_POS = 61
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # smallest legal Length field (49)
MAX_BATCH_LENGTH = 0x7FFFFFFF - LOG_OVERHEAD

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_unpack_header = BATCH_HEADER.unpack_from
_pack_q = struct.Struct(">q").pack_into
_pack_i = struct.Struct(">i").pack_into
_pack_I = struct.Struct(">I").pack_into
_pack_h = struct.Struct(">h").pack_into
_unpack_h = struct.Struct(">h").unpack_from
_unpack_i = struct.Struct(">i").unpack_from


class BatchHeader(NamedTuple):
    """The 61 fixed bytes of a batch, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TIMESTAMP_CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        """The delete horizon stamped by the cleaner, or NO_TIMESTAMP (-1)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else NO_TIMESTAMP

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at 2**31 like Kafka), or NO_SEQUENCE."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


_new_header = tuple.__new__


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """The batch header at ``buf[pos:]``; checks only that 61 bytes exist, the Length field and magic."""
    try:
        h = _new_header(BatchHeader, _unpack_header(buf, pos))
    except struct.error:
        raise CorruptMessageError(
            f"record batch header at position {pos} is truncated: {max(len(buf) - pos, 0)} bytes "
            f"available, {BATCH_OVERHEAD} needed") from None
    if h[1] < MIN_BATCH_LENGTH or h[1] > MAX_BATCH_LENGTH:
        raise CorruptMessageError(
            f"record batch at position {pos} has impossible length {h[1]} "
            f"(at least {MIN_BATCH_LENGTH})")
    if h[3] != MAGIC:
        raise CorruptMessageError(
            f"record batch at position {pos} has unsupported magic {h[3]} (only RecordBatch v2, "
            f"magic 2, is supported)")
    return h


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches Attributes .. end of batch (which must lie in ``buf``)."""
    end = pos + LOG_OVERHEAD + header[1]
    if end > len(buf):
        return False
    return _crc32c(memoryview(buf)[pos + ATTRIBUTES_POS:end]) == header[4]


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Parse and fully check the frame of the batch at ``pos``: length, magic, completeness and CRC."""
    h = parse_header(buf, pos)
    end = pos + LOG_OVERHEAD + h[1]
    if end > len(buf):
        raise CorruptMessageError(
            f"record batch at position {pos} is truncated: length field says {h[1] + LOG_OVERHEAD} "
            f"bytes, {len(buf) - pos} available")
    with memoryview(buf) as mv:
        crc = _crc32c(mv[pos + ATTRIBUTES_POS:end])
    if crc != h[4]:
        raise CorruptMessageError(
            f"record batch at position {pos} (base offset {h[0]}) is corrupt: stored CRC {h[4]:#010x}, "
            f"computed {crc:#010x}")
    if h[6] < 0 or h[12] < 0:
        raise CorruptMessageError(
            f"record batch at position {pos} has negative last offset delta {h[6]} or "
            f"records count {h[12]}")
    return h


def iter_batch_headers(buf, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each batch in concatenated batches (a segment file, a fetch payload).

    Raises ``CorruptMessageError`` at the first torn or corrupt batch (having yielded the good ones before
    it, so a recovering log knows the valid prefix: the position of the failing batch).
    """
    pos = 0
    n = len(buf)
    if validate:
        while pos < n:
            h = validate_batch(buf, pos)
            yield pos, h
            pos += LOG_OVERHEAD + h[1]
    else:
        while pos < n:
            h = parse_header(buf, pos)
            end = pos + LOG_OVERHEAD + h[1]
            if end > n:
                raise CorruptMessageError(
                    f"record batch at position {pos} is truncated: length field says "
                    f"{h[1] + LOG_OVERHEAD} bytes, {n - pos} available")
            yield pos, h
            pos = end


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite the base offset in place (outside the CRC)."""
    _pack_q(buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite the partition leader epoch in place (outside the CRC)."""
    _pack_i(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray, pos: int, timestamp_ms: int) -> None:
    """Switch the batch at ``pos`` to LogAppendTime ``timestamp_ms`` (attributes bit 3 and MaxTimestamp,
    as Kafka's ``setMaxTimestamp``) and recompute the CRC. The batch must be complete in ``buf``."""
    (attributes,) = _unpack_h(buf, pos + ATTRIBUTES_POS)
    (length,) = _unpack_i(buf, pos + LENGTH_POS)
    _pack_h(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    _pack_q(buf, pos + MAX_TIMESTAMP_POS, timestamp_ms)
    with memoryview(buf) as mv:
        crc = _crc32c(mv[pos + ATTRIBUTES_POS:pos + LOG_OVERHEAD + length])
    _pack_I(buf, pos + CRC_POS, crc)
