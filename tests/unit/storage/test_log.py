"""Log, LogSegment, OffsetIndex/TimeIndex and LogConfig: every public method, rolling by each condition,
index and timestamp lookups, truncation, DeleteRecords, flushing, follower continuity, idempotence."""

from __future__ import annotations

import os
import shutil

import pytest

from protocol.errors import (
    CorruptMessageError,
    InvalidConfigError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from storage.control import build_control_batch
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from storage.log import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    Log,
    LogConfig,
    LogOffsetSnapshot,
)
from storage.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    RecordBatchBuilder,
    decode_records,
    iter_batch_headers,
    validate_batch,
)
from storage.segment import KafkaStorageError, LogSegment, log_file_name


def batch(n=3, ts=1000, value=b"v" * 20, key=b"k", base_offset=0, **kw) -> bytes:
    b = RecordBatchBuilder(base_offset=base_offset, **kw)
    for i in range(n):
        b.append(ts + i, key + b"%d" % i if key is not None else None, value)
    return b.build()


def headers(data: bytes):
    return [h for _, h in iter_batch_headers(data)]


def offsets(data: bytes):
    return [r.offset for r in decode_records(data, include_control=True)]


@pytest.fixture
def d(tmp_path):
    return str(tmp_path / "topic-0")


def ckpt(d, name):
    with open(os.path.join(d, name)) as f:
        return int(f.read().split("\n")[1])


# ---------------------------------------------------------------------------------------------- config


def test_config_defaults_and_props_round_trip():
    c = LogConfig()
    assert (c.segment_bytes, c.segment_ms, c.retention_ms, c.retention_bytes) == (1 << 30, 604800000, 604800000, -1)
    assert (c.max_message_bytes, c.cleanup_policy, c.index_interval_bytes) == (1048588, "delete", 4096)
    assert c.delete and not c.compact
    props = c.to_props()
    assert props["unclean.leader.election.enable"] == "false" and props["segment.bytes"] == "1073741824"
    assert LogConfig.from_props(props) == c
    c2 = LogConfig.from_props(
        {
            "segment.bytes": "1048576",
            "internal.segment.bytes": "1024",
            "cleanup.policy": "compact,delete",
            "unclean.leader.election.enable": "TRUE",
            "min.cleanable.dirty.ratio": "0.2",
            "retention.ms": -1,
            "message.timestamp.type": "LogAppendTime",
        }
    )
    assert c2.segment_bytes == 1 << 20 and c2.segment_size == 1024 and c2.compact and c2.delete
    assert c2.unclean_leader_election_enable and c2.min_cleanable_dirty_ratio == 0.2 and c2.retention_ms == -1
    assert LogConfig.from_props({"retention.ms": "5"}, defaults=c2).segment_size == 1024
    assert "internal.segment.bytes" not in props and c2.to_props()["internal.segment.bytes"] == "1024"
    assert LogConfig.from_props(c2.to_props()) == c2


def test_segment_bytes_floor_is_one_mebibyte_and_internal_segment_bytes_overrides_it():
    # KIP-1030 (Kafka 4.1's LogConfig: segment.bytes atLeast(1024 * 1024)); internal.segment.bytes is the tests'
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        LogConfig.from_props({"segment.bytes": str((1 << 20) - 1)})
    assert LogConfig.from_props({"segment.bytes": str(1 << 20)}).segment_size == 1 << 20
    assert LogConfig().segment_size == 1 << 30 and LogConfig().internal_segment_bytes is None
    assert LogConfig(internal_segment_bytes=600).segment_size == 600
    with pytest.raises(InvalidConfigError):
        LogConfig(internal_segment_bytes=13)


@pytest.mark.parametrize(
    "props",
    [
        {"no.such.key": "1"},
        {"segment.bytes": "13"},
        {"segment.bytes": "1048575"},
        {"internal.segment.bytes": "13"},
        {"compression.gzip.level": "0"},
        {"compression.gzip.level": "10"},
        {"compression.lz4.level": "18"},
        {"compression.zstd.level": "23"},
        {"compression.zstd.level": "-131073"},
        {"segment.bytes": "abc"},
        {"segment.bytes": 2**31},
        {"segment.ms": 0},
        {"retention.ms": -2},
        {"cleanup.policy": "remove"},
        {"cleanup.policy": ""},
        {"unclean.leader.election.enable": "yes"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"message.timestamp.type": "Now"},
        {"min.insync.replicas": 0},
        {"flush.messages": True},
        {"segment.index.bytes": 3},
    ],
)
def test_config_rejects_bad_values(props):
    with pytest.raises(InvalidConfigError):
        LogConfig.from_props(props)


