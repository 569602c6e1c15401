"""The transactional producer's state (the transactional half of Kafka's client ``TransactionManager``), pure:
no I/O, no threads of its own. The Producer drives it from the user's thread and the Sender asks it
which partitions must be added to the transaction before their batches may go out.

States and moves (Kafka's ``TransactionManager.State.isTransitionValid``)::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                               IN_TRANSACTION -> ABORTING_TRANSACTION -> READY
      IN_TRANSACTION / COMMITTING_TRANSACTION -> ABORTABLE_ERROR -> ABORTING_TRANSACTION
      any -> FATAL_ERROR (fenced: another instance took the transactional id; close the producer)

Error classes (what the coordinator or a partition leader answered):
- *retriable* (CONCURRENT_TRANSACTIONS, coordinator moving or loading, timeouts): the caller retries;
- *fatal* (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and
  INVALID_TXN_STATE from EndTxn): every later call raises it (INVALID_PRODUCER_EPOCH as ProducerFencedError);
- anything else is *abortable*: ``commit_transaction`` raises it, ``abort_transaction`` recovers.
"""

from __future__ import annotations

from protocol import errors as E
from protocol.errors import IllegalStateError, KafkaError
from rafka.structs import TopicPartition

UNINITIALIZED = "UNINITIALIZED"
INITIALIZING = "INITIALIZING"
READY = "READY"
IN_TRANSACTION = "IN_TRANSACTION"
COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
ABORTABLE_ERROR = "ABORTABLE_ERROR"
FATAL_ERROR = "FATAL_ERROR"

VALID_SOURCES = {
    INITIALIZING: {UNINITIALIZED, ABORTING_TRANSACTION},
    READY: {INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION},
    IN_TRANSACTION: {READY},
    COMMITTING_TRANSACTION: {IN_TRANSACTION},
    ABORTING_TRANSACTION: {IN_TRANSACTION, ABORTABLE_ERROR},
    ABORTABLE_ERROR: {IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR},
}
RETRIABLE = {
    E.ConcurrentTransactionsError.code,
    E.CoordinatorLoadInProgressError.code,
    E.CoordinatorNotAvailableError.code,
    E.NotCoordinatorError.code,
    E.RequestTimedOutError.code,
}
FATAL = {
    E.ProducerFencedError.code,
    E.InvalidProducerEpochError.code,
    E.TransactionalIdAuthorizationFailedError.code,
}


class TransactionAbortedError(KafkaError):
    """A batch of a transaction that is being aborted was not sent (Kafka's TransactionAbortedException)."""

    code, name, retriable = -1, "TRANSACTION_ABORTED", False
    default_message = "The transaction was aborted; its unsent records were dropped."


