"""The cleaner's batch-level steps (storage/cleaner.py): pass 1's key scan over a batch's raw records,
a marker's control type, Kafka's empty batch (``writeEmptyHeader``) and the rebuild of a partially kept batch
with every batch-level field kept. Pure functions over one batch's bytes."""

from __future__ import annotations

import struct

from crc32c import crc32c

from protocol.errors import InvalidRecordError
from storage.codecs import decompress
from storage.control import parse_control_record
from storage.records import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CRC_POS,
    DELETE_HORIZON_MASK,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC,
    RECORDS_POS,
    BatchHeader,
    RecordBatch,
    RecordBatchBuilder,
)
from storage.varint import _ZZ1, _ZZ2, decode_varint

INT32_MAX = 0x7FFFFFFF
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def scan_keys(h: BatchHeader, data: bytes | bytearray, m: dict) -> None:
    """Pass 1's hot loop: ``m[key] = offset`` for each record of the batch, reading only the Length,
    TimestampDelta (skipped), OffsetDelta and Key fields of the record grammar (storage/records.py);
    values and headers are never decoded. Malformed records raise ``InvalidRecordError``."""
    compression = h.attributes & COMPRESSION_MASK
    if compression:
        data, p = decompress(compression, memoryview(data)[RECORDS_POS:]), 0
    else:
        p = RECORDS_POS
    end = len(data)
    base = h.base_offset
    zz1, zz2 = _ZZ1, _ZZ2
    try:
        for _ in range(h.records_count):
            z = data[p]  # Length
            if z < 128:
                n = zz1[z]
                p += 1
            elif data[p + 1] < 128:
                n = zz2[z][data[p + 1]]
                p += 2
            else:
                n, p = decode_varint(data, p)
            rend = p + n
            if n < 6 or rend > end:
                raise ValueError(f"record length {n} does not fit the batch")
            p += 1  # Attributes
            while data[p] >= 128:  # TimestampDelta
                p += 1
            z = data[p + 1]  # OffsetDelta
            if z < 128:
                off = zz1[z]
                p += 2
            elif data[p + 2] < 128:
                off = zz2[z][data[p + 2]]
                p += 3
            else:
                off, p = decode_varint(data, p + 1)
            z = data[p]  # KeyLength
            if z < 128:
                n = zz1[z]
                p += 1
            elif data[p + 1] < 128:
                n = zz2[z][data[p + 1]]
                p += 2
            else:
                n, p = decode_varint(data, p)
            m[data[p : p + n] if n >= 0 else None] = base + off
            p = rend
    except (IndexError, ValueError) as e:
        raise InvalidRecordError(f"record batch at offset {base} holds a malformed record: {e}") from None


def control_type(h: BatchHeader, data: bytes) -> int:
    records = RecordBatch(data, 0, header=h).records()
    return parse_control_record(records[0])[0]


def empty_batch(h: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: no records, same offsets, sequence and producer fields."""
    attributes = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    buf = bytearray(
        BATCH_HEADER.pack(
            h.base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD,
            h.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            h.last_offset_delta,
            h.max_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            0,
        )
    )
    _U32.pack_into(buf, CRC_POS, crc32c(memoryview(buf)[ATTRIBUTES_POS:]))
    return bytes(buf)


def rebuild_batch(h: BatchHeader, records, delete_horizon_ms: int | None) -> bytes:
    """A batch of ``records`` (a subset of ``h``'s) keeping every batch-level field and the offset range."""
    b = RecordBatchBuilder(
        compression_type=h.compression_type,
        timestamp_type=h.timestamp_type,
        base_offset=h.base_offset,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        batch_size=INT32_MAX,
        delete_horizon_ms=delete_horizon_ms,
    )
    for r in records:
        b.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
    out = bytearray(b.build())
    if _I32.unpack_from(out, LAST_OFFSET_DELTA_POS)[0] != h.last_offset_delta:
        # Kafka's overrideLastOffset: the last sequence (base_sequence + delta) must survive
        _I32.pack_into(out, LAST_OFFSET_DELTA_POS, h.last_offset_delta)
        _U32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)
