"""RecordBatch v2: golden bytes, round-trips, compatibility with kafka-python's independent implementation,
and hostile input (every failure must be a KafkaError with a message, never another exception type)."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    UnsupportedCompressionTypeError,
)
from storage import codecs
from storage.control import build_control_batch, parse_control_record
from storage.records import (
    BATCH_HEADER,
    BATCH_OVERHEAD,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    GZIP,
    LOG_OVERHEAD,
    LZ4,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NONE,
    SNAPPY,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    ZSTD,
    BatchHeader,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    crc_ok,
    decode_records,
    decode_varint,
    encode_varint,
    iter_batch_headers,
    iter_batches,
    iter_records,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build(records, compression=NONE, **kw) -> bytes:
    kw.setdefault("batch_size", 1 << 30)
    b = RecordBatchBuilder(compression_type=compression, **kw)
    for r in records:
        assert b.append(*r)
    return b.build()


def wrap_records(body: bytes, count: int, attributes: int = 0, last_offset_delta: int = 0) -> bytes:
    """A batch frame with a correct CRC around arbitrary records bytes (to reach the record parser)."""
    head = bytearray(
        BATCH_HEADER.pack(
            0,
            BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
            -1,
            2,
            0,
            attributes,
            last_offset_delta,
            1000,
            1000,
            -1,
            -1,
            -1,
            count,
        )
    )
    head += body
    struct.pack_into(">I", head, 17, crc32c(memoryview(head)[21:]))
    return bytes(head)


# ------------------------------------------------------------------------------------------------
# golden bytes


def test_crc32c_is_castagnoli():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720)


def test_golden_batch_field_by_field():
    value64 = bytes(range(64))
    data = build(
        [(1000, b"k", b"v1", [("h", b"x")]), (1003, None, b""), (999, None, value64)],
        producer_id=7,
        producer_epoch=2,
        base_sequence=10,
        base_offset=0,
    )
    rec0 = (
        bytes(
            [
                0x1A,  # length 13, zigzag 26
                0x00,  # attributes
                0x00,  # timestamp delta 0
                0x00,  # offset delta 0
                0x02,
            ]
        )
        + b"k"
        + bytes([0x04])
        + b"v1"
        + bytes([0x02, 0x02])
        + b"h"
        + bytes([0x02])
        + b"x"
    )
    rec1 = bytes([0x0C, 0x00, 0x06, 0x02, 0x01, 0x00, 0x00])  # length 6, ts +3, offset 1, null key, b"", 0 headers
    rec2 = (
        bytes(
            [
                0x8E,
                0x01,  # length 71, zigzag 142 as a 2-byte varint
                0x00,
                0x01,  # ts delta -1, zigzag 1
                0x04,
                0x01,  # offset delta 2, null key
                0x80,
                0x01,
            ]
        )
        + value64
        + bytes([0x00])
    )  # value length 64 (zigzag 128, 2 bytes)
    records = rec0 + rec1 + rec2
    assert len(rec0) == 14 and len(rec1) == 7 and len(rec2) == 73
    after_crc = (
        struct.pack(">h", 0)
        + struct.pack(">i", 2)
        + struct.pack(">q", 1000)
        + struct.pack(">q", 1003)
        + struct.pack(">q", 7)
        + struct.pack(">h", 2)
        + struct.pack(">i", 10)
        + struct.pack(">i", 3)
        + records
    )
    expected = (
        struct.pack(">q", 0)
        + struct.pack(">i", 4 + 1 + 4 + len(after_crc))
        + struct.pack(">i", -1)
        + bytes([2])
        + struct.pack(">I", crc32c(after_crc))
        + after_crc
    )
    assert data == expected
    h = validate_batch(data)
    assert h == BatchHeader(0, 49 + len(records), -1, 2, crc32c(after_crc), 0, 2, 1000, 1003, 7, 2, 10, 3)
    assert (h.last_offset, h.next_offset, h.size_in_bytes, h.last_sequence) == (2, 3, len(data), 12)
    assert decode_records(data) == [
        Record(0, 1000, b"k", b"v1", (("h", b"x"),)),
        Record(1, 1003, None, b"", ()),
        Record(2, 999, None, value64, ()),
    ]


def test_golden_control_batch():
    data = build_control_batch(
        CONTROL_COMMIT,
        producer_id=42,
        producer_epoch=3,
        coordinator_epoch=5,
        timestamp_ms=77,
        base_offset=100,
        partition_leader_epoch=9,
    )
    key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 5)
    rec = bytes([0x00, 0x00, 0x00, 0x08]) + key + bytes([0x0C]) + value + bytes([0x00])
    rec = bytes([len(rec) * 2]) + rec
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, 77, 77, 42, 3, -1, 1) + rec
    expected = struct.pack(">qiiB", 100, 9 + len(after_crc), 9, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    assert data == expected
    h = validate_batch(data)
    assert h.is_control and h.is_transactional and h.has_producer_id
    assert decode_records(data) == []  # consumers never see markers
    (marker,) = decode_records(data, include_control=True)
    assert marker.offset == 100 and parse_control_record(marker) == (CONTROL_COMMIT, 5)
    abort = build_control_batch(CONTROL_ABORT, 42, 3, 6, 78)
    assert parse_control_record(next(iter(RecordBatch(abort)))) == (CONTROL_ABORT, 6)


def test_header_properties_and_constants():
    assert BATCH_HEADER.size == BATCH_OVERHEAD == 61 and LOG_OVERHEAD == 12
    data = build(
        [(5, b"a", b"b")] * 3,
        compression=LZ4,
        timestamp_type=TIMESTAMP_LOG_APPEND_TIME,
        base_offset=40,
        producer_id=3,
        producer_epoch=0,
        base_sequence=2**31 - 2,
        is_transactional=True,
    )
    h = parse_header(data)
    assert h.compression_type == LZ4 and h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert h.is_transactional and not h.is_control and h.has_producer_id
    assert (h.base_offset, h.last_offset, h.next_offset, h.records_count) == (40, 42, 43, 3)
    assert h.last_sequence == 0  # wraps at 2**31 like Kafka
    plain = parse_header(build([(1, None, b"")]))
    assert (plain.producer_id, plain.producer_epoch, plain.base_sequence) == (
        NO_PRODUCER_ID,
        NO_PRODUCER_EPOCH,
        NO_SEQUENCE,
    )
    assert not plain.has_producer_id and plain.last_sequence == NO_SEQUENCE
    assert plain.timestamp_type == TIMESTAMP_CREATE_TIME and plain.delete_horizon_ms == -1
    horizon = parse_header(build([(10, b"k", None)], delete_horizon_ms=5000))
    assert horizon.has_delete_horizon and horizon.delete_horizon_ms == 5000 == horizon.base_timestamp


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_roundtrip(n):
    enc = encode_varint(n)
    assert decode_varint(enc + b"\xff") == (n, len(enc))
    assert enc == kcodec_varint(n)


def kcodec_varint(n):
    from kafka.record.util import encode_varint as kenc

    out = bytearray()
    kenc(n, out.append)
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# round trips

headers_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3)
record_st = st.tuples(
    st.integers(-(2**40), 2**40),  # timestamp offset from a base
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    headers_st,
)


@FUZZ
@given(
    records=st.lists(record_st, min_size=1, max_size=40),
    compression=st.sampled_from(ALL_CODECS),
    base_ts=st.integers(2**40, 2**42),
    base_offset=st.integers(0, 2**40),
    pid=st.integers(-1, 2**40),
    transactional=st.booleans(),
)
def test_roundtrip(records, compression, base_ts, base_offset, pid, transactional):
    recs = [(base_ts + dt, k, v, hs) for dt, k, v, hs in records]
    data = build(
        recs,
        compression,
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=1 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        is_transactional=transactional,
    )
    h = validate_batch(data)
    assert h.records_count == len(recs) and h.last_offset_delta == len(recs) - 1
    assert h.base_timestamp == recs[0][0] and h.max_timestamp == max(r[0] for r in recs)
    assert h.compression_type == compression and h.is_transactional == transactional
    expect = [
        Record(base_offset + i, ts, k, v, tuple((hk, hv) for hk, hv in hs)) for i, (ts, k, v, hs) in enumerate(recs)
    ]
    assert decode_records(data) == expect
    assert list(RecordBatch(data)) == expect
    assert list(iter_records(data + data)) == expect + expect


@FUZZ
@given(values=st.lists(st.binary(max_size=600), min_size=1, max_size=60), batch_size=st.integers(1, 4000))
def test_builder_fills_to_batch_size(values, batch_size):
    b = RecordBatchBuilder(batch_size=batch_size)
    taken = 0
    for v in values:
        if not b.append(1, None, v):
            break
        taken += 1
    assert taken >= 1  # a batch always takes its first record however large
    assert b.record_count == taken
    data = b.build()
    assert len(data) == b.estimated_size
    assert taken == 1 or len(data) <= batch_size
    if taken < len(values):  # the refused record would really have overflowed
        assert len(build([(1, None, v) for v in values[: taken + 1]])) > batch_size
    assert [r.value for r in decode_records(data)] == values[:taken]


def test_builder_explicit_offsets_and_types():
    b = RecordBatchBuilder(base_offset=100, batch_size=1 << 20)
    assert b.append(1, b"a", b"1", offset=100)
    assert b.append(2, bytearray(b"b"), memoryview(b"2"), offset=105)
    with pytest.raises(ValueError):
        b.append(3, None, None, offset=105)
    with pytest.raises(TypeError):
        b.append(3, "str key", b"x")
    with pytest.raises(TypeError):
        b.append(3, None, b"x", [(1, b"x")])
    data = b.build()
    h = parse_header(data)
    assert (h.last_offset, h.records_count) == (105, 2)
    assert [(r.offset, r.key, r.value) for r in decode_records(data)] == [(100, b"a", b"1"), (105, b"b", b"2")]
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatchBuilder(compression_type=5)
    with pytest.raises(InvalidTimestampError, match="negative"):
        RecordBatchBuilder().append(-2, None, b"x")
    no_ts = build([(-1, None, b"x")])  # NO_TIMESTAMP is allowed, as in Kafka
    assert decode_records(no_ts)[0].timestamp == -1 and parse_header(no_ts).max_timestamp == -1


def test_empty_builder_builds_empty_batch():
    data = RecordBatchBuilder(base_offset=7).build()
    h = validate_batch(data)
    assert (h.records_count, h.base_offset, len(data)) == (0, 7, BATCH_OVERHEAD)
    assert decode_records(data) == []


# ------------------------------------------------------------------------------------------------
# in-place rewrites


def test_rewrites_outside_crc_keep_it_valid():
    data = bytearray(build([(1, b"k", b"v")] * 4, GZIP))
    crc_before = parse_header(data).crc
    set_base_offset(data, 0, 1234)
    set_partition_leader_epoch(data, 0, 17)
    h = validate_batch(data)
    assert (h.base_offset, h.partition_leader_epoch, h.crc) == (1234, 17, crc_before)
    assert [r.offset for r in decode_records(data)] == [1234, 1235, 1236, 1237]


def test_set_log_append_time_in_concatenation():
    first = build([(1, b"a", b"x"), (2, b"b", b"y")])
    second = build([(10, None, b"z"), (30, None, b"w")], SNAPPY)
    buf = bytearray(first + second)
    set_log_append_time(buf, len(first), 999)
    h = validate_batch(buf, len(first))
    assert h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and h.max_timestamp == 999 and h.base_timestamp == 10
    assert crc_ok(buf, len(first), h)
    assert [r.timestamp for r in decode_records(bytes(buf))] == [1, 2, 999, 999]
    kb = DefaultRecordBatch(bytes(buf[len(first) :]))
    assert kb.validate_crc() and [r.timestamp for r in kb] == [999, 999]


# ------------------------------------------------------------------------------------------------
# compatibility with kafka-python (an independent implementation of the same format)


def sample_records(n=60):
    return [
        (
            1_700_000_000_000 + i * 7 - (i % 5) * 3,
            (b"key-%d" % i) if i % 3 else None,
            (b"value-%d-" % i) * (i % 11) if i % 7 else None,
            [("trace", b"t%d" % i), ("empty", None), ("\u00e9t\u00e9", b"")] if i % 4 == 0 else [],
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("compression", ALL_CODECS)
def test_rafka_batches_read_by_kafka_python(compression):
    recs = sample_records()
    data = build(
        recs,
        compression,
        base_offset=500,
        producer_id=11,
        producer_epoch=4,
        base_sequence=90,
        is_transactional=True,
        partition_leader_epoch=6,
    )
    h = validate_batch(data)
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc()
    assert (
        kb.base_offset,
        kb.size_in_bytes,
        kb.leader_epoch,
        kb.magic,
        kb.crc,
        kb.attributes,
        kb.last_offset_delta,
        kb.first_timestamp,
        kb.max_timestamp,
        kb.producer_id,
        kb.producer_epoch,
        kb.base_sequence,
        kb.records_count,
    ) == (
        h.base_offset,
        h.size_in_bytes,
        h.partition_leader_epoch,
        h.magic,
        h.crc,
        h.attributes,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
    )
    assert kb.compression_type == compression and kb.is_transactional and not kb.is_control_batch
    assert kb.last_sequence == h.last_sequence and kb.next_offset == h.next_offset
    theirs = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kb]
    assert theirs == [(500 + i, ts, k, v, tuple(hs)) for i, (ts, k, v, hs) in enumerate(recs)]
    assert theirs == [tuple(r) for r in decode_records(data)]
    # and through kafka-python's MemoryRecords over concatenated batches
    mr = MemoryRecords(data + build(recs[:3], compression, base_offset=560))
    offsets = []
    while mr.has_next():
        offsets += [r.offset for r in mr.next_batch()]
    assert offsets == list(range(500, 563))


@pytest.mark.parametrize("compression", ALL_CODECS)
def test_kafka_python_batches_read_by_rafka(compression):
    recs = sample_records()
    kb = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=3,
        producer_epoch=1,
        base_sequence=7,
        batch_size=1 << 30,
    )
    for i, (ts, k, v, hs) in enumerate(recs):
        kb.append(i, timestamp=ts, key=k, value=v, headers=hs)
    data = bytes(kb.build())
    ref = DefaultRecordBatch(data)
    h = validate_batch(data)
    assert crc_ok(data, 0, h)
    assert (
        h.base_offset,
        h.batch_length + 12,
        h.partition_leader_epoch,
        h.magic,
        h.crc,
        h.attributes,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
    ) == (
        ref.base_offset,
        ref.size_in_bytes,
        ref.leader_epoch,
        ref.magic,
        ref.crc,
        ref.attributes,
        ref.last_offset_delta,
        ref.first_timestamp,
        ref.max_timestamp,
        ref.producer_id,
        ref.producer_epoch,
        ref.base_sequence,
        ref.records_count,
    )
    ours = decode_records(data)
    assert [tuple(r) for r in ours] == [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(data)
    ]
    assert ours == [Record(i, ts, k, v, tuple(hs)) for i, (ts, k, v, hs) in enumerate(recs)]
    if compression in (NONE, SNAPPY, ZSTD):  # same codec output: the whole batch is byte-identical
        ours_bytes = build(
            recs, compression, producer_id=3, producer_epoch=1, base_sequence=7, partition_leader_epoch=0
        )  # kafka-python writes epoch 0, Java -1
        assert ours_bytes == data


def test_control_batch_read_by_kafka_python():
    data = build_control_batch(
        CONTROL_ABORT, producer_id=8, producer_epoch=2, coordinator_epoch=4, timestamp_ms=1234, base_offset=77
    )
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc() and kb.is_control_batch and kb.is_transactional
    (rec,) = list(kb)
    assert rec.abort and rec.version == 0 and rec.offset == 77 and rec.timestamp == 1234


def test_snappy_framing_matches_kafka_python_and_both_framings_read():
    payload = bytes(range(256)) * 400  # > 32 KiB: several xerial blocks
    assert codecs.snappy_compress(payload) == kcodec.snappy_encode(payload)
    assert codecs.snappy_compress(payload).startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    raw = bytes(cramjam.snappy.compress_raw(payload))  # librdkafka writes a bare block
    framed = bytes(cramjam.snappy.compress(payload))  # the snappy framing format
    for blob in (raw, framed, kcodec.snappy_encode(payload), kcodec.snappy_encode(payload, False)):
        assert codecs.decompress(SNAPPY, blob) == payload
    body = build([(1, None, payload)])[BATCH_OVERHEAD:]
    data = wrap_records(bytes(cramjam.snappy.compress_raw(body)), 1, attributes=SNAPPY)
    assert decode_records(data)[0].value == payload


def test_lz4_frame_like_kafkas_java_client():
    frame = codecs.lz4_compress(b"x" * 100_000)
    flg, bd = frame[4], frame[5]
    assert frame[:4] == b"\x04\x22\x4d\x18"
    assert flg == 0x60 and bd == 0x40  # v01, independent blocks, no checksums/size; 64 KiB blocks
    assert lz4.frame.decompress(frame) == b"x" * 100_000
    assert codecs.decompress(LZ4, kcodec.lz4_encode(b"abc" * 1000)) == b"abc" * 1000


def test_gzip_and_zstd_variants_read():
    payload = b"hello kafka " * 5000
    assert gzip.decompress(codecs.gzip_compress(payload)) == payload
    two_members = gzip.compress(payload[:100]) + gzip.compress(payload[100:])
    assert codecs.decompress(GZIP, two_members) == payload
    assert codecs.decompress(GZIP, zlib.compress(payload)) == payload
    cobj = zstandard.ZstdCompressor().compressobj()  # streaming: no content size, like zstd-jni
    streamed = cobj.compress(payload) + cobj.flush()
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert codecs.decompress(ZSTD, streamed + codecs.zstd_compress(b"tail")) == payload + b"tail"


@pytest.mark.parametrize("compression", [GZIP, SNAPPY, LZ4, ZSTD])
def test_decompression_is_capped_and_garbage_is_corrupt(compression):
    bomb = codecs.compress(compression, b"\x00" * 200_000)
    with pytest.raises(CorruptMessageError, match="more than|claims"):
        codecs.decompress(compression, bomb, max_size=100_000)
    assert codecs.decompress(compression, bomb, max_size=200_000) == b"\x00" * 200_000
    for junk in (b"", b"\xff", b"not compressed at all" * 3, bomb[: len(bomb) // 2]):
        with pytest.raises(CorruptMessageError):
            codecs.decompress(compression, junk)


def test_lz4_output_is_read_in_bounded_steps():
    """lz4 output comes in steps of codecs._LZ4_STEP (python-lz4 allocates max_length up front): more than
    one step decodes whole, frame after frame, and the cap still holds across steps."""
    big = bytes(range(256)) * (3 * codecs._LZ4_STEP // 256) + b"end"
    two = codecs.lz4_compress(big) + codecs.lz4_compress(b"second frame")
    assert codecs.decompress(LZ4, two) == big + b"second frame"
    with pytest.raises(CorruptMessageError, match="more than"):
        codecs.decompress(LZ4, two, max_size=len(big) + 5)
    with pytest.raises(CorruptMessageError, match="truncated"):
        codecs.decompress(LZ4, two[: len(two) // 3])


# ------------------------------------------------------------------------------------------------
# hostile input


GOOD = build(sample_records(20), base_offset=10)


def test_garbage_and_short_input():
    with pytest.raises(CorruptMessageError, match="truncated"):
        parse_header(b"\x00" * 60)
    with pytest.raises(CorruptMessageError, match="truncated"):
        validate_batch(GOOD[:70])
    with pytest.raises(CorruptMessageError, match="impossible length"):
        validate_batch(GOOD, 5)
    with pytest.raises(CorruptMessageError):
        validate_batch(b"garbage" * 20)


def test_wrong_magic():
    for magic in (0, 1, 3, 255):
        bad = bytearray(GOOD)
        bad[16] = magic
        with pytest.raises(CorruptMessageError, match="magic"):
            parse_header(bad)


@pytest.mark.parametrize("length", [-1, 0, 48, 2**31 - 1])
def test_impossible_length(length):
    bad = bytearray(GOOD)
    struct.pack_into(">i", bad, 8, length)
    with pytest.raises(CorruptMessageError, match="length|truncated"):
        validate_batch(bad)


def test_truncated_batch_and_torn_tail():
    with pytest.raises(CorruptMessageError, match="truncated"):
        validate_batch(GOOD[:-1])
    buf = GOOD + GOOD + GOOD[:100]
    seen = []
    with pytest.raises(CorruptMessageError, match="truncated"):
        for pos, _h in iter_batch_headers(buf):
            seen.append(pos)
    assert seen == [0, len(GOOD)]
    with pytest.raises(CorruptMessageError):
        list(iter_batch_headers(buf, validate=False))
    assert [p for p, _ in iter_batch_headers(GOOD + GOOD, validate=False)] == [0, len(GOOD)]


def test_every_flipped_byte_under_the_crc_is_caught():
    for i in range(21, len(GOOD)):
        bad = bytearray(GOOD)
        bad[i] ^= 0x40
        h = parse_header(bad) if i >= 61 else None
        if h is not None:
            assert not crc_ok(bad, 0, h)
        with pytest.raises(CorruptMessageError):
            validate_batch(bad)
    bad = bytearray(GOOD)
    bad[17] ^= 1  # the stored CRC itself
    with pytest.raises(CorruptMessageError, match="CRC"):
        decode_records(bytes(bad))
    assert decode_records(bytes(bad), validate=False) == decode_records(GOOD)  # check.crcs=false


@pytest.mark.parametrize(
    "body, count, match",
    [
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00]), 1, "negative key length"),
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00]), 1, "negative value length"),
        (bytes([0x0E, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x01, 0x01]), 1, "header"),  # negative header key
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01]), 1, "header"),  # header count -1
        (bytes([0x0D, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00]), 1, "length -7 does not fit"),
        (bytes([0x06, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00]), 1, "length 3 does not fit"),  # shorter than possible
        (bytes([0x7E, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00]), 1, "length 63 does not fit"),  # past the batch
        (bytes([0x12, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02]) + b"h" + bytes([0x03]), 1, "header value length -2"),
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00]), 2, "records|end"),  # count says 2, holds 1
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00]), 1, "remain"),  # trailing byte
        (bytes([0x0E, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00]), 1, "fit|fill"),  # length 7 over 6 bytes
        (bytes([0x10, 0x00, 0x00, 0x00, 0x08]) + b"k" * 4 + bytes([0x01, 0x00]), 1, "fill|fit"),  # overrun
        (bytes([0x14, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02, 0xFF, 0x02, 0x01]), 1, "utf-8|decode"),
        (bytes([0x0C, 0x00] + [0xFF] * 11), 1, "longer than 10 bytes|fit|end"),
    ],
)
def test_malformed_records_under_a_good_crc(body, count, match):
    data = wrap_records(body, count)
    validate_batch(data)  # the frame and CRC are fine ...
    with pytest.raises(InvalidRecordError, match=match):  # ... the records are not
        decode_records(data)
    with pytest.raises(InvalidRecordError):
        list(RecordBatch(data))


def test_unknown_codec_in_a_good_batch():
    data = wrap_records(b"\x00" * 10, 1, attributes=6)
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_records(data)


def test_control_record_parse_errors():
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, b"\x00", b"\x00" * 6, ()))
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, struct.pack(">hh", 0, 1), None, ()))
    with pytest.raises(InvalidRecordError):
        parse_control_record(Record(0, 0, struct.pack(">hh", 0, 7), struct.pack(">hi", 0, 1), ()))
    with pytest.raises(ValueError):
        build_control_batch(3, 1, 1, 1, 1)


def _only_kafka_errors(fn, *args):
    try:
        fn(*args)
    except KafkaError as e:
        assert e.message  # a clear message, never an empty one
        assert isinstance(e, (CorruptMessageError, InvalidRecordError, UnsupportedCompressionTypeError))


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(blob):
    _only_kafka_errors(validate_batch, blob)
    _only_kafka_errors(decode_records, blob)
    _only_kafka_errors(lambda b: list(iter_batch_headers(b, validate=False)), blob)


@FUZZ
@given(body=st.binary(max_size=200), count=st.integers(0, 20), codec=st.integers(0, 7), log_append=st.booleans())
def test_fuzz_records_region_under_a_good_crc(body, count, codec, log_append):
    data = wrap_records(body, count, attributes=codec | (8 if log_append else 0))
    validate_batch(data)
    _only_kafka_errors(decode_records, data)
    _only_kafka_errors(lambda d: [list(b) for b in iter_batches(d)], data)


@FUZZ
@given(data=st.data(), compression=st.sampled_from(ALL_CODECS))
def test_fuzz_mutated_valid_batches(data, compression):
    good = build(sample_records(8), compression)
    body = bytearray(good[BATCH_OVERHEAD:])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    mutated = wrap_records(bytes(body[:cut]), 8, attributes=compression, last_offset_delta=7)
    _only_kafka_errors(decode_records, mutated)
