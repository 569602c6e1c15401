"""storage/log_validator.py (Kafka's LogValidator) through ``Log.append_as_leader``.

Every malformed batch here carries a valid CRC (the records were tampered with, then the CRC recomputed),
so only a record-level check can refuse it. For each: the leader refuses the whole request with Kafka's
error class and a message naming the batch, the record and the problem; nothing is appended (a good batch
in front of the bad one in the same request is not written either); what was there before is still
readable. Then: what a client may not send (control batches, LogAppendTime batches on a LogAppendTime topic,
an idempotent batch without a sequence), compacted topics without keys, timestamp bounds, the header's
MaxTimestamp corrected in place (as Kafka's ``setMaxTimestamp``), and the coordinator origin.
"""

from __future__ import annotations

import pytest
from batch_forge import COMPACT, HOUR, MALFORMED, NOW, build, enc_record, records_body, set_header, wrap

from protocol.errors import InvalidConfigError, InvalidRecordError, InvalidTimestampError
from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.records import (
    CONTROL_COMMIT,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    decode_records,
    iter_batch_headers,
    validate_batch,
)


@pytest.fixture
def d(tmp_path):
    return str(tmp_path / "topic-0")


def values(lg: Log) -> list:
    lg.update_high_watermark(lg.log_end_offset)
    return [r.value for r in decode_records(lg.read(0, 1 << 22).records)]


@pytest.mark.parametrize("name,make,props,error,fragment", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_batch_refuses_the_whole_request(d, name, make, props, error, fragment):
    lg = Log(d, LogConfig.from_props(props), now_ms=NOW)
    lg.append_as_leader(build(2, value=b"before"), 0, NOW)
    leo, size = lg.log_end_offset, lg.size_in_bytes
    bad = make()
    validate_batch(bad)  # the frame and CRC are fine: only the records are wrong
    first = build(1, value=b"same request")
    with pytest.raises(error) as info:
        lg.append_as_leader(first + bad, 0, NOW)
    msg = info.value.message
    assert fragment in msg and f"batch 1 (at byte {len(first)})" in msg, msg
    assert (lg.log_end_offset, lg.size_in_bytes) == (leo, size)  # nothing written, not even the good batch
    assert values(lg) == [b"before", b"before"]  # earlier records still decode
    lg.append_as_leader(build(1, value=b"after"), 0, NOW)  # and the log goes on
    assert values(lg) == [b"before", b"before", b"after"]


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_well_formed_batches_of_every_codec_are_accepted(d, codec):
    lg = Log(d, LogConfig.from_props(COMPACT), now_ms=NOW)
    hdrs = [("trace", b"\x00\x01"), ("é", None)]
    b = wrap(
        b"".join(enc_record(i - 1, i, b"k%d" % i, None if i == 2 else b"v" * i, hdrs[: i % 3]) for i in range(40)),
        40,
        codec,
        max_ts=NOW - 1000 + 38,
    )
    info = lg.append_as_leader(b, 0, NOW)
    assert (info.first_offset, info.last_offset, info.max_timestamp) == (0, 39, NOW - 1000 + 38)
    lg.update_high_watermark(40)
    got = decode_records(lg.read(0, 1 << 20).records)
    assert [r.offset for r in got] == list(range(40)) and got[0].timestamp == NOW - 1001


def test_wrong_max_timestamp_is_corrected_in_place(d):
    """Kafka's ``setMaxTimestamp``: the leader trusts the records, fixes the header and the CRC."""
    lg = Log(d, now_ms=NOW)
    b = set_header(build(3, ts=NOW - 500), max_timestamp=NOW - 10_000_000)
    info = lg.append_as_leader(b, 0, NOW)
    assert info.max_timestamp == NOW - 498
    lg.update_high_watermark(3)
    data = lg.read(0, 1 << 20).records
    (h,) = [h for _, h in iter_batch_headers(data)]  # CRC checked
    assert h.max_timestamp == NOW - 498
    assert lg.fetch_offset_by_timestamp(NOW - 499) == (1, NOW - 499, 0)


def test_timestamp_bounds_follow_the_config(d):
    lg = Log(
        d,
        LogConfig.from_props({"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 0}),
        now_ms=NOW,
    )
    lg.append_as_leader(build(1, ts=NOW - 1000), 0, NOW)  # exactly at the bounds: accepted
    lg.append_as_leader(build(1, ts=NOW), 0, NOW)
    lg.append_as_leader(build(1, ts=-1), 0, NOW)  # NO_TIMESTAMP is not checked (Kafka)
    with pytest.raises(InvalidTimestampError, match=rf"record 1: Timestamp {NOW - 1001} .*\[{NOW - 1000}, {NOW}\]"):
        lg.append_as_leader(
            wrap(enc_record(0, 0, b"a", b"v") + enc_record(-1001, 1, b"b", b"v"), 2, base_ts=NOW), 0, NOW
        )
    with pytest.raises(InvalidTimestampError, match="record 0"):
        lg.append_as_leader(build(1, ts=NOW + 1), 0, NOW)
    # a LogAppendTime batch in a CreateTime topic: its records carry MaxTimestamp, which is checked
    with pytest.raises(InvalidTimestampError):
        lg.append_as_leader(set_header(build(1, ts=NOW, timestamp_type=1), max_timestamp=NOW + 5), 0, NOW)
    lg.append_as_leader(build(1, ts=NOW, timestamp_type=1), 0, NOW)
    assert lg.log_end_offset == 4
    assert LogConfig().message_timestamp_before_max_ms == 2**63 - 1
    assert LogConfig().message_timestamp_after_max_ms == HOUR
    assert LogConfig().to_props()["message.timestamp.after.max.ms"] == "3600000"
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props({"message.timestamp.before.max.ms": -1})


def test_log_append_time_topic_ignores_the_bounds_and_stamps(d):
    lg = Log(
        d,
        LogConfig.from_props({"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": 0}),
        now_ms=NOW,
    )
    info = lg.append_as_leader(build(2, ts=NOW + 10 * HOUR), 0, NOW)
    assert info.log_append_time == NOW and info.max_timestamp == NOW


def test_coordinator_origin_may_write_control_batches(d):
    """Transaction markers come from the transaction coordinator (Kafka's AppendOrigin.COORDINATOR)."""
    lg = Log(d, now_ms=NOW)
    lg.append_as_leader(build(2, producer_id=3, producer_epoch=1, base_sequence=0, is_transactional=True), 0, NOW)
    with pytest.raises(InvalidRecordError, match="control"):
        lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 3, 1, 0, NOW), 0, NOW)
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 3, 1, 0, NOW), 0, NOW, origin="coordinator")
    lg.update_high_watermark(3)
    assert lg.last_stable_offset == 3
    with pytest.raises(ValueError):
        lg.append_as_leader(build(1), 0, NOW, origin="replication")  # followers use append_as_follower


