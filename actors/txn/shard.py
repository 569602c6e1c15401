"""The transaction coordinator's state machine for one ``__transaction_state`` partition (Kafka's
TransactionMetadata + TransactionStateManager + the decisions of TransactionCoordinator), pure, time passed
in: handlers return a :class:`TxnResult` (records, response), ``replay`` is the only mutator and a Prepare
record yields its :class:`MarkerJob`. A CoordinatorShard of the runtime (actors/coordinator/), driven by
actors/txn/state_manager.py and actors/txn_coordinator.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from actors.txn.metadata import (  # noqa: F401 - re-exported: the coordinator's names live here too
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    MAX_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATE_NAMES,
    VALID_PREVIOUS,
    IllegalTransitionError,
    MarkerJob,
    TransactionMetadata,
    TxnConfig,
    TxnResult,
    _error,
    _ok,
    _partition_set,
)
from actors.txn.records import TxnLogValue, TxnRecord
from protocol import errors as E


class TxnCoordinatorShard:
    """The transactional ids of one ``__transaction_state`` partition, led at ``coordinator_epoch``."""

    def __init__(self, coordinator_epoch: int, config: TxnConfig | None = None):
        self.coordinator_epoch = coordinator_epoch
        self.config = config or TxnConfig()
        self.txns: dict[str, TransactionMetadata] = {}
        self._creating: set[str] = set()  # new ids whose first record is in flight

    # ---- the only mutator ----------------------------------------------------------------------
    def replay(self, record: TxnRecord, loading: bool = False) -> MarkerJob | None:
        """Apply one appended (or, with ``loading``, read back) record; a Prepare record yields the marker
        job it starts. A live move is checked against Kafka's valid previous states; a load takes the latest
        value as Kafka's loader does (an append that timed out may have landed after all)."""
        tid, v = record.transactional_id, record.value
        self._creating.discard(tid)
        md = self.txns.get(tid)
        if v is None:  # tombstone: the id expired
            self.txns.pop(tid, None)
            return None
        if v.status not in STATE_NAMES or v.status in (DEAD, PREPARE_EPOCH_FENCE):
            raise IllegalTransitionError(f"transaction {tid!r}: state {v.status} is never written")
        if not loading and md is not None and md.state not in VALID_PREVIOUS[v.status]:
            raise IllegalTransitionError(
                f"transaction {tid!r}: {STATE_NAMES[md.state]} -> {STATE_NAMES[v.status]} is not a valid transition"
            )
        if not loading and md is None and v.status != EMPTY:
            raise IllegalTransitionError(f"transaction {tid!r} must start Empty, not {STATE_NAMES[v.status]}")
        if md is None:
            md = self.txns[tid] = TransactionMetadata(tid, v.producer_id, v.producer_epoch, v.timeout_ms)
        md.producer_id, md.producer_epoch, md.timeout_ms, md.state = (
            v.producer_id,
            v.producer_epoch,
            v.timeout_ms,
            v.status,
        )
        md.partitions = set(v.partitions)
        md.start_ms, md.last_update_ms = v.start_ms, v.last_update_ms
        md.pending = None
        if v.status in (PREPARE_COMMIT, PREPARE_ABORT):
            return self._job(md)
        return None

    def load(self, records: Iterable[TxnRecord], now_ms: int) -> int:
        """Rebuild from the partition read from its start (latest value per id); the records replayed."""
        n = 0
        for rec in records:
            self.replay(rec, loading=True)
            n += 1
        return n

    def append_failed(self, transactional_id: str) -> None:
        """The records of a handler were not appended: the id takes requests again."""
        self._creating.discard(transactional_id)
        md = self.txns.get(transactional_id)
        if md is not None:
            md.pending = None

    # ---- requests ------------------------------------------------------------------------------
    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        new_producer_id: Callable[[], int],
        expected_producer_id: int = -1,
        expected_epoch: int = -1,
    ) -> TxnResult:
        """InitProducerId with a transactional id: a new id gets a producer id at epoch 0; a known one is
        bumped (fencing its previous instance), its open transaction aborted first."""
        if not isinstance(transactional_id, str) or not transactional_id:
            return _error(E.InvalidRequestError("InitProducerId needs a non-empty transactional id"))
        if not isinstance(timeout_ms, int) or timeout_ms <= 0 or timeout_ms > self.config.max_timeout_ms:
            return _error(
                E.InvalidTransactionTimeoutError(
                    f"transaction.timeout.ms {timeout_ms} must be in (0, transaction.max.timeout.ms = "
                    f"{self.config.max_timeout_ms}]"
                )
            )
        md = self.txns.get(transactional_id)
        if md is None and transactional_id in self._creating:
            return _error(E.ConcurrentTransactionsError(f"transaction {transactional_id!r} is being created; retry"))
        if md is None:
            self._creating.add(transactional_id)
            pid = new_producer_id()
            return self._write(
                transactional_id,
                TxnLogValue(pid, 0, timeout_ms, EMPTY, (), now_ms, -1),
                producer_id=pid,
                producer_epoch=0,
            )
        if md.pending is not None or md.state in (PREPARE_COMMIT, PREPARE_ABORT, DEAD):
            return _error(E.ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing; retry"))
        if expected_producer_id >= 0 and (expected_producer_id, expected_epoch) != (md.producer_id, md.producer_epoch):
            return _error(
                E.ProducerFencedError(
                    f"producer {expected_producer_id} epoch {expected_epoch} is not the current instance of "
                    f"{transactional_id!r} (producer {md.producer_id} epoch {md.producer_epoch})"
                )
            )
        if md.state == ONGOING:  # fence the previous instance: abort its transaction at a bumped epoch
            pid, epoch = md.producer_id, self._fence_epoch(md)
            value = TxnLogValue(
                pid, epoch, md.timeout_ms, PREPARE_ABORT, tuple(sorted(md.partitions)), now_ms, md.start_ms
            )
            res = self._write(transactional_id, value)
            res.response = {
                "error_code": E.ConcurrentTransactionsError.code,
                "error_message": f"aborting the open transaction of {transactional_id!r}'s previous instance; retry",
            }
            return res
        pid, epoch = self._bumped(md, new_producer_id)
        return self._write(
            transactional_id,
            TxnLogValue(pid, epoch, timeout_ms, EMPTY, (), now_ms, -1),
            producer_id=pid,
            producer_epoch=epoch,
        )

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable, now_ms: int
    ) -> TxnResult:
        """AddPartitionsToTxn (AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition)."""
        try:
            parts = _partition_set(partitions)
        except E.KafkaError as exc:
            return _error(exc)
        md, err = self._producer(transactional_id, producer_id, producer_epoch)
        if err is not None:
            return err
        assert md is not None
        if md.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return _error(E.ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing; retry"))
        if md.state == ONGOING and parts <= md.partitions:
            return TxnResult([], _ok())
        # a new transaction starts after its id's previous one, even within one millisecond: a partition leader
        # tells a late verification push from a current one by it (actors/replication/txn_verification.py)
        start = md.start_ms if md.state == ONGOING else max(now_ms, md.start_ms + 1)
        value = TxnLogValue(
            md.producer_id,
            md.producer_epoch,
            md.timeout_ms,
            ONGOING,
            tuple(sorted(md.partitions | parts)),
            now_ms,
            start,
        )
        return self._write(transactional_id, value)

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable) -> dict:
        """KIP-890 verification (AddPartitionsToTxn verify-only), per partition: 0 when the producer's ongoing
        transaction includes it, INVALID_TXN_STATE when it does not, else the producer's own error
        (:meth:`verify_error`) for every partition."""
        parts = [(tp[0], int(tp[1])) for tp in partitions]
        err = self.verify_error(transactional_id, producer_id, producer_epoch)
        if err is not None:
            return {tp: err.code for tp in parts}
        md = self.txns[transactional_id]
        ongoing = md.state == ONGOING
        return {tp: 0 if ongoing and tp in md.partitions else E.InvalidTxnStateError.code for tp in parts}

    def verify_error(self, transactional_id: str, producer_id: int, producer_epoch: int) -> E.KafkaError | None:
        """Kafka's handleVerifyPartitionsInTransaction checks the producer before the partitions: an unknown
        id or another producer id -> INVALID_PRODUCER_ID_MAPPING, another epoch (a newer instance
        initialised the id) -> PRODUCER_FENCED, markers being written -> CONCURRENT_TRANSACTIONS."""
        md = self.txns.get(transactional_id) if isinstance(transactional_id, str) else None
        if md is None or md.producer_id != producer_id:
            return E.InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of transactional id {transactional_id!r}"
            )
        if md.producer_epoch != producer_epoch:
            return E.ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} of {transactional_id!r} is fenced: a newer "
                f"instance initialised the transactional id (current epoch {md.producer_epoch})"
            )
        if md.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return E.ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing; retry")
        return None

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
    ) -> TxnResult:
        """EndTxn: Ongoing -> PrepareCommit/PrepareAbort (the caller answers once it is appended and then
        writes the markers); a retried EndTxn of a completed transaction answers its outcome."""
        md, err = self._producer(transactional_id, producer_id, producer_epoch)
        if err is not None:
            return err
        assert md is not None
        want = PREPARE_COMMIT if commit else PREPARE_ABORT
        done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        if md.state == ONGOING:
            value = TxnLogValue(
                md.producer_id,
                md.producer_epoch,
                md.timeout_ms,
                want,
                tuple(sorted(md.partitions)),
                now_ms,
                md.start_ms,
            )
            return self._write(transactional_id, value)
        if md.state == done:
            return TxnResult([], _ok())
        if md.state == want:
            return _error(E.ConcurrentTransactionsError(f"transaction {transactional_id!r} is completing; retry"))
        verb = "commit" if commit else "abort"
        return _error(
            E.InvalidTxnStateError(f"cannot {verb} transaction {transactional_id!r} in state {STATE_NAMES[md.state]}")
        )

    def markers_written(
        self, job: MarkerJob, now_ms: int, then_add: tuple[int, int, Iterable] | None = None
    ) -> TxnResult:
        """Every partition leader took ``job``'s markers: CompleteCommit/CompleteAbort.

        ``then_add`` = ``(producer_id, producer_epoch, partitions)`` of an AddPartitionsToTxn that arrived while
        the markers were going out (it waits for them, see the actor): when it is the same producer at the same
        epoch and the partitions are well formed, the next transaction's Ongoing record follows the Complete one
        in the same append (``response["then_added"]``), so the producer's next transaction starts one acks=all
        round trip sooner. Both records are replayed in order, each a valid move (Complete from Prepare, Ongoing
        from Complete); anything else leaves the request to be retried the usual way."""
        md = self.txns.get(job.transactional_id)
        want = PREPARE_COMMIT if job.commit else PREPARE_ABORT
        if md is None or md.state != want or md.pending is not None:
            return TxnResult()
        if (md.producer_id, md.producer_epoch) != (job.producer_id, job.producer_epoch):
            return TxnResult()
        done = COMPLETE_COMMIT if job.commit else COMPLETE_ABORT
        value = TxnLogValue(md.producer_id, md.producer_epoch, md.timeout_ms, done, (), now_ms, md.start_ms)
        res = self._write(job.transactional_id, value)
        if then_add is not None and then_add[:2] == (md.producer_id, md.producer_epoch):
            try:
                parts = _partition_set(then_add[2])
            except E.KafkaError:
                return res
            nxt = TxnLogValue(
                md.producer_id,
                md.producer_epoch,
                md.timeout_ms,
                ONGOING,
                tuple(sorted(parts)),
                now_ms,
                max(now_ms, md.start_ms + 1),
            )
            res.records.append(TxnRecord(job.transactional_id, nxt))
            res.response = _ok(then_added=True)
            md.pending = ONGOING
        return res

    # ---- timers ----------------------------------------------------------------------------------
    def abort_expired(self, now_ms: int) -> list[TxnResult]:
        """Ongoing transactions older than their timeout: abort at a bumped epoch (the producer is fenced)."""
        out = []
        for tid, md in sorted(self.txns.items()):
            if md.state == ONGOING and md.pending is None and md.start_ms + md.timeout_ms < now_ms:
                pid, epoch = md.producer_id, self._fence_epoch(md)
                parts = tuple(sorted(md.partitions))
                out.append(
                    self._write(tid, TxnLogValue(pid, epoch, md.timeout_ms, PREPARE_ABORT, parts, now_ms, md.start_ms))
                )
        return out

    def expire_ids(self, now_ms: int) -> list[TxnResult]:
        """Transactional ids idle past ``transactional.id.expiration.ms``: tombstones."""
        out = []
        for tid, md in sorted(self.txns.items()):
            idle = md.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) and md.pending is None
            if idle and md.last_update_ms + self.config.id_expiration_ms <= now_ms:
                md.pending = DEAD
                out.append(TxnResult([TxnRecord(tid, None)], _ok()))
        return out

    def next_deadline(self) -> int | None:
        """The earliest time a transaction here times out (the actor's timer)."""
        times = [md.start_ms + md.timeout_ms for md in self.txns.values() if md.state == ONGOING]
        return min(times) if times else None

    # ---- reads -------------------------------------------------------------------------------------
    def pending_jobs(self) -> list[MarkerJob]:
        """The marker jobs of every transaction in a Prepare state (to resume after a load)."""
        return [self._job(md) for _, md in sorted(self.txns.items()) if md.state in (PREPARE_COMMIT, PREPARE_ABORT)]

    def describe(self, transactional_id: str) -> dict:
        md = self.txns.get(transactional_id)
        if md is None:
            return {
                "transactional_id": transactional_id,
                **_error(
                    E.TransactionalIdNotFoundError(f"transactional id {transactional_id!r} is not known")
                ).response,
            }
        return {**md.describe(), **_ok()}

    def list(self, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None) -> list[dict]:
        want_states, want_pids = set(states or ()), set(producer_ids or ())
        return [
            {"transactional_id": tid, "producer_id": md.producer_id, "state": STATE_NAMES[md.state]}
            for tid, md in sorted(self.txns.items())
            if (not want_states or STATE_NAMES[md.state] in want_states)
            and (not want_pids or md.producer_id in want_pids)
        ]

    # ---- helpers -----------------------------------------------------------------------------------
    def _producer(self, tid: str, pid: int, epoch: int) -> tuple[TransactionMetadata | None, TxnResult | None]:
        md = self.txns.get(tid) if isinstance(tid, str) else None
        if md is None or md.producer_id != pid:
            return None, _error(E.InvalidProducerIdMappingError(f"producer {pid} is not the producer of {tid!r}"))
        if epoch != md.producer_epoch:
            return None, _error(
                E.ProducerFencedError(
                    f"producer {pid} epoch {epoch} of {tid!r} is fenced (current epoch {md.producer_epoch})"
                )
            )
        if md.pending is not None:
            return None, _error(
                E.ConcurrentTransactionsError(f"transaction {tid!r} has a state change in flight; retry")
            )
        return md, None

    @staticmethod
    def _bumped(md: TransactionMetadata, new_producer_id: Callable[[], int]) -> tuple[int, int]:
        """Kafka's prepareIncrementProducerEpoch: an exhausted epoch (>= Short.MaxValue - 1) takes a new id."""
        if md.producer_epoch >= MAX_EPOCH - 1:
            return new_producer_id(), 0
        return md.producer_id, md.producer_epoch + 1

    @staticmethod
    def _fence_epoch(md: TransactionMetadata) -> int:
        """Kafka's prepareFenceProducerEpoch: the same producer id one epoch up (at most Short.MaxValue), so
        the abort markers carry the id of the data they abort."""
        return min(md.producer_epoch + 1, MAX_EPOCH)

    def _write(self, tid: str, value: TxnLogValue, **extra) -> TxnResult:
        md = self.txns.get(tid)
        if md is not None:
            md.pending = value.status
        return TxnResult([TxnRecord(tid, value)], _ok(**extra))

    def _job(self, md: TransactionMetadata) -> MarkerJob:
        return MarkerJob(
            md.transactional_id,
            md.producer_id,
            md.producer_epoch,
            md.state == PREPARE_COMMIT,
            tuple(sorted(md.partitions)),
            self.coordinator_epoch,
            md.start_ms,
        )