def test_config_validates_direct_construction():
    with pytest.raises(InvalidConfigError):
        LogConfig(internal_segment_bytes=-1)


# ---------------------------------------------------------------------------------------------- indexes


def test_offset_index_append_lookup_truncate_reload(tmp_path):
    p = str(tmp_path / "0.index")
    idx = OffsetIndex(p, 100, 8 * 4)
    assert idx.lookup(150) == (100, 0) and idx.entries == 0 and idx.max_entries == 4
    for off, pos in [(105, 10), (110, 20), (120, 30)]:
        idx.append(off, pos)
    with pytest.raises(ValueError):
        idx.append(120, 40)  # not increasing
    assert idx.lookup(99) == (100, 0) and idx.lookup(104) == (100, 0)
    assert idx.lookup(105) == (105, 10) and idx.lookup(119) == (110, 20) and idx.lookup(10**12) == (120, 30)
    assert idx.lookup_position(25) == 20 and idx.lookup_position(5) == 0
    idx.append(130, 40)
    assert idx.is_full
    with pytest.raises(ValueError):
        idx.append(140, 50)
    idx.truncate_to(111)
    assert idx.entries == 2 and idx.last_offset == 110
    idx.flush()
    assert os.path.getsize(p) == 16
    again = OffsetIndex(p, 100, 8 * 4)
    assert [again.entry(i) for i in range(2)] == [(105, 10), (110, 20)]
    again.sanity_check(log_size=21)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(log_size=20)  # a position beyond the log
    with open(p, "ab") as f:
        f.write(b"\x00\x01\x02")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(p, 100, 64).sanity_check(10**6)


def test_offset_index_rejects_unordered_file(tmp_path):
    p = str(tmp_path / "0.index")
    with open(p, "wb") as f:
        f.write(bytes.fromhex("00000005 00000010 00000003 00000020".replace(" ", "")))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(p, 0, 1024).sanity_check(10**6)


def test_time_index_maybe_append_lookup_truncate(tmp_path):
    p = str(tmp_path / "0.timeindex")
    ti = TimeIndex(p, 0, 12 * 3)
    assert ti.last_entry() == (-1, 0) and ti.lookup(5) == (-1, 0)
    assert ti.maybe_append(100, 3)
    assert not ti.maybe_append(100, 5)  # not strictly larger
    assert not ti.maybe_append(50, 6)
    assert ti.maybe_append(200, 9)
    assert ti.lookup(99) == (-1, 0) and ti.lookup(100) == (100, 3) and ti.lookup(250) == (200, 9)
    assert ti.maybe_append(300, 12)
    assert ti.is_full
    with pytest.raises(ValueError):
        ti.maybe_append(400, 15)
    assert ti.maybe_append(400, 15, skip_full_check=True)
    ti.truncate_to(10)
    assert ti.last_entry() == (200, 9) and ti.entries == 2
    ti.flush()
    again = TimeIndex(p, 0, 36)
    assert again.last_entry() == (200, 9)
    again.sanity_check(next_offset=10)
    with pytest.raises(CorruptIndexError):
        again.sanity_check(next_offset=9)


# ---------------------------------------------------------------------------------------------- segment


def seg_batches(seg_base, specs):
    """Concatenated batches with offsets from seg_base, and the (pos, size, last, ts) list for append."""
    out, meta, off = b"", [], seg_base
    for n, ts in specs:
        b = batch(n, ts=ts, base_offset=off)
        meta.append((len(out), len(b), off + n - 1, ts + n - 1))
        out += b
        off += n
    return out, meta


