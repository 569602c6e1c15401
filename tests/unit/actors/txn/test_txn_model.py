"""Model-based test of transactions without Ray: the transaction coordinator's shard (actors/txn/shard.py),
one data partition ``Log`` (a single replica: HW = LEO after every append) and one group shard
(actors/group/shard.py) for ``__consumer_offsets``, driven the way the actors drive them.

Rules: InitProducerId (a new instance of a transactional id; one with an open transaction fences and aborts
it), produce (AddPartitionsToTxn when the partition is not in the client's transaction yet, then a
transactional batch; the leader verifies with the coordinator, KIP-890, when the producer has no open
transaction in the log), send offsets (AddOffsetsToTxn + TxnOffsetCommit), EndTxn commit/abort, marker
delivery one partition at a time or all at once (then markers_written), time passing (abort_expired),
coordinator reloads (a fresh transaction shard replays every record appended so far, its pending jobs replace
the queue; a fresh group shard loads its partition), the data log reopened (clean or after a crash), writes of
fenced instances (zombies), and plain appends. Some ids start near the epoch limit (a bump takes a new
producer id).

The model follows each transaction as the data log sees it (producer id -> its open transaction) and the
coordinator's decision (the Prepare record) for it. Invariants after every step: the read_committed view
(batches below the LSO, aborted transactions of ``collect_aborted_transactions`` filtered by
``AbortedTransactionFilter``, markers dropped) is exactly the plain records plus the records of committed
transactions, in offset order; the LSO is the first offset of the earliest open transaction (else the HW);
a committed transaction is one its client committed; OffsetFetch shows only committed transactions' offsets
and require_stable answers UNSTABLE_OFFSET_COMMIT exactly while a transaction's offsets are pending; a fenced
instance's writes are always refused (by the coordinator's verification or by the log's epoch check).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.group.classic_group import GroupCoordinatorConfig
from actors.group.shard import GroupCoordinatorShard
from actors.txn import records as R
from actors.txn.shard import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    MarkerJob,
    TxnCoordinatorShard,
    TxnResult,
)
from protocol import errors as E
from rafka.consumer.read_committed import AbortedTransactionFilter
from storage.batch_header import iter_batch_headers
from storage.control import build_control_batch
from storage.log import Log, LogConfig
from storage.records import CONTROL_ABORT, CONTROL_COMMIT, RecordBatch, RecordBatchBuilder, decode_records

TIDS = ("t0", "t1", "t2")
DATA = ("data", 0)
OFFSETS = ("__consumer_offsets", 0)
TIMEOUT_MS = 10_000
T0 = 1_000_000
CFG = LogConfig(internal_segment_bytes=2000, index_interval_bytes=200, retention_ms=-1)


def group_of(tid: str) -> str:
    return f"g-{tid}"


def fetch_offset(shard: GroupCoordinatorShard, group: str, require_stable: bool = False) -> dict:
    res = shard.offset_fetch(group, [{"name": "in", "partition_indexes": [0]}], require_stable)
    return res["topics"][0]["partitions"][0]


@dataclass
class Instance:
    """One producer instance (a client of a transactional id) as the client knows itself."""

    tid: str
    pid: int
    epoch: int
    seq: int = 0
    in_txn: bool = False
    added: set = field(default_factory=set)


@dataclass
class LogTxn:
    """A transaction open in the data log: its first offset, records, and the coordinator's decision."""

    first: int
    offsets: list[int] = field(default_factory=list)
    outcome: bool | None = None  # True commit, False abort, None not decided yet


class TxnMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        # on tmpfs when there is one: the log's fsyncs (checkpoints, close) are not what this test is about
        self.root = tempfile.mkdtemp(prefix="txnmodel", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.now = T0
        self.counter = 0
        self.pids = itertools.count(1000)
        # the coordinator (its log is the list of appended records) and its marker jobs
        self.coord = TxnCoordinatorShard(1)
        self.coord_log: list[R.TxnRecord] = []
        self.jobs: list[tuple[MarkerJob, set]] = []  # (job, partitions already written)
        # the data partition and the group shard
        self.generation = 0
        self.leo = 0  # the data log's end offset in the model (data records and markers)
        self.lg = Log(os.path.join(self.root, "data-0"), CFG, now_ms=T0)
        self.groups = GroupCoordinatorShard(GroupCoordinatorConfig())
        self.group_log: list = []  # the __consumer_offsets partition: (key, value, producer id) and markers
        # clients
        self.clients: dict[str, Instance] = {}
        self.zombies: list[Instance] = []
        self.intent: dict[str, bool] = {}  # tid -> what its client asked EndTxn for (until the Prepare)
        # the model of the data log: offset -> (value, producer id or -1, committed?) for data records
        self.rows: dict[int, bytes] = {}
        self.plain: set[int] = set()
        self.committed: set[int] = set()
        self.aborted: set[int] = set()
        self.open: dict[int, LogTxn] = {}  # producer id -> its transaction open in the data log
        self.decided: dict[int, bool] = {}  # producer id -> the coordinator's decision not yet completed
        self.log_epoch: dict[int, int] = {}  # producer id -> the highest epoch the data log saw
        # the model of the offsets: group -> committed offset; producer id -> {group: pending offset}
        self.group_committed: dict[str, int] = {}
        self.group_pending: dict[int, dict[str, int]] = {}
        self.fenced_writes_refused = 0

    def teardown(self):
        event(f"committed records: {'some' if self.committed else 'none'}")
        event(f"aborted records: {'some' if self.aborted else 'none'}")
        event(f"open transactions at the end: {len(self.open)}")
        event(f"group offsets committed: {'some' if self.group_committed else 'none'}")
        event(f"fenced writes refused: {'some' if self.fenced_writes_refused else 'none'}")
        event(f"producer ids: {len({md.producer_id for md in self.coord.txns.values()} | set(self.log_epoch))}")
        self.lg.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ the coordinator's actor
    def new_pid(self) -> int:
        return next(self.pids)

    def apply(self, res) -> dict:
        """Append (always acked), replay, follow the decisions and queue the marker jobs."""
        for rec in res.records:
            rec = R.TxnRecord(R.decode_key(rec.key_bytes()), R.decode_value(rec.value_bytes()))
            self.coord_log.append(rec)
            job = self.coord.replay(rec)
            v = rec.value
            if v is not None and v.status in (PREPARE_COMMIT, PREPARE_ABORT):
                self._decide(rec.transactional_id, v.producer_id, v.status == PREPARE_COMMIT)
            if v is not None and v.status in (COMPLETE_COMMIT, COMPLETE_ABORT):
                assert v.producer_id not in self.open, "completed before its data partition took the marker"
                assert self.group_pending.get(v.producer_id) is None, "completed before the offsets marker"
                self.decided.pop(v.producer_id, None)
            if job is not None:
                self.jobs.append((job, set()))
        return res.response

    def _decide(self, tid: str, pid: int, commit: bool) -> None:
        want = self.intent.pop(tid, None)
        if commit:  # only a client's EndTxn(commit) ever commits
            assert want is True, f"{tid}: committed without its client asking ({want})"
        assert pid not in self.decided, f"producer {pid} decided twice"
        self.decided[pid] = commit
        if pid in self.open:
            assert self.open[pid].outcome is None
            self.open[pid].outcome = commit

    # ------------------------------------------------------------------ the data partition's leader
    def _append(self, raw: bytes, origin: str = "client"):
        info = self.lg.append_as_leader(raw, 0, self.now, origin=origin)
        assert info.first_offset == self.leo
        self.leo = info.last_offset + 1
        self.lg.update_high_watermark(self.lg.log_end_offset)
        return info

    def _write(self, inst: Instance, n: int) -> bool:
        """A transactional batch of ``inst``: verified with the coordinator when the producer has no open
        transaction here (KIP-890), then checked by the log. True when it was appended."""
        if inst.pid not in self.open:
            if self.coord.verify(inst.tid, inst.pid, inst.epoch, [DATA])[DATA] != 0:
                return False
        b = RecordBatchBuilder(
            producer_id=inst.pid, producer_epoch=inst.epoch, base_sequence=inst.seq, is_transactional=True
        )
        values = []
        for _ in range(n):
            self.counter += 1
            values.append(b"v%d" % self.counter)
            b.append(self.now, b"k", values[-1])
        try:
            info = self._append(b.build())
        except E.InvalidProducerEpochError:
            assert self.log_epoch[inst.pid] > inst.epoch
            return False
        assert self.log_epoch.get(inst.pid, -1) <= inst.epoch
        self.log_epoch[inst.pid] = inst.epoch
        inst.seq += n
        txn = self.open.get(inst.pid)
        if txn is None:
            # a new transaction in the log needs one the coordinator has not decided yet
            assert inst.pid not in self.decided, f"a write of producer {inst.pid} joined a decided transaction"
            txn = self.open[inst.pid] = LogTxn(info.first_offset)
        for i, v in enumerate(values):
            self.rows[info.first_offset + i] = v
            txn.offsets.append(info.first_offset + i)
        return True

    def _is_fenced(self, inst: Instance) -> bool:
        md = self.coord.txns.get(inst.tid)
        return md is None or (md.producer_id, md.producer_epoch) != (inst.pid, inst.epoch)

    # ------------------------------------------------------------------ rules: clients
    @initialize(seeds=st.lists(st.sampled_from([-1, MAX_EPOCH - 3, MAX_EPOCH - 2]), min_size=3, max_size=3))
    def init_all(self, seeds):
        """Every client initializes; a seeded id was initialized many times already (its epoch is near
        Short.MaxValue, so bumps take a new producer id)."""
        for tid, epoch in zip(TIDS, seeds):
            if epoch >= 0:
                value = R.TxnLogValue(self.new_pid(), epoch, TIMEOUT_MS, EMPTY, (), self.now, -1)
                self.apply(TxnResult([R.TxnRecord(tid, value)]))
            self.init(tid)

    @rule(tid=st.sampled_from(TIDS))
    def init(self, tid):
        r = self.apply(self.coord.init_producer_id(tid, TIMEOUT_MS, self.now, self.new_pid))
        if r["error_code"] == E.ConcurrentTransactionsError.code:
            return
        assert r["error_code"] == 0, r
        old = self.clients.get(tid)
        if old is not None:
            self.zombies.append(old)
        self.intent.pop(tid, None)
        self.clients[tid] = Instance(tid, r["producer_id"], r["producer_epoch"])

    def _begin(self, inst: Instance, tp, always: bool = False) -> bool:
        """AddPartitionsToTxn for a partition new to the client's transaction (AddOffsetsToTxn: ``always``)."""
        if inst.in_txn and tp in inst.added and not always:
            return True
        r = self.apply(self.coord.add_partitions(inst.tid, inst.pid, inst.epoch, [tp], self.now))
        if r["error_code"] != 0:
            assert r["error_code"] in (E.ConcurrentTransactionsError.code, E.ProducerFencedError.code), r
            if r["error_code"] == E.ProducerFencedError.code:
                self.init(inst.tid)  # fatal for the instance: the application starts a new one
            return False
        inst.in_txn = True
        inst.added.add(tp)
        return True

    @rule(tid=st.sampled_from(TIDS), n=st.integers(1, 3))
    def produce(self, tid, n):
        inst = self.clients.get(tid)
        if inst is None or not self._begin(inst, DATA):
            return
        fenced = self._is_fenced(inst)
        if self._write(inst, n) and fenced:
            # only a write that lands in the transaction being aborted for its fencing
            assert self.open[inst.pid].outcome is False
            event("a fenced instance's late write joined its aborted transaction")

    @rule(tid=st.sampled_from(TIDS), offset=st.integers(0, 10**6))
    def send_offsets(self, tid, offset):
        inst = self.clients.get(tid)
        if inst is None or not self._begin(inst, OFFSETS, always=True):
            return
        assert not self._is_fenced(inst) and inst.pid not in self.decided
        topics = [{"name": "in", "partitions": [{"partition_index": 0, "committed_offset": offset}]}]
        res = self.groups.txn_offset_commit(group_of(tid), topics, inst.pid, self.now)
        assert res.response["topics"][0]["partitions"][0]["error_code"] == 0
        self.groups.replay_all(res.records)
        self.group_log += [(r.key_bytes(), r.value_bytes(), inst.pid) for r in res.records]
        self.group_pending.setdefault(inst.pid, {})[group_of(tid)] = offset

    @rule(tid=st.sampled_from(TIDS), commit=st.sampled_from([True, True, True, False]))
    def end_txn(self, tid, commit):
        inst = self.clients.get(tid)
        if inst is None or not inst.in_txn:
            return
        self.intent[tid] = commit
        r = self.apply(self.coord.end_txn(tid, inst.pid, inst.epoch, commit, self.now))
        self.intent.pop(tid, None)  # a Prepare record took it (see _decide), or nothing was written
        if r["error_code"] == E.ConcurrentTransactionsError.code:
            return
        if r["error_code"] == 0:  # the client's outcome is the coordinator's
            want = (PREPARE_COMMIT, COMPLETE_COMMIT) if commit else (PREPARE_ABORT, COMPLETE_ABORT)
            assert self.coord.txns[tid].state in want
        else:
            assert r["error_code"] in (E.ProducerFencedError.code, E.InvalidTxnStateError.code), r
            assert self._is_fenced(inst) or self.coord.txns[tid].state in (COMPLETE_ABORT, COMPLETE_COMMIT)
            if r["error_code"] == E.ProducerFencedError.code:
                self.init(tid)  # fatal for the instance: the application starts a new one
                return
        inst.in_txn, inst.added = False, set()

    @rule(tid=st.sampled_from(TIDS), n=st.integers(1, 3), offset=st.none() | st.integers(0, 10**6))
    def whole_transaction(self, tid, n, offset):
        """A client's produce, send-offsets and commit in a row (the other rules still interleave with it)."""
        self.produce(tid, n)
        if offset is not None:
            self.send_offsets(tid, offset)
        self.end_txn(tid, True)

    @precondition(lambda self: self.zombies)
    @rule(data=st.data(), n=st.integers(1, 2))
    def zombie_write(self, data, n):
        z = data.draw(st.sampled_from(self.zombies))
        assert self._is_fenced(z)
        assert not self._write(z, n), f"fenced instance {z} wrote"
        self.fenced_writes_refused += 1

    @rule(n=st.integers(1, 3))
    def plain_append(self, n):
        b = RecordBatchBuilder()
        values = []
        for _ in range(n):
            self.counter += 1
            values.append(b"p%d" % self.counter)
            b.append(self.now, b"k", values[-1])
        info = self._append(b.build())
        for i, v in enumerate(values):
            self.rows[info.first_offset + i] = v
            self.plain.add(info.first_offset + i)

    # ------------------------------------------------------------------ rules: coordinator
    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), whole=st.booleans())
    def deliver_markers(self, data, whole):
        """One partition's marker of a queued job (``whole``: all of them); the last one completes it."""
        i = data.draw(st.integers(0, len(self.jobs) - 1))
        job, done = self.jobs[i]
        todo = [tp for tp in job.partitions if tp not in done]
        for tp in todo if whole else [data.draw(st.sampled_from(todo))] if todo else []:
            if tp == DATA:
                self._data_marker(job)
            else:
                self._offsets_marker(job)
            done.add(tp)
        if all(tp in done for tp in job.partitions):
            del self.jobs[i]
            self.apply(self.coord.markers_written(job, self.now))

    @precondition(lambda self: self.jobs)
    @rule()
    def markers_catch_up(self):
        """The marker sender writes every queued job's remaining markers."""
        for job, done in self.jobs:
            for tp in job.partitions:
                if tp not in done:
                    self._data_marker(job) if tp == DATA else self._offsets_marker(job)
        jobs, self.jobs = self.jobs, []
        for job, _ in jobs:
            self.apply(self.coord.markers_written(job, self.now))
        # every decided transaction is complete once its markers are all written
        assert not [t for t, md in self.coord.txns.items() if md.state in (PREPARE_COMMIT, PREPARE_ABORT)]
        assert not self.decided
        assert all(t.outcome is None for t in self.open.values())

    def _data_marker(self, job: MarkerJob) -> None:
        kind = CONTROL_COMMIT if job.commit else CONTROL_ABORT
        raw = build_control_batch(kind, job.producer_id, job.producer_epoch, job.coordinator_epoch, self.now)
        self._append(raw, origin="coordinator")
        assert self.log_epoch.get(job.producer_id, -1) <= job.producer_epoch
        self.log_epoch[job.producer_id] = job.producer_epoch
        txn = self.open.pop(job.producer_id, None)
        if txn is not None:
            assert txn.outcome is job.commit, (txn, job)
            (self.committed if job.commit else self.aborted).update(txn.offsets)

    def _offsets_marker(self, job: MarkerJob) -> None:
        records = self.groups.complete_transaction(job.producer_id, job.commit).records
        self.groups.replay_all(records)
        self.group_log += records
        pending = self.group_pending.pop(job.producer_id, None)
        if pending is not None:
            assert self.decided[job.producer_id] is job.commit
            if job.commit:
                self.group_committed.update(pending)

    @rule(ms=st.sampled_from([200, 500, 1_000, 2_000, TIMEOUT_MS + 1]))
    def time_passes(self, ms):
        self.now += ms
        for res in self.coord.abort_expired(self.now):
            self.apply(res)

    @rule(which=st.sampled_from(["txn", "group", "both"]))
    def reload(self, which):
        """A coordinator's partition moves: a new leader loads every record appended so far (the transaction
        coordinator at the next coordinator epoch, its pending jobs replacing the queue; the group shard
        from its ``__consumer_offsets`` records and markers)."""
        if which in ("txn", "both"):
            fresh = TxnCoordinatorShard(self.coord.coordinator_epoch + 1)
            for rec in self.coord_log:
                fresh.replay(rec, loading=True)
            for tid in self.coord.txns:
                assert fresh.describe(tid) == self.coord.describe(tid)
            assert fresh.txns.keys() == self.coord.txns.keys()
            if fresh.pending_jobs():
                event("reload resumed marker jobs")
            self.coord = fresh
            self.jobs = [(job, set()) for job in fresh.pending_jobs()]
        if which in ("group", "both"):
            groups = GroupCoordinatorShard(GroupCoordinatorConfig())
            groups.load(self.group_log, self.now)
            self.groups = groups

    @rule(crash=st.booleans())
    def reopen_data_log(self, crash):
        """The data partition's log is closed and opened again (``crash``: from the files as the OS holds
        them, without a clean shutdown): recovery rebuilds its open transactions and aborted-txn index."""
        old = self.lg
        self.generation += 1
        path = os.path.join(self.root, f"data-{self.generation}")
        if crash:
            shutil.copytree(old.dir, path)
            old.close()
        else:
            old.close()
            os.rename(old.dir, path)
        self.lg = Log(path, CFG, now_ms=self.now)
        assert self.lg.log_end_offset == self.leo  # nothing is lost: the files hold every append
        self.lg.update_high_watermark(self.lg.log_end_offset)  # the only replica: the HW is its LEO

    # ------------------------------------------------------------------ invariants
    def read(self, upto: int) -> bytes:
        """Every batch below ``upto``, fetch after fetch (a read stops at a segment's end)."""
        out, off = [], 0
        while off < upto:
            r = self.lg.read(off, 1 << 30, max_offset=upto)
            if not r.records:
                break
            out.append(r.records)
            off = r.next_offset
        return b"".join(out)

    @invariant()
    def lso_is_the_earliest_open_transaction(self):
        leo = self.lg.log_end_offset
        assert leo == self.leo and self.lg.high_watermark == leo
        want = min([t.first for t in self.open.values()], default=leo)
        assert self.lg.last_stable_offset == want, (self.lg.last_stable_offset, self.open)

    @invariant()
    def read_committed_is_exactly_the_committed_transactions(self):
        lso = self.lg.last_stable_offset
        raw = self.read(lso)
        aborted = self.lg.collect_aborted_transactions(0, lso)
        f = AbortedTransactionFilter([(t.producer_id, t.first_offset) for t in aborted])
        got = [
            (r.offset, r.value)
            for pos, h in iter_batch_headers(raw)
            if f.keep(h, raw, pos)
            for r in RecordBatch(raw, pos, header=h).records()
        ]
        want = sorted((o, v) for o, v in self.rows.items() if o < lso and (o in self.plain or o in self.committed))
        assert got == want
        # read_uncommitted: every data record, markers dropped
        everything = self.read(self.lg.log_end_offset)
        assert [(r.offset, r.value) for r in decode_records(everything)] == sorted(self.rows.items())

    @invariant()
    def transactions_decide_in_one_way(self):
        assert not (self.committed & self.aborted)
        for pid, txn in self.open.items():
            assert txn.outcome is self.decided.get(pid)

    @invariant()
    def offsets_appear_only_on_commit(self):
        pending_groups = {g for p in self.group_pending.values() for g in p}
        for tid in TIDS:
            g = group_of(tid)
            assert fetch_offset(self.groups, g)["committed_offset"] == self.group_committed.get(g, -1)
            stable = fetch_offset(self.groups, g, require_stable=True)
            assert (stable["error_code"] == E.UnstableOffsetCommitError.code) == (g in pending_groups)
        assert self.groups.pending_transactions() == {p: len(v) for p, v in self.group_pending.items()}


TxnMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("TXN_MODEL_EXAMPLES", 100)), stateful_step_count=100, deadline=None
)
TestTxnModel = TxnMachine.TestCase
