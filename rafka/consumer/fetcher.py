"""The consumer's fetcher (Kafka's ``Fetcher``), over the consumer's ``SubscriptionState`` (rafka/consumer/subscription.py).

Pipelining as in the Java consumer: ``poll`` returns records that are already buffered and, before
returning, sends the next ``fetch`` to each partition's leader replica actor. Ray delivers the reply on
its own threads while the application processes the batch it got, so the following ``poll`` usually
finds data waiting: one fetch buffered plus one in flight per partition. Fetches long-poll on the
leader for ``fetch_max_wait_ms`` / ``fetch_min_bytes``.

Decoding happens in ``poll`` on the caller's thread (``storage.records.decode_records``, the fast path),
only for partitions whose records are handed out; control batches are skipped; records below the
position (a fetch returns whole batches) are dropped.

Each partition's state carries an ``epoch`` bumped by every seek/reset/reassign: replies to fetches sent
under an older epoch are discarded, so a seek is never followed by stale records.

KIP-392 (``client_rack`` set): fetches carry the rack; a leader answering ``preferred_read_replica`` sends the
partition's next fetches to that replica until ``metadata_max_age_ms`` passes or it answers an error, then back
to the leader (Kafka's Fetcher, librdkafka alike). ListOffsets stays on the leader.

Not thread-safe: one thread drives a consumer, as in Kafka.
"""

from __future__ import annotations

import logging
import time

from actors.channels.ray_errors import kafka_error_for
from protocol.errors import (
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    for_code,
    refresh_metadata,
)
from protocol.messages import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from rafka.consumer.read_committed import AbortedTransactionFilter
from rafka.consumer.subscription import SubscriptionState, TopicPartitionState
from rafka.metadata import ClusterMetadata
from rafka.producer.gc_pause import gc_paused
from rafka.structs import ConsumerRecord, TopicPartition
from rafka.transport import RAY, Transport
from storage.records import decode_batch_into, iter_batch_headers

log = logging.getLogger("rafka.consumer")

EARLIEST, LATEST = -2, -1


class CompletedFetch:
    """The raw bytes of one fetch reply, decoded on first use."""

    __slots__ = ("records", "raw", "next_offset", "index", "aborted")

    def __init__(self, raw: bytes, next_offset: int, aborted=None):
        self.raw = raw
        self.next_offset = next_offset
        self.records: list | None = None
        self.index = 0
        self.aborted = aborted  # read_committed: the fetch's aborted transactions (None: read_uncommitted)

    def decode(self, st: TopicPartitionState, check_crcs: bool) -> list:
        if self.records is None:
            with gc_paused():  # one object per record, all kept: the collector's passes would free nothing
                self.records = self._decode(st, check_crcs)
            self.raw = b""
        return self.records

    def _decode(self, st: TopicPartitionState, check_crcs: bool) -> list:
        """The records of ``raw`` from the partition's position on (control and aborted batches left out)."""
        topic, part = st.tp
        start = st.position
        out: list = []
        # CRCs (check_crcs) are checked once, here; decoding below skips them.
        keep = AbortedTransactionFilter(self.aborted).keep if self.aborted is not None else None
        for pos, h in iter_batch_headers(self.raw, validate=check_crcs):
            if keep is not None and not keep(h, self.raw, pos):
                continue  # an aborted transaction's batch or a marker: never handed out
            if h.is_control or h.next_offset <= start:
                continue
            # ConsumerRecords built by the C decoder in one step, each with its own batch's leader epoch
            decode_batch_into(self.raw, pos, h, out, (ConsumerRecord, topic, part, h.partition_leader_epoch, start))
        return out

    def remaining(self) -> int:
        return 0 if self.records is None else len(self.records) - self.index


