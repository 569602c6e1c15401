"""Hand-made RecordBatch v2 bytes for validation tests: well-formed batches from the builder, and malformed
records sealed under a *valid* CRC (so only a record-level check can catch them)."""

from __future__ import annotations

import struct
import time

from crc32c import crc32c

from protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    UnsupportedCompressionTypeError,
)
from storage import codecs
from storage.control import build_control_batch
from storage.records import (
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CONTROL_COMMIT,
    GZIP,
    LOG_OVERHEAD,
    LZ4,
    NONE,
    RECORDS_POS,
    ZSTD,
    RecordBatchBuilder,
    encode_varint,
)

# The leader's clock: unit tests pass it as now_ms; a real cluster's replicas read time.time(), which is at
# most the test's duration past it (timestamps here are hours away from the bounds they test).
NOW = int(time.time() * 1000)


def reseal(b) -> bytes:
    """Fix the Length field and recompute the CRC-32C of a (tampered) batch."""
    b = bytearray(b)
    struct.pack_into(">i", b, 8, len(b) - LOG_OVERHEAD)
    struct.pack_into(">I", b, 17, crc32c(memoryview(b)[21:]))
    return bytes(b)


def build(
    n: int = 3, ts: int = NOW - 1000, key: bytes | None = b"k", value: bytes = b"v" * 20, codec: int = NONE, **kw
) -> bytes:
    """A well-formed batch of ``n`` records (keys ``k0, k1, ...`` unless ``key`` is None)."""
    b = RecordBatchBuilder(compression_type=codec, **kw)
    for i in range(n):
        assert b.append(ts + i, None if key is None else key + b"%d" % i, value)
    return b.build()


def set_header(batch: bytes, **fields) -> bytes:
    """The batch with header fields replaced (BatchHeader names), resealed."""
    names = (
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )
    values = list(BATCH_HEADER.unpack_from(batch))
    for k, v in fields.items():
        values[names.index(k)] = v
    return reseal(BATCH_HEADER.pack(*values) + batch[BATCH_OVERHEAD:])


def records_body(batch: bytes) -> bytes:
    """The (uncompressed) records region of a batch built without compression."""
    return batch[RECORDS_POS:]


def enc_record(tsd: int, od: int, key, value, headers=(), attrs: int = 0) -> bytes:
    """One record in the v2 grammar, any deltas and lengths (raw bytes for header keys allowed)."""
    body = [bytes([attrs]), encode_varint(tsd), encode_varint(od)]
    body += [b"\x01"] if key is None else [encode_varint(len(key)), key]
    body += [b"\x01"] if value is None else [encode_varint(len(value)), value]
    body.append(encode_varint(len(headers)))
    for hk, hv in headers:
        hk = hk.encode("utf-8") if isinstance(hk, str) else hk
        body += [encode_varint(len(hk)), hk]
        body += [b"\x01"] if hv is None else [encode_varint(len(hv)), hv]
    body = b"".join(body)
    return encode_varint(len(body)) + body


