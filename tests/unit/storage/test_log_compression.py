"""compression.type on the leader (storage/log_validator.py ``convert_compression``, Kafka's LogValidator
recompression): 'producer' keeps the producer's codec; a named codec rebuilds every other batch in it, its
offsets assigned from the log end as for any batch, its records read back unchanged; control batches stay
as written; a producer's id and sequences survive (a retried batch is still a duplicate); a rebuilt batch
over max.message.bytes is refused; an unknown codec name is INVALID_CONFIG."""

from __future__ import annotations

import pytest
from batch_forge import NOW, build

from protocol.errors import InvalidConfigError, MessageTooLargeError
from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.log_validator import COORDINATOR
from storage.records import (
    COMPRESSION_MASK,
    CONTROL_COMMIT,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    RecordBatchBuilder,
    decode_records,
    iter_batch_headers,
    validate_batch,
)

CODEC = {"uncompressed": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


def stored(lg: Log):
    lg.update_high_watermark(lg.log_end_offset)
    data = lg.read(0, 1 << 22).records
    return [h for _, h in iter_batch_headers(data)], decode_records(data, include_control=True)


def with_headers(n: int, codec: int, first: int = 0, **kw) -> bytes:
    b = RecordBatchBuilder(compression_type=codec, **kw)
    for i in range(first, first + n):
        assert b.append(NOW - 500 + i, b"k%d" % i, b"value-%d" % i * 3, [("h", b"%d" % i)])
    return b.build()


@pytest.mark.parametrize("target", list(CODEC))
@pytest.mark.parametrize("source", [NONE, GZIP, ZSTD], ids=["none", "gzip", "zstd"])
def test_a_named_codec_rebuilds_the_batches_in_it(tmp_path, target, source):
    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props({"compression.type": target}), now_ms=NOW)
    a = lg.append_as_leader(with_headers(30, source), 0, NOW)
    b = lg.append_as_leader(with_headers(20, source, first=30), 0, NOW)
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 29, 30, 49)
    headers, records = stored(lg)
    assert [h.attributes & COMPRESSION_MASK for h in headers] == [CODEC[target]] * 2
    assert [(h.base_offset, h.last_offset_delta, h.records_count) for h in headers] == [(0, 29, 30), (30, 19, 20)]
    assert [r.offset for r in records] == list(range(50))
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (b"k%d" % i, b"value-%d" % i * 3, NOW - 500 + i) for i in range(50)
    ]
    assert all(tuple(r.headers) == (("h", b"%d" % r.offset),) for r in records)


def test_producer_keeps_the_producers_codec(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props({"compression.type": "producer"}), now_ms=NOW)
    sent = with_headers(10, GZIP)
    lg.append_as_leader(sent, 0, NOW)
    lg.append_as_leader(with_headers(5, LZ4, first=10), 0, NOW)
    headers, records = stored(lg)
    assert [h.attributes & COMPRESSION_MASK for h in headers] == [GZIP, LZ4]
    assert len(records) == 15 and LogConfig().compression_type == "producer"


def test_control_batches_stay_and_idempotent_batches_keep_their_sequences(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props({"compression.type": "zstd"}), now_ms=NOW)
    idem = with_headers(4, NONE, producer_id=9, producer_epoch=0, base_sequence=0)
    lg.append_as_leader(idem, 0, NOW)
    again = lg.append_as_leader(idem, 0, NOW)  # the producer's retry: still known as a duplicate
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 3)
    txn = with_headers(2, NONE, first=4, producer_id=11, producer_epoch=0, base_sequence=0, is_transactional=True)
    lg.append_as_leader(txn, 0, NOW)
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 11, 0, 0, NOW), 0, NOW, COORDINATOR)
    headers, records = stored(lg)
    assert [(h.attributes & COMPRESSION_MASK, h.is_control, h.producer_id, h.base_sequence) for h in headers] == [
        (ZSTD, False, 9, 0),
        (ZSTD, False, 11, 0),
        (NONE, True, 11, -1),
    ]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4, 5, 6]
    for h in headers:
        assert h.is_transactional == (h.producer_id == 11)


def test_a_rebuilt_batch_over_max_message_bytes_is_refused(tmp_path):
    props = {"compression.type": "uncompressed", "max.message.bytes": 2000}
    lg = Log(str(tmp_path / "t-0"), LogConfig.from_props(props), now_ms=NOW)
    small = build(100, value=b"x" * 100, codec=GZIP)  # 10 KB of records in a few hundred bytes
    validate_batch(small)
    assert len(small) < 2000
    with pytest.raises(MessageTooLargeError, match="compression.type uncompressed"):
        lg.append_as_leader(small, 0, NOW)
    assert lg.log_end_offset == 0


