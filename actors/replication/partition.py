"""Kafka's ``kafka.cluster.Partition`` for one local replica, pure (no Ray, no I/O, never awaits): it owns the Log
and the bookkeeping of partition_state.py, applies LeaderAndIsr, appends as leader or follower, reads, and returns
what changed (``LeaderHwChange``, ``AlterPartitionProposal``, truncation offsets) for the caller to act on.
Called from the replica's event loop only (the shell, LeaderWrites, ReplicaFetcher, AlterPartitionManager,
housekeeping); time is passed in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.replication.partition_state import (  # the bookkeeping Partition is built from
    FOLLOWER,
    LEADER,
    NEW,
    STOPPED,
    AlterPartitionProposal,
    ByteMarks,
    LeaderHwChange,
    LeaderState,
    check_transition,
    truncation_offset,
)
from protocol import errors as E
from protocol.control_messages import AlterPartitionResponse, LeaderAndIsrPartitionState
from protocol.messages import READ_COMMITTED, FetchResponse
from storage.control import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from storage.log_validator import CLIENT, COORDINATOR

if TYPE_CHECKING:
    from storage.log import Log, LogAppendInfo


EARLIEST, LATEST = -2, -1  # ListOffsets special timestamps


class Partition:
    """One local replica of a partition (Kafka's ``kafka.cluster.Partition``): role, epochs, ISR, the
    leader's follower bookkeeping and HW rule, the follower's truncation, over the Log it owns.

    Pure and synchronous: time comes in as ``now_ms``; the outcomes come back as values
    (:class:`LeaderHwChange`, :class:`AlterPartitionProposal`, truncation offsets) for the caller to act
    on. ``generation`` is bumped on every role change so a caller that awaited in between can tell its
    work is stale. Single-threaded: one owner (the replica actor's event loop) calls it.
    """

    def __init__(self, broker_id: int, log: "Log", topic: str = "", partition: int = 0):
        self.broker_id, self.log, self.topic, self.partition = int(broker_id), log, topic, int(partition)
        self.role = NEW
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: tuple[int, ...] = ()
        self.topic_id: str | None = None
        self.generation = 0
        self.leader_state: LeaderState | None = None
        self.marks = ByteMarks()
        self.marks.reset(log.log_end_offset)

    # ---- LeaderAndIsr -----------------------------------------------------------------------------
    def stale_reason(self, state: LeaderAndIsrPartitionState) -> str | None:
        """Why a LeaderAndIsr is stale (None when it must be applied)."""
        epoch = state.leader_epoch
        if self.role == STOPPED:
            return "replica is stopped"
        if epoch < self.leader_epoch:
            return f"leader epoch {epoch} < current {self.leader_epoch}"
        if epoch == self.leader_epoch and state.partition_epoch <= self.partition_epoch:
            return f"leader epoch {epoch} is not newer than the current one"
        return None

    def _adopt(self, state: LeaderAndIsrPartitionState) -> None:
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        self.isr = tuple(sorted(state.isr))
        self.replicas = state.replicas
        if state.topic_id is not None:
            self.topic_id = state.topic_id

    def make_leader(self, state: LeaderAndIsrPartitionState, now_ms: int) -> tuple[bool, LeaderHwChange]:
        """Apply a (non-stale) LeaderAndIsr naming this broker leader. Returns ``(new_epoch, change)``:
        ``new_epoch`` False for an ISR/assignment update within the current leader epoch (follower
        progress kept, ``generation`` unchanged)."""
        check_transition(self.role, LEADER)
        same_epoch = self.role == LEADER and state.leader_epoch == self.leader_epoch
        self._adopt(state)
        if same_epoch:
            assert self.leader_state is not None
            self.leader_state.commit(self.isr, self.partition_epoch, now_ms)
            self.leader_state.replicas = self.replicas
            return False, self.maybe_increment_leader_hw()
        self.generation += 1
        previous = self.leader_state if self.role == LEADER else None
        self.role = LEADER
        if self.leader_epoch > self.log.latest_epoch:
            # Kafka's maybeAssignEpochStartOffset: followers asking about older epochs learn where
            # they ended even before this leader's first append
            self.log.epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.leader_state = LeaderState.start(
            self.broker_id,
            self.leader_epoch,
            self.partition_epoch,
            self.isr,
            self.replicas,
            self.log.log_end_offset,
            now_ms,
            previous,
        )
        return True, self.maybe_increment_leader_hw()

    def make_follower(self, state: LeaderAndIsrPartitionState) -> bool:
        """Apply a (non-stale) LeaderAndIsr naming another leader (or none). False when only the
        partition epoch moved (same leader, same epoch: the fetch loop carries on)."""
        check_transition(self.role, FOLLOWER)
        same = self.role == FOLLOWER and state.leader_epoch == self.leader_epoch and state.leader == self.leader_id
        self._adopt(state)
        if same:
            return False
        self.generation += 1
        self.role = FOLLOWER
        self.leader_state = None
        return True

    def stop(self) -> bool:
        """StopReplica; False when already stopped. The caller closes or deletes the log."""
        if self.role == STOPPED:
            return False
        check_transition(self.role, STOPPED)
        self.role = STOPPED
        self.generation += 1
        return True

    def check_leader(self, current_leader_epoch: int | None, require_leader: bool = True) -> E.KafkaError | None:
        """The error a leader-only request gets here (epoch fencing, not the leader), or None. ``require_leader``
        False (Kafka's getLocalLog): a follower serves too (KIP-392 consumer fetches), with the same fencing."""
        if current_leader_epoch is not None and current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return E.FencedLeaderEpochError(
                    f"request epoch {current_leader_epoch} < leader epoch {self.leader_epoch}"
                )
            if current_leader_epoch > self.leader_epoch:
                return E.UnknownLeaderEpochError(
                    f"request epoch {current_leader_epoch} > leader epoch {self.leader_epoch}"
                )
        if self.role != LEADER and (require_leader or self.role != FOLLOWER):
            return E.NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition} "
                f"(role {self.role}, leader {self.leader_id}, epoch {self.leader_epoch})"
            )
        return None

    # ---- leader: append, HW, ISR ------------------------------------------------------------------
    def append_records_to_leader(
        self, batches: bytes, acks: int, now_ms: int, origin: str = CLIENT
    ) -> tuple["LogAppendInfo", LeaderHwChange]:
        """Kafka's appendRecordsToLeader: the min.insync.replicas check for acks=all, the append, and
        the HW it may move (NONE for a deduplicated retry: nothing was written)."""
        min_isr = self.log.config.min_insync_replicas
        if acks == -1 and len(self.isr) < min_isr:
            raise E.NotEnoughReplicasError(f"ISR {list(self.isr)} is below min.insync.replicas={min_isr}")
        info = self.log.append_as_leader(batches, self.leader_epoch, now_ms, origin)
        if info.duplicate:
            return info, LeaderHwChange.NONE
        self.marks.record(self.log.log_end_offset, info.valid_bytes)
        if self.maybe_increment_leader_hw() is LeaderHwChange.INCREASED:
            return info, LeaderHwChange.INCREASED
        return info, LeaderHwChange.SAME

    def append_txn_marker(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, now_ms: int
    ) -> tuple["LogAppendInfo", LeaderHwChange]:
        """WriteTxnMarkers on the leader: a COMMIT/ABORT control batch appended with the coordinator's
        origin (clients may not write one), min.insync.replicas enforced as for acks=all. The producer
        state refuses a marker from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED) or an older
        producer epoch (INVALID_PRODUCER_EPOCH)."""
        min_isr = self.log.config.min_insync_replicas
        if len(self.isr) < min_isr:
            raise E.NotEnoughReplicasError(f"ISR {list(self.isr)} is below min.insync.replicas={min_isr}")
        kind = CONTROL_COMMIT if committed else CONTROL_ABORT
        batch = build_control_batch(
            kind, producer_id, producer_epoch, coordinator_epoch, now_ms, partition_leader_epoch=self.leader_epoch
        )
        info = self.log.append_as_leader(batch, self.leader_epoch, now_ms, origin=COORDINATOR)
        self.marks.record(self.log.log_end_offset, info.valid_bytes)
        # SAME when the HW did not move: new data all the same, so waiting follower fetches wake up
        if self.maybe_increment_leader_hw() is LeaderHwChange.INCREASED:
            return info, LeaderHwChange.INCREASED
        return info, LeaderHwChange.SAME

    def describe_producers(self) -> list[dict]:
        """Kafka's DescribeProducers (leader only, after ``check_leader``): every producer this partition
        tracks, with the first offset of its open transaction (-1: none)."""
        out = []
        for pid, e in sorted(self.log.producer_state.producers.items()):
            out.append(
                {
                    "producer_id": pid,
                    "producer_epoch": e.producer_epoch,
                    "last_sequence": e.last_seq,
                    "last_timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_start_offset": -1
                    if e.current_txn_first_offset is None
                    else e.current_txn_first_offset,
                }
            )
        return out

    def in_open_transaction(self, producer_id: int) -> bool:
        """The producer has a transaction open in this partition's log (data written, no marker yet)."""
        entry = self.log.producer_state.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_increment_leader_hw(self) -> LeaderHwChange:
        """Kafka's maybeIncrementLeaderHW: the rule (min LEO over the maximal ISR), the LEO read and
        the HW write together. INCREASED when it moved, else NONE (also when not the leader)."""
        if self.role != LEADER or self.leader_state is None:
            return LeaderHwChange.NONE
        lg = self.log
        old = lg.high_watermark
        new = self.leader_state.high_watermark(lg.log_end_offset, old)
        if new > old:
            lg.update_high_watermark(new)
            return LeaderHwChange.INCREASED
        return LeaderHwChange.NONE

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, now_ms: int
    ) -> tuple[LeaderHwChange, AlterPartitionProposal | None]:
        """A follower fetched from ``fetch_offset`` (its LEO): record it, maybe expand the ISR (the
        proposal to send), maybe move the HW."""
        if fetch_offset > self.log.log_end_offset:
            raise E.OffsetOutOfRangeError(
                f"follower b{replica_id} fetch offset {fetch_offset} is past the leader's LEO {self.log.log_end_offset}"
            )
        ls = self.leader_state
        assert ls is not None
        ls.on_follower_fetch(replica_id, fetch_offset, self.log.log_end_offset, now_ms)
        proposal = None
        if ls.pending_isr is None and ls.can_join_isr(replica_id, self.log.high_watermark):
            proposal = self._propose(tuple(self.isr) + (replica_id,), f"b{replica_id} caught up")
        return self.maybe_increment_leader_hw(), proposal

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> AlterPartitionProposal | None:
        """ISR followers not caught up for ``max_lag_ms`` leave (one AlterPartition in flight at most)."""
        ls = self.leader_state
        if self.role != LEADER or ls is None or ls.pending_isr is not None:
            return None
        out = ls.out_of_sync_replicas(self.log.log_end_offset, now_ms, max_lag_ms)
        if not out:
            return None
        return self._propose(tuple(b for b in self.isr if b not in out), f"{out} lagged more than {max_lag_ms} ms")

    def _propose(self, new_isr: tuple, why: str) -> AlterPartitionProposal:
        assert self.leader_state is not None
        isr = self.leader_state.propose(new_isr)
        return AlterPartitionProposal(isr, self.leader_epoch, self.partition_epoch, why)

    def apply_isr(self, isr, partition_epoch: int, now_ms: int) -> LeaderHwChange | None:
        """The controller accepted an ISR (AlterPartition answer). None when a newer LeaderAndIsr already
        said more (the in-flight change is dropped); else the HW change it caused."""
        assert self.leader_state is not None
        if int(partition_epoch) < self.partition_epoch:
            self.leader_state.abort()
            return None
        self.isr = tuple(sorted(isr))
        self.partition_epoch = int(partition_epoch)
        self.leader_state.commit(self.isr, self.partition_epoch, now_ms)
        return self.maybe_increment_leader_hw()

    def alter_partition_refused(self, resp: AlterPartitionResponse, now_ms: int) -> LeaderHwChange | None:
        """A non-retriable AlterPartition error: drop the in-flight change; adopt the controller's ISR
        when the answer carries a newer one for this leader epoch."""
        assert self.leader_state is not None
        self.leader_state.abort()
        if resp.isr and resp.leader_epoch == self.leader_epoch and resp.partition_epoch > self.partition_epoch:
            return self.apply_isr(resp.isr, resp.partition_epoch, now_ms)
        return None

    # ---- leader: reads ----------------------------------------------------------------------------
    def fetchable_end(self, isolation_level: int) -> int:
        return self.log.last_stable_offset if isolation_level == 1 else self.log.high_watermark

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        replica_id: int,
        isolation_level: int,
        epoch: int,
        one=True,
        leader_only: bool = True,
    ):
        """One synchronous read answering a fetch (leader only, unless ``leader_only`` is False: a KIP-392 consumer
        fetch, which a follower serves from its own log): followers read up to the LEO, consumers up to this
        replica's HW (or LSO for read_committed). Raises the Kafka error to answer. ``one`` is Kafka's
        minOneMessage: the first batch goes whole even when over ``max_bytes``."""
        err = self.check_leader(epoch, leader_only)
        if err is not None:
            raise err
        lg = self.log
        snap = lg.fetch_offset_snapshot()
        follower = replica_id >= 0
        if follower:
            end = None
        else:
            end = snap.last_stable_offset if isolation_level == READ_COMMITTED else snap.high_watermark
        if fetch_offset > snap.log_end_offset or fetch_offset < snap.log_start_offset:
            raise E.OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} outside [{snap.log_start_offset}, {snap.log_end_offset}]"
            )
        if fetch_offset == snap.log_end_offset or (end is not None and fetch_offset >= end):
            records, next_offset = b"", fetch_offset  # nothing to read (a caught-up follower's usual fetch)
        else:
            info = lg.read(fetch_offset, max_bytes, max_offset=end, min_one_message=one)
            records, next_offset = info.records, info.next_offset
        aborted = None
        if isolation_level == READ_COMMITTED and not follower:
            aborted = tuple(
                (t.producer_id, t.first_offset) for t in lg.collect_aborted_transactions(fetch_offset, next_offset)
            )
        return FetchResponse(
            high_watermark=snap.high_watermark,
            log_start_offset=snap.log_start_offset,
            last_stable_offset=snap.last_stable_offset,
            records=bytes(records) if not isinstance(records, bytes) else records,
            next_offset=next_offset,
            log_end_offset=snap.log_end_offset if follower else None,
            leader_epoch=self.leader_epoch if follower else None,
            aborted_transactions=aborted,
        )

    def list_offset(self, timestamp: int, isolation_level: int) -> tuple[int, int, int]:
        """ListOffsets on the leader (after ``check_leader``): ``(offset, timestamp, leader_epoch)``."""
        lg = self.log
        if timestamp == EARLIEST:
            found = lg.fetch_offset_by_timestamp(EARLIEST)
            return lg.log_start_offset, -1, found[2] if found else -1
        if timestamp == LATEST:
            assert self.leader_state is not None
            start = self.leader_state.leader_epoch_start_offset
            if lg.high_watermark < start:
                raise E.OffsetNotAvailableError(
                    f"high watermark {lg.high_watermark} has not reached this leader epoch's start offset {start}"
                )
            return self.fetchable_end(isolation_level), -1, lg.latest_epoch
        found = lg.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= self.fetchable_end(isolation_level):
            return -1, -1, -1
        return found

    # ---- follower ---------------------------------------------------------------------------------
    def truncate_to(self, offset: int) -> bool:
        """Cut the log back to ``offset``; True when it removed records. At or past the LEO only the
        epoch cache entries starting at the LEO go (Kafka's UnifiedLog.truncateTo): a leader that appended
        nothing in its epoch left one, and a follower keeping it would ask the new leader about that
        epoch forever (OffsetForLeaderEpoch never converges)."""
        lg = self.log
        if offset >= lg.log_end_offset:
            lg.epoch_cache.truncate_from_end(lg.log_end_offset)
            return False
        self.log.truncate_to(offset)
        self.marks.reset(self.log.log_end_offset)
        return True

    def truncation_after_epoch(
        self, requested_epoch: int, leader_epoch: int, leader_end_offset: int
    ) -> tuple[int, bool]:
        """Where to truncate given the leader's OffsetForLeaderEpoch answer (``truncation_offset``)."""
        lg = self.log
        return truncation_offset(
            requested_epoch,
            leader_epoch,
            leader_end_offset,
            lg.end_offset_for_epoch,
            lg.log_end_offset,
            lg.high_watermark,
        )

    def append_as_follower(self, records: bytes, leader_hw: int, leader_log_start: int) -> bool:
        """Apply one fetch answer: append, follow the leader's HW (capped at our LEO) and log start. True when
        this replica's HW rose (consumers long-polling this follower may read more: KIP-392)."""
        lg = self.log
        if records:
            info = lg.append_as_follower(records)
            self.marks.record(lg.log_end_offset, info.valid_bytes)
        hw = min(leader_hw, lg.log_end_offset)
        rose = hw > lg.high_watermark
        if rose:
            lg.update_high_watermark(hw)
        leader_start = min(leader_log_start, lg.high_watermark)
        if leader_start > lg.log_start_offset:  # retention / DeleteRecords on the leader
            lg.delete_records(leader_start)
        return rose

    def offset_out_of_range_truncation(self, leader_leo: int, leader_start: int) -> tuple[int, bool] | None:
        """After OFFSET_OUT_OF_RANGE from the leader: ``(offset, restart)``: truncate to ``offset``
        (our LEO is past the leader's), or with ``restart`` start the log afresh there (the leader's log
        starts past our LEO); None when neither applies."""
        lg = self.log
        if 0 <= leader_leo < lg.log_end_offset:
            return leader_leo, False
        if leader_start > lg.log_end_offset:
            return leader_start, True
        return None

    def restart_log_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.marks.reset(self.log.log_end_offset)