def wrap(
    body: bytes,
    count: int,
    codec: int = NONE,
    attributes: int | None = None,
    base_ts: int = NOW - 1000,
    max_ts: int | None = None,
    last_offset_delta: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch with a valid CRC around ``body`` (compressed with ``codec`` first unless ``attributes`` is
    given: then the body goes in as it is, whatever the attributes claim)."""
    if attributes is None:
        attributes = codec
        if codec:
            body = codecs.compress(codec, body)
    head = BATCH_HEADER.pack(
        0,
        0,
        -1,
        2,
        0,
        attributes,
        max(count - 1, 0) if last_offset_delta is None else last_offset_delta,
        base_ts,
        base_ts if max_ts is None else max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    return reseal(head + body)


HOUR = 3_600_000
COMPACT = {"cleanup.policy": "compact"}


def _count_high():
    b = build(3)
    return set_header(b, records_count=5, last_offset_delta=4)


def _count_low():
    b = build(3)
    return set_header(b, records_count=2, last_offset_delta=1)


def _records(*recs, count=None, **kw):
    return wrap(b"".join(recs), len(recs) if count is None else count, **kw)


GOOD = [enc_record(i, i, b"k%d" % i, b"value") for i in range(3)]

# Each malformed batch of the issue (valid CRC), with the topic configs it needs, the error a leader must
# answer and a fragment of that error's message: (id, maker, topic configs, error class, fragment).
MALFORMED = [
    ("count-lies-high", _count_high, {}, InvalidRecordError, "record 3"),
    ("count-lies-low", _count_low, {}, InvalidRecordError, "remain after the batch's 2 records"),
    (
        "negative-record-length",
        lambda: _records(GOOD[0], encode_varint(-5) + b"\x00" * 12),
        {},
        InvalidRecordError,
        "record length -5",
    ),
    (
        "bad-varint",
        lambda: _records(GOOD[0], encode_varint(20) + b"\x00\x00\x02" + b"\xff" * 10 + b"\x01" * 7),
        {},
        InvalidRecordError,
        "varint",
    ),
    ("truncated-record", lambda: _records(GOOD[0], GOOD[1][:-3]), {}, InvalidRecordError, "does not fit"),
    ("trailing-bytes", lambda: wrap(b"".join(GOOD) + b"\x00junk", 3), {}, InvalidRecordError, "bytes remain"),
    (
        "offset-deltas-out-of-order",
        lambda: _records(enc_record(0, 0, b"a", b"v"), enc_record(1, 2, b"b", b"v"), enc_record(2, 1, b"c", b"v")),
        {},
        InvalidRecordError,
        "offset delta 2",
    ),
    (
        "negative-key-length",
        lambda: _records(GOOD[0], encode_varint(8) + b"\x00\x02\x02" + encode_varint(-3) + b"\x01\x00\x00\x00"),
        {},
        InvalidRecordError,
        "key length -3",
    ),
    (
        "value-overruns-record",
        lambda: _records(encode_varint(9) + b"\x00\x00\x00\x01" + encode_varint(40) + b"abc\x00"),
        {},
        InvalidRecordError,
        "value length 40",
    ),
    (
        "header-key-not-utf8",
        lambda: _records(enc_record(0, 0, b"k", b"v", [(b"\xff\xfe", b"x")])),
        {},
        InvalidRecordError,
        "UTF-8",
    ),
    (
        "negative-header-count",
        lambda: _records(encode_varint(6) + b"\x00\x00\x00\x01\x01" + encode_varint(-2)),
        {},
        InvalidRecordError,
        "header count -2",
    ),
    ("gzip-flag-on-raw-records", lambda: wrap(b"".join(GOOD), 3, attributes=GZIP), {}, CorruptMessageError, "gzip"),
    ("lz4-flag-on-raw-records", lambda: wrap(b"".join(GOOD), 3, attributes=LZ4), {}, CorruptMessageError, "lz4"),
    (
        "zstd-garbage",
        lambda: wrap(b"\x28\xb5\x2f\xfd" + b"\x00" * 30, 3, attributes=ZSTD),
        {},
        CorruptMessageError,
        "zstd",
    ),
    (
        "codec-5",
        lambda: wrap(b"".join(GOOD), 3, attributes=5),
        {},
        UnsupportedCompressionTypeError,
        "compression type 5",
    ),
    (
        "codec-6",
        lambda: wrap(b"".join(GOOD), 3, attributes=6),
        {},
        UnsupportedCompressionTypeError,
        "compression type 6",
    ),
    (
        "codec-7",
        lambda: wrap(b"".join(GOOD), 3, attributes=7),
        {},
        UnsupportedCompressionTypeError,
        "compression type 7",
    ),
    (
        "malformed-inside-lz4",
        lambda: wrap(b"".join(GOOD) + b"\x05", 3, codec=LZ4),
        {},
        InvalidRecordError,
        "bytes remain",
    ),
    (
        "client-control-batch",
        lambda: build_control_batch(CONTROL_COMMIT, 7, 0, 0, NOW),
        {},
        InvalidRecordError,
        "control",
    ),
    (
        "idempotent-without-sequence",
        lambda: build(2, producer_id=7, producer_epoch=0),
        {},
        InvalidRecordError,
        "sequence",
    ),
    ("null-key-compacted", lambda: build(3, key=None), COMPACT, InvalidRecordError, "without a key"),
    (
        "null-key-compacted-zstd",
        lambda: _records(GOOD[0], enc_record(1, 1, None, b"v"), codec=ZSTD),
        COMPACT,
        InvalidRecordError,
        "record 1",
    ),
    (
        "timestamp-too-old",
        lambda: build(2, ts=NOW - 2 * HOUR),
        {"message.timestamp.before.max.ms": HOUR},
        InvalidTimestampError,
        "out of range",
    ),
    ("timestamp-too-new", lambda: build(2, ts=NOW + 2 * HOUR), {}, InvalidTimestampError, "out of range"),
    (
        "log-append-time-batch-on-log-append-time-topic",
        lambda: build(1, timestamp_type=1),
        {"message.timestamp.type": "LogAppendTime"},
        InvalidTimestampError,
        "LogAppendTime",
    ),
]