def test_segment_append_read_translate_and_index_interval(tmp_path):
    seg = LogSegment(str(tmp_path), 50, index_interval_bytes=200, max_index_size=1024, created_ms=0)
    assert os.path.exists(seg.index_path) and os.path.exists(seg.time_index_path)
    assert os.path.basename(seg.log_path) == log_file_name(50) == "00000000000000000050.log"
    data, meta = seg_batches(50, [(2, 1000 + 10 * i) for i in range(20)])
    seg.append(data, meta)
    assert seg.size == len(data) and seg.next_offset == 90
    assert 0 < seg.offset_index.entries < 20  # sparse: roughly every 200 bytes
    assert seg.max_timestamp_so_far == 1191 and seg.offset_of_max_timestamp == 89
    for target in range(50, 90):
        pos, h = seg.translate_offset(target)
        assert h.base_offset <= target <= h.last_offset and pos == meta[(target - 50) // 2][0]
    assert seg.translate_offset(90) is None
    got, first, nxt = seg.read(61, 10**6)
    assert first == 60 and nxt == 90 and got == data[meta[5][0] :]
    size = meta[0][1]
    got, first, nxt = seg.read(50, size * 3 + 10)
    assert (first, nxt, len(got)) == (50, 56, size * 3)
    got, first, nxt = seg.read(50, 10, min_one_message=True)
    assert (first, nxt, len(got)) == (50, 52, size)
    assert seg.read(50, 10, min_one_message=False) == (b"", 50, 50)
    got, _, nxt = seg.read(50, 10**6, max_position=meta[3][0])
    assert nxt == 56 and len(got) == meta[3][0]


def test_segment_should_roll_conditions(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=0, max_index_size=8 * 3, created_ms=1000)
    assert not seg.should_roll(10**9, 0, 0, 10**12, 100, 1)  # empty: never
    data, meta = seg_batches(0, [(1, 5000)])
    seg.append(data, meta)
    size = len(data)
    args = dict(segment_bytes=10**6, segment_ms=10**6)
    assert not seg.should_roll(size, 5000, 1, 0, **args)
    assert seg.should_roll(10, 5000, 1, 0, segment_bytes=size + 9, segment_ms=10**6)  # bytes
    assert not seg.should_roll(9, 5000, 1, 0, segment_bytes=size + 9, segment_ms=10**6)
    assert seg.should_roll(10, 5000 + 101, 1, 0, segment_bytes=10**6, segment_ms=100)  # time, by timestamps
    assert not seg.should_roll(10, 5000 + 100, 1, 0, segment_bytes=10**6, segment_ms=100)
    assert seg.should_roll(10, 5000 + 60, 1, 0, segment_bytes=10**6, segment_ms=100, jitter_ms=50)
    assert seg.should_roll(10, 5000, 2**31, 0, **args)  # relative offset overflow
    for i in range(1, 4):  # index interval 0: every batch after the first is indexed
        data, meta = seg_batches(i, [(1, 5000)])
        seg.append(data, meta)
    assert seg.offset_index.is_full and seg.should_roll(10, 5000, 5, 0, **args)
    notime = LogSegment(str(tmp_path / "x"), 0, created_ms=1000) if os.makedirs(tmp_path / "x") is None else None
    data, meta = seg_batches(0, [(1, -1)])
    notime.append(data, meta)
    assert notime.should_roll(10, -1, 1, 1000 + 101, segment_bytes=10**6, segment_ms=100)  # by creation time
    assert not notime.should_roll(10, -1, 1, 1000 + 100, segment_bytes=10**6, segment_ms=100)


def test_segment_truncate_and_recover(tmp_path):
    seg = LogSegment(str(tmp_path), 0, index_interval_bytes=50)
    data, meta = seg_batches(0, [(2, 100 * i) for i in range(10)])
    seg.append(data, meta)
    removed = seg.truncate_to(9)  # batch 8..9 goes whole
    assert removed == len(data) - meta[4][0] and seg.next_offset == 8 and seg.size == meta[4][0]
    assert seg.max_timestamp_so_far == 301 and seg.offset_of_max_timestamp == 7
    assert seg.truncate_to(100) == 0
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 30)  # a torn tail
    seg2 = LogSegment(str(tmp_path), 0, index_interval_bytes=50)
    seen = []
    assert seg2.recover(on_batch=lambda pos, h: seen.append(h.base_offset)) == 30
    assert seen == [0, 2, 4, 6] and seg2.size == meta[4][0] and seg2.next_offset == 8
    assert seg2.translate_offset(5)[1].base_offset == 4
    seg.close()
    seg2.close()


# ---------------------------------------------------------------------------------------------- log: append


def test_leader_append_assigns_offsets_epoch_and_keeps_crc(d):
    lg = Log(d, now_ms=0)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark, lg.latest_epoch) == (0, 0, 0, -1)
    two = batch(3, base_offset=77) + batch(2, ts=2000, base_offset=5)
    info = lg.append_as_leader(two, 4, now_ms=9)
    assert info == (0, 4, 2001, -1, 0, 5, len(two), False)
    assert lg.log_end_offset == 5 and lg.latest_epoch == 4 and lg.epoch_cache.entries() == [(4, 0)]
    lg.update_high_watermark(5)
    data = lg.read(0, 10**6).records
    hs = headers(data)  # iter_batch_headers validates every CRC
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(0, 4), (3, 4)]
    assert data[21 : len(batch(3))] == two[21 : len(batch(3))]  # everything from attributes on is untouched
    assert offsets(data) == [0, 1, 2, 3, 4]
    lg.append_as_leader(batch(1), 6, now_ms=9)
    assert lg.epoch_cache.entries() == [(4, 0), (6, 5)] and lg.end_offset_for_epoch(4) == (4, 5)
    assert lg.append_as_leader(b"", 6, 9) == (-1, -1, -1, -1, 0, 0, 0, False)


