"""The transaction coordinator's request-level rules, pure: Kafka's TransactionStateManager configs (names and
defaults: docs/internals.md, "Transactions"), the ``__transaction_state`` spec, append error mapping,
``txn_kind`` (transactions on the coordinator runtime) and the parked AddPartitionsToTxn. No Ray, no I/O;
called by actors/txn_coordinator.py, actors/txn/state_manager.py and the broker's coordinator host.
"""

from __future__ import annotations

import asyncio

from actors.coordinator.context import ACTIVE as ACTIVE  # the runtime's states and routing
from actors.coordinator.context import FAILED as FAILED
from actors.coordinator.context import LOADING as LOADING
from actors.coordinator.context import route_code as route_code
from actors.coordinator.shard import CoordinatorKind
from actors.txn.records import TxnRecord, decode_key, decode_value, partition_for
from actors.txn.shard import TxnConfig, TxnCoordinatorShard
from protocol import errors as E
from protocol.names import TXN_TOPIC

DEFAULT_TXN_PARTITIONS = 5
DEFAULT_TXN_REPLICATION = 3
DEFAULT_TXN_MIN_ISR = 2
DEFAULT_TXN_SEGMENT_BYTES = 104857600
DEFAULT_ABORT_CHECK_MS = 10000
DEFAULT_EXPIRE_CHECK_MS = 3600000
DEFAULT_APPEND_TIMEOUT_MS = 5000

NOT_COORDINATOR = E.NotCoordinatorError.code
COORDINATOR_NOT_AVAILABLE = E.CoordinatorNotAvailableError.code
COORDINATOR_LOAD_IN_PROGRESS = E.CoordinatorLoadInProgressError.code
# Kafka's TransactionStateManager.appendTransactionToLog error mapping.
APPEND_ERRORS = {
    **{
        c.code: COORDINATOR_NOT_AVAILABLE
        for c in (
            E.UnknownTopicOrPartitionError,
            E.NotEnoughReplicasError,
            E.NotEnoughReplicasAfterAppendError,
            E.RequestTimedOutError,
        )
    },
    **{
        c.code: NOT_COORDINATOR
        for c in (E.NotLeaderOrFollowerError, E.KafkaStorageError, E.FencedLeaderEpochError, E.UnknownLeaderEpochError)
    },
}


def txn_config(props: dict | None) -> TxnConfig:
    props, default = props or {}, TxnConfig()
    return TxnConfig(
        max_timeout_ms=int(props.get("transaction.max.timeout.ms", default.max_timeout_ms)),
        id_expiration_ms=int(props.get("transactional.id.expiration.ms", default.id_expiration_ms)),
    )


def txn_partitions(props: dict | None) -> int:
    return int((props or {}).get("transaction.state.log.num.partitions", DEFAULT_TXN_PARTITIONS))


def txn_partition_for(transactional_id: str, props: dict | None) -> int:
    return partition_for(transactional_id, txn_partitions(props))


def txn_topic_spec(props: dict | None, alive_brokers: int) -> dict:
    """The CreateTopics request for ``__transaction_state`` (Kafka's auto-creation of the internal topic)."""
    props = props or {}
    rf = max(1, min(int(props.get("transaction.state.log.replication.factor", DEFAULT_TXN_REPLICATION)), alive_brokers))
    min_isr = max(1, min(int(props.get("transaction.state.log.min.isr", DEFAULT_TXN_MIN_ISR)), rf))
    return {
        "name": TXN_TOPIC,
        "num_partitions": txn_partitions(props),
        "replication_factor": rf,
        "configs": {
            "cleanup.policy": "compact",
            "min.insync.replicas": min_isr,
            "segment.bytes": int(props.get("transaction.state.log.segment.bytes", DEFAULT_TXN_SEGMENT_BYTES)),
        },
    }


def append_error(code: int) -> int:
    """The error a transaction request answers when its record was not appended (replica's ``code``)."""
    return APPEND_ERRORS.get(code, code) if code else 0


def decode(key: bytes | None, value: bytes | None, producer_id: int) -> TxnRecord | None:
    """A ``__transaction_state`` record read back (keyless records are skipped)."""
    return None if key is None else TxnRecord(decode_key(key), decode_value(value))


def txn_kind(config: TxnConfig) -> CoordinatorKind:
    """Transactions on the coordinator runtime (actors/coordinator/): no markers are written to this topic."""
    return CoordinatorKind(
        topic=TXN_TOPIC,
        new_shard=lambda epoch: TxnCoordinatorShard(epoch, config),
        decode=decode,
        end_txn=lambda producer_id, committed: None,
        append_error=append_error,
        summary=lambda shard: f"{len(shard.txns)} transactional ids",
    )


class ParkedAdd:
    """An AddPartitionsToTxn that found its id's previous transaction still completing (markers going out):
    instead of answering CONCURRENT_TRANSACTIONS at once, the handler waits for ``fut``: ``None`` = the state
    moved, try again; a dict = the answer, when the Ongoing record went out with the Complete one
    (``combined``, TxnCoordinatorShard.markers_written's ``then_add``)."""

    __slots__ = ("producer_id", "producer_epoch", "partitions", "fut", "combined")

    def __init__(self, producer_id: int, producer_epoch: int, partitions, fut: asyncio.Future):
        self.producer_id, self.producer_epoch, self.partitions, self.fut = producer_id, producer_epoch, partitions, fut
        self.combined = False
