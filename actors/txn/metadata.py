"""The transaction coordinator's data (pure, no Ray): Kafka's transaction states and their valid previous
states, ``TransactionMetadata`` per transactional id, the ``MarkerJob`` a Prepare record starts, the
``TxnResult`` a handler returns, and the request checks the handlers share. The state machine over them is
actors/txn/shard.py (which re-exports these names)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from actors.txn.records import TxnRecord
from protocol import errors as E

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = {
    EMPTY: "Empty",
    ONGOING: "Ongoing",
    PREPARE_COMMIT: "PrepareCommit",
    PREPARE_ABORT: "PrepareAbort",
    COMPLETE_COMMIT: "CompleteCommit",
    COMPLETE_ABORT: "CompleteAbort",
    DEAD: "Dead",
    PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS = {
    EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE},
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
    DEAD: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
    PREPARE_EPOCH_FENCE: {ONGOING},
}
MAX_EPOCH = 32767  # Short.MaxValue: an epoch at MAX_EPOCH - 1 is exhausted, the next bump takes a new id


class IllegalTransitionError(RuntimeError):
    """A state move Kafka's TransactionMetadata forbids: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604800000  # transactional.id.expiration.ms


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int = EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: int | None = None  # the state a record in flight moves to; not durable

    def describe(self) -> dict:
        return {
            "transactional_id": self.transactional_id,
            "state": STATE_NAMES[self.state],
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "transaction_timeout_ms": self.timeout_ms,
            "transaction_start_time_ms": self.start_ms,
            "topics": sorted(self.partitions),
        }


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a COMMIT (``commit``) or ABORT marker for ``producer_id``/``producer_epoch`` to each partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    coordinator_epoch: int
    start_ms: int = -1  # the transaction's start: each marker carries it (actors/replication/txn_verification.py)


@dataclass(slots=True)
class TxnResult:
    records: list[TxnRecord] = field(default_factory=list)
    response: dict = field(default_factory=dict)


def _error(exc: E.KafkaError, **extra) -> TxnResult:
    return TxnResult([], {"error_code": exc.code, "error_message": str(exc), **extra})


def _ok(**extra) -> dict:
    return {"error_code": 0, "error_message": None, **extra}


def _partition_set(partitions: Iterable) -> set[tuple[str, int]]:
    """``{(topic, partition)}`` of an AddPartitionsToTxn, or InvalidRequestError."""
    try:
        parts = {(t, int(p)) for t, p in partitions}
    except (TypeError, ValueError):
        raise E.InvalidRequestError("partitions must be (topic, partition) pairs") from None
    if not parts or not all(isinstance(t, str) and t and p >= 0 for t, p in parts):
        raise E.InvalidRequestError("AddPartitionsToTxn needs one or more (topic, partition) pairs")
    return parts