def test_leader_append_rejects_bad_input(d):
    lg = Log(d, LogConfig(max_message_bytes=200, internal_segment_bytes=1000), now_ms=0)
    with pytest.raises(MessageTooLargeError):
        lg.append_as_leader(batch(1, value=b"x" * 300), 0, 0)
    with pytest.raises(RecordListTooLargeError):
        lg.append_as_leader(batch(1) * 20, 0, 0)
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(bytes(bad), 0, 0)
    with pytest.raises(CorruptMessageError):
        lg.append_as_leader(batch(1)[:-3], 0, 0)
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(RecordBatchBuilder(is_transactional=True).build(), 0, 0)  # 0 records
    assert lg.log_end_offset == 0 and lg.size_in_bytes == 0


def test_log_append_time_and_compacted_null_keys(d):
    lg = Log(d, LogConfig(message_timestamp_type="LogAppendTime", cleanup_policy="compact"), now_ms=0)
    info = lg.append_as_leader(batch(2, ts=5), 0, now_ms=777)
    assert info.log_append_time == 777 and info.max_timestamp == 777
    lg.update_high_watermark(2)
    h = headers(lg.read(0, 1000).records)[0]
    assert h.timestamp_type == 1 and h.max_timestamp == 777
    assert [r.timestamp for r in decode_records(lg.read(0, 1000).records)] == [777, 777]
    assert lg.fetch_offset_by_timestamp(700) == (0, 777, 0)
    with pytest.raises(InvalidRecordError):
        lg.append_as_leader(batch(1, key=None), 0, 0)


def test_idempotent_duplicates_and_sequence_errors(d):
    lg = Log(d, now_ms=0)
    pb = dict(producer_id=9, producer_epoch=0)
    first = batch(2, base_sequence=0, **pb)
    assert lg.append_as_leader(first, 0, 1)[:2] == (0, 1)
    lg.append_as_leader(batch(1), 0, 1)
    dup = lg.append_as_leader(first, 0, 2)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    assert lg.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceNumberError):
        lg.append_as_leader(batch(1, base_sequence=5, **pb), 0, 3)
    two = batch(1, base_sequence=2, **pb) + batch(2, base_sequence=3, **pb)
    assert lg.append_as_leader(two, 0, 3)[:2] == (3, 5)
    with pytest.raises(OutOfOrderSequenceNumberError):  # batches of one producer must chain
        lg.append_as_leader(batch(1, base_sequence=5, **pb) + batch(1, base_sequence=9, **pb), 0, 3)
    assert lg.producer_state.last_entry(9).last_seq == 4
    lg.close()
    lg = Log(d, now_ms=0)  # state survives a restart (snapshot at close)
    assert lg.append_as_leader(batch(2, base_sequence=3, **pb), 0, 4).duplicate


def test_transactions_last_stable_offset(d):
    lg = Log(d, now_ms=0)
    lg.append_as_leader(batch(2, producer_id=3, producer_epoch=1, base_sequence=0, is_transactional=True), 0, 1)
    lg.append_as_leader(batch(1), 0, 1)
    lg.update_high_watermark(3)
    assert lg.last_stable_offset == 0
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 3, 1, 0, 5), 0, 2, origin="coordinator")
    lg.update_high_watermark(4)
    assert lg.last_stable_offset == 4