class Fetcher:
    def __init__(
        self,
        metadata: ClusterMetadata,
        config,
        transport: Transport = RAY,
        subscriptions: SubscriptionState | None = None,
    ):
        self.metadata = metadata
        self.cfg = config
        self.transport = transport
        self.subscriptions = subscriptions if subscriptions is not None else SubscriptionState()

    # -- assignment (the SubscriptionState's) -------------------------------------------------------
    @property
    def states(self) -> dict[TopicPartition, TopicPartitionState]:
        return self.subscriptions.assignment

    def assign(self, partitions) -> None:
        self.subscriptions.assign(partitions)

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        return self.subscriptions.state(tp)

    # -- offsets -----------------------------------------------------------------------------------
    def list_offset(self, tp: TopicPartition, timestamp: int, timeout_ms: float) -> tuple[int, int, int]:
        """``(offset, timestamp, leader_epoch)`` from the leader's ListOffsets; retries leadership errors."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        last: BaseException | None = None
        while True:
            try:
                leader = self.metadata.leader(tp)
                if leader is None:
                    raise NotLeaderOrFollowerError(f"{tp} has no leader")
                handle, leader_id, epoch = leader
                left = max(0.01, deadline - time.monotonic())
                req = ListOffsetsRequest(timestamp, current_leader_epoch=epoch, isolation_level=self.cfg.isolation_id)
                resp = ListOffsetsResponse.from_dict(
                    self.transport.get(self.transport.call(handle, "list_offsets", req), timeout=left)
                )
                if resp.error_code:
                    raise for_code(resp.error_code)(resp.error_message or None)
                return resp.offset, resp.timestamp, resp.leader_epoch
            except Exception as exc:  # noqa: BLE001 - classified: retriable ones loop
                err = classify(exc)
                if not getattr(err, "retriable", False):
                    raise err from exc
                last = err
                self.metadata.forget_handle(tp)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"list offsets for {tp} did not finish in {timeout_ms:.0f} ms: {last}")
            time.sleep(self.cfg.retry_backoff_ms / 1000.0)
            self.metadata.refresh([tp.topic], force=True)

    def resolve_positions(self, timeout_ms: float) -> None:
        """Give every partition without a position one: pending seek_to_*, else ``auto_offset_reset``."""
        for st in self.states.values():
            if st.position is not None and st.reset is None:
                continue
            target = st.reset
            if target is None:
                policy = self.cfg.auto_offset_reset
                if policy == "none":
                    raise NoOffsetForPartitionError(f"no position for {st.tp} and auto_offset_reset is 'none'")
                target = EARLIEST if policy == "earliest" else LATEST
            offset, _, _ = self.list_offset(st.tp, target, timeout_ms)
            st.seek(offset)

    # -- fetching ----------------------------------------------------------------------------------
    def send_fetches(self) -> None:
        now = time.monotonic()
        cfg = self.cfg
        for st in self.states.values():
            if st.paused or st.in_flight is not None or st.fetch_position is None or st.reset is not None:
                continue
            if len(st.buffer) > 1 or now < st.retry_at:
                continue
            try:
                leader = self.metadata.leader(st.tp)
            except KafkaError:
                st.retry_at = now + cfg.retry_backoff_ms / 1000.0
                continue
            if leader is None:
                self.metadata.request_update()
                st.retry_at = now + cfg.retry_backoff_ms / 1000.0
                continue
            handle, leader_id, epoch = leader
            source, handle = self._read_replica(st, now, leader_id, handle)
            req = FetchRequest(
                st.fetch_position,
                max_bytes=cfg.max_partition_fetch_bytes,
                max_wait_ms=cfg.fetch_max_wait_ms,
                min_bytes=cfg.fetch_min_bytes,
                current_leader_epoch=epoch,
                isolation_level=cfg.isolation_id,
                client_rack=cfg.client_rack or None,
            )
            ref = self.transport.call(handle, "fetch", req)
            st.in_flight = (ref, st.epoch, source, source != leader_id)

    def _read_replica(self, st: TopicPartitionState, now: float, leader_id: int, leader_handle) -> tuple[int, object]:
        """``(broker, replica handle)`` the partition's fetch goes to: the preferred read replica while it is in
        force and can be found, else the leader (Kafka's Fetcher.selectReadReplica)."""
        preferred = st.read_replica(now)
        if preferred is None or preferred == leader_id:
            return leader_id, leader_handle
        handle = self.metadata.replica_handle(st.tp, preferred)
        if handle is None:
            log.debug("preferred read replica %s of %s not found: fetching from the leader", preferred, st.tp)
            st.clear_preferred_read_replica()
            return leader_id, leader_handle
        return preferred, handle

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for fetch replies and buffer them; True if any arrived."""
        refs = [st.in_flight[0] for st in self.states.values() if st.in_flight is not None]
        if not refs:
            if timeout_s > 0:
                time.sleep(min(timeout_s, self.cfg.retry_backoff_ms / 1000.0))
            return False
        ready, _ = self.transport.wait(refs, num_returns=1, timeout=max(0.0, timeout_s))
        if not ready:
            return False
        ready, _ = self.transport.wait(refs, num_returns=len(refs), timeout=0)
        done = set(ready)
        for st in list(self.states.values()):
            if st.in_flight is not None and st.in_flight[0] in done:
                self._complete(st)
        return True

    def _complete(self, st: TopicPartitionState) -> None:
        ref, epoch, source, to_follower = st.in_flight
        st.in_flight = None
        resp = FetchResponse()
        try:
            resp = FetchResponse.from_dict(self.transport.get(ref))
        except Exception as exc:  # noqa: BLE001
            err = classify(exc)
        else:
            err = for_code(resp.error_code)(resp.error_message or None) if resp.error_code else None
        if epoch != st.epoch:
            return  # a seek happened meanwhile
        if err is None and resp.preferred_read_replica >= 0:  # KIP-392: no records, read there from now on
            expires = time.monotonic() + self.cfg.metadata_max_age_ms / 1000.0
            st.update_preferred_read_replica(resp.preferred_read_replica, expires)
            log.debug("%s: reading from preferred replica %s", st.tp, resp.preferred_read_replica)
            return
        if err is not None and to_follower:  # the preferred replica failed: back to the leader at once
            st.clear_preferred_read_replica()
            log.debug("fetch of %s from follower %s failed (%s): back to the leader", st.tp, source, err)
            if isinstance(err, OffsetOutOfRangeError):
                return  # its log is behind the position (Kafka's Fetcher): the leader answers, no reset
        if err is None:
            st.high_watermark = resp.high_watermark
            st.log_start_offset = resp.log_start_offset
            st.last_stable_offset = resp.last_stable_offset
            raw = resp.records
            if raw:
                nxt = resp.next_offset  # the offset after the last batch: no walk over the batch headers
                st.buffer.append(CompletedFetch(raw, nxt, resp.aborted_transactions))
                st.fetch_position = max(st.fetch_position, nxt)
            return
        if isinstance(err, OffsetOutOfRangeError):
            if self.cfg.auto_offset_reset == "none":
                st.retry_at = float("inf")
                raise OffsetOutOfRangeError(
                    f"fetch offset {st.fetch_position} is out of range for {st.tp} and auto_offset_reset is 'none'"
                )
            log.info(
                "offset %s out of range for %s: resetting (%s)", st.fetch_position, st.tp, self.cfg.auto_offset_reset
            )
            st.reset = EARLIEST if self.cfg.auto_offset_reset == "earliest" else LATEST
            return
        st.retry_at = time.monotonic() + self.cfg.retry_backoff_ms / 1000.0
        if refresh_metadata(err.code):
            st.clear_preferred_read_replica()
            self.metadata.forget_handle(st.tp, source)
            return
        if not err.retriable:
            raise err
        log.debug("retriable fetch error for %s: %s", st.tp, err)

    # -- handing out records -----------------------------------------------------------------------
    def drain(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        left = max_records
        check = self.cfg.check_crcs
        kd, vd = self.cfg.key_deserializer, self.cfg.value_deserializer
        for st in self.states.values():
            if left <= 0:
                break
            if st.paused:
                continue
            while st.buffer and left > 0:
                cf = st.buffer[0]
                recs = cf.decode(st, check)
                take = recs[cf.index : cf.index + left]
                cf.index += len(take)
                if cf.index >= len(recs):
                    st.buffer.pop(0)
                    st.position = max(st.position, cf.next_offset)
                if take:
                    if kd is not None or vd is not None:
                        take = [
                            r._replace(
                                key=kd(r.key) if kd and r.key is not None else r.key,
                                value=vd(r.value) if vd and r.value is not None else r.value,
                            )
                            for r in take
                        ]
                    out.setdefault(st.tp, []).extend(take)
                    st.position = max(st.position, take[-1].offset + 1)
                    left -= len(take)
        if out and len(self.states) > 1:
            # rotate so the next poll starts with another partition (fairness)
            first = next(iter(out))
            st = self.states.pop(first)
            self.states[first] = st
        return out

    def has_buffered(self) -> bool:
        return any(st.buffer and not st.paused for st in self.states.values())


def classify(exc: BaseException) -> BaseException:
    """A replica call's exception as a Kafka error (actors.channels.ray_errors)."""
    return kafka_error_for(exc, "replica actor", timeout_error=KafkaTimeoutError)
