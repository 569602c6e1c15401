"""Model-based test: random appends (leader and follower; plain, and transactional with COMMIT/ABORT
markers), rolls, truncations, high watermark moves, DeleteRecords, retention, flushes and reopens (clean
and after a crash) against an in-memory model of offset -> record, checking reads, offsets, timestamp
lookups and the aborted transactions (``collect_aborted_transactions``, the LSO) after every step."""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.errors import OffsetOutOfRangeError
from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.records import CONTROL_ABORT, CONTROL_COMMIT, RecordBatchBuilder, decode_records
from storage.txn_index import AbortedTxn

CFG = LogConfig(internal_segment_bytes=700, index_interval_bytes=150, retention_ms=-1)


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="logmodel")
        self.generation = 0
        self.config = CFG
        self.lg = Log(self._dir(), self.config, now_ms=0)
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []  # (base, [(offset, ts, value)])
        self.leo = self.log_start = self.hw = 0
        self.epoch = 0
        self.counter = 0
        self.txn: dict[int, tuple[int, str]] = {}  # batch base -> (producer id, "data"/"abort"/"commit")
        self.seq_end: dict[int, int] = {}  # transactional data batch base -> the sequence after it

    def _dir(self):
        return os.path.join(self.root, f"g{self.generation}", "t-0")

    def teardown(self):
        self.lg.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ model helpers
    def records(self, lo=0, hi=None, control=False):
        """Records in ``[lo, hi)``; markers (value None) only with ``control``."""
        hi = self.leo if hi is None else hi
        return [
            (o, ts, v) for _, recs in self.batches for (o, ts, v) in recs if lo <= o < hi and (control or v is not None)
        ]

    def transactions(self) -> tuple[list[AbortedTxn], dict[int, int], list[int]]:
        """The aborted transactions (LSO at abort: the earliest other open transaction, else one past the
        marker), the open ones ``{pid: first offset}`` and the markers of all ended ones, from the batches."""
        open_: dict[int, int] = {}
        aborted, markers = [], []
        for base, _ in self.batches:
            pid, kind = self.txn.get(base, (-1, ""))
            if kind == "data":
                open_.setdefault(pid, base)
            elif kind:
                first = open_.pop(pid, None)
                markers.append(base)
                if first is not None and kind == "abort":
                    aborted.append(AbortedTxn(pid, first, base, min(open_.values()) if open_ else base + 1))
        return aborted, open_, markers

    def _next_seq(self, pid):
        ends = [self.seq_end[b] for b, _ in self.batches if self.txn.get(b) == (pid, "data")]
        return ends[-1] if ends else 0

    def _batch(self, timestamps, base_offset=0, epoch=-1):
        b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
        values = []
        for ts in timestamps:
            self.counter += 1
            v = b"r%d" % self.counter
            b.append(ts, b"k", v)
            values.append(v)
        return b.build(), values

    def _add(self, base, timestamps, values):
        self.batches.append((base, [(base + i, ts, v) for i, (ts, v) in enumerate(zip(timestamps, values))]))
        self.leo = base + len(values)

    # ------------------------------------------------------------------ rules
    @rule(timestamps=st.lists(st.integers(0, 1000), min_size=1, max_size=4))
    def append_leader(self, timestamps):
        data, values = self._batch(timestamps)
        info = self.lg.append_as_leader(data, self.epoch, now_ms=0)
        assert (info.first_offset, info.last_offset) == (self.leo, self.leo + len(values) - 1)
        self._add(self.leo, timestamps, values)

    @rule(pid=st.integers(1, 2), timestamps=st.lists(st.integers(0, 1000), min_size=1, max_size=3))
    def append_transactional(self, pid, timestamps):
        b = RecordBatchBuilder(
            producer_id=pid, producer_epoch=0, base_sequence=self._next_seq(pid), is_transactional=True
        )
        values = []
        for ts in timestamps:
            self.counter += 1
            values.append(b"t%d" % self.counter)
            b.append(ts, b"k", values[-1])
        info = self.lg.append_as_leader(b.build(), self.epoch, now_ms=0)
        assert info.first_offset == self.leo
        self.txn[self.leo] = (pid, "data")
        self.seq_end[self.leo] = self._next_seq(pid) + len(values)
        self._add(self.leo, timestamps, values)

    @rule(pid=st.integers(1, 2), abort=st.booleans(), ts=st.integers(0, 1000))
    def end_transaction(self, pid, abort, ts):
        marker = build_control_batch(CONTROL_ABORT if abort else CONTROL_COMMIT, pid, 0, 0, ts)
        info = self.lg.append_as_leader(marker, self.epoch, now_ms=0, origin="coordinator")
        assert info.first_offset == self.leo
        self.txn[self.leo] = (pid, "abort" if abort else "commit")
        self._add(self.leo, [ts], [None])

    @rule(timestamps=st.lists(st.integers(0, 1000), min_size=1, max_size=3))
    def append_follower(self, timestamps):
        data, values = self._batch(timestamps, base_offset=self.leo, epoch=self.epoch)
        self.lg.append_as_follower(data, now_ms=0)
        self._add(self.leo, timestamps, values)

    @rule()
    def bump_epoch(self):
        self.epoch += 1

    @rule()
    def roll(self):
        self.lg.roll(now_ms=0)

    @rule(data=st.data())
    def truncate(self, data):
        target = data.draw(st.integers(self.log_start, self.leo))
        assert self.lg.truncate_to(target) == (target < self.leo)
        removed = [b for b, recs in self.batches if recs[-1][0] >= target]  # a batch holding target goes whole
        self.batches = [(b, recs) for b, recs in self.batches if recs[-1][0] < target]
        if removed:
            self.leo = removed[0]
        # a removed batch's transaction role goes with it (the batch holding target starts below target)
        self.txn = {b: m for b, m in self.txn.items() if b < self.leo}
        self.hw = min(self.hw, self.leo)
        self.log_start = min(self.log_start, self.leo)

    @rule(gap=st.integers(0, 5))
    def truncate_fully(self, gap):
        start = self.leo + gap
        self.lg.truncate_fully_and_start_at(start, now_ms=0)
        self.batches, self.leo, self.log_start, self.hw, self.txn = [], start, start, start, {}

    @rule(data=st.data())
    def update_hw(self, data):
        self.hw = data.draw(st.integers(self.log_start, self.leo))
        assert self.lg.update_high_watermark(self.hw) == self.hw

    @rule(data=st.data())
    def delete_records(self, data):
        target = data.draw(st.integers(self.log_start, self.hw))
        assert self.lg.delete_records(target) == max(self.log_start, target)
        self.log_start = max(self.log_start, target)

    @rule(retention_bytes=st.integers(-1, 3000), retention_ms=st.integers(-1, 1500), now=st.integers(0, 2000))
    def retention(self, retention_bytes, retention_ms, now):
        self.config = LogConfig(
            internal_segment_bytes=700,
            index_interval_bytes=150,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
        )
        self.lg.update_config(self.config)
        before_segments = [(s.base_offset, s.size) for s in self.lg.segments]
        deleted = self.lg.delete_old_segments(now_ms=now)
        new_log_start = self.lg.log_start_offset
        assert self.log_start <= new_log_start <= self.hw
        assert new_log_start == self.log_start or new_log_start == self.lg.segments[0].base_offset
        if deleted and retention_ms < 0:  # only bytes (and the log start) can delete: never the active one
            assert before_segments[-1][0] in [s.base_offset for s in self.lg.segments]
        self.log_start = new_log_start

    @rule()
    def flush(self):
        self.lg.flush(now_ms=0)
        assert self.lg.recovery_point == self.leo

    @rule()
    def reopen_clean(self):
        self.lg.close()
        self.lg = Log(self.lg.dir, self.config, now_ms=0)
        assert self.lg.high_watermark == self.hw

    @rule()
    def reopen_after_crash(self):
        old = self.lg
        self.generation += 1
        os.makedirs(os.path.dirname(self._dir()))
        shutil.copytree(old.dir, self._dir())  # what the OS holds: as after a process crash
        old.close()
        self.lg = Log(self._dir(), self.config, now_ms=0)
        assert self.log_start <= self.lg.high_watermark <= self.hw
        self.hw = self.lg.high_watermark

    @rule(ts=st.integers(-3, 1001))
    def timestamp_lookup(self, ts):
        got = self.lg.fetch_offset_by_timestamp(ts)
        live = self.records(self.log_start, control=True)  # a marker has a timestamp too
        if ts == -2:
            assert got[0] == self.log_start
        elif ts == -1:
            assert got[0] == self.leo
        elif ts == -3:
            present = self.records(self.lg.segments[0].base_offset, control=True)
            if not present or self.log_start == self.leo:
                assert got is None
            else:
                best = max(t for _, t, _ in present)
                if got is None:  # only when every record with the largest timestamp is below the log start
                    assert all(o < self.log_start for o, t, _ in present if t == best)
                else:
                    assert (
                        got[1] == best and got[0] >= self.log_start and (got[0], best) in [(o, t) for o, t, _ in live]
                    )
        else:
            expected = next(((o, t) for o, t, _ in live if t >= ts), None)
            assert (got[:2] if got else None) == expected

    # ------------------------------------------------------------------ invariants
    @invariant()
    def offsets_match(self):
        lg = self.lg
        assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (self.log_start, self.leo, self.hw)

    @invariant()
    def reads_match(self):
        got, off = [], self.log_start
        while off < self.leo:
            r = self.lg.read(off, 500)
            assert r.records, (off, self.leo)
            got += [(x.offset, x.timestamp, x.value) for x in decode_records(r.records) if x.offset >= self.log_start]
            off = r.next_offset
        assert got == self.records(self.log_start)
        visible, off = [], self.log_start
        while off < self.hw:  # a consumer below the high watermark: whole batches, up to the one holding it
            r = self.lg.read(off, 10**6, max_offset=self.hw)
            if not r.records:
                break
            visible += [x.offset for x in decode_records(r.records) if x.offset >= self.log_start]
            off = r.next_offset
        whole = [
            o for _, recs in self.batches if recs[-1][0] < self.hw for o, _, v in recs if o >= self.log_start and v
        ]
        assert visible == whole
        if self.log_start > 0:
            try:
                self.lg.read(self.log_start - 1, 100)
            except OffsetOutOfRangeError:
                pass
            else:
                raise AssertionError("read below the log start offset")

    @invariant()
    def transactions_match(self):
        aborted, open_, markers = self.transactions()
        start = self.log_start
        got = self.lg.collect_aborted_transactions(start, self.leo)
        want = [t for t in aborted if t.last_offset >= start]
        # A crash reopen after DeleteRecords/retention may rebuild an index by replaying from the log start:
        # what began below it is gone from that replay (nothing of it is left to filter). Entries wholly
        # above the log start (their LSO too) must be exact; the others must name the same markers.
        assert [(t.producer_id, t.last_offset) for t in got] == [(t.producer_id, t.last_offset) for t in want] or (
            {(t.producer_id, t.last_offset) for t in got} <= {(t.producer_id, t.last_offset) for t in want}
            and all(t.first_offset < start or t.last_stable_offset < start for t in want if t not in got)
        ), (got, want)
        exact = [t for t in want if t.first_offset >= start and t.last_stable_offset >= start]
        assert [t for t in got if t in exact] == exact, (got, exact)
        if start == self.leo or not self.lg.segments[0].base_offset <= start:
            return
        firsts = [f for f in open_.values() if f >= start]
        if len(firsts) == len(open_):  # every open transaction is above the log start
            bound = min(firsts + [self.hw])
            assert self.lg.last_stable_offset <= bound, "the LSO passed an open transaction"
            if all(m < self.hw for m in markers):  # no ended transaction waits for its marker's replication
                assert self.lg.last_stable_offset == bound, (self.lg.last_stable_offset, open_)


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOG_MODEL_EXAMPLES", 40)), stateful_step_count=30, deadline=None
)
TestLogModel = LogMachine.TestCase