@pytest.mark.parametrize("crash", [False, True])
@pytest.mark.parametrize("second_marker", [False, True])
def test_transactional_producer_goes_on_after_delete_records(d, tmp_path, crash, second_marker):
    """Found by the log model: data of a transactional producer, its COMMIT marker, DeleteRecords past both,
    then (maybe another marker, maybe a crash and reopen) the producer's next sequence. Accepted in every
    case: a reopen replays only the markers above the log start, and a marker alone leaves the sequence
    unknown, just as a producer forgotten when the log start passed its data may go on at any sequence."""
    txn = dict(producer_id=3, producer_epoch=0, is_transactional=True)
    lg = Log(d, now_ms=0)
    lg.append_as_leader(batch(1, base_sequence=0, **txn), 0, 1)
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 3, 0, 0, 5), 0, 2, origin="coordinator")
    lg.update_high_watermark(2)
    assert lg.delete_records(1) == 1
    if second_marker:  # a later transaction added the partition but wrote nothing here
        lg.append_as_leader(build_control_batch(CONTROL_ABORT, 3, 0, 0, 6), 0, 3, origin="coordinator")
    if crash:
        copy = str(tmp_path / "crashed")
        shutil.copytree(d, copy)  # what the OS holds, as a process crash leaves it
        lg.close()
        lg = Log(copy, now_ms=0)
    leo = lg.log_end_offset
    info = lg.append_as_leader(batch(2, base_sequence=1, **txn), 0, 7)
    assert (info.first_offset, info.last_offset, info.duplicate) == (leo, leo + 1, False)
    with pytest.raises(OutOfOrderSequenceNumberError):  # from its next batch on, sequences follow on again
        lg.append_as_leader(batch(1, base_sequence=9, **txn), 0, 8)
    lg.close()


def test_fetch_offset_snapshot(d):
    lg = Log(d, now_ms=0)
    assert lg.fetch_offset_snapshot() == LogOffsetSnapshot(0, 0, 0, 0)
    lg.append_as_leader(batch(2, producer_id=3, producer_epoch=1, base_sequence=0, is_transactional=True), 0, 1)
    lg.append_as_leader(batch(3), 0, 1)
    lg.update_high_watermark(4)
    snap = lg.fetch_offset_snapshot()
    assert snap == LogOffsetSnapshot(log_start_offset=0, log_end_offset=5, high_watermark=4, last_stable_offset=0)
    with pytest.raises(AttributeError):  # frozen
        snap.high_watermark = 5
    lg.append_as_leader(build_control_batch(CONTROL_COMMIT, 3, 1, 0, 5), 0, 2, origin="coordinator")
    lg.update_high_watermark(6)
    lg.delete_records(2)
    assert lg.fetch_offset_snapshot() == LogOffsetSnapshot(2, 6, 6, 6)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark, lg.last_stable_offset) == (2, 6, 6, 6)


def test_follower_append_keeps_offsets_and_checks_continuity(d):
    lg = Log(d, now_ms=0)
    b = batch(3, base_offset=0, partition_leader_epoch=2) + batch(2, base_offset=3, partition_leader_epoch=5)
    info = lg.append_as_follower(b, now_ms=0)
    assert (info.first_offset, info.last_offset, lg.log_end_offset) == (0, 4, 5)
    assert lg.epoch_cache.entries() == [(2, 0), (5, 3)]
    with pytest.raises(UnexpectedAppendOffsetError):
        lg.append_as_follower(batch(1, base_offset=7))
    with pytest.raises(UnexpectedAppendOffsetError):
        lg.append_as_follower(batch(1, base_offset=4))
    with pytest.raises(UnexpectedAppendOffsetError):  # second batch does not continue the first
        lg.append_as_follower(batch(1, base_offset=5) + batch(1, base_offset=9))
    assert lg.log_end_offset == 5
    lg.update_high_watermark(5)
    assert lg.read(0, 10**6).records == b  # byte for byte
    compact = Log(d + "c", LogConfig(cleanup_policy="compact"), now_ms=0)
    compact.append_as_follower(batch(1, base_offset=0) + batch(1, base_offset=4))  # a cleaned leader's gap
    compact.append_as_follower(batch(1, base_offset=2**31 + 10), now_ms=0)  # rolls: not relative-able
    assert compact.log_end_offset == 2**31 + 11 and [s.base_offset for s in compact.segments] == [0, 2**31 + 10]


# ---------------------------------------------------------------------------------------------- rolling


def test_roll_by_segment_bytes_and_snapshots(d):
    size = len(batch(2))
    lg = Log(d, LogConfig(internal_segment_bytes=size * 3), now_ms=0)
    for _i in range(10):
        lg.append_as_leader(batch(2), 0, 0)
    assert [s.base_offset for s in lg.segments] == [0, 6, 12, 18]
    assert all(s.size <= size * 3 for s in lg.segments)
    snaps = sorted(n for n in os.listdir(d) if n.endswith(".snapshot"))
    assert snaps == [f"{o:020d}.snapshot" for o in (6, 12, 18)]


