"""``TransactionManager``: the producer's id, epoch and sequences, and the AddPartitionsToTxn in flight (the
parts of Kafka's client ``TransactionManager`` that run with the Sender; the transaction's state and valid
moves are ``TransactionState``, rafka/producer/txn_manager.py). The ``Sender`` (rafka/producer/sender.py)
holds one and runs it on its thread; ``Transactions`` and ``send_batch`` call it from the user's thread.
It calls brokers and the transaction coordinator through the producer's transport.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
from typing import Any, Callable

from protocol.errors import ConcurrentTransactionsError, for_code
from protocol.names import broker_name
from protocol.txn_messages import AddPartitionsToTxnRequest
from rafka.metadata import ClusterMetadata
from rafka.producer.accumulator import RecordAccumulator, monotonic_ms
from rafka.producer.txn_manager import TransactionState
from rafka.structs import TopicPartition
from rafka.transport import Transport

ADD_WRITE_WAIT_S = 0.005  # add_partitions_now's wait for the channel's I/O thread to write the request

log = logging.getLogger("rafka.producer")


class TransactionManager:
    def __init__(
        self, cluster: str, config, accumulator: RecordAccumulator, metadata: ClusterMetadata, transport: Transport
    ):
        self.cluster = cluster
        self.cfg = config
        self.acc = accumulator
        self.metadata = metadata
        self.transport = transport
        self.wakeup: Callable[[], None] = lambda: None  # set by the Sender: wakes its loop
        self.producer_id = -1
        self.producer_epoch = -1
        # per partition: the next sequence to assign and the last one acknowledged (Kafka's TxnPartitionMap)
        self.next_seq: dict[TopicPartition, int] = collections.defaultdict(int)
        self.last_acked: dict[TopicPartition, int] = collections.defaultdict(lambda: -1)
        self.reset_pending = False  # KIP-360: a new producer id once nothing is in flight
        self.resets = 0
        self.pid_retry_at = 0.0
        self._pid_warnings = 0
        # transactions (rafka/producer/txn_manager.py): set by the Producer; partitions are added before they are sent
        self.txn: TransactionState | None = None
        self.txn_client = None
        self._adding: tuple[Any, list[TopicPartition]] | None = None  # the AddPartitionsToTxn in flight
        self.add_retry_at, self._warmed = 0.0, set()  # (_warmed: partitions whose leader _warm found)
        # _adding is started from the Sender's loop and from the caller's thread (add_partitions_now)
        self._add_lock = threading.Lock()

    # -- producer id -------------------------------------------------------------------------------
    def ensure_producer_id(self, now: float) -> bool:
        """An idempotent producer's id and epoch from a live broker (``init_producer_id``); False (retry at
        ``pid_retry_at``) when no broker gave one."""
        if now < self.pid_retry_at:
            return False
        brokers = list(self.metadata.brokers().items())
        random.shuffle(brokers)
        last: BaseException | None = None
        for broker_id, info in brokers:
            if info.get("alive") is False:
                continue
            try:
                broker = self.transport.get_actor(broker_name(self.cluster, broker_id))
                resp = self.transport.get(
                    self.transport.call(broker, "init_producer_id"), timeout=self.cfg.request_timeout_ms / 1000
                )
            except Exception as exc:  # noqa: BLE001 - try the next broker
                last = exc
                continue
            code = resp.get("error_code", 0)
            if code:
                last = for_code(code)(resp.get("error_message"))
                continue
            self.producer_id = int(resp["producer_id"])
            self.producer_epoch = int(resp.get("producer_epoch", 0))
            log.debug("producer id %d epoch %d from broker %d", self.producer_id, self.producer_epoch, broker_id)
            self.next_seq.clear()
            self.last_acked.clear()
            self.resequence()
            return True
        (log.warning if self._pid_warnings == 0 else log.debug)(
            "could not get a producer id yet: %s", last or "no live broker"
        )
        self._pid_warnings += 1
        self.pid_retry_at = now + self.cfg.retry_backoff_ms
        return False

    def reset_producer_id(self) -> None:
        """A sequence gap at a leader (KIP-360): drop the id; the loop takes a new one and re-sequences."""
        log.warning("producer id %d has a sequence gap: taking a new one and re-sequencing", self.producer_id)
        self.reset_pending = False
        self.producer_id = -1
        self.resets += 1

    def resequence(self) -> None:
        """Batches sealed under an earlier producer id (retries waiting in the queues) take the new id and
        sequences from 0 in queue order, so the leader sees the producer start afresh (KIP-360)."""
        for tp, batches in self.acc.sealed().items():
            for batch in batches:
                if batch.producer_id != self.producer_id:
                    seq = self.next_seq[tp]
                    self.next_seq[tp] = (seq + batch.record_count) & 0x7FFFFFFF
                    batch.reseal(self.producer_id, self.producer_epoch, seq)

    # -- transactions ------------------------------------------------------------------------------
    def use_transaction(self, txn: TransactionState, client) -> None:
        self.txn, self.txn_client = txn, client

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """The coordinator's producer id/epoch (InitProducerId): sequences start again at 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.next_seq.clear()
        self.last_acked.clear()
        self.wakeup()

    def add_partitions_now(self) -> None:
        """Send the AddPartitionsToTxn of the partitions queued so far from the caller's thread, at once, when
        none is in flight and the coordinator is known (else the loop sends it: finding the coordinator
        blocks). ``send_batch`` calls it once every partition of the topic has a record, and at the latest
        once the call's records are placed: the loop gets the GIL only after the 5 ms switch interval and
        its turn, often after the previous transaction's markers were done, when the coordinator can no
        longer fold the Ongoing record into their CompleteCommit append (docs/internals.md, Transactions)."""
        if self.txn is None or self.txn_client is None or not self.txn_client.found:
            self.wakeup()
            return
        started = False
        if self._add_lock.acquire(blocking=False):  # (held: the loop is sending one right now)
            try:
                if self._adding is None:
                    self._add_partitions(monotonic_ms())
                    started = self._adding is not None
            finally:
                self._add_lock.release()
        self.wakeup()
        if started:
            # see it written before this thread goes back to placing records: the channel's I/O thread needs the
            # GIL, which the caller's C loop would hold for milliseconds; an AddPartitionsToTxn that reaches the
            # coordinator after the previous transaction's markers costs an append of its own
            self.transport.sync_io(ADD_WRITE_WAIT_S)

    def add_partitions(self, now: float) -> tuple[list[TopicPartition], BaseException] | None:
        """The Sender loop's turn (under the lock ``add_partitions_now`` also takes): collect the answer of the
        AddPartitionsToTxn in flight or send the next one. ``(partitions, error)`` when the coordinator refused
        them for good: the Sender fails their batches."""
        with self._add_lock:
            return self._add_partitions(now)

    def add_retry_wait(self, now: float) -> float | None:
        """How long until an AddPartitionsToTxn is retried, None when none waits for its backoff."""
        txn = self.txn
        if txn is not None and self._adding is None and txn.pending and self.add_retry_at > now:
            return self.add_retry_at - now
        return None

    def _add_partitions(self, now: float) -> tuple[list[TopicPartition], BaseException] | None:
        """Kafka's AddPartitionsToTxnHandler: one request for every partition written to and not yet in the
        transaction; their batches wait (``Sender._can_send``) until it is answered."""
        txn = self.txn
        assert txn is not None
        if self._adding is not None:
            call, tps = self._adding
            res = call.poll(0.0)
            if res is None:
                self._warm(tps)
                return None
            code = res.get("error_code", 0)
            if code == 0:
                txn.added(tps, res)  # (before _adding clears: a reader sees them in flight or added)
                self._adding = None
                return None
            self._adding = None
            err = for_code(code)(res.get("error_message"))
            if txn.is_retriable(code):
                # the previous transaction's markers are still going out: Kafka retries this one after 20 ms
                concurrent = code == ConcurrentTransactionsError.code
                self.add_retry_at = now + (
                    min(20, self.cfg.retry_backoff_ms) if concurrent else self.cfg.retry_backoff_ms
                )
                return None
            err = txn.fail(err)
            return tps, err  # their records can never be sent in this transaction
        pending = sorted(txn.pending)
        if not pending or self.producer_id < 0 or now < self.add_retry_at:
            return None
        if txn.state not in ("IN_TRANSACTION", "COMMITTING_TRANSACTION"):  # (aborting: nothing more to add)
            return None
        req = AddPartitionsToTxnRequest(
            txn.transactional_id,
            self.producer_id,
            self.producer_epoch,
            tuple((tp.topic, tp.partition) for tp in pending),
            want_tokens=True,
        )
        call = self.txn_client.start(req)
        call.poll(0.0)  # sends it
        if call.ref is not None:  # wake the loop when the answer comes, not at the next 50 ms tick
            self.transport.future(call.ref).add_done_callback(lambda _f: self.wakeup())
        self._adding = (call, pending)
        return None

    def _warm(self, tps: list[TopicPartition]) -> None:
        """While an AddPartitionsToTxn is in flight (on the loop's thread), look up the leaders of its partitions
        and open the connections their batches will go on: the producer's first batches to a new topic then go
        as soon as it is answered, not after a replica lookup (a broker call) per partition and a connect."""
        todo = [tp for tp in tps if tp not in self._warmed]
        if not todo:
            return
        self._warmed.update(todo)
        try:
            self.metadata.lookup_leaders(todo)
        except Exception:  # noqa: BLE001 - a metadata hiccup: the sends look them up again
            log.debug("looking up leaders of %s", todo, exc_info=True)
        for tp in todo:
            try:
                leader = self.metadata.leader(tp)
            except Exception:  # noqa: BLE001 - unknown or unreachable now: the send looks it up again
                continue
            if leader is not None:
                self.transport.warm(leader[0])
