"""Model-based test of replication without Ray: one controller model and three Partitions (actors/replication/partition.py)
on temp dirs, driven the way the replica actors drive them (the ReplicaFetcher's truncate-then-fetch, the
AlterPartitionManager's round trip, LeaderAndIsr after every controller change).

Rules: appends with acks=1 and acks=all, follower fetches, time passing and the leader's ISR-shrink check,
AlterPartition answers (expand and shrink), crash (the log dir as the OS holds it, copied) and restart of a
replica, clean elections (from the alive ISR) and unclean ones (any alive replica).

Invariants: the leader's HW <= the LEO of every alive ISR member; an acks=all record that was acknowledged
is in the leader's log unless an unclean election happened since; after its truncation a follower's log is a
prefix of the leader's; a leader's HW never goes backwards while it stays leader.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.replication.partition import Partition
from actors.replication.partition_state import LEADER
from protocol import errors as E
from protocol.control_messages import AlterPartitionResponse, LeaderAndIsrPartitionState
from storage.log import Log, LogConfig
from storage.records import RecordBatchBuilder, decode_records

BROKERS = (0, 1, 2)
MIN_ISR = 2
LAG_MS = 100
CFG = LogConfig(internal_segment_bytes=600, index_interval_bytes=150, retention_ms=-1, min_insync_replicas=MIN_ISR)


def contents(lg: Log) -> list[tuple[int, bytes]]:
    out, off = [], lg.log_start_offset
    while off < lg.log_end_offset:
        r = lg.read(off, 10**6)
        if not r.records:
            break
        out += [(x.offset, x.value) for x in decode_records(r.records)]
        off = r.next_offset
    return out


class ReplicationMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="replmodel")
        self.now = 0
        self.counter = 0
        self.dirgen = {b: 0 for b in BROKERS}
        self.parts: dict[int, Partition | None] = {b: self._open(b) for b in BROKERS}
        # the controller model
        self.leader, self.epoch, self.pe = 0, 0, 0
        self.isr: tuple[int, ...] = BROKERS
        self.alter: list[tuple[int, object]] = []  # (leader broker, proposal) in flight
        self.truncated = {b: False for b in BROKERS}  # the fetcher's "truncated since the leader change"
        self.pending: list[tuple[int, int, int, list]] = []  # acks=all: (broker, dirgen, required, records)
        self.acked: dict[int, bytes] = {}
        self.leader_hw: dict[tuple[int, int], int] = {}
        self._elect(0)

    def teardown(self):
        for p in self.parts.values():
            if p is not None:
                p.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def _dir(self, b):
        return os.path.join(self.root, f"b{b}", f"g{self.dirgen[b]}", "t-0")

    def _open(self, b):
        return Partition(b, Log(self._dir(b), CFG, now_ms=self.now), "t", 0)

    def alive(self):
        return [b for b in BROKERS if self.parts[b] is not None]

    def _leader_part(self):
        return self.parts[self.leader] if self.leader >= 0 else None

    def _broadcast(self):
        """The controller's LeaderAndIsr to every alive replica (bumping the partition epoch)."""
        self.pe += 1
        state = LeaderAndIsrPartitionState(
            topic="t",
            partition=0,
            controller_epoch=1,
            leader=self.leader,
            leader_epoch=self.epoch,
            isr=self.isr,
            partition_epoch=self.pe,
            replicas=BROKERS,
        )
        for b in self.alive():
            p = self.parts[b]
            if p.stale_reason(state) is not None:
                continue
            if b == self.leader:
                p.make_leader(state, self.now)
            else:
                if p.make_follower(state):
                    self.truncated[b] = False
                self.leader_hw.pop((b, self.dirgen[b]), None)
        self._settle()

    def _elect(self, new_leader, isr=None):
        self.leader = new_leader
        self.epoch += 1
        if isr is not None:
            self.isr = tuple(sorted(isr))
        self._broadcast()

    def _settle(self):
        """What the purgatory would answer: acks=all produces complete once the HW passes them (acknowledged
        when the committed ISR still meets min.insync.replicas) or fail when leadership moved."""
        keep = []
        for b, gen, required, records in self.pending:
            p = self.parts[b]
            if p is None or self.dirgen[b] != gen or p.role != LEADER:
                continue
            if p.log.high_watermark >= required:
                if len(p.isr) >= MIN_ISR:
                    self.acked.update(records)
                    event("acks=all acknowledged")
                continue
            keep.append((b, gen, required, records))
        self.pending = keep

    def _batch(self, n):
        b = RecordBatchBuilder()
        recs = []
        for _ in range(n):
            self.counter += 1
            v = b"r%d" % self.counter
            b.append(self.now, b"k", v)
            recs.append(v)
        return b.build(), recs

    # ------------------------------------------------------------------ rules
    @rule(n=st.integers(1, 3), acks=st.sampled_from([1, -1]))
    def append(self, n, acks):
        p = self._leader_part()
        if p is None:
            return
        data, values = self._batch(n)
        try:
            info, _change = p.append_records_to_leader(data, acks, self.now)
        except E.NotEnoughReplicasError:
            assert acks == -1 and len(p.isr) < MIN_ISR
            return
        if acks == -1:
            records = [(info.first_offset + i, v) for i, v in enumerate(values)]
            self.pending.append((self.leader, self.dirgen[self.leader], info.last_offset + 1, records))
        self._settle()

    @rule(b=st.sampled_from(BROKERS))
    def one_follower_fetch(self, b):
        self.follower_fetch(b)

    def follower_fetch(self, b):
        """One round of the ReplicaFetcher: truncate by leader epoch if not yet done, then one fetch."""
        f, lp = self.parts[b], self._leader_part()
        if f is None or lp is None or b == self.leader or f.leader_epoch != lp.leader_epoch:
            return
        if not self.truncated[b]:
            for _ in range(100):
                requested = f.log.latest_epoch
                if requested < 0:
                    f.truncate_to(f.log.high_watermark)
                    break
                epoch, end = lp.log.end_offset_for_epoch(requested)
                offset, done = f.truncation_after_epoch(requested, epoch, end)
                if f.truncate_to(offset):
                    event("follower truncated")
                if done:
                    break
            else:
                raise AssertionError("epoch truncation did not converge")
            self.truncated[b] = True
            self._check_prefix(f, lp)
        fetch_offset = f.log.log_end_offset
        _change, proposal = lp.update_follower_fetch_state(b, fetch_offset, self.now)
        if proposal is not None:
            self.alter.append((self.leader, proposal))
        resp = lp.read(fetch_offset, 2000, b, 0, lp.leader_epoch)
        f.append_as_follower(resp.records, resp.high_watermark, resp.log_start_offset)
        self._check_prefix(f, lp)
        self._settle()

    @rule()
    def replication_round(self):
        """Every follower fetches twice (the second fetch reports the LEO the first one reached)."""
        for _ in range(2):
            for b in BROKERS:
                self.follower_fetch(b)

    @rule(ms=st.integers(1, 3 * LAG_MS))
    def tick_and_check_isr(self, ms):
        """Time passes; the leader's isr-expiration task runs."""
        self.now += ms
        p = self._leader_part()
        if p is not None:
            proposal = p.maybe_shrink_isr(self.now, LAG_MS)
            if proposal is not None:
                self.alter.append((self.leader, proposal))

    @precondition(lambda self: self.alter)
    @rule()
    def answer_alter_partition(self):
        """The controller answers the oldest AlterPartition (Kafka's checks: leader epoch, partition
        epoch, no dead replica added)."""
        b, proposal = self.alter.pop(0)
        p = self.parts[b]
        if p is None or p.role != LEADER or p.leader_epoch != proposal.leader_epoch:
            return  # the actor's task was cancelled by the role change
        added = set(proposal.new_isr) - set(self.isr)
        ok = (
            b == self.leader
            and proposal.leader_epoch == self.epoch
            and proposal.partition_epoch == self.pe
            and all(self.parts[r] is not None for r in added)
        )
        if ok:
            event("ISR expanded" if added else "ISR shrunk")
            self.pe += 1
            self.isr = proposal.new_isr
            p.apply_isr(self.isr, self.pe, self.now)
        else:
            refusal = AlterPartitionResponse(1, None, self.leader, self.epoch, self.isr, self.pe)
            p.alter_partition_refused(refusal, self.now)
        self._settle()

    @rule(b=st.sampled_from(BROKERS))
    def crash(self, b):
        """The replica's process dies: its log is what the OS holds. The controller drops it from the ISR
        (keeping a last member) and, if it led, elects a new leader from the alive ISR."""
        p = self.parts[b]
        if p is None:
            return
        old = self._dir(b)
        self.dirgen[b] += 1
        os.makedirs(os.path.dirname(self._dir(b)))
        shutil.copytree(old, self._dir(b))
        p.log.close()
        self.parts[b] = None
        self.leader_hw.pop((b, self.dirgen[b] - 1), None)
        self.alter = [(x, prop) for x, prop in self.alter if x != b]
        isr = tuple(r for r in self.isr if r != b) or self.isr
        if b == self.leader:
            candidates = [r for r in isr if self.parts[r] is not None]
            self._elect(candidates[0] if candidates else -1, isr)
        else:
            self.isr = isr
            self._broadcast()

    @rule(b=st.sampled_from(BROKERS))
    def restart(self, b):
        if self.parts[b] is not None:
            return
        self.parts[b] = self._open(b)
        self.truncated[b] = False
        if self.leader < 0 and b in self.isr:
            self._elect(b)  # the offline partition comes back with its last ISR member (clean)
        else:
            self._broadcast()

    @rule(data=st.data())
    def clean_election(self, data):
        candidates = [r for r in self.isr if r != self.leader and self.parts[r] is not None]
        if not candidates:
            return
        self._elect(data.draw(st.sampled_from(candidates)))

    @rule(data=st.data())
    def unclean_election(self, data):
        candidates = [r for r in self.alive() if r not in self.isr]
        if not candidates:
            return
        b = data.draw(st.sampled_from(candidates))
        self.acked.clear()  # unclean.leader.election may lose acknowledged records: forget them
        self._elect(b, (b,))

    # ------------------------------------------------------------------ invariants
    def _check_prefix(self, f: Partition, lp: Partition) -> None:
        mine, theirs = contents(f.log), contents(lp.log)
        assert mine == theirs[: len(mine)], (mine, theirs)

    @invariant()
    def hw_at_most_min_leo_over_isr(self):
        p = self._leader_part()
        if p is None or p.role != LEADER:
            return
        hw = p.log.high_watermark
        for r in p.isr:
            if self.parts[r] is not None:
                assert hw <= self.parts[r].log.log_end_offset, (r, hw, p.isr)

    @invariant()
    def acknowledged_records_survive(self):
        p = self._leader_part()
        if p is None:
            return
        log_records = dict(contents(p.log))
        for offset, value in self.acked.items():
            assert log_records.get(offset) == value, (offset, value, self.leader)

    @invariant()
    def leader_hw_never_goes_back(self):
        p = self._leader_part()
        if p is None or p.role != LEADER:
            return
        key = (self.leader, self.dirgen[self.leader])
        hw = p.log.high_watermark
        assert hw >= self.leader_hw.get(key, 0)
        self.leader_hw[key] = hw


ReplicationMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("REPLICATION_MODEL_EXAMPLES", 150)), stateful_step_count=50, deadline=None
)
TestReplicationModel = ReplicationMachine.TestCase