def test_roll_by_segment_ms_and_index_full_and_explicit(d):
    lg = Log(d, LogConfig(segment_ms=100), now_ms=0)
    lg.append_as_leader(batch(1, ts=1000), 0, 0)
    lg.append_as_leader(batch(1, ts=1100), 0, 0)
    lg.append_as_leader(batch(1, ts=1101), 0, 0)  # 1101 - 1000 > 100
    assert [s.base_offset for s in lg.segments] == [0, 2]
    lg2 = Log(d + "i", LogConfig(segment_index_bytes=24, index_interval_bytes=0), now_ms=0)
    for i in range(6):  # time index: 2 entries of 12 bytes, full after the 3rd batch
        lg2.append_as_leader(batch(1, ts=i), 0, 0)
    assert [s.base_offset for s in lg2.segments] == [0, 3] and lg2.segments[0].time_index.entries == 2
    seg = lg2.roll()
    assert seg.base_offset == 6 and lg2.roll() is seg  # an empty active segment is reused


# ---------------------------------------------------------------------------------------------- read


def test_read_limits_and_ranges(d):
    size = len(batch(2))
    lg = Log(d, LogConfig(internal_segment_bytes=size * 4, index_interval_bytes=size), now_ms=0)
    for i in range(20):
        lg.append_as_leader(batch(2, ts=1000 + i), 0, 0)
    assert len(lg.segments) == 5
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(41, 100)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 100)
    assert lg.read(40, 100) == (b"", 40, 40)
    r = lg.read(3, size * 3 + 5)
    assert (r.first_offset, r.next_offset, len(r.records)) == (2, 8, size * 3) and offsets(r.records) == list(
        range(2, 8)
    )
    r = lg.read(7, 10**6)  # stays in one segment
    assert (r.first_offset, r.next_offset) == (6, 8)
    r = lg.read(8, 1)
    assert (r.first_offset, r.next_offset, len(r.records)) == (8, 10, size)
    assert lg.read(8, 1, min_one_message=False) == (b"", 8, 8)
    assert lg.read(8, 10**6, max_offset=8) == (b"", 8, 8)
    r = lg.read(8, 10**6, max_offset=13)  # batch 12..13 holds the bound: excluded
    assert (r.first_offset, r.next_offset) == (8, 12)
    r = lg.read(8, 10**6, max_offset=16)  # bound at a segment boundary
    assert (r.first_offset, r.next_offset) == (8, 16)
    got, off = [], 0
    while off < lg.log_end_offset:
        r = lg.read(off, size * 2 + 1)
        got += offsets(r.records)
        off = r.next_offset
    assert got == list(range(40))


# ---------------------------------------------------------------------------------------------- timestamps