@pytest.mark.parametrize("bad", ["brotli", "none", "ZSTD", "", 4])
def test_an_unknown_compression_type_is_invalid_config(bad):
    with pytest.raises(InvalidConfigError, match="compression.type"):
        LogConfig.from_props({"compression.type": bad})
    assert LogConfig.from_props({"compression.type": " zstd "}).compression_type == "zstd"


# ---- KIP-390: the topic's level for its codec (Kafka's LogConfig.getCompression) ----------------------------


def compressible(n: int = 400) -> bytes:
    """One uncompressed batch of records that compress well (repetitive text, varied numbers)."""
    b = RecordBatchBuilder(compression_type=NONE, batch_size=1 << 20)
    for i in range(n):
        text = b"order %06d of customer %04d: %s" % (i, i % 97, b"widget gadget sprocket " * (1 + i % 5))
        assert b.append(NOW - 500 + i, b"k%d" % i, text)
    return b.build()


def stored_at(tmp_path, name: str, props: dict) -> tuple[int, list]:
    """The stored size and records of ``compressible()`` appended to a log with ``props``."""
    lg = Log(str(tmp_path / f"{name}-0"), LogConfig.from_props(props), now_ms=NOW)
    lg.append_as_leader(compressible(), 0, NOW)
    headers, records = stored(lg)
    (h,) = headers
    return h.size_in_bytes, [(r.offset, r.key, r.value) for r in records]


@pytest.mark.parametrize(
    "codec, low, high",
    [("gzip", "1", "9"), ("zstd", "1", "19"), ("zstd", "-5", "3"), ("lz4", "1", "9"), ("lz4", "9", "17")],
)
def test_the_topics_compression_level_is_the_one_the_leader_rebuilds_at(tmp_path, codec, low, high):
    key = f"compression.{codec}.level"
    lo_size, lo_records = stored_at(tmp_path, "lo", {"compression.type": codec, key: low})
    hi_size, hi_records = stored_at(tmp_path, "hi", {"compression.type": codec, key: high})
    assert lo_size != hi_size  # the level reached the codec
    assert lo_records == hi_records and len(lo_records) == 400  # and the records read back the same
    # the default level is the codec's default (gzip -1 = deflate 6, lz4 9 = lz4's fast compressor, zstd 3)
    default_size, _ = stored_at(tmp_path, "default", {"compression.type": codec})
    named = {"gzip": "6", "lz4": "9", "zstd": "3"}[codec]
    named_size, _ = stored_at(tmp_path, "named", {"compression.type": codec, key: named})
    assert default_size == named_size


def test_gzip_level_9_stores_fewer_bytes_than_level_1(tmp_path):
    fast, _ = stored_at(tmp_path, "fast", {"compression.type": "gzip", "compression.gzip.level": "1"})
    best, _ = stored_at(tmp_path, "best", {"compression.type": "gzip", "compression.gzip.level": "9"})
    assert best < fast


def test_another_codecs_level_or_a_batch_already_in_the_codec_is_not_rebuilt(tmp_path):
    # only the topic's codec's level counts; a batch in that codec is kept as the producer wrote it
    # (Kafka's LogValidator: inPlaceAssignment when the source codec is the target's, whatever its level)
    plain, _ = stored_at(tmp_path, "a", {"compression.type": "gzip", "compression.zstd.level": "19"})
    default, _ = stored_at(tmp_path, "b", {"compression.type": "gzip"})
    assert plain == default
    lg = Log(str(tmp_path / "c-0"), LogConfig.from_props({"compression.type": "gzip", "compression.gzip.level": "9"}))
    sent = build(50, value=b"y" * 100, codec=GZIP)
    lg.append_as_leader(sent, 0, NOW)
    (h,), _ = stored(lg)
    assert h.size_in_bytes == len(sent)


@pytest.mark.parametrize(
    "key, bad", [("compression.gzip.level", "0"), ("compression.lz4.level", "0"), ("compression.zstd.level", "23")]
)
def test_a_level_out_of_the_codecs_range_is_invalid_config(key, bad):
    with pytest.raises(InvalidConfigError, match=key):
        LogConfig.from_props({key: bad})
    assert LogConfig.from_props({"compression.gzip.level": "-1"}).compression_level(GZIP) == -1
    assert LogConfig().compression_level(SNAPPY) is None
