"""The producer's background sender thread (Kafka's ``Sender`` + the idempotent part of ``TransactionManager``).

Loop: expire batches older than ``delivery_timeout_ms``; find partitions with ready batches whose
leader is known and whose in-flight budget allows; drain them; send the pass's produce calls together,
one request per leader process (``Transport.produce_many``: Kafka's one ProduceRequest per broker), whose
answers wake the loop; handle the responses that arrived.

In-flight budget per partition: with idempotence at most ``max_in_flight_requests_per_connection`` (<= 5)
*batches*, so the leader's 5-batch duplicate window covers every retry; without it, that many *calls*. A
call carries several ready batches of a partition (up to ``max_request_size``; 96 KB over Ray, whose
inline-argument limit is 100 KB). Ray does not run calls to an async actor in order (600-1,200 inversions
in 20,000 calls, actors/replication/call_order.py), so ordering is also enforced by ``_can_send`` and the
OUT_OF_ORDER_SEQUENCE retry below.

Idempotence: a producer id/epoch comes from a broker's ``init_producer_id()``; sequences are assigned
per partition when a batch is first drained and baked into its bytes, which retries resend unchanged.
A retried batch goes alone and ahead of newer ones. OUT_OF_ORDER_SEQUENCE for a batch whose
predecessor is itself unresolved is retried (it arrived first). Otherwise the leader has a real gap (it
lost acknowledged batches, e.g. to an unclean election): as since KIP-360, the batch is retried, nothing
more is sent until no call is in flight, then a new producer id re-sequences every unacknowledged batch
from 0, in order (Kafka bumps the epoch instead). Only what the leader lost is lost. A transactional
producer's id and epoch are its coordinator's: there such an error fails the batch (abort only).

Errors: retriable Kafka errors (``err.retriable``), a dead or unavailable leader actor and request
timeouts are retried after ``retry_backoff_ms`` (exponential up to ``retry_backoff_max_ms``) while
``retries`` and ``delivery_timeout_ms`` allow, with a metadata refresh for leadership errors. A batch of
several records refused as too large (MESSAGE_TOO_LARGE) is split and its parts sent (KIP-126,
``RecordAccumulator.split``). Anything else fails the batch's futures."""

from __future__ import annotations

import collections
import logging
import threading

from actors.channels.ray_errors import kafka_error_for
from protocol.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceNumberError,
    RequestTimedOutError,
    UnknownProducerIdError,
    for_code,
    refresh_metadata,
)
from protocol.messages import ProduceRequest, ProduceResponse
from rafka.metadata import ClusterMetadata
from rafka.producer.accumulator import ProducerBatch, RecordAccumulator, monotonic_ms
from rafka.producer.transaction_manager import TransactionManager
from rafka.structs import TopicPartition
from rafka.transport import RAY, Transport

log = logging.getLogger("rafka.producer")

_RESET_PID_ERRORS = {OutOfOrderSequenceNumberError.code, InvalidProducerEpochError.code, UnknownProducerIdError.code}
INLINE_CALL_BYTES = 96 * 1024


class InFlight:
    __slots__ = ("ref", "future", "tp", "batches", "leader", "sent_ms", "abandoned")

    def __init__(self, tp: TopicPartition, batches: list[ProducerBatch], leader: int, sent_ms: float):
        self.tp, self.batches, self.leader, self.sent_ms = tp, batches, leader, sent_ms
        self.ref = self.future = None  # set when the pass's calls go out (Sender._issue)
        self.abandoned = False