def test_fetch_offset_by_timestamp(d):
    size = len(batch(3))
    lg = Log(d, LogConfig(internal_segment_bytes=size * 3, index_interval_bytes=1), now_ms=0)
    assert lg.fetch_offset_by_timestamp(-3) is None and lg.fetch_offset_by_timestamp(5) is None
    tss = [100, 300, 200, 600, 500, 900, 700, 800]
    for i, ts in enumerate(tss):
        lg.append_as_leader(batch(3, ts=ts), i // 3, 0)  # records ts, ts+1, ts+2
    assert lg.fetch_offset_by_timestamp(-2) == (0, -1, 0)
    assert lg.fetch_offset_by_timestamp(-1) == (24, -1, 2)
    assert lg.fetch_offset_by_timestamp(-3) == (17, 902, 1)
    assert lg.fetch_offset_by_timestamp(0) == (0, 100, 0)
    assert lg.fetch_offset_by_timestamp(101) == (1, 101, 0)
    assert lg.fetch_offset_by_timestamp(250) == (3, 300, 0)
    assert lg.fetch_offset_by_timestamp(201) == (3, 300, 0)
    assert lg.fetch_offset_by_timestamp(650) == (15, 900, 1)
    assert lg.fetch_offset_by_timestamp(903) is None
    assert lg.fetch_offset_by_timestamp(-7) is None
    lg.update_high_watermark(24)
    lg.delete_records(4)
    assert lg.fetch_offset_by_timestamp(0) == (4, 301, 0)
    assert lg.fetch_offset_by_timestamp(-2) == (4, -1, 0)


# ---------------------------------------------------------------------------------------------- truncation


def test_truncate_to(d):
    size = len(batch(2))
    lg = Log(d, LogConfig(internal_segment_bytes=size * 2), now_ms=0)
    for e in range(6):
        lg.append_as_leader(batch(2, producer_id=1, producer_epoch=0, base_sequence=2 * e), e, 0)
    lg.update_high_watermark(12)
    assert [s.base_offset for s in lg.segments] == [0, 4, 8]
    assert not lg.truncate_to(12) and not lg.truncate_to(50)
    assert lg.truncate_to(7)  # batch 6..7 goes whole, segment 8 deleted
    assert (lg.log_end_offset, lg.high_watermark, lg.recovery_point) == (6, 6, 0)
    assert [s.base_offset for s in lg.segments] == [0, 4]
    assert lg.latest_epoch == 2 and lg.epoch_cache.entries()[-1] == (2, 4)
    assert lg.producer_state.last_entry(1).last_seq == 5
    lg.append_as_leader(batch(2, producer_id=1, producer_epoch=0, base_sequence=6), 7, 0)  # state rolled back
    assert lg.log_end_offset == 8
    assert lg.truncate_to(4)  # a segment boundary: segment 4 stays, empty
    assert lg.log_end_offset == 4 and [s.base_offset for s in lg.segments] == [0, 4]
    assert ckpt(d, RECOVERY_POINT_FILE) <= 4
    lg.close()
    lg = Log(d, LogConfig(internal_segment_bytes=size * 2), now_ms=0)
    assert lg.log_end_offset == 4 and offsets(lg.read(0, 10**6).records) == [0, 1, 2, 3]


def test_truncate_fully_and_start_at(d):
    lg = Log(d, now_ms=0)
    lg.append_as_leader(batch(5), 3, 0)
    lg.update_high_watermark(5)
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark, lg.latest_epoch) == (100, 100, 100, -1)
    assert [s.base_offset for s in lg.segments] == [100]
    lg.append_as_follower(batch(2, base_offset=100, partition_leader_epoch=4))
    lg.close()
    lg = Log(d, now_ms=0)
    assert (lg.log_start_offset, lg.log_end_offset, lg.latest_epoch) == (100, 102, 4)
    assert lg.truncate_to(50) and (lg.log_start_offset, lg.log_end_offset) == (50, 50)  # below the first segment


# ---------------------------------------------------------------------------------------------- deletion and retention


def test_delete_records(d):
    size = len(batch(2))
    lg = Log(d, LogConfig(internal_segment_bytes=size * 2), now_ms=0)
    for _ in range(6):
        lg.append_as_leader(batch(2), 0, 0)
    with pytest.raises(OffsetOutOfRangeError):
        lg.delete_records(1)  # above the high watermark 0
    lg.update_high_watermark(12)
    assert lg.delete_records(5) == 5
    assert [s.base_offset for s in lg.segments] == [4, 8] and ckpt(d, LOG_START_OFFSET_FILE) == 5
    assert lg.delete_records(2) == 5  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(4, 100)
    assert lg.read(5, 10**6).first_offset == 4  # the batch holding 5, whole
    assert lg.delete_records(12) == 12 and [s.base_offset for s in lg.segments] == [8]  # never the active one
    lg.close()
    lg = Log(d, LogConfig(internal_segment_bytes=size * 2), now_ms=0)
    assert lg.log_start_offset == 12 and lg.log_end_offset == 12


def test_retention_by_time_bytes_and_high_watermark(d):
    size = len(batch(2))
    cfg = LogConfig(internal_segment_bytes=size * 2, retention_ms=1000)
    lg = Log(d, cfg, now_ms=0)
    for i in range(8):
        lg.append_as_leader(batch(2, ts=10_000 + 1000 * i), 0, 0)  # segment k: max ts 11_001 + 2000 k
    assert [s.base_offset for s in lg.segments] == [0, 4, 8, 12]
    assert lg.delete_old_segments(now_ms=14_500) == 0  # nothing below the high watermark
    lg.update_high_watermark(8)
    assert lg.delete_old_segments(now_ms=14_500) == 2 and lg.log_start_offset == 8  # 11_001, 13_001
    lg.update_high_watermark(16)
    assert lg.delete_old_segments(now_ms=14_500) == 0
    assert lg.delete_old_segments(now_ms=10**9) == 2  # all old: the active one too, after a roll
    assert [s.base_offset for s in lg.segments] == [16] and lg.log_start_offset == 16 and lg.log_end_offset == 16
    lg.update_config(LogConfig(internal_segment_bytes=size * 2, retention_bytes=size * 3, retention_ms=-1))
    for _ in range(7):
        lg.append_as_leader(batch(2, ts=0), 0, 0)
    lg.update_high_watermark(30)
    assert lg.delete_old_segments(now_ms=10**9) == 2  # 7 batches, keep <= 3: whole segments, not the active
    assert lg.size_in_bytes == size * 3 and [s.base_offset for s in lg.segments] == [24, 28]
    lg.update_config(
        LogConfig(internal_segment_bytes=size * 2, retention_bytes=0, retention_ms=-1, cleanup_policy="compact")
    )
    assert lg.delete_old_segments(now_ms=10**9) == 0  # compact only: no size/time retention