class TransactionState:
    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000):
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        self.transactional_id = transactional_id
        self.timeout_ms = int(transaction_timeout_ms)
        self.state = UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        self.partitions: set[TopicPartition] = set()  # in the ongoing transaction (coordinator knows)
        self.pending: set[TopicPartition] = set()  # written to, not yet added
        self.offsets_groups: set[str] = set()
        self.error: BaseException | None = None
        # the coordinator's verification tokens of the added partitions, and the transaction's start they are
        # for (protocol/txn_tokens.py): sent with the produces, so the leaders need not ask the coordinator
        self.tokens: dict[TopicPartition, bytes] = {}
        self.start_ms = -1

    # ---- moves ----------------------------------------------------------------------------------------
    def _move(self, target: str) -> None:
        if self.state == FATAL_ERROR:
            raise self.error or IllegalStateError("the producer is in a fatal state")
        if self.state not in VALID_SOURCES[target]:
            raise IllegalStateError(f"Invalid transition attempted from state {self.state} to state {target}")
        self.state = target

    def start_init(self) -> None:
        self._move(INITIALIZING)

    def initialized(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._move(READY)

    def begin(self) -> None:
        if self.state == UNINITIALIZED:
            raise IllegalStateError("call init_transactions() before begin_transaction()")
        self._move(IN_TRANSACTION)

    def start_commit(self) -> None:
        if self.state == ABORTABLE_ERROR:
            raise self.error or IllegalStateError("the transaction must be aborted")
        self._move(COMMITTING_TRANSACTION)

    def start_abort(self) -> None:
        self._move(ABORTING_TRANSACTION)

    def completed(self) -> None:
        """EndTxn answered (or nothing had to be ended): ready for the next transaction."""
        self._move(READY)
        self.partitions.clear()
        self.pending.clear()
        self.offsets_groups.clear()
        self.tokens.clear()
        self.start_ms = -1
        self.error = None

    # ---- what the producer writes --------------------------------------------------------------------
    def check_can_send(self) -> None:
        """A record may be sent only inside a transaction."""
        if self.state == IN_TRANSACTION:
            return
        if self.state in (ABORTABLE_ERROR, FATAL_ERROR) and self.error is not None:
            raise self.error
        raise IllegalStateError(f"Cannot send a record while the transactional producer is {self.state}")

    def maybe_add(self, tp: TopicPartition) -> bool:
        """Queue ``tp`` for AddPartitionsToTxn; True when it was neither added nor queued before (the Sender
        should be woken to send the request now)."""
        if tp in self.partitions or tp in self.pending:
            return False
        self.pending.add(tp)
        return True

    def needs_add(self, tp: TopicPartition) -> bool:
        """The Sender holds ``tp``'s batches until the coordinator added the partition."""
        return tp in self.pending

    def added(self, tps, answer: dict | None = None) -> None:
        """``tps`` are in the transaction; ``answer``: the AddPartitionsToTxn answer, whose verification tokens
        (when it has them) go with the produces to those partitions."""
        tokens = (answer or {}).get("tokens") or ()
        if tokens:
            self.start_ms = int(answer["txn_start_ms"])  # type: ignore[index]
            self.tokens.update({TopicPartition(t, p): tok for t, p, tok in tokens})
        for tp in tps:
            self.pending.discard(tp)
            self.partitions.add(tp)

    def produce_fields(self, tp: TopicPartition) -> dict:
        """The transactional fields of a ProduceRequest to ``tp``: the id, and its token when there is one."""
        tok = self.tokens.get(tp)
        if tok is None:
            return {"transactional_id": self.transactional_id}
        return {"transactional_id": self.transactional_id, "txn_start_ms": self.start_ms, "txn_token": tok}

    @property
    def has_partitions(self) -> bool:
        """Anything to end at the coordinator (Kafka's transactionStarted)."""
        return bool(self.partitions or self.offsets_groups)

    # ---- errors ----------------------------------------------------------------------------------------
    def fail(self, err: BaseException, from_end_txn: bool = False) -> BaseException:
        """Record an error of a transactional call or produce; returns it classified (fatal or abortable)."""
        code = getattr(err, "code", None)
        fatal = code in FATAL or (from_end_txn and code == E.InvalidTxnStateError.code)
        if code == E.InvalidProducerEpochError.code:
            # a leader's or an older coordinator's word for it: Kafka's client and librdkafka (_FENCED) treat it
            # as PRODUCER_FENCED, so the application learns to close the producer
            err = E.ProducerFencedError(
                f"{self.transactional_id!r} (producer {self.producer_id} epoch {self.producer_epoch}) was fenced "
                f"by a newer instance: {getattr(err, 'message', err)}"
            )
        if fatal:
            self.state, self.error = FATAL_ERROR, err
        elif self.state in (IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR):
            self.state, self.error = ABORTABLE_ERROR, err
        return err

    @staticmethod
    def is_retriable(code: int) -> bool:
        return code in RETRIABLE

    def describe(self) -> dict:
        return {
            "transactional_id": self.transactional_id,
            "state": self.state,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "partitions": sorted(self.partitions),
        }
