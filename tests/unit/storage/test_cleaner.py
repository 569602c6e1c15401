"""Log compaction (storage/cleaner.py) through the real Log: correctness against a dict model, offsets,
producer and transaction rules, tombstone horizons, grouping, and crashes in the middle of a swap."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from protocol.errors import CorruptMessageError
from storage import cleaner, cleaner_records
from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    RecordBatch,
    RecordBatchBuilder,
)

T0 = 1_000_000


def config(**props):
    base = {"cleanup.policy": "compact", "delete.retention.ms": 1000, "segment.bytes": 1 << 20}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return LogConfig.from_props(base)


def batch(records, pid=-1, epoch=-1, seq=-1, txn=False, compression=NONE, ts=T0, headers=()):
    b = RecordBatchBuilder(
        compression_type=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        batch_size=1 << 30,
    )
    for key, value in records:
        assert b.append(ts, key, value, headers)
    return b.build()


def put(log, records, now=T0, **kw):
    return log.append_as_leader(batch(records, **kw), leader_epoch=0, now_ms=now)


def marker(log, kind, pid, epoch=0, now=T0):
    return log.append_as_leader(
        build_control_batch(kind, pid, epoch, 0, now), leader_epoch=0, now_ms=now, origin="coordinator"
    )


def batches(log):
    return [(h, data) for seg in log.segments for _, h, data in seg.iter_batches()]


def records(log, include_control=False):
    out = []
    for h, data in batches(log):
        if h.is_control and not include_control:
            continue
        out.extend(RecordBatch(data, 0, header=h).records())
    return out


def ready(log):
    """Roll so everything written is in non-active segments, and let the HW cover it."""
    log.roll()
    log.update_high_watermark(log.log_end_offset)


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "topic-0")


def test_delete_policy_is_a_noop(logdir):
    log = Log(logdir, LogConfig(), now_ms=T0)
    put(log, [(b"a", b"1"), (b"a", b"2")])
    ready(log)
    stats = log.compact(T0)
    assert stats.records_read == 0 and len(records(log)) == 2


def test_latest_per_key_with_offsets_preserved(logdir):
    log = Log(logdir, config(), now_ms=T0)
    put(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")])  # 0 1 2
    log.roll()
    put(log, [(b"a", b"2"), (b"b", b"2")])  # 3 4
    put(log, [(b"d", b"1")])  # 5
    log.roll()
    put(log, [(b"a", b"3")])  # 6 (active after ready? no: rolled)
    ready(log)
    put(log, [(b"b", b"3")])  # 7, active segment: never cleaned
    stats = log.compact(T0)
    got = [(r.offset, r.key, r.value) for r in records(log)]
    assert got == [(2, b"c", b"1"), (4, b"b", b"2"), (5, b"d", b"1"), (6, b"a", b"3"), (7, b"b", b"3")]
    assert (stats.records_read, stats.records_kept, stats.distinct_keys) == (7, 4, 4)
    assert stats.first_offset == 0 and stats.end_offset == 7
    assert stats.bytes_after < stats.bytes_read
    assert log.log_end_offset == 8
    # the first batch keeps its offset range 0..2 (base offset + last offset delta) with one record
    h0 = batches(log)[0][0]
    assert (h0.base_offset, h0.last_offset, h0.records_count) == (0, 2, 1)
    # consumers read through the Log as before; reopening sees the same
    assert log.read(0, 1 << 20).first_offset == 0
    log.close()
    log = Log(logdir, config(), now_ms=T0)
    assert [(r.offset, r.key, r.value) for r in records(log)] == got
    log.close()


def test_nothing_above_the_high_watermark_or_lag_is_cleaned(logdir):
    log = Log(logdir, config(min_compaction_lag_ms=5000), now_ms=T0)
    put(log, [(b"a", b"1"), (b"a", b"2")])
    log.roll()
    put(log, [(b"a", b"3")])
    log.roll()
    assert log.compact(T0 + 10_000).segments_cleaned == 0  # HW still 0
    log.update_high_watermark(2)
    assert log.compact(T0 + 10_000).segments_cleaned == 1  # only the segment wholly below the HW
    assert [r.offset for r in records(log)] == [1, 2]
    put(log, [(b"a", b"4")], ts=T0 + 20_000)
    ready(log)
    stats = log.compact(T0 + 21_000)  # the segment holding offset 3 is younger than the lag
    assert stats.end_offset == 3
    assert [r.offset for r in records(log)] == [2, 3]
    assert log.compact(T0 + 25_000).end_offset == 4
    assert [r.offset for r in records(log)] == [3]
    log.close()


def test_tombstones_get_a_horizon_then_go(logdir):
    log = Log(logdir, config(delete_retention_ms=1000), now_ms=T0)
    put(log, [(b"a", b"1"), (b"b", b"1")])
    put(log, [(b"a", None)])  # tombstone for a
    ready(log)
    s1 = log.compact(T0 + 100)
    got = [(r.offset, r.key, r.value) for r in records(log)]
    assert got == [(1, b"b", b"1"), (2, b"a", None)]
    tomb = [h for h, _ in batches(log) if h.base_offset == 2][0]
    assert tomb.has_delete_horizon and tomb.delete_horizon_ms == T0 + 1100
    assert records(log)[1].timestamp == T0  # the record timestamp survives the new base timestamp
    assert s1.tombstones_removed == 0
    assert log.compact(T0 + 1099).tombstones_removed == 0
    assert [r.offset for r in records(log)] == [1, 2]
    s3 = log.compact(T0 + 1100)
    assert s3.tombstones_removed == 1
    assert [(r.offset, r.key, r.value) for r in records(log)] == [(1, b"b", b"1")]
    log.close()


def test_null_keys_are_removed(logdir):
    log = Log(logdir, LogConfig(), now_ms=T0)  # delete policy accepts null keys
    put(log, [(None, b"x"), (b"a", b"1"), (None, b"y")])
    log.close()
    log = Log(logdir, config(), now_ms=T0)
    ready(log)
    stats = log.compact(T0)
    assert stats.null_key_records_removed == 2
    assert [(r.offset, r.key) for r in records(log)] == [(1, b"a")]
    log.close()


@pytest.mark.parametrize("compression", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_rebuilt_batches_keep_every_batch_field(logdir, compression):
    log = Log(logdir, config(), now_ms=T0)
    hdrs = (("h1", b"v"), ("h2", None))
    put(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], compression=compression, headers=hdrs, ts=T0 + 5)
    put(log, [(b"b", b"2")])
    ready(log)
    before = batches(log)[0][0]
    log.compact(T0)
    after, data = batches(log)[0]
    assert after.records_count == 2
    for f in (
        "base_offset",
        "last_offset_delta",
        "partition_leader_epoch",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "compression_type",
        "timestamp_type",
        "is_transactional",
        "is_control",
    ):
        assert getattr(after, f) == getattr(before, f), f
    recs = RecordBatch(data, 0).records()  # validates the CRC
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs] == [
        (0, b"a", b"1", hdrs, T0 + 5),
        (2, b"c", b"1", hdrs, T0 + 5),
    ]
    log.close()


def test_log_append_time_survives(logdir):
    log = Log(logdir, config(message_timestamp_type="LogAppendTime"), now_ms=T0)
    log.append_as_leader(batch([(b"a", b"1"), (b"b", b"1")]), leader_epoch=0, now_ms=T0 + 77)
    put(log, [(b"a", b"2")], now=T0 + 99)
    ready(log)
    log.compact(T0 + 100)
    h, data = batches(log)[0]
    assert h.timestamp_type == 1 and h.max_timestamp == T0 + 77
    assert [(r.key, r.timestamp) for r in RecordBatch(data, 0)] == [(b"b", T0 + 77)]
    log.close()


def test_last_batch_of_a_producer_is_kept_empty(logdir):
    log = Log(logdir, config(), now_ms=T0)
    put(log, [(b"a", b"1"), (b"b", b"1")], pid=5, epoch=0, seq=0)  # 0-1, producer 5 seq 0-1
    put(log, [(b"a", b"2"), (b"b", b"2")])  # 2-3 supersede both
    put(log, [(b"c", b"1")], pid=6, epoch=0, seq=0)  # 4
    put(log, [(b"c", b"2")], pid=6, epoch=0, seq=1)  # 5: producer 6's last batch
    ready(log)
    log.compact(T0)
    hs = [h for h, _ in batches(log)]
    assert [(h.base_offset, h.last_offset, h.records_count, h.producer_id) for h in hs] == [
        (0, 1, 0, 5),
        (2, 3, 2, -1),
        (5, 5, 1, 6),
    ]
    assert (hs[0].base_sequence, hs[0].last_sequence, hs[0].producer_epoch) == (0, 1, 0)
    # idempotence survives: a retry of producer 5's batch is still a duplicate
    dup = put(log, [(b"a", b"1"), (b"b", b"1")], pid=5, epoch=0, seq=0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)
    log.close()
    for n in os.listdir(logdir):  # rebuild producer state from the compacted log alone
        if n.endswith(".snapshot"):
            os.remove(os.path.join(logdir, n))
    log = Log(logdir, config(), now_ms=T0)
    assert log.producer_state.last_entry(5).last_seq == 1
    assert put(log, [(b"z", b"1")], pid=5, epoch=0, seq=2).first_offset == 6
    log.close()


def test_transactions(logdir):
    log = Log(logdir, config(delete_retention_ms=1000), now_ms=T0)
    put(log, [(b"a", b"0"), (b"x", b"0")])  # 0-1
    put(log, [(b"a", b"aborted")], pid=7, epoch=0, seq=0, txn=True)  # 2
    put(log, [(b"b", b"committed")], pid=8, epoch=0, seq=0, txn=True)  # 3
    marker(log, CONTROL_ABORT, 7)  # 4
    put(log, [(b"x", b"1")])  # 5
    ready(log)
    put(log, [(b"c", b"1")])  # 6 (active)
    marker(log, CONTROL_COMMIT, 8)  # 7: in the active segment
    log.update_high_watermark(log.log_end_offset)
    stats = log.compact(T0)
    assert stats.aborted_records_removed == 1
    data = [(r.offset, r.key, r.value) for r in records(log)]
    assert data == [(0, b"a", b"0"), (3, b"b", b"committed"), (5, b"x", b"1"), (6, b"c", b"1")]
    hs = {h.base_offset: h for h, _ in batches(log)}
    assert hs[2].records_count == 0 and hs[2].producer_id == 7  # producer 7's last batch, emptied
    assert 4 in hs and hs[4].is_control  # the abort marker stays while a batch of its txn was seen
    log.close()


def test_open_transaction_blocks_cleaning(logdir):
    log = Log(logdir, config(), now_ms=T0)
    put(log, [(b"a", b"0")])
    put(log, [(b"a", b"1")], pid=9, epoch=0, seq=0, txn=True)  # open: first unstable offset 1
    put(log, [(b"a", b"2")])
    ready(log)
    assert log.last_stable_offset == 1
    assert log.compact(T0).segments_cleaned == 0
    marker(log, CONTROL_COMMIT, 9)
    ready(log)
    log.compact(T0)
    assert [(r.offset, r.value) for r in records(log)] == [(2, b"2")]
    log.close()


def test_small_segments_are_grouped_and_unchanged_ones_left_alone(logdir):
    log = Log(logdir, config(internal_segment_bytes=4096), now_ms=T0)
    for i in range(40):
        put(log, [(b"k%d" % (i % 4), b"v" * 300)])
        if i % 2:
            log.roll()
    ready(log)
    n_before = len(log.segments)
    stats = log.compact(T0)
    assert stats.groups_swapped == 1 and len(log.segments) < n_before
    assert [(r.offset, r.key) for r in records(log)] == [(36, b"k0"), (37, b"k1"), (38, b"k2"), (39, b"k3")]
    assert all(s.size <= 4096 for s in log.segments)
    ino = {s.base_offset: os.stat(s.log_path).st_ino for s in log.segments}
    again = log.compact(T0)
    assert again.groups_swapped == 0 and again.records_kept == 4
    assert {s.base_offset: os.stat(s.log_path).st_ino for s in log.segments} == ino
    log.close()


def test_grouping_respects_segment_bytes(logdir):
    log = Log(logdir, config(internal_segment_bytes=2048), now_ms=T0)
    for i in range(30):  # distinct keys: nothing is removed, neighbours cannot all merge
        put(log, [(b"k%d" % i, b"v" * 500)])
        log.roll()
    ready(log)
    stats = log.compact(T0)
    assert stats.records_kept == 30
    assert all(s.size <= 2048 for s in log.segments)
    assert [r.offset for r in records(log)] == list(range(30))
    log.close()


def test_corrupt_batch_aborts_without_change(logdir):
    log = Log(logdir, config(), now_ms=T0)
    put(log, [(b"a", b"1")])
    put(log, [(b"a", b"2")])
    ready(log)
    seg = log.segments[0]
    with open(seg.log_path, "r+b") as f:
        f.seek(seg.size - 2)
        f.write(b"\xff\xff")
    with pytest.raises(CorruptMessageError):
        log.compact(T0)
    assert len(batches(log)) == 2 and not any(n.endswith(".cleaned") for n in os.listdir(logdir))


# ---------------------------------------------------------------------------- crash in the middle of a swap
def _crashing_replace(log, stage):
    class Crash(Exception):
        pass

    def replace(new, olds):
        new.flush()
        if stage == "cleaned":
            raise Crash
        new.change_suffix(".swap")
        if stage == "swap":
            raise Crash
        olds[0].delete()
        if stage == "half-deleted":
            raise Crash
        for o in olds[1:]:
            o.delete()
        raise Crash  # all old segments gone, the .swap not renamed yet

    return replace, Crash


@pytest.mark.parametrize("stage", ["cleaned", "swap", "half-deleted", "deleted"])
def test_crash_mid_swap_recovers(logdir, stage):
    log = Log(logdir, config(), now_ms=T0)
    model = {}
    for i in range(60):
        key, value = b"k%d" % (i % 7), b"v%d" % i
        put(log, [(key, value)])
        model[key] = (i, value)
        if i % 10 == 9:
            log.roll()
    ready(log)
    before = [(r.offset, r.key, r.value) for r in records(log)]
    replace, Crash = _crashing_replace(log, stage)
    with pytest.raises(Crash):
        cleaner.compact_log(
            log.segments,
            last_stable_offset=log.last_stable_offset,
            now_ms=T0,
            replace_segments=replace,
            active_producers={},
            segment_bytes=1 << 20,
        )
    # the process dies here: no close; the next open recovers
    log2 = Log(logdir, config(), now_ms=T0)
    got = [(r.offset, r.key, r.value) for r in records(log2)]
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and set(got) <= set(before)
    final = {}
    for o, k, v in got:
        final[k] = (o, v)
    assert final == model  # a consumer reading from the start sees every key's latest value
    if stage == "cleaned":
        assert got == before
    else:
        assert len(got) == len(model)
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(logdir))
    assert log2.log_end_offset == 60
    log2.update_high_watermark(60)  # the HW checkpoint was not written: the crash came first
    log2.compact(T0)
    assert sorted((o, k, v) for k, (o, v) in model.items()) == [(r.offset, r.key, r.value) for r in records(log2)]
    log2.close()


# ---------------------------------------------------------------------------- model-based
_put = st.tuples(st.just("put"), st.integers(0, 5), st.integers(1, 3))
ops = st.lists(
    st.one_of(
        _put,
        _put,
        _put,
        st.tuples(st.just("del"), st.integers(0, 5), st.just(1)),
        st.tuples(st.just("del"), st.integers(0, 5), st.just(1)),
        st.tuples(st.just("roll"), st.just(0), st.just(0)),
        st.tuples(st.just("compact"), st.integers(0, 2500), st.just(0)),
    ),
    min_size=5,
    max_size=50,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
# a pass removes an expired tombstone and empties the cleanable range; the next compact has nothing to clean
# (no dirty bytes) and does nothing: its stats end at 0, yet the tombstone below the earlier pass stays gone
@example(ops=[("del", 0, 1), ("roll", 0, 0), ("compact", 0, 0), ("compact", 1000, 0), ("compact", 0, 0)])
def test_matches_dict_model(tmp_path_factory, ops):
    d = str(tmp_path_factory.mktemp("log"))
    log = Log(d, config(delete_retention_ms=1000, internal_segment_bytes=600), now_ms=T0)
    written = {}  # offset -> (key, value): everything ever appended
    latest = {}  # key -> offset of its latest record
    horizon = {}  # tombstone offset -> its delete horizon, from the first pass that kept it
    now = T0
    cleaned_to = 0  # the furthest end of any pass: offsets at or past it were never in a pass's range
    for op, a, b in ops:
        if op in ("put", "del"):
            recs = [(b"k%d" % ((a + j) % 6), None if op == "del" else b"v%d" % len(written)) for j in range(b)]
            info = put(log, recs, now=now)
            for j, (k, v) in enumerate(recs):
                written[info.first_offset + j] = (k, v)
                latest[k] = info.first_offset + j
        elif op == "roll":
            log.roll()
        else:
            now += a
            log.update_high_watermark(log.log_end_offset)
            stats = log.compact(now)
            event(f"records removed: {stats.records_kept < stats.records_read}")
            event(f"tombstones expired: {stats.tombstones_removed > 0}")
            got = [(r.offset, r.key, r.value) for r in records(log)]
            offsets = [o for o, _, _ in got]
            assert offsets == sorted(set(offsets))
            for o, k, v in got:
                assert written[o] == (k, v)  # nothing invented, offsets preserved
            got_offsets = set(offsets)
            for _k, o in latest.items():  # every key's latest record survives, unless a tombstone
                if written[o][1] is not None:
                    assert o in got_offsets
            cleaned = [(o, k) for o, k, _ in got if o < stats.end_offset]
            assert len({k for _, k in cleaned}) == len(cleaned)  # one record per key in the cleaned range
            end = stats.end_offset  # the map covers only the cleaned range: latest below its end
            for o, k in cleaned:
                assert o == max(x for x, (kk, _) in written.items() if kk == k and x < end)
            cleaned_to = max(cleaned_to, stats.end_offset)
            assert all(o in got_offsets for o in written if o >= cleaned_to)  # tail untouched
            for o, _k, v in got:
                if v is None and o < end:
                    assert now < horizon.setdefault(o, now + 1000)  # kept only before its horizon
            for o, h in horizon.items():
                if o in got_offsets:
                    assert now < h
                elif latest[written[o][0]] == o:
                    assert now >= h  # the key's tombstone went: only after the horizon
    log.close()
    reopened = Log(d, config(delete_retention_ms=1000, internal_segment_bytes=600), now_ms=now)
    assert reopened.log_end_offset == (max(written) + 1 if written else 0)
    reopened.close()


def test_commit_marker_lifecycle_after_its_data_is_gone(logdir):
    log = Log(logdir, config(delete_retention_ms=1000), now_ms=T0)
    put(log, [(b"a", b"txn")], pid=8, epoch=0, seq=0, txn=True)  # 0
    marker(log, CONTROL_COMMIT, 8)  # 1
    put(log, [(b"a", b"plain")])  # 2 supersedes the txn's record
    ready(log)
    log.producer_state.producer_id_expiration_ms = 0
    assert log.producer_state.remove_expired_producers(T0) == [8]  # no longer an active producer
    log.compact(T0)  # the txn's batch goes; its marker stays this pass (a batch of it was seen)
    assert [(h.base_offset, h.is_control, h.has_delete_horizon) for h, _ in batches(log)] == [
        (1, True, False),
        (2, False, False),
    ]
    log.compact(T0 + 10)  # no data of the txn left: the marker gets its delete horizon
    hs = [h for h, _ in batches(log)]
    assert hs[0].is_control and hs[0].delete_horizon_ms == T0 + 1010
    assert RecordBatch(batches(log)[0][1], 0).records()[0].key == b"\x00\x00\x00\x01"  # still COMMIT
    log.compact(T0 + 1009)
    assert len(batches(log)) == 2
    stats = log.compact(T0 + 1010)
    assert stats.markers_removed == 1
    assert [(h.base_offset, h.is_control) for h, _ in batches(log)] == [(2, False)]
    log.close()


def test_key_scanner_matches_the_record_decoder():
    from storage.records import decode_records, parse_header

    big_key = b"K" * 200  # 2-byte key length
    b = RecordBatchBuilder(base_offset=0, batch_size=1 << 30)
    for i in range(9000):  # offset deltas up to 3 bytes; timestamps deltas of several bytes
        assert b.append(
            T0 + i * 1_000_003,
            big_key + b"%d" % (i % 50) if i % 3 else b"k%d" % i,
            None if i % 7 == 0 else b"v",
            (("h", b"x"),) if i % 5 == 0 else (),
        )
    for compression in (NONE, ZSTD):
        b.compression_type = compression
        data = b.build()
        h = parse_header(data)
        m: dict = {}
        cleaner_records.scan_keys(h, data, m)
        expected = {}
        for r in decode_records(data):
            expected[r.key] = r.offset
        assert m == expected
