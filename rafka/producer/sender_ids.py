"""The ``Sender``'s producer ids and transactions (rafka/producer/sender.py): the idempotent producer's id from a broker
(``init_producer_id``), the coordinator's id and epoch for a transactional one, and the AddPartitionsToTxn of
the partitions a transaction writes to (Kafka's ``TransactionManager`` parts that run on the sender thread).
A mixin of ``Sender``: it uses the thread's state (metadata, transport, accumulator, sequences, wake event)."""

from __future__ import annotations

import logging
import random

from protocol.names import broker_name
from protocol.txn_messages import AddPartitionsToTxnRequest
from rafka.errors import ConcurrentTransactionsError, for_code
from rafka.producer.accumulator import monotonic_ms
from rafka.producer.txn_manager import TransactionState
from rafka.structs import TopicPartition

ADD_WRITE_WAIT_S = 0.005  # add_partitions_now's wait for the channel's I/O thread to write the request

log = logging.getLogger("rafka.producer")


class SenderIds:
    # -- producer id -------------------------------------------------------------------------------
    def _ensure_producer_id(self, now: float) -> bool:
        if now < self._pid_retry_at:
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
            self._next_seq.clear()
            self._last_acked.clear()
            self._resequence()
            return True
        (log.warning if self._pid_warnings == 0 else log.debug)(
            "could not get a producer id yet: %s", last or "no live broker"
        )
        self._pid_warnings += 1
        self._pid_retry_at = now + self.cfg.retry_backoff_ms
        return False

    # -- transactions ------------------------------------------------------------------------------
    def use_transaction(self, txn: TransactionState, client) -> None:
        self.txn, self.txn_client = txn, client

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """The coordinator's producer id/epoch (InitProducerId): sequences start again at 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next_seq.clear()
        self._last_acked.clear()
        self.wakeup()

    def add_partitions_now(self) -> None:
        """Send the AddPartitionsToTxn of the partitions queued so far from the caller's thread, at once, when
        none is in flight and the coordinator is known (else the loop sends it: finding the coordinator
        blocks). ``send_batch`` calls it once every partition of the topic has a record, and at the latest
        once the call's records are placed: the loop gets the GIL only after the 5 ms switch interval and
        its turn (17-35 ms after the call began for 10,000 records), often after the previous transaction's
        markers were done, when the coordinator can no longer fold the Ongoing record into their
        CompleteCommit append."""
        if self.txn is None or self.txn_client is None or not self.txn_client.found:
            self._wake.set()
            return
        started = False
        if self._add_lock.acquire(blocking=False):  # (held: the loop is sending one right now)
            try:
                if self._adding is None:
                    self._add_partitions(monotonic_ms())
                    started = self._adding is not None
            finally:
                self._add_lock.release()
        self._wake.set()
        if started:
            # see it written before this thread goes back to placing records: the channel's I/O thread needs the
            # GIL, which the caller's C loop would hold for milliseconds; an AddPartitionsToTxn that reaches the
            # coordinator after the previous transaction's markers costs an append of its own
            self.transport.sync_io(ADD_WRITE_WAIT_S)

    def _add_partitions(self, now: float) -> None:
        """Kafka's AddPartitionsToTxnHandler: one request for every partition written to and not yet in the
        transaction; their batches wait (``_can_send``) until it is answered."""
        txn = self.txn
        assert txn is not None
        if self._adding is not None:
            call, tps = self._adding
            res = call.poll(0.0)
            if res is None:
                self._warm(tps)
                return
            code = res.get("error_code", 0)
            if code == 0:
                txn.added(tps, res)  # (before _adding clears: a reader sees them in flight or added)
                self._adding = None
                return
            self._adding = None
            err = for_code(code)(res.get("error_message"))
            if txn.is_retriable(code):
                # the previous transaction's markers are still going out: Kafka retries this one after 20 ms
                concurrent = code == ConcurrentTransactionsError.code
                self._add_retry_at = now + (
                    min(20, self.cfg.retry_backoff_ms) if concurrent else self.cfg.retry_backoff_ms
                )
                return
            txn.fail(err)
            for tp in tps:  # their records can never be sent in this transaction
                for batch in self.acc.drain(tp, 1 << 62, 1 << 30):
                    self._fail(batch, err)
            return
        pending = sorted(txn.pending)
        if not pending or self.producer_id < 0 or now < self._add_retry_at:
            return
        if txn.state not in ("IN_TRANSACTION", "COMMITTING_TRANSACTION"):  # (aborting: nothing more to add)
            return
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
            self.transport.future(call.ref).add_done_callback(lambda _f: self._wake.set())
        self._adding = (call, pending)

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
