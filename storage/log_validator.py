"""Kafka's LogValidator: what a partition leader checks in every batch before it appends anything
(``validate_leader_append``; one bad batch refuses the whole request). Called by the Log's leader append;
pure (``buf`` is mutated only to correct a MaxTimestamp); the record walk runs in C when the extension is
built. The checks, in order, with their error codes: docs/internals.md (storage/).
"""

from __future__ import annotations

import os
from typing import Callable

from crc32c import crc32c

from protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidRecordsError,
    InvalidTimestampError,
    InvalidTimestampsError,
    KafkaError,
    MessageTooLargeError,
    RecordValidationError,
    UnsupportedCompressionTypeError,
)
from storage.codecs import compress, decompress
from storage.log_config import LogConfig
from storage.records import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    NO_TIMESTAMP,
    RECORDS_POS,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    parse_header,
    validate_batch,
)

__all__ = [
    "CLIENT",
    "COORDINATOR",
    "ORIGINS",
    "validate_leader_append",
    "convert_compression",
    "walk_records",
    "ACCELERATED",
]

CLIENT, COORDINATOR = "client", "coordinator"  # Kafka's AppendOrigin.CLIENT / COORDINATOR
ORIGINS = (CLIENT, COORDINATOR)

WALK_OK, WALK_MALFORMED, WALK_NULL_KEY, WALK_TIMESTAMP = 0, 1, 2, 3
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_KNOWN_CODECS = (0, 1, 2, 3, 4)
# compression.type -> the codec a leader writes (Kafka's BrokerCompressionType; 'producer' keeps the batch's)
TARGET_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _load_walker() -> Callable | None:
    if os.environ.get("RAFKA_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from storage import _crecords
    except ImportError:
        return None
    return getattr(_crecords, "validate_records", None)


_c_walk = _load_walker()  # read at each call, so tests can swap paths
ACCELERATED: bool = _c_walk is not None


# ---------------------------------------------------------------------------------------------- walk

_V_OK, _V_TRUNC, _V_TOOLONG, _V_OVERFLOW = 0, 1, 2, 3


def _varint(data, p: int, lim: int) -> tuple[int, int, int]:
    """``(status, value, next)`` of the zigzag varint at ``data[p:lim]``, statuses as the C reader's: a
    10th byte must end the varint and carry bit 63 only (more: overflow, still consumed)."""
    z = shift = 0
    overflow = False
    while True:
        if p >= lim:
            return _V_TRUNC, 0, p
        b = data[p]
        p += 1
        if shift == 63:
            if b & 0x80:
                return _V_TOOLONG, 0, p
            overflow = b > 1
            z |= (b & 1) << 63
            break
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return (_V_OVERFLOW if overflow else _V_OK), (z >> 1) ^ -(z & 1), p


def _walk_records(
    data,
    p: int,
    end: int,
    count: int,
    base_ts: int,
    log_append_time: bool,
    compacted: bool,
    ts_low: int,
    ts_high: int,
    errors: list | None = None,
) -> tuple:
    """The pure-Python twin of ``_crecords.validate_records`` (same arguments, same answers). With ``errors``
    (a list), a record without a key or with its timestamp out of range is added to it as ``(index, status,
    detail)`` and the walk goes on (Kafka's per-record errors, KIP-467); a malformed record still ends it."""
    max_ts = NO_TIMESTAMP
    for i in range(count):
        st, n, p = _varint(data, p, end)
        if st != _V_OK:
            return (
                WALK_MALFORMED,
                i,
                "the record length is not a valid varint (truncated, over 10 bytes or past 64 bits)",
            )
        if n < 6 or n > end - p:
            return WALK_MALFORMED, i, f"record length {n} does not fit the batch ({end - p} bytes left)"
        rend = p + n
        p += 1  # Attributes (unused)
        st, tsd, p = _varint(data, p, rend)
        if not (st == _V_OK or (st == _V_OVERFLOW and log_append_time)):
            return WALK_MALFORMED, i, "the timestamp delta is not a valid varint"
        st2, od, p = _varint(data, p, rend)
        if st2 != _V_OK:
            return WALK_MALFORMED, i, "the offset delta is not a valid varint"
        if od != i:
            return WALK_MALFORMED, i, f"offset delta {od}, expected {i} (deltas must run 0, 1, 2, ...)"
        ts = NO_TIMESTAMP
        if not log_append_time:
            ts = base_ts + tsd
            if st == _V_OVERFLOW or not _INT64_MIN <= ts <= _INT64_MAX:
                return WALK_MALFORMED, i, "the timestamp (base timestamp + delta) does not fit 64 bits"
        st, klen, p = _varint(data, p, rend)
        if st != _V_OK:
            return WALK_MALFORMED, i, "the key length is not a valid varint"
        if klen < -1 or klen > rend - p:
            return WALK_MALFORMED, i, f"key length {klen} does not fit the record"
        if klen > 0:
            p += klen
        st, vlen, p = _varint(data, p, rend)
        if st != _V_OK:
            return WALK_MALFORMED, i, "the value length is not a valid varint"
        if vlen < -1 or vlen > rend - p:
            return WALK_MALFORMED, i, f"value length {vlen} does not fit the record"
        if vlen > 0:
            p += vlen
        st, hcount, p = _varint(data, p, rend)
        if st != _V_OK:
            return WALK_MALFORMED, i, "the header count is not a valid varint"
        if hcount < 0 or hcount > rend - p:
            return WALK_MALFORMED, i, f"header count {hcount} does not fit the record"
        for h in range(hcount):
            st, hk, p = _varint(data, p, rend)
            if st != _V_OK:
                return WALK_MALFORMED, i, f"the length of header {h}'s key is not a valid varint"
            if hk < 0 or hk > rend - p:
                return WALK_MALFORMED, i, f"header {h} has key length {hk}, which does not fit the record"
            try:
                bytes(data[p : p + hk]).decode("utf-8")
            except UnicodeDecodeError:
                return WALK_MALFORMED, i, f"header {h}'s key is not valid UTF-8"
            p += hk
            st, hv, p = _varint(data, p, rend)
            if st != _V_OK:
                return WALK_MALFORMED, i, f"the length of header {h}'s value is not a valid varint"
            if hv < -1 or hv > rend - p:
                return WALK_MALFORMED, i, f"header {h} has value length {hv}, which does not fit the record"
            if hv > 0:
                p += hv
        if p != rend:
            return WALK_MALFORMED, i, f"the record's fields end {rend - p} bytes before its declared length {n}"
        if compacted and klen < 0:
            if errors is None:
                return WALK_NULL_KEY, i, None
            errors.append((i, WALK_NULL_KEY, None))
            continue
        if not log_append_time:
            if ts != NO_TIMESTAMP and (ts < ts_low or ts > ts_high):
                if errors is None:
                    return WALK_TIMESTAMP, i, ts
                errors.append((i, WALK_TIMESTAMP, ts))
                continue
            if ts > max_ts:
                max_ts = ts
    if p != end:
        return WALK_MALFORMED, count, f"{end - p} bytes remain after the batch's {count} records"
    return WALK_OK, count, max_ts


def walk_records(
    data, p: int, end: int, count: int, base_ts: int, log_append_time: bool, compacted: bool, ts_low: int, ts_high: int
) -> tuple:
    """``(status, index, detail)`` of the records in ``data[p:end]`` (see the C docstring), through C when
    built."""
    c = _c_walk
    if c is not None:
        return c(data, p, end, count, base_ts, log_append_time, compacted, ts_low, ts_high)
    return _walk_records(data, p, end, count, base_ts, log_append_time, compacted, ts_low, ts_high)


# ---------------------------------------------------------------------------------------------- batches


def _where(index: int, pos: int) -> str:
    return f"batch {index} (at byte {pos})"


def _fail(cls: type[KafkaError], index: int, pos: int, what: str) -> KafkaError:
    return cls(f"{_where(index, pos)}: {what}")


def validate_leader_append(
    buf: bytearray, config: LogConfig, now_ms: int, origin: str = CLIENT
) -> list[tuple[int, int, BatchHeader]]:
    """Check every batch of one leader append (see the module docstring); ``(position, size, header)`` of
    each, headers as corrected. Raises the first failure's Kafka error; ``buf`` is then unchanged."""
    if origin not in ORIGINS:
        raise ValueError(
            f"append origin must be one of {ORIGINS}, not {origin!r} (followers append with append_as_follower)"
        )
    client = origin == CLIENT
    lat_topic = config.message_timestamp_type == "LogAppendTime"
    compacted = config.compact
    ts_low = max(now_ms - config.message_timestamp_before_max_ms, _INT64_MIN)
    ts_high = min(now_ms + config.message_timestamp_after_max_ms, _INT64_MAX)
    max_msg = config.max_message_bytes
    n = len(buf)
    out: list[tuple[int, int, BatchHeader]] = []
    fixes: list[tuple[int, int]] = []  # (pos, max timestamp) to write once everything passed
    pos = index = 0
    while pos < n:
        try:
            h = validate_batch(buf, pos)
        except CorruptMessageError as e:
            raise _fail(CorruptMessageError, index, pos, e.message) from None
        size = h.size_in_bytes
        if size > max_msg:
            raise _fail(MessageTooLargeError, index, pos, f"{size} bytes exceed max.message.bytes {max_msg}")
        attributes, count = h.attributes, h.records_count
        if count != h.last_offset_delta + 1:
            raise _fail(
                InvalidRecordError,
                index,
                pos,
                f"records count {count} does not match last offset "
                f"delta {h.last_offset_delta} (count must be delta + 1)",
            )
        if client and attributes & CONTROL_MASK:
            raise _fail(
                InvalidRecordError, index, pos, "clients are not allowed to write control records (transaction markers)"
            )
        if h.producer_id >= 0:
            if client and h.base_sequence < 0:
                raise _fail(
                    InvalidRecordError,
                    index,
                    pos,
                    f"invalid sequence number {h.base_sequence} in a batch with producer id {h.producer_id}",
                )
        elif attributes & TRANSACTIONAL_MASK:
            raise _fail(InvalidRecordError, index, pos, "transactional batch without a producer id")
        lat_batch = bool(attributes & TIMESTAMP_TYPE_MASK)
        if lat_batch and lat_topic:
            raise _fail(
                InvalidTimestampError,
                index,
                pos,
                "invalid timestamp type: a producer should not set the timestamp type to LogAppendTime",
            )
        codec = attributes & COMPRESSION_MASK
        if codec not in _KNOWN_CODECS:
            raise _fail(
                UnsupportedCompressionTypeError,
                index,
                pos,
                f"unknown compression type {codec} (known: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)",
            )
        start, end = pos + RECORDS_POS, pos + size
        data: bytes | bytearray = buf
        if codec:
            try:
                with memoryview(buf) as mv:
                    data = decompress(codec, mv[start:end])
            except CorruptMessageError as e:
                raise _fail(CorruptMessageError, index, pos, e.message) from None
            start, end = 0, len(data)
        status, rec, detail = walk_records(
            data, start, end, count, h.base_timestamp, lat_batch or lat_topic, compacted, ts_low, ts_high
        )
        if status in (WALK_NULL_KEY, WALK_TIMESTAMP):  # every bad record of the batch, as Kafka (KIP-467)
            errors: list[tuple[int, int, int | None]] = []
            status, rec, detail = _walk_records(
                data, start, end, count, h.base_timestamp, lat_batch or lat_topic, compacted, ts_low, ts_high, errors
            )
            if status == WALK_OK:
                raise _record_errors(index, pos, errors, ts_low, ts_high)
        if status != WALK_OK:
            raise InvalidRecordError(f"{_where(index, pos)}, record {rec}: " + detail)
        batch_max_ts = h.max_timestamp
        if lat_batch and not lat_topic and batch_max_ts != NO_TIMESTAMP and not ts_low <= batch_max_ts <= ts_high:
            raise _fail(
                InvalidTimestampError,
                index,
                pos,
                f"Timestamp {batch_max_ts} (LogAppendTime batch: every record carries it) is out of "
                f"range. The timestamp should be within [{ts_low}, {ts_high}]",
            )
        if not lat_batch and not lat_topic and detail != batch_max_ts:
            fixes.append((len(out), detail))
        out.append((pos, size, h))
        pos += size
        index += 1
    for i, max_ts in fixes:  # only now: a refused request leaves buf as it came
        p, size, h = out[i]
        out[i] = (p, size, _set_max_timestamp(buf, p, size, h, max_ts))
    return out


def _record_errors(index: int, pos: int, errors: list, ts_low: int, ts_high: int) -> RecordValidationError:
    """Kafka's processRecordErrors: INVALID_TIMESTAMP if any record's timestamp is out of range, else
    INVALID_RECORD, with every bad record's ``(batch_index, message)`` and the first three in the message."""
    record_errors = []
    for i, status, ts in errors:
        if status == WALK_NULL_KEY:
            msg = "a compacted topic cannot accept a record without a key"
        else:
            msg = (
                f"Timestamp {ts} of the record is out of range. The timestamp should be within [{ts_low}, "
                f"{ts_high}] (message.timestamp.before.max.ms / after.max.ms)"
            )
        record_errors.append((i, msg))
    first = "; ".join(f"record {i}: {m}" for i, m in record_errors[:3])
    where = _where(index, pos)
    if any(status == WALK_TIMESTAMP for _, status, _ in errors):
        return InvalidTimestampsError(
            f"{where}: One or more records have been rejected due to invalid timestamp "
            f"({len(record_errors)} in total, the first three at most: {first})",
            tuple(record_errors),
        )
    return InvalidRecordsError(
        f"{where}: One or more records have been rejected due to {len(record_errors)} record errors in total, "
        f"and only showing the first three errors at most: {first}",
        tuple(record_errors),
    )


def convert_compression(
    buf: bytearray, infos: list[tuple[int, int, BatchHeader]], config: LogConfig
) -> tuple[bytearray, list[tuple[int, int, BatchHeader]]]:
    """The topic's compression.type on validated batches (Kafka's validateMessagesAndAssignOffsetsCompressed
    with a target codec other than the source's): each batch in another codec is rebuilt in the topic's, at the
    topic's level for that codec (``compression.gzip.level`` / ``lz4`` / ``zstd``, KIP-390; a batch already in the
    topic's codec is kept whatever level it was written at, as Kafka keeps it), its
    records as they came (validated: offset deltas 0, 1, 2, ..., so the leader's base offset gives them their
    offsets as Kafka's rebuild does), header fields kept, length, attributes and CRC new. Control batches stay
    as written. ``(buf, infos)`` unchanged when nothing is to convert; MESSAGE_TOO_LARGE if a rebuilt batch
    exceeds max.message.bytes."""
    codec = TARGET_CODECS.get(config.compression_type)
    if codec is None or all(h.attributes & COMPRESSION_MASK == codec or h.is_control for _, _, h in infos):
        return buf, infos
    out = bytearray()
    new_infos: list[tuple[int, int, BatchHeader]] = []
    with memoryview(buf) as mv:
        for index, (pos, size, h) in enumerate(infos):
            source = h.attributes & COMPRESSION_MASK
            start = len(out)
            if source == codec or h.is_control:
                out += mv[pos : pos + size]
            else:
                body = mv[pos + RECORDS_POS : pos + size]
                records = decompress(source, body) if source else body
                out += mv[pos : pos + RECORDS_POS]
                # the topic's Compression, level included (Kafka's LogConfig.getCompression ->
                # BrokerCompressionType.targetCompression -> LogValidator's builder of the new batch)
                out += compress(codec, records, config.compression_level(codec)) if codec else records
                n = len(out) - start
                if n > config.max_message_bytes:
                    raise _fail(
                        MessageTooLargeError,
                        index,
                        pos,
                        f"{n} bytes in compression.type {config.compression_type} exceed max.message.bytes "
                        f"{config.max_message_bytes}",
                    )
                out[start + LENGTH_POS : start + LENGTH_POS + 4] = (n - LOG_OVERHEAD).to_bytes(4, "big")
                attributes = (h.attributes & ~COMPRESSION_MASK) | codec
                out[start + ATTRIBUTES_POS : start + ATTRIBUTES_POS + 2] = attributes.to_bytes(2, "big")
                with memoryview(out) as omv:
                    crc = crc32c(omv[start + ATTRIBUTES_POS :])
                out[start + CRC_POS : start + CRC_POS + 4] = crc.to_bytes(4, "big")
            new_infos.append((start, len(out) - start, parse_header(out, start)))
    return out, new_infos


def _set_max_timestamp(buf: bytearray, pos: int, size: int, h: BatchHeader, max_ts: int) -> BatchHeader:
    """Kafka's ``setMaxTimestamp`` for a CreateTime batch: the field and the CRC rewritten in place."""
    buf[pos + MAX_TIMESTAMP_POS : pos + MAX_TIMESTAMP_POS + 8] = max_ts.to_bytes(8, "big", signed=True)
    with memoryview(buf) as mv:
        crc = crc32c(mv[pos + ATTRIBUTES_POS : pos + size])
    buf[pos + CRC_POS : pos + CRC_POS + 4] = crc.to_bytes(4, "big")
    return h._replace(max_timestamp=max_ts, crc=crc)
