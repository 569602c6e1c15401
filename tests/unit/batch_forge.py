"""Hand-made RecordBatch v2 bytes for validation tests: well-formed batches from the builder, and malformed
records sealed under a *valid* CRC (so only a record-level check can catch them)."""
from __future__ import annotations

import struct

from crc32c import crc32c

from storage import codecs
from storage.records import (BATCH_HEADER, BATCH_OVERHEAD, LOG_OVERHEAD, NONE, RECORDS_POS, RecordBatchBuilder,
                             encode_varint)

NOW = 1_800_000_000_000  # the leader's clock in these tests (2027-01-15)


def reseal(b) -> bytes:
    """Fix the Length field and recompute the CRC-32C of a (tampered) batch."""
    b = bytearray(b)
    struct.pack_into(">i", b, 8, len(b) - LOG_OVERHEAD)
    struct.pack_into(">I", b, 17, crc32c(memoryview(b)[21:]))
    return bytes(b)


def build(n: int = 3, ts: int = NOW - 1000, key: bytes | None = b"k", value: bytes = b"v" * 20,
          codec: int = NONE, **kw) -> bytes:
    """A well-formed batch of ``n`` records (keys ``k0, k1, ...`` unless ``key`` is None)."""
    b = RecordBatchBuilder(compression_type=codec, **kw)
    for i in range(n):
        assert b.append(ts + i, None if key is None else key + b"%d" % i, value)
    return b.build()


def set_header(batch: bytes, **fields) -> bytes:
    """The batch with header fields replaced (BatchHeader names), resealed."""
    names = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
             "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
             "base_sequence", "records_count")
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


def wrap(body: bytes, count: int, codec: int = NONE, attributes: int | None = None, base_ts: int = NOW - 1000,
         max_ts: int | None = None, last_offset_delta: int | None = None, producer_id: int = -1,
         producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A batch with a valid CRC around ``body`` (compressed with ``codec`` first unless ``attributes`` is
    given: then the body goes in as it is, whatever the attributes claim)."""
    if attributes is None:
        attributes = codec
        if codec:
            body = codecs.compress(codec, body)
    head = BATCH_HEADER.pack(0, 0, -1, 2, 0, attributes, max(count - 1, 0) if last_offset_delta is None
                             else last_offset_delta, base_ts, base_ts if max_ts is None else max_ts,
                             producer_id, producer_epoch, base_sequence, count)
    return reseal(head + body)