# ---------------------------------------------------------------------------------------------- flushing, checkpoints, reopen


def test_flush_recovery_point_and_checkpoints(d):
    lg = Log(d, LogConfig(flush_messages=4), now_ms=0)
    assert lg.recovery_point == 0
    lg.append_as_leader(batch(3), 0, 0)
    assert lg.recovery_point == 0
    lg.append_as_leader(batch(1), 0, 0)  # 4 unflushed messages: flush
    assert lg.recovery_point == 4
    lg.update_high_watermark(4)
    lg.append_as_leader(batch(1), 0, 0)
    lg.flush()
    assert lg.recovery_point == 5
    assert (ckpt(d, RECOVERY_POINT_FILE), ckpt(d, HIGH_WATERMARK_FILE), ckpt(d, LOG_START_OFFSET_FILE)) == (5, 4, 0)
    lg2 = Log(d + "t", LogConfig(flush_ms=50), now_ms=0)
    lg2.append_as_leader(batch(1), 0, now_ms=10)
    assert lg2.recovery_point == 0 and not lg2.maybe_flush(40)
    lg2.append_as_leader(batch(1), 0, now_ms=60)  # 60 ms since the last flush
    assert lg2.recovery_point == 2
    lg2.append_as_leader(batch(1), 0, now_ms=70)
    assert lg2.maybe_flush(200) and lg2.recovery_point == 3


def test_close_and_reopen_is_clean(d):
    size = len(batch(2))
    cfg = LogConfig(internal_segment_bytes=size * 3, index_interval_bytes=1)
    lg = Log(d, cfg, now_ms=0)
    for i in range(10):
        lg.append_as_leader(batch(2, ts=100 * i), i // 4, 0)
    lg.update_high_watermark(15)
    before = lg.read(0, 10**6, max_offset=20).records + lg.read(6, 10**6).records
    maxes = [s.max_timestamp_so_far for s in lg.segments]
    lg.close()
    assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    with pytest.raises(KafkaStorageError):
        lg.read(0, 10)
    lg = Log(d, cfg, now_ms=0)
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    assert (lg.log_end_offset, lg.high_watermark, lg.recovery_point, lg.latest_epoch) == (20, 15, 20, 2)
    assert lg.read(0, 10**6, max_offset=20).records + lg.read(6, 10**6).records == before
    assert [s.max_timestamp_so_far for s in lg.segments] == maxes  # from the time indexes' last entries
    lg.append_as_leader(batch(2), 2, 0)
    assert lg.log_end_offset == 22
    lg.delete()
    assert not os.path.exists(d)


def test_compaction_through_replace_segments(d):
    size = len(batch(1, key=b"a"))
    cfg = LogConfig(internal_segment_bytes=size * 4, cleanup_policy="compact", index_interval_bytes=1)
    lg = Log(d, cfg, now_ms=0)
    for i in range(16):
        lg.append_as_leader(batch(1, key=b"key%d" % (i % 2), ts=i, value=b"v%02d" % i), 0, 0)
    lg.update_high_watermark(16)
    before = lg.size_in_bytes
    lg.compact(now_ms=100)
    assert lg.size_in_bytes < before
    live = decode_records(b"".join(lg.read(s.base_offset, 10**6).records for s in lg.segments))
    latest = {}
    for r in live:
        latest[r.key] = r.value
    assert latest == {b"key00": b"v14", b"key10": b"v15"}
    assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]
    lg.close()
    lg = Log(d, cfg, now_ms=0)
    assert lg.log_end_offset == 16 and lg.fetch_offset_by_timestamp(15)[0] == 15


def test_validate_batch_of_read_data_after_offset_rewrite(d):
    lg = Log(d, now_ms=0)
    for _ in range(3):
        lg.append_as_leader(batch(2, base_offset=123456), 1, 0)
    lg.update_high_watermark(6)
    data = lg.read(0, 10**6).records
    pos = 0
    for expected in (0, 2, 4):
        h = validate_batch(data, pos)
        assert h.base_offset == expected
        pos += h.size_in_bytes
