"""The transaction coordinator's request-level rules, pure (Kafka's TransactionStateManager configs and the
``__transaction_state`` topic): no Ray, no I/O. actors/txn_coordinator.py is the actor over them and the
shard (actors/txn/shard.py).

Broker configs (Kafka's names; rafka's defaults where they differ are noted):

- ``transaction.state.log.num.partitions`` (Kafka 50; rafka 5: each partition replica is an actor),
  ``transaction.state.log.replication.factor`` (3, capped by the live brokers),
  ``transaction.state.log.min.isr`` (2, capped by the replication factor),
  ``transaction.state.log.segment.bytes`` (100 MiB); the topic is compacted;
- ``transaction.max.timeout.ms`` (15 min), ``transactional.id.expiration.ms`` (7 days),
- ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s),
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` (1 h).
"""

from __future__ import annotations

import asyncio

from actors.group.service import ACTIVE as ACTIVE  # the same states and routing as groups
from actors.group.service import FAILED as FAILED
from actors.group.service import LOADING
from actors.group.service import route_code as route_code
from actors.txn.records import partition_for
from actors.txn.shard import TxnConfig, TxnCoordinatorShard
from protocol import errors as E

TXN_TOPIC = "__transaction_state"
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


class TxnPartition:
    """One ``__transaction_state`` partition led (or being loaded) here: its shard, load state, the
    generation that stale tasks check (bumped on unload) and its tasks (load, markers, timers)."""

    def __init__(self, partition: int, epoch: int, replica, shard: TxnCoordinatorShard):
        self.partition, self.epoch, self.replica, self.shard = partition, epoch, replica, shard
        self.state, self.gen = LOADING, 0
        self.tasks: list[asyncio.Task] = []
        self.loaded_records = 0
        # AddPartitionsToTxn waiting (at most one per id) for the id's transaction to complete: see the actor
        self.parked: dict[str, ParkedAdd] = {}

    def wake(self, transactional_id: str) -> None:
        """The id's state moved (or its append failed): its parked AddPartitionsToTxn tries again."""
        w = self.parked.get(transactional_id)
        if w is not None and not w.combined and not w.fut.done():
            w.fut.set_result(None)

    def stop_tasks(self) -> None:
        for t in self.tasks:
            t.cancel()
        self.tasks = []
        for w in self.parked.values():  # they retry and are routed again (NOT_COORDINATOR, or the new load)
            if not w.fut.done():
                w.fut.set_result(None)


class ParkedAdd:
    """An AddPartitionsToTxn that found its id's previous transaction still completing (markers going out):
    instead of answering CONCURRENT_TRANSACTIONS at once, the handler waits for ``fut``: ``None`` = the state
    moved, try again; a dict = the answer, when the Ongoing record went out with the Complete one
    (``combined``, TxnCoordinatorShard.markers_written's ``then_add``)."""

    __slots__ = ("producer_id", "producer_epoch", "partitions", "fut", "combined")

    def __init__(self, producer_id: int, producer_epoch: int, partitions, fut: asyncio.Future):
        self.producer_id, self.producer_epoch, self.partitions, self.fut = producer_id, producer_epoch, partitions, fut
        self.combined = False