def test_follower_appends_are_not_revalidated(d):
    """The leader validated: a follower keeps the leader's bytes (here, a far-future timestamp the leader
    accepted under its own config)."""
    lg = Log(d, now_ms=NOW)
    lg.append_as_follower(build(2, ts=NOW + 10 * HOUR))
    assert lg.log_end_offset == 2


def test_records_body_helper_matches_builder():
    assert records_body(build(1, key=None, value=b"x")) == enc_record(0, 0, None, b"x")


@pytest.mark.parametrize("accelerated", [True, False], ids=["c-walk", "python-walk"])
@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_every_bad_record_of_a_batch_is_named_kip_467(d, monkeypatch, accelerated, codec):
    """Kafka's processRecordErrors: the walk goes on past a bad record, and the error carries every bad
    record's index in the batch (Produce v8+ answers them as record_errors), INVALID_RECORD for keys."""
    from protocol.errors import InvalidRecordsError, InvalidTimestampsError
    from storage import log_validator

    if not accelerated:
        monkeypatch.setattr(log_validator, "_c_walk", None)
    bad = {3, 17, 18, 42, 99}
    body = b"".join(enc_record(i, i, None if i in bad else b"k%d" % i, b"v%d" % i) for i in range(100))
    lg = Log(d, LogConfig.from_props(COMPACT), now_ms=NOW)
    with pytest.raises(InvalidRecordsError) as info:
        lg.append_as_leader(wrap(body, 100, codec), 0, NOW)
    exc = info.value
    assert exc.code == 87 and [i for i, _ in exc.record_errors] == sorted(bad)
    assert all("without a key" in m for _, m in exc.record_errors)
    assert "5 record errors" in exc.message and "record 3:" in exc.message and "record 42" not in exc.message
    assert lg.log_end_offset == 0
    # a timestamp out of range among them: INVALID_TIMESTAMP, still every record named
    recs = [enc_record(i, i, None if i == 2 else b"k", b"v") for i in range(5)]
    recs[4] = enc_record(3 * HOUR, 4, b"k", b"v")
    with pytest.raises(InvalidTimestampsError) as info:
        lg.append_as_leader(wrap(b"".join(recs), 5, codec), 0, NOW)
    assert info.value.code == 32 and [i for i, _ in info.value.record_errors] == [2, 4]
    assert "out of range" in info.value.record_errors[1][1] and "without a key" in info.value.record_errors[0][1]
    # a malformed record after a bad one still refuses the batch as malformed, with no record errors
    tail = enc_record(5, 7, b"k", b"v")
    with pytest.raises(InvalidRecordError) as info:
        lg.append_as_leader(wrap(b"".join(recs[:4]) + tail, 5, codec), 0, NOW)
    assert not isinstance(info.value, InvalidRecordsError) and "offset delta 7" in info.value.message
