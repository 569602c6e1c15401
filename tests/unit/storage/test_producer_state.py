"""ProducerStateManager: Kafka's idempotence/transaction rules, snapshots, truncation, expiry."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from storage.control import build_control_batch
from storage.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    snapshot_file_name,
)
from storage.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    TRANSACTIONAL_MASK,
    BatchHeader,
    parse_header,
)

INT32_MAX = 0x7FFFFFFF


def hdr(pid, epoch, seq, count=1, offset=0, txn=False, ts=1000):
    return BatchHeader(
        offset, 100, 0, 2, 0, TRANSACTIONAL_MASK if txn else 0, count - 1, ts, ts, pid, epoch, seq, count
    )


def marker(kind, pid, epoch, offset, coordinator_epoch=0, ts=1000):
    buf = build_control_batch(kind, pid, epoch, coordinator_epoch, ts, base_offset=offset)
    return parse_header(buf), buf


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(str(tmp_path))


class Appender:
    """A minimal leader: check, assign offsets, update."""

    def __init__(self, psm, start=0):
        self.psm, self.leo = psm, start

    def append(self, pid, epoch, seq, count=1, txn=False, now=1000):
        h = hdr(pid, epoch, seq, count, self.leo, txn)
        dup = self.psm.check(h)
        if dup is not None:
            return ("dup", dup)
        self.psm.update(h, now)
        self.leo = h.next_offset
        return ("ok", (h.base_offset, h.last_offset))

    def end_txn(self, kind, pid, epoch, coordinator_epoch=0, now=1000):
        h, buf = marker(kind, pid, epoch, self.leo, coordinator_epoch)
        self.psm.check(h, buf)
        done = self.psm.update(h, now, buf)
        self.leo = h.next_offset
        return done


def test_non_idempotent_batches_skip_everything(psm):
    h = hdr(-1, -1, -1, 3, 10)
    assert psm.check(h) is None
    assert psm.update(h, 5) is None
    assert psm.producers == {}
    assert psm.map_end_offset == 13


def test_in_sequence_and_duplicates(psm):
    a = Appender(psm)
    assert a.append(7, 0, 0, 3) == ("ok", (0, 2))
    assert a.append(7, 0, 3, 2) == ("ok", (3, 4))
    assert a.append(7, 0, 0, 3) == ("dup", (0, 2))  # retry of the first batch
    assert a.append(7, 0, 3, 2) == ("dup", (3, 4))
    assert a.leo == 5
    e = psm.last_entry(7)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset) == (0, 0, 4, 4)


def test_only_last_five_batches_are_remembered(psm):
    a = Appender(psm)
    for s in range(7):
        a.append(1, 0, s)
    assert len(psm.last_entry(1).batches) == 5
    assert a.append(1, 0, 6) == ("dup", (6, 6))
    assert a.append(1, 0, 2) == ("dup", (2, 2))
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 0, 1)  # fell out of the cache: Kafka answers OUT_OF_ORDER_SEQUENCE


def test_gap_and_overlap_are_out_of_order(psm):
    a = Appender(psm)
    a.append(1, 0, 0, 2)
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 0, 5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 0, 1)  # overlaps but is not the same range
    assert a.append(1, 0, 2) == ("ok", (2, 2))


def test_old_epoch_is_fenced_and_new_epoch_starts_at_zero(psm):
    a = Appender(psm)
    a.append(1, 3, 0, 5)
    with pytest.raises(InvalidProducerEpochError):
        a.append(1, 2, 5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 4, 5)
    assert a.append(1, 4, 0) == ("ok", (5, 5))
    e = psm.last_entry(1)
    assert e.producer_epoch == 4 and len(e.batches) == 1  # the cache restarts with the epoch
    with pytest.raises(InvalidProducerEpochError):
        a.append(1, 3, 0, 5)  # the previous epoch is fenced now


def test_old_epoch_duplicate_is_fenced_not_answered(psm):
    a = Appender(psm)
    a.append(1, 0, 0)
    a.append(1, 1, 0)
    with pytest.raises(InvalidProducerEpochError):
        a.append(1, 0, 0)


def test_unknown_producer_accepts_any_sequence(psm):
    a = Appender(psm)
    assert a.append(9, 2, 1234, 2) == ("ok", (0, 1))  # state lost to retention: accept (Kafka >= 2.5)
    assert a.append(9, 2, 1236) == ("ok", (2, 2))
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(9, 2, 1240)


def test_sequence_wraps_at_int32_max(psm):
    a = Appender(psm)
    a.append(1, 0, INT32_MAX - 1, 2)
    assert psm.last_entry(1).last_seq == INT32_MAX
    assert a.append(1, 0, 0) == ("ok", (2, 2))
    # a batch straddling the wrap: last_seq wraps too
    a2 = Appender(ProducerStateManager(psm.log_dir))
    a2.append(2, 0, INT32_MAX - 1, 4)
    assert a2.psm.last_entry(2).last_seq == 1
    assert a2.append(2, 0, INT32_MAX - 1, 4) == ("dup", (0, 3))
    assert a2.append(2, 0, 2) == ("ok", (4, 4))


def test_transactions_open_close_and_first_unstable_offset(psm):
    a = Appender(psm)
    a.append(1, 0, 0, 1)  # plain idempotent data: stable
    assert psm.first_unstable_offset is None
    a.append(2, 0, 0, 2, txn=True)  # opens at 1
    a.append(3, 0, 0, 1, txn=True)  # opens at 3
    a.append(2, 0, 2, 1, txn=True)  # continues
    assert psm.ongoing_transactions == {2: 1, 3: 3}
    assert psm.first_unstable_offset == 1
    done = a.end_txn(CONTROL_COMMIT, 2, 0, coordinator_epoch=5)
    assert done == CompletedTxn(2, 1, 5, False)
    assert psm.ongoing_transactions == {3: 3}
    assert psm.first_unstable_offset == 1  # closed but its marker (5) is not under the HW yet
    assert psm.last_stable_offset(4) == 1
    psm.on_high_watermark_updated(5)
    assert psm.first_unstable_offset == 1
    psm.on_high_watermark_updated(6)
    assert psm.first_unstable_offset == 3
    done = a.end_txn(CONTROL_ABORT, 3, 0)
    assert done == CompletedTxn(3, 3, 6, True)
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset is None and psm.ongoing_transactions == {}
    assert psm.last_stable_offset(7) == 7
    assert psm.last_entry(2).coordinator_epoch == 5
    # a marker without data (empty transaction) completes nothing
    assert a.end_txn(CONTROL_ABORT, 2, 0, coordinator_epoch=5) is None


def test_non_transactional_write_inside_open_txn_is_rejected(psm):
    a = Appender(psm)
    a.append(1, 0, 0, txn=True)
    with pytest.raises(InvalidTxnStateError):
        a.append(1, 0, 1, txn=False)
    assert a.append(1, 0, 1, txn=True)[0] == "ok"


def test_marker_checks(psm):
    a = Appender(psm)
    a.append(1, 2, 0, txn=True)
    a.end_txn(CONTROL_COMMIT, 1, 2, coordinator_epoch=4)
    h, buf = marker(CONTROL_COMMIT, 1, 2, a.leo, coordinator_epoch=3)
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.check(h, buf)
    h, buf = marker(CONTROL_ABORT, 1, 1, a.leo, coordinator_epoch=9)
    with pytest.raises(InvalidProducerEpochError):
        psm.check(h, buf)
    h = hdr(1, 2, 0, offset=a.leo)
    with pytest.raises(ValueError):  # a control batch needs its bytes
        psm.update(h._replace(attributes=0x30), 1)


def test_marker_with_new_epoch_resets_sequences(psm):
    a = Appender(psm)
    a.append(1, 0, 0, 3, txn=True)
    a.end_txn(CONTROL_ABORT, 1, 1)  # coordinator bumped the epoch while aborting
    e = psm.last_entry(1)
    assert e.producer_epoch == 1 and list(e.batches) == [] and e.current_txn_first_offset is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 1, 3, txn=True)
    assert a.append(1, 1, 0, txn=True)[0] == "ok"


def test_expiration(psm):
    psm.producer_id_expiration_ms = 1000
    a = Appender(psm)
    a.append(1, 0, 0, now=100)
    a.append(2, 0, 0, txn=True, now=100)
    a.append(3, 0, 0, now=900)
    assert psm.remove_expired_producers(1099) == []
    assert psm.remove_expired_producers(1100) == [1]  # 2 has an open txn, 3 is recent
    assert set(psm.producers) == {2, 3}
    assert a.append(1, 0, 7)[0] == "ok"  # forgotten producer: any sequence


# ---------------------------------------------------------------------------- snapshots
def test_snapshot_round_trip(psm, tmp_path):
    a = Appender(psm)
    for s in range(7):
        a.append(1, 0, s, now=10 + s)
    a.append(2, 3, 0, 2, txn=True, now=50)
    a.end_txn(CONTROL_COMMIT, 2, 3, coordinator_epoch=8, now=60)
    a.append(4, 0, 0, txn=True, now=70)
    path = psm.take_snapshot(a.leo)
    assert os.path.basename(path) == snapshot_file_name(a.leo) == f"{a.leo:020d}.snapshot"
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load(0, a.leo) == a.leo
    assert fresh.producers == psm.producers
    assert fresh.ongoing_transactions == {4: a.leo - 1}
    assert fresh.map_end_offset == a.leo
    # duplicate detection survives the restart for all five cached batches
    b = Appender(fresh, a.leo)
    assert b.append(1, 0, 2) == ("dup", (2, 2))
    assert b.append(1, 0, 7)[0] == "ok"


def test_snapshot_codec_golden_and_corruption():
    from storage.producer_state import CorruptSnapshotError, ProducerStateEntry

    entry = ProducerStateEntry(5, 1, 2, 3, None, [BatchMetadata(0, 0, 10, 10, 99)])
    data = encode_snapshot([entry])
    assert data[:2] == b"\x00\x01" and len(data) == 2 + 4 + 4 + 31 + 32
    assert decode_snapshot(data) == [entry]
    for bad in (
        data[:-1],
        data + b"\x00",
        data[:5],
        data[:10] + bytes([data[10] ^ 1]) + data[11:],
        b"\x00\x02" + data[2:],
    ):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)


def test_corrupt_latest_snapshot_falls_back_to_older(psm, tmp_path):
    a = Appender(psm)
    a.append(1, 0, 0, 5)
    psm.take_snapshot(5)
    a.append(1, 0, 5, 5)
    psm.take_snapshot(10)
    p = tmp_path / snapshot_file_name(10)
    raw = bytearray(p.read_bytes())
    raw[-3] ^= 0xFF
    p.write_bytes(bytes(raw))
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load(0, 10) == 5  # replay [5, 10) from the log
    assert fresh.snapshot_offsets() == [5]  # the corrupt one was deleted
    assert fresh.last_entry(1).last_seq == 4
    fresh.update(hdr(1, 0, 5, 5, 5), 1000)  # the Log's replay
    assert fresh.producers == psm.producers


def test_load_ignores_snapshots_above_log_end_and_tmp_files(psm, tmp_path):
    a = Appender(psm)
    a.append(1, 0, 0, 3)
    psm.take_snapshot(3)
    a.append(1, 0, 3, 3)
    psm.take_snapshot(6)
    (tmp_path / (snapshot_file_name(9) + ".tmp")).write_bytes(b"torn")
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load(0, 4) == 3  # log ends at 4 (tail lost): snapshot 6 describes lost data
    assert fresh.snapshot_offsets() == [3]
    assert not (tmp_path / (snapshot_file_name(9) + ".tmp")).exists()
    assert fresh.last_entry(1).last_seq == 2


def test_load_without_snapshot_replays_from_log_start(tmp_path):
    m = ProducerStateManager(str(tmp_path))
    assert m.load(42, 100) == 42 and m.producers == {} and m.map_end_offset == 42
    m.update(hdr(3, 0, 0, 1, 42), 5)
    assert m.map_end_offset == 43


def test_load_snapshot_below_log_start_replays_from_log_start(psm, tmp_path):
    a = Appender(psm)
    a.append(1, 0, 0, 3)  # offsets 0-2
    a.append(2, 0, 0, 1, txn=True)  # offset 3: an open transaction
    a.append(3, 0, 0, 8)  # offsets 4-11
    a.end_txn(CONTROL_COMMIT, 4, 0)  # offset 12: producer 4 known from a marker only
    psm.take_snapshot(13)
    fresh = ProducerStateManager(str(tmp_path))
    assert fresh.load(10, 20) == 13
    # Kafka's isProducerRetained: 1 (data below the log start) and 4 (no data) are gone; 2 keeps its open
    # transaction (it bounds the LSO until its marker); 3 has data above the log start.
    assert set(fresh.producers) == {2, 3} and fresh.last_entry(3).last_seq == 7
    assert fresh.ongoing_transactions == {2: 3}
    fresh.update(hdr(1, 0, 5, 1, 13), 5)  # unknown again: any sequence
    assert fresh.producers[1].last_seq == 5


def test_log_start_moving_past_a_producer_forgets_it(psm):
    a = Appender(psm)
    a.append(1, 0, 0, 2)  # 0-1
    a.append(2, 0, 0, 1, txn=True)  # 2, open
    a.append(3, 0, 0, 1)  # 3
    assert psm.evict_unretained(3) == [1]  # 2's open transaction keeps it even below the log start
    assert set(psm.producers) == {2, 3}
    assert a.append(1, 0, 9)[0] == "ok"  # forgotten: any sequence, as after a reopen


def test_marker_for_an_unknown_producer_leaves_its_sequence_unknown(psm):
    """Data of a transactional producer goes to DeleteRecords, then a marker of the same epoch comes
    (a later transaction that added the partition but wrote nothing here): its next sequence is accepted,
    as it is with no marker in between. Kafka refuses it (OUT_OF_ORDER_SEQUENCE_NUMBER) only in the first
    case, and also after a crash whose replay starts at the marker: the log model found that."""
    a = Appender(psm)
    a.append(1, 2, 0, 1, txn=True)
    a.end_txn(CONTROL_COMMIT, 1, 2)
    assert psm.evict_unretained(2) == [1]
    a.end_txn(CONTROL_ABORT, 1, 2)
    e = psm.last_entry(1)
    assert e.seq_unknown and e.producer_epoch == 2 and list(e.batches) == []
    with pytest.raises(InvalidProducerEpochError):  # the marker's epoch still fences older producers
        a.append(1, 1, 1, txn=True)
    assert a.append(1, 2, 1, txn=True)[0] == "ok"
    assert not psm.last_entry(1).seq_unknown  # from here on sequences follow on as usual
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 2, 5, txn=True)
    a.end_txn(CONTROL_ABORT, 1, 3)  # a marker that bumps a known producer's epoch: the new one starts at 0
    assert not psm.last_entry(1).seq_unknown
    with pytest.raises(OutOfOrderSequenceNumberError):
        a.append(1, 3, 2, txn=True)


def test_load_drops_expired(psm, tmp_path):
    a = Appender(psm)
    a.append(1, 0, 0, now=0)
    a.append(2, 0, 0, now=5000)
    psm.take_snapshot(2)
    fresh = ProducerStateManager(str(tmp_path), producer_id_expiration_ms=1000)
    fresh.load(0, 2, now_ms=5500)
    assert set(fresh.producers) == {2}


def test_truncate_reloads_and_drops_snapshots_above(psm, tmp_path):
    a = Appender(psm)
    a.append(1, 0, 0, 2)
    psm.take_snapshot(2)
    a.append(
        1,
        0,
        2,
        2,
    )
    a.append(2, 0, 0, 1, txn=True)
    psm.take_snapshot(5)
    a.append(1, 0, 4, 1)
    assert psm.truncate(6) == 6  # nothing beyond: no-op
    assert psm.snapshot_offsets() == [2, 5]
    replay_from = psm.truncate(3)
    assert replay_from == 2 and psm.snapshot_offsets() == [2]
    assert psm.last_entry(1).last_seq == 1 and psm.last_entry(2) is None
    assert psm.ongoing_transactions == {}
    # the Log replays [2, 3): the first two records of batch (2..3) are gone with the truncation,
    # so a truncated log can only end at a batch boundary; here the Log truncated to 2 in fact.
    assert psm.truncate(2) == 2 and psm.snapshot_offsets() == [2]


def test_truncate_keeps_snapshot_at_offset(psm):
    a = Appender(psm)
    a.append(1, 0, 0, 2)
    psm.take_snapshot(2)
    a.append(1, 0, 2, 2)
    assert psm.truncate(2) == 2
    assert psm.snapshot_offsets() == [2] and psm.last_entry(1).last_seq == 1


def test_delete_snapshots_below_and_truncate_fully(psm):
    a = Appender(psm)
    for s in range(4):
        a.append(1, 0, s)
        psm.take_snapshot(a.leo)
    assert psm.snapshot_offsets() == [1, 2, 3, 4]
    psm.delete_snapshots_below(3)
    assert psm.snapshot_offsets() == [3, 4]
    psm.truncate_fully_and_start_at(100)
    assert psm.snapshot_offsets() == [] and psm.producers == {} and psm.map_end_offset == 100


# ---------------------------------------------------------------------------- property-based
attempt = st.tuples(
    st.sampled_from(["next", "retry", "gap", "overlap", "bump", "old"]),
    st.integers(0, 8),  # which past batch to retry / gap size
    st.integers(1, 4),  # record count
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attempts=st.lists(attempt, min_size=1, max_size=40), npids=st.integers(1, 3), data=st.data())
def test_random_retries_duplicates_out_of_order(tmp_path, attempts, npids, data):
    for n in os.listdir(tmp_path):
        os.remove(tmp_path / n)
    psm = ProducerStateManager(str(tmp_path))
    app = Appender(psm)
    sent: dict[int, list] = {p: [] for p in range(npids)}  # pid -> appended (epoch, first, last, offsets)
    epoch = {p: 0 for p in range(npids)}
    log_batches = []
    for kind, k, count in attempts:
        pid = data.draw(st.integers(0, npids - 1))
        mine = [b for b in sent[pid] if b[0] == epoch[pid]]
        next_seq = (mine[-1][2] + 1) & INT32_MAX if mine else 0
        ep = epoch[pid]
        if kind == "retry" and sent[pid]:
            e, first, last, offs = sent[pid][-1 - (k % len(sent[pid]))]
            ep, seq, count = e, first, last - first + 1
        elif kind == "gap":
            seq = next_seq + 1 + k
        elif kind == "overlap" and mine:
            seq = max(0, next_seq - 1 - (k % 3))
            count += 1  # never the exact range of a cached batch ending at next_seq - 1
        elif kind == "bump":
            epoch[pid] += 1
            ep, seq = epoch[pid], 0
        elif kind == "old" and epoch[pid] > 0:
            ep, seq = epoch[pid] - 1, 0
        else:
            seq = next_seq
        h = hdr(pid, ep, seq, count, app.leo)
        same_epoch = [b for b in sent[pid] if b[0] == ep][-5:]
        cached = [b for b in same_epoch if (b[1], b[2]) == (seq, h.last_sequence)]
        try:
            dup = psm.check(h)
        except InvalidProducerEpochError:
            event("fenced")
            assert ep < epoch[pid]
            continue
        except OutOfOrderSequenceNumberError:
            event("out of order")
            assert ep == epoch[pid] and not cached and sent[pid]
            assert seq != next_seq  # the exact next sequence is always accepted
            continue
        assert ep <= epoch[pid]
        if dup is not None:
            event("duplicate")
            assert cached and dup == cached[0][3]
            continue
        assert not cached
        psm.update(h, 1000)
        app.leo = h.next_offset
        sent[pid].append((ep, seq, h.last_sequence, (h.base_offset, h.last_offset)))
        log_batches.append(h)
    # invariants over the appended log: per producer and epoch, sequences are contiguous
    for _pid, batches in sent.items():
        by_epoch: dict[int, list] = {}
        for b in batches:
            by_epoch.setdefault(b[0], []).append(b)
        first_epoch = min(by_epoch) if by_epoch else None
        for e, bs in by_epoch.items():
            if e != first_epoch:
                assert bs[0][1] == 0
            for x, y in zip(bs, bs[1:]):
                assert y[1] == (x[2] + 1) & INT32_MAX
    # replaying the log into a fresh manager yields the same state; so does a snapshot round trip
    replay = ProducerStateManager(str(tmp_path))
    for h in log_batches:
        replay.update(h, 1000)
    assert replay.producers == psm.producers
    psm.take_snapshot(app.leo)
    loaded = ProducerStateManager(str(tmp_path))
    assert loaded.load(0, app.leo) == app.leo
    assert loaded.producers == psm.producers
