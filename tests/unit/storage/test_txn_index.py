"""The aborted transaction index (storage/txn_index.py) and its use by the Log: the file format, damage
handling, the entries a log writes on abort (leader, follower, replay), across rolls, truncation,
compaction and recovery, and ``Log.collect_aborted_transactions``."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.records import CONTROL_ABORT, CONTROL_COMMIT, RecordBatchBuilder
from storage.txn_index import ABORTED_TXN, AbortedTxn, TxnIndex, collect_aborted

T0 = 1_000_000


# ---------------------------------------------------------------------------------------------- the file


def test_entry_is_kafkas_34_byte_format():
    t = AbortedTxn(producer_id=0x0102030405060708, first_offset=10, last_offset=20, last_stable_offset=15)
    raw = t.encode()
    assert ABORTED_TXN.size == 34 and len(raw) == 34
    assert raw == bytes.fromhex(
        "0000"  # version 0
        "0102030405060708"  # producer id
        "000000000000000a"  # first offset
        "0000000000000014"  # last offset
        "000000000000000f"  # last stable offset
    )


def _chain(draw_list):
    """Valid entries from (pid, gap, span, lso_back) tuples: last offsets increasing."""
    out, last = [], 99
    for pid, gap, span, back in draw_list:
        last += gap + 1
        first = max(last - span, 0)
        out.append(AbortedTxn(pid, first, last, max(last + 1 - back, 0)))
    return out


entries_st = st.lists(
    st.tuples(st.integers(0, 2**62), st.integers(0, 50), st.integers(0, 150), st.integers(0, 200)), max_size=20
).map(_chain)


@settings(max_examples=60, deadline=None)
@given(entries=entries_st)
def test_append_reload_round_trip(tmp_path_factory, entries):
    path = str(tmp_path_factory.mktemp("ti") / "00000000000000000100.txnindex")
    idx = TxnIndex(path, 100, create=True)
    for t in entries:
        idx.append(t)
    idx.flush()
    assert os.path.getsize(path) == 34 * len(entries)
    again = TxnIndex(path, 100)
    assert again.entries() == entries and not again.damaged


def test_appends_must_follow_each_other(tmp_path):
    idx = TxnIndex(str(tmp_path / "x.txnindex"), 100, create=True)
    idx.append(AbortedTxn(1, 90, 105, 106))  # first offset in an earlier segment: allowed
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 100, 105, 106))  # last offset not increasing
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 110, 109, 110))  # first after last
    with pytest.raises(ValueError):
        TxnIndex(str(tmp_path / "y.txnindex"), 100, create=True).append(AbortedTxn(1, 50, 99, 100))  # below base
    assert idx.entries() == [AbortedTxn(1, 90, 105, 106)]


def test_truncate_reset_delete(tmp_path):
    path = str(tmp_path / "x.txnindex")
    idx = TxnIndex(path, 0, create=True)
    for i in range(5):
        idx.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))
    idx.truncate_to(25)  # markers at 25 and above go
    assert [t.last_offset for t in idx.entries()] == [5, 15]
    assert os.path.getsize(path) == 68
    assert TxnIndex(path, 0).entries() == idx.entries()
    idx.reset()
    assert idx.entries() == [] and os.path.getsize(path) == 0
    idx.delete()
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    "damage",
    ["torn", "version", "first_after_last", "not_increasing"],
)
def test_damaged_file_loads_its_valid_prefix_and_says_so(tmp_path, damage):
    path = str(tmp_path / "x.txnindex")
    idx = TxnIndex(path, 0, create=True)
    for i in range(3):
        idx.append(AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i + 6))
    with open(path, "r+b") as f:
        if damage == "torn":
            f.truncate(34 + 17)
        elif damage == "version":
            f.seek(34)
            f.write(b"\x01")
        elif damage == "first_after_last":
            f.seek(34 + 10)  # high byte of entry 1's first offset
            f.write(b"\x40")
        else:
            f.seek(34 + 18 + 7)  # entry 1's last offset -> 0 (below entry 0's)
            f.write(b"\x00")
    size = os.path.getsize(path)
    again = TxnIndex(path, 0)
    assert again.entries() == idx.entries()[:1] and again.damaged
    assert os.path.getsize(path) == size  # loading never writes: the loader repairs it (atomically)
    again.replace(idx.entries())
    assert TxnIndex(path, 0).entries() == idx.entries() and not TxnIndex(path, 0).damaged


def test_missing_file_is_damaged(tmp_path):
    assert TxnIndex(str(tmp_path / "gone.txnindex"), 0).damaged


def test_collect_stops_once_an_lso_reaches_the_bound(tmp_path):
    a = TxnIndex(str(tmp_path / "a"), 0, create=True)
    b = TxnIndex(str(tmp_path / "b"), 100, create=True)
    a.append(AbortedTxn(1, 0, 10, 5))  # another transaction from 5 was open
    a.append(AbortedTxn(2, 5, 20, 21))
    b.append(AbortedTxn(3, 150, 160, 161))
    assert a.collect(11, 15) == ([AbortedTxn(2, 5, 20, 21)], True)
    assert a.collect(0, 100) == ([AbortedTxn(1, 0, 10, 5), AbortedTxn(2, 5, 20, 21)], False)
    assert collect_aborted([a, b], 0, 200) == a.entries() + b.entries()
    assert collect_aborted([a, b], 0, 21) == a.entries()  # complete in a: b is not searched
    assert collect_aborted([a, b], 21, 200) == b.entries()


# ---------------------------------------------------------------------------------------------- the log


def batch(key, pid=-1, seq=-1, txn=False):
    b = RecordBatchBuilder(
        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, is_transactional=txn
    )
    b.append(T0, key, b"v" * 40)
    return b.build()


class Writer:
    """Transactional producers writing to one log: ``data(pid)`` one record in its transaction."""

    def __init__(self, log):
        self.log, self.seq = log, {}

    def data(self, pid, key=b"k"):
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + 1
        return self.log.append_as_leader(batch(key, pid, seq, True), 0, T0).first_offset

    def plain(self, key=b"p"):
        return self.log.append_as_leader(batch(key), 0, T0).first_offset

    def end(self, pid, kind=CONTROL_ABORT):
        marker = build_control_batch(kind, pid, 0, 0, T0)
        return self.log.append_as_leader(marker, 0, T0, origin="coordinator").first_offset


def index_of(log):
    return [seg.txn_index.entries() for seg in log.segments]


@pytest.fixture
def logdir(tmp_path):
    return str(tmp_path / "t-0")


def test_abort_writes_an_entry_with_the_lso_at_abort(logdir):
    log = Log(logdir, LogConfig(), now_ms=T0)
    w = Writer(log)
    a0 = w.data(7)
    w.plain()
    b0 = w.data(8)
    w.data(7)
    m7 = w.end(7)  # producer 8 still open: the LSO at abort is its first offset
    m8 = w.end(8, CONTROL_COMMIT)  # commits leave no entry
    c0 = w.data(9)
    m9 = w.end(9)  # nothing else open: one past the marker
    assert index_of(log) == [[AbortedTxn(7, a0, m7, b0), AbortedTxn(9, c0, m9, m9 + 1)]]
    assert m8 == m7 + 1
    end = log.log_end_offset
    assert log.collect_aborted_transactions(0, end) == index_of(log)[0]
    assert log.collect_aborted_transactions(m7 + 1, end) == [AbortedTxn(9, c0, m9, m9 + 1)]
    assert log.collect_aborted_transactions(0, c0) == [AbortedTxn(7, a0, m7, b0)]
    log.close()
    again = Log(logdir, LogConfig(), now_ms=T0)
    assert index_of(again) == index_of(log)
    again.close()


def test_entries_across_rolls_and_collect(logdir):
    log = Log(logdir, LogConfig(internal_segment_bytes=400), now_ms=T0)
    w = Writer(log)
    want = []
    for pid in range(10, 16):
        first = w.data(pid)
        w.plain()
        w.data(pid)
        w.plain()
        want.append((pid, first, w.end(pid)))
    assert len(log.segments) > 3
    got = [t for e in index_of(log) for t in e]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in got] == want
    assert any(t.first_offset < seg.base_offset for seg in log.segments for t in seg.txn_index.entries())
    for seg in log.segments:
        assert all(seg.base_offset <= t.last_offset < seg.next_offset for t in seg.txn_index.entries())
    for start in range(0, log.log_end_offset, 3):
        for upper in range(start + 1, log.log_end_offset + 1, 5):
            expect = [t for t in got if t.last_offset >= start and t.first_offset < upper]
            assert log.collect_aborted_transactions(start, upper) == expect, (start, upper)
    log.close()


def test_truncation_drops_entries_above_the_point(logdir):
    log = Log(logdir, LogConfig(internal_segment_bytes=400), now_ms=T0)
    w = Writer(log)
    marks = []
    for pid in range(20, 26):
        w.data(pid)
        w.plain()
        marks.append(w.end(pid))
    cut = marks[3]
    log.truncate_to(cut)
    kept = [t.last_offset for e in index_of(log) for t in e]
    assert kept == marks[:3]
    w.data(30)
    m = w.end(30)
    assert [t.last_offset for e in index_of(log) for t in e] == marks[:3] + [m]
    live = index_of(log)
    log.close()
    again = Log(logdir, LogConfig(internal_segment_bytes=400), now_ms=T0)
    assert index_of(again) == live
    again.close()


def test_follower_builds_the_same_index(logdir, tmp_path):
    leader = Log(logdir, LogConfig(internal_segment_bytes=400), now_ms=T0)
    w = Writer(leader)
    for pid in range(40, 44):
        w.data(pid)
        w.data(pid + 10)
        w.end(pid)
        w.end(pid + 10, CONTROL_COMMIT if pid % 2 else CONTROL_ABORT)
    follower = Log(str(tmp_path / "f-0"), LogConfig(internal_segment_bytes=400), now_ms=T0)
    off = 0
    while off < leader.log_end_offset:
        r = leader.read(off, 300)
        follower.append_as_follower(r.records, now_ms=T0)
        off = r.next_offset
    flat = [t for e in index_of(leader) for t in e]
    assert len(flat) == 6
    assert [t for e in index_of(follower) for t in e] == flat
    leader.close()
    follower.close()


def _crash_copy(log, dst):
    """What a kill -9 leaves: the files as they are (no clean-shutdown marker: open removed it)."""
    shutil.copytree(log.dir, dst)
    return dst


@pytest.mark.parametrize("damage", ["none", "deleted", "flipped"])
def test_recovery_rebuild_equals_the_live_index(logdir, tmp_path, damage):
    cfg = LogConfig(internal_segment_bytes=400)
    log = Log(logdir, cfg, now_ms=T0)
    w = Writer(log)
    for pid in range(60, 70):
        w.data(pid)
        if pid % 3:
            w.data(pid + 100)
        w.plain()
        w.end(pid)
        if pid % 3:
            w.end(pid + 100)
        if pid == 64:
            log.flush(T0)  # a recovery point in the middle
    live = index_of(log)
    assert sum(map(len, live)) == 16
    d = _crash_copy(log, str(tmp_path / "crashed"))
    files = sorted(n for n in os.listdir(d) if n.endswith(".txnindex") and os.path.getsize(os.path.join(d, n)))
    for n in files[:2]:
        p = os.path.join(d, n)
        if damage == "deleted":
            os.remove(p)
        elif damage == "flipped":
            with open(p, "r+b") as f:
                f.seek(2)
                f.write(b"\xff")  # producer id negative
    log.close()
    rec = Log(d, cfg, now_ms=T0)
    assert index_of(rec) == live
    rec.close()
    again = Log(d, cfg, now_ms=T0)  # clean reopen: the files on disk say the same
    assert index_of(again) == index_of(rec)
    again.close()


def test_compaction_keeps_the_entries_whose_marker_stays(logdir):
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "delete.retention.ms": 1000, "segment.bytes": 1 << 20})
    log = Log(logdir, cfg, now_ms=T0)
    w = Writer(log)
    w.plain(b"a")
    f7 = w.data(7, b"a")
    f8 = w.data(8, b"b")
    m7 = w.end(7)
    w.end(8, CONTROL_COMMIT)
    f9 = w.data(9, b"c")
    w.plain(b"c")
    m9 = w.end(9)
    w.plain(b"x")
    assert index_of(log) == [[AbortedTxn(7, f7, m7, f8), AbortedTxn(9, f9, m9, m9 + 1)]]
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    stats = log.compact(T0)
    assert stats.aborted_records_removed == 2
    cleaned = log.segments[0]
    markers = {h.base_offset for _, h in cleaned.iter_headers() if h.is_control}
    assert {m7, m9} <= markers
    assert cleaned.txn_index.entries() == [AbortedTxn(7, f7, m7, f8), AbortedTxn(9, f9, m9, m9 + 1)]
    assert log.collect_aborted_transactions(0, log.log_end_offset) == cleaned.txn_index.entries()
    log.close()
    again = Log(logdir, cfg, now_ms=T0)
    assert again.segments[0].txn_index.entries() == [AbortedTxn(7, f7, m7, f8), AbortedTxn(9, f9, m9, m9 + 1)]
    again.close()


def test_compaction_drops_an_entry_with_its_marker(logdir):
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "delete.retention.ms": 1000, "segment.bytes": 1 << 20})
    log = Log(logdir, cfg, now_ms=T0)
    w = Writer(log)
    f7 = w.data(7, b"a")
    m7 = w.end(7)
    w.data(7, b"b")  # producer 7's last batch is now a later one: the aborted batch can go whole
    m7b = w.end(7, CONTROL_COMMIT)
    w.plain(b"x")
    assert index_of(log) == [[AbortedTxn(7, f7, m7, m7 + 1)]]
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.compact(T0)  # the aborted record goes; its marker stays this pass (a batch of it was seen)
    assert log.segments[0].txn_index.entries() == [AbortedTxn(7, f7, m7, m7 + 1)]
    log.compact(T0 + 10)  # nothing of the transaction left: the marker gets its delete horizon
    assert log.segments[0].txn_index.entries() == [AbortedTxn(7, f7, m7, m7 + 1)]
    assert log.compact(T0 + 5000).markers_removed == 1  # past delete.retention.ms: marker and entry go
    markers = {h.base_offset for seg in log.segments for _, h in seg.iter_headers() if h.is_control}
    assert m7 not in markers and m7b in markers
    assert index_of(log)[0] == []
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    log.close()