class Sender(threading.Thread):
    def __init__(
        self,
        cluster: str,
        config,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        client_id: str,
        transport: Transport = RAY,
    ):
        super().__init__(name=f"rafka-sender-{client_id}", daemon=True)
        self.cluster = cluster
        self.transport = transport
        self.cfg = config
        self.acc = accumulator
        self.metadata = metadata
        self.idempotent = config.enable_idempotence
        self._wake = threading.Event()
        self._responses: collections.deque[InFlight] = collections.deque()
        self._in_flight: dict[int, InFlight] = {}
        self._round: list[tuple[tuple, InFlight]] = []  # this pass's produce calls, sent together (_issue)
        self._tp_batches: dict[TopicPartition, int] = collections.defaultdict(int)
        self._tp_calls: dict[TopicPartition, int] = collections.defaultdict(int)
        # the producer id, epoch and sequences, and the AddPartitionsToTxn of a transactional producer
        self.transaction_manager = tm = TransactionManager(cluster, config, accumulator, metadata, transport)
        tm.wakeup = self._wake.set
        # Ray calls stay under Ray's inline-argument limit (100 KB) so they skip the object store (a single
        # larger batch still goes, alone); the TCP channel takes requests up to max.request.size
        self._max_call_bytes = config.max_request_size
        if getattr(transport, "inline_calls_only", True):
            self._max_call_bytes = min(config.max_request_size, INLINE_CALL_BYTES)
        self.running = True
        self.force_close = False
        self.fatal_error: BaseException | None = None
        accumulator.wakeup = self._wake.set
        accumulator.wake_by = self.wake_by
        self._sleep_until = 0.0  # monotonic ms the loop sleeps until; 0.0 while it runs

    def wakeup(self) -> None:
        self._wake.set()

    @property
    def producer_id(self) -> int:
        return self.transaction_manager.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.transaction_manager.producer_epoch

    def add_partitions_now(self) -> None:
        """The transaction's AddPartitionsToTxn from the caller's thread, now (TransactionManager)."""
        self.transaction_manager.add_partitions_now()

    def wake_by(self, deadline_ms: float) -> None:
        """Wake the loop if it sleeps past ``deadline_ms`` (a new batch's linger deadline) or is running (it
        may have scanned the accumulator before the batch came: one more pass, then it sleeps right)."""
        until = self._sleep_until
        if until == 0.0 or deadline_ms < until:
            self._wake.set()

    # -- main loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while self.running or (not self.force_close and (self.acc.incomplete_snapshot() or self._in_flight)):
                self._run_once()
        except BaseException as exc:  # noqa: BLE001 - record and fail everything rather than hang users
            if self.transport.available():
                log.exception("producer sender thread crashed")
                self.fatal_error = exc
            else:
                self.fatal_error = KafkaError("Ray was shut down under a running producer")
        self._abort_everything(self.fatal_error or KafkaError("producer closed before the record was sent"))

    def _run_once(self) -> None:
        now = monotonic_ms()
        while self._responses:
            self._handle(self._responses.popleft(), now)
        for batch in self.acc.expired(now):
            # a batch waiting to be retried says why it was retried: the leader's last answer is the cause
            # (NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas, ...)
            last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
            timeout = KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.tp}: "
                f"{now - batch.created_ms:.0f} ms has passed since batch creation{last}"
            )
            timeout.__cause__ = batch.last_error
            self._fail(batch, timeout)
        self._check_request_timeouts(now)
        wait_ms = 50.0
        tm = self.transaction_manager
        if tm.txn is not None:
            refused = tm.add_partitions(now)
            if refused is not None:
                tps, err = refused
                for tp in tps:  # their records can never be sent in this transaction
                    for batch in self.acc.drain(tp, 1 << 62, 1 << 30):
                        self._fail(batch, err)
            retry_ms = tm.add_retry_wait(now)
            if retry_ms is not None:
                wait_ms = min(wait_ms, retry_ms)  # retry AddPartitionsToTxn on time, not at the tick
        elif self.idempotent and tm.reset_pending and not self._in_flight:
            tm.reset_producer_id()
        if tm.txn is None and self.idempotent and tm.producer_id < 0:
            if not tm.ensure_producer_id(now):
                wait_ms = max(1.0, tm.pid_retry_at - now)
                self._wake.wait(wait_ms / 1000.0)
                self._wake.clear()
                return
        ready, next_ms = self.acc.ready(now, self._can_send)
        wait_ms = min(wait_ms, next_ms)
        for tp in ready:
            if not self._send(tp, now):
                wait_ms = min(wait_ms, float(self.cfg.retry_backoff_ms))
        self._issue()
        if self._responses:
            return
        wait_ms = max(wait_ms, 0.5)
        self._sleep_until = now + wait_ms
        self._wake.wait(wait_ms / 1000.0)
        self._sleep_until = 0.0
        self._wake.clear()

    def _can_send(self, tp: TopicPartition, first: ProducerBatch) -> bool:
        """The in-flight gate (Ray does not keep an async actor's calls in order): a retried batch goes only
        when nothing of its partition is in flight, and with idempotence a producer id's first batch on a
        partition goes alone (a leader takes any first sequence of an unknown producer)."""
        calls = self._tp_calls[tp]
        if first.attempts and calls:
            return False
        tm = self.transaction_manager
        if tm.reset_pending or (self.idempotent and tm.producer_id < 0):
            return False  # the in-flight calls drain first, then a new producer id re-sequences the rest
        if tm.txn is not None and (tm.producer_id < 0 or tp in tm.txn.pending):
            return False  # not in the transaction yet: AddPartitionsToTxn first
        if self.idempotent:
            if calls and tm.last_acked[tp] < 0:
                return False
            return self._tp_batches[tp] < self.cfg.max_in_flight_requests_per_connection
        return calls < self.cfg.max_in_flight_requests_per_connection

    # -- sending -----------------------------------------------------------------------------------
    def _send(self, tp: TopicPartition, now: float) -> bool:
        try:
            leader = self.metadata.leader(tp)
        except KafkaError as exc:
            for batch in self.acc.drain(tp, 1 << 62, 1 << 30):
                self._fail(batch, exc)
            return True
        except Exception:  # noqa: BLE001 - GCS hiccup: try again after the backoff
            log.warning("metadata read failed for %s", tp, exc_info=True)
            return False
        if leader is None:
            self.metadata.request_update()
            return False
        handle, leader_id, _epoch = leader
        tm = self.transaction_manager
        if self.idempotent:
            budget = self.cfg.max_in_flight_requests_per_connection - self._tp_batches[tp]
            if tm.last_acked[tp] < 0:
                budget = 1
        else:
            budget = 1 << 30
        batches = self.acc.drain(tp, self._max_call_bytes, budget)
        if not batches:
            return True
        for batch in batches:
            if batch.payload is None:
                if self.idempotent:
                    seq = tm.next_seq[tp]
                    tm.next_seq[tp] = (seq + batch.record_count) & 0x7FFFFFFF
                    batch.seal(tm.producer_id, tm.producer_epoch, seq, tm.txn is not None)
                else:
                    batch.seal(-1, -1, -1)
        payload = batches[0].payload if len(batches) == 1 else b"".join(b.payload for b in batches)
        txn = tm.txn.produce_fields(tp) if tm.txn is not None else {}  # (the id, and a verification token)
        req = ProduceRequest(payload, self.cfg.acks, self.cfg.request_timeout_ms, **txn)
        inf = InFlight(tp, batches, leader_id, now)
        self._in_flight[id(inf)] = inf
        self._tp_batches[tp] += len(batches)
        self._tp_calls[tp] += 1
        self._round.append(((handle, tp.topic, tp.partition, req), inf))
        return True

    def _issue(self) -> None:
        """The pass's produce calls at once: one request per leader process (Kafka's Sender sends one
        ProduceRequest per broker with every ready partition led there; ``Transport.produce_many``)."""
        todo, self._round = self._round, []
        refs = self.transport.produce_many([item for item, _inf in todo]) if todo else []
        for (_item, inf), ref in zip(todo, refs):
            inf.ref, inf.future = ref, self.transport.future(ref)
            inf.future.add_done_callback(lambda _f, inf=inf: self._arrived(inf))

    def _arrived(self, inf: InFlight) -> None:
        self._responses.append(inf)
        self._wake.set()

    def _check_request_timeouts(self, now: float) -> None:
        limit = self.cfg.request_timeout_ms + 1000  # the leader answers REQUEST_TIMED_OUT itself first
        for inf in list(self._in_flight.values()):
            if now - inf.sent_ms > limit:
                inf.abandoned = True
                self._retire(inf)
                err = RequestTimedOutError(f"no produce response from the leader of {inf.tp} in {limit} ms")
                self.metadata.forget_handle(inf.tp, inf.leader)
                for batch in inf.batches:
                    self._retry_or_fail(batch, err, now)

    def _retire(self, inf: InFlight) -> None:
        if self._in_flight.pop(id(inf), None) is not None:
            self._tp_batches[inf.tp] -= len(inf.batches)
            self._tp_calls[inf.tp] -= 1

    # -- responses ---------------------------------------------------------------------------------
    def _handle(self, inf: InFlight, now: float) -> None:
        if inf.abandoned:
            return
        self._retire(inf)
        err: BaseException | None = None
        resp = ProduceResponse()
        try:
            resp = ProduceResponse.from_dict(inf.future.result())
        except Exception as exc:  # noqa: BLE001 - classified below
            err = _classify(exc)
            if isinstance(err, NotLeaderOrFollowerError):
                self.metadata.forget_handle(inf.tp, inf.leader)
        if err is None and resp.error_code:
            err = for_code(resp.error_code)(resp.error_message or None)
        if err is None:
            base = resp.base_offset
            lat = resp.log_append_time or -1
            tm = self.transaction_manager
            for batch in inf.batches:
                if self.idempotent and batch.producer_id == tm.producer_id:
                    tm.last_acked[inf.tp] = max(tm.last_acked[inf.tp], batch.base_sequence + batch.record_count - 1)
                batch.complete(base if self.cfg.acks != 0 else -1, lat)
                self.acc.finish(batch)
                base += batch.record_count
            return
        if refresh_metadata(err.code) or err.code == MessageTooLargeError.code:
            # (MESSAGE_TOO_LARGE: the topic's max.message.bytes may have been lowered since the metadata was
            # read; send_batch sizes its bulk batches by it, rafka/producer/send_batch.py bulk_bytes)
            self.metadata.request_update()
            if err.code == NotLeaderOrFollowerError.code:
                self.metadata.forget_handle(inf.tp, inf.leader)
        for batch in inf.batches:
            self._retry_or_fail(batch, err, now)

    def _retry_or_fail(self, batch: ProducerBatch, err: BaseException, now: float) -> None:
        code = getattr(err, "code", -1)
        tm = self.transaction_manager
        if isinstance(err, DuplicateSequenceNumberError):
            batch.complete(-1)  # Kafka: already written, offset unknown
            self.acc.finish(batch)
            return
        if (
            code == MessageTooLargeError.code
            and batch.record_count > 1
            and batch.producer_id == (tm.producer_id if self.idempotent else -1)
            and now - batch.created_ms < self.cfg.delivery_timeout_ms
            and not self.force_close
        ):
            parts = self.acc.split(batch, now)  # (max.message.bytes lowered since send_batch sized its batches)
            log.info("%s: a batch refused as too large goes again as %d: %s", batch.tp, len(parts), err)
            return
        retriable = getattr(err, "retriable", False)
        overtaken = False
        if (
            isinstance(err, OutOfOrderSequenceNumberError)
            and self.idempotent
            and batch.producer_id == tm.producer_id
            and batch.base_sequence != (tm.last_acked[batch.tp] + 1) & 0x7FFFFFFF
        ):
            # it overtook an earlier batch of its partition (still in flight, or failed and coming
            # back): resend it, without backoff, once nothing of the partition is in flight
            retriable = overtaken = True
        if (
            not retriable
            and tm.txn is None
            and self.idempotent
            and code in _RESET_PID_ERRORS
            and batch.producer_id == tm.producer_id
        ):
            # a real gap at the leader (KIP-360): retried under a new producer id, re-sequenced
            retriable = tm.reset_pending = True
        batch.last_error = err
        expired = now - batch.created_ms >= self.cfg.delivery_timeout_ms
        if retriable and batch.attempts < self.cfg.retries and not expired and not self.force_close:
            log.debug(
                "retrying %d record(s) of %s (pid %d seq %d, attempt %d): %s",
                batch.record_count,
                batch.tp,
                batch.producer_id,
                batch.base_sequence,
                batch.attempts + 1,
                err,
            )
            self.acc.reenqueue(batch, now, backoff=not overtaken)
            return
        if expired and retriable:
            cause = err
            err = KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.tp}: delivery_timeout_ms "
                f"({self.cfg.delivery_timeout_ms}) passed; last error: {err}"
            )
            err.__cause__ = cause
        self._fail(batch, err)

    def _fail(self, batch: ProducerBatch, err: BaseException) -> None:
        txn = self.transaction_manager.txn
        if txn is not None:
            # the transaction can only be aborted now, or the producer is fenced (INVALID_PRODUCER_EPOCH from
            # the leader: the record fails with ProducerFencedError)
            err = txn.fail(err)
        batch.fail(err)
        self.acc.finish(batch)

    def _abort_everything(self, err: BaseException) -> None:
        for inf in list(self._in_flight.values()):
            inf.abandoned = True
            self._retire(inf)
        for batch in self.acc.abort_all(err):
            self._fail(batch, err)
        for batch in self.acc.incomplete_snapshot():
            self._fail(batch, err)


def _classify(exc: BaseException) -> BaseException:
    """A produce call's exception as a Kafka error: dead/unavailable actors become NOT_LEADER_OR_FOLLOWER
    (actors.channels.ray_errors)."""
    return kafka_error_for(exc, "leader replica actor", "produce", timeout_error=KafkaTimeoutError)
