"""The fixed 61-byte header of Kafka's RecordBatch v2 (magic 2): layout, named fields (``BatchHeader``), frame
and CRC checks and the leader's in-place rewrites; re-exported by storage/records.py. Pure. Big-endian::

    BaseOffset Int64 0..8 | Length Int32 8..12 | PartitionLeaderEpoch Int32 12..16 | Magic Int8 (2) 16
    CRC Uint32 17..21 (CRC-32C of Attributes .. end) | Attributes Int16 21..23 (bits 0-2 compression,
    3 LogAppendTime, 4 transactional, 5 control, 6 delete horizon) | LastOffsetDelta Int32 23..27
    BaseTimestamp Int64 27..35 | MaxTimestamp Int64 35..43 | ProducerId Int64 43..51
    ProducerEpoch Int16 51..53 | BaseSequence Int32 53..57 | RecordsCount Int32 57..61 | Records 61..
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c as _crc32c

from protocol.errors import CorruptMessageError

__all__ = [
    "BATCH_HEADER",
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_BATCH_LENGTH",
    "MAX_BATCH_LENGTH",
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "BatchHeader",
    "parse_header",
    "crc_ok",
    "validate_batch",
    "iter_batch_headers",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "COMPRESSION_MASK",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "DELETE_HORIZON_MASK",
    "BASE_OFFSET_POS",
    "LENGTH_POS",
    "PARTITION_LEADER_EPOCH_POS",
    "MAGIC_POS",
    "CRC_POS",
    "ATTRIBUTES_POS",
    "LAST_OFFSET_DELTA_POS",
    "BASE_TIMESTAMP_POS",
    "MAX_TIMESTAMP_POS",
    "PRODUCER_ID_POS",
    "RECORDS_COUNT_POS",
    "RECORDS_POS",
]

# ---------------------------------------------------------------------------------------------
# Fixed headers

BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")
BATCH_OVERHEAD = 61  # BATCH_HEADER.size
LOG_OVERHEAD = 12  # base offset (8) + length (4)
MAGIC = 2
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
            f"available, {BATCH_OVERHEAD} needed"
        ) from None
    if h.batch_length < MIN_BATCH_LENGTH or h.batch_length > MAX_BATCH_LENGTH:
        raise CorruptMessageError(
            f"record batch at position {pos} has impossible length {h.batch_length} (at least {MIN_BATCH_LENGTH})"
        )
    if h.magic != MAGIC:
        raise CorruptMessageError(
            f"record batch at position {pos} has unsupported magic {h.magic} (only RecordBatch v2, "
            f"magic 2, is supported)"
        )
    return h


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches Attributes .. end of batch (which must lie in ``buf``)."""
    end = pos + header.size_in_bytes
    if end > len(buf):
        return False
    return _crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : end]) == header.crc


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Parse and fully check the frame of the batch at ``pos``: length, magic, completeness and CRC."""
    h = parse_header(buf, pos)
    end = pos + h.size_in_bytes
    if end > len(buf):
        raise CorruptMessageError(
            f"record batch at position {pos} is truncated: length field says {h.size_in_bytes} "
            f"bytes, {len(buf) - pos} available"
        )
    with memoryview(buf) as mv:
        crc = _crc32c(mv[pos + ATTRIBUTES_POS : end])
    if crc != h.crc:
        raise CorruptMessageError(
            f"record batch at position {pos} (base offset {h.base_offset}) is corrupt: stored CRC {h.crc:#010x}, "
            f"computed {crc:#010x}"
        )
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptMessageError(
            f"record batch at position {pos} has negative last offset delta {h.last_offset_delta} or "
            f"records count {h.records_count}"
        )
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
            pos += h.size_in_bytes
    else:
        while pos < n:
            h = parse_header(buf, pos)
            end = pos + h.size_in_bytes
            if end > n:
                raise CorruptMessageError(
                    f"record batch at position {pos} is truncated: length field says "
                    f"{h.size_in_bytes} bytes, {n - pos} available"
                )
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
        crc = _crc32c(mv[pos + ATTRIBUTES_POS : pos + LOG_OVERHEAD + length])
    _pack_I(buf, pos + CRC_POS, crc)
