"""``Producer``: Kafka's producer API over rafka's replica actors.

    with rafka.Producer(cluster, acks="all", linger_ms=5) as p:
        fut = p.send("clicks", value=b"...", key=b"user-1")
        md = fut.get(timeout=10)          # RecordMetadata(topic, partition, offset, timestamp, ...)
        p.send("clicks", b"x", callback=lambda md, exc: ...)
        p.flush()

``send`` serializes, picks the partition (explicit, user ``partitioner``, or Kafka's default: murmur2
of the key, KIP-480 sticky for null keys), appends to the partition's open batch (blocking up to
``max_block_ms`` for metadata or buffer space) and returns at once; a background ``Sender`` thread
ships batches to partition leaders. A send to a topic the cluster does not have auto-creates it when
the brokers' ``auto.create.topics.enable`` is true (Kafka's default; ``num.partitions`` partitions,
``default.replication.factor`` replicas), as a Kafka producer's Metadata request does; with it off the
send waits ``max_block_ms`` for the topic and raises KafkaTimeoutError. See ``rafka.config.ProducerConfig`` for every setting.

Thread safety: ``send``/``flush`` may be called from many threads; ``close`` once.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, Callable, Iterable

from protocol.errors import IllegalStateError, KafkaTimeoutError, RecordTooLargeError
from rafka.channel import data_transport
from rafka.client_utils import resolve_cluster
from rafka.config import ProducerConfig
from rafka.metadata import ClusterMetadata
from rafka.producer.accumulator import RECORD_OVERHEAD, FutureRecordMetadata, RecordAccumulator, now_ms
from rafka.producer.gc_pause import gc_paused
from rafka.producer.partitioner import DefaultPartitioner, partition_for_key
from rafka.producer.producer_batch import RecordFutures
from rafka.producer.send_batch import _headers, place_and_append, to_bytes
from rafka.producer.sender import Sender
from rafka.producer.transactions import Transactions
from rafka.structs import PartitionInfo
from storage.topic import validate_topic_name

__all__ = ["Producer"]

_ids = itertools.count(1)


class Producer:
    def __init__(self, cluster: Any = None, **config: Any):
        self.config = ProducerConfig(**config)
        self.cluster_name = resolve_cluster(cluster)
        self.client_id = self.config.client_id or f"producer-{next(_ids)}"
        self.metadata = ClusterMetadata(self.cluster_name, self.config.metadata_max_age_ms)
        self.metadata.auto_create_topics = True  # a send to an unknown topic auto-creates it if the cluster allows
        self._default_partitioner = DefaultPartitioner()
        self._user_partitioner = self.config.partitioner
        self.accumulator = RecordAccumulator(
            self.config.batch_size,
            self.config.buffer_memory,
            self.config.linger_ms,
            self.config.compression_id,
            self.config.retry_backoff_ms,
            self.config.retry_backoff_max_ms,
            self.config.delivery_timeout_ms,
        )
        self.sender = Sender(
            self.cluster_name, self.config, self.accumulator, self.metadata, self.client_id, data_transport(self.config)
        )
        self._max_record_size = min(self.config.max_request_size, self.config.buffer_memory)
        self._plain_limit = self._max_record_size - RECORD_OVERHEAD - 61  # key + value bytes send's fast path takes
        self._sticky_of = self._default_partitioner.sticky.lookup
        self._legal_topics: set[str] = set()  # names already checked by validate_topic_name
        self._closed = False
        self._close_lock = threading.Lock()
        self._txn = Transactions(self) if self.config.transactional_id is not None else None
        cfg = self.config  # send()'s fast path takes records that need no serializer, partitioner or transaction
        self._plain = (
            cfg.key_serializer is None
            and cfg.value_serializer is None
            and self._user_partitioner is None
            and self._txn is None
        )
        self.sender.start()

    # -- sending -----------------------------------------------------------------------------------
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers=None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        callback: Callable | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; returns a future of its ``RecordMetadata``.

        ``callback(metadata, exception)`` runs on the sender thread when the record is acknowledged or
        fails. Raises at once (not through the future) for bad arguments, ``InvalidTopicError`` for a name
        Kafka forbids (before any metadata wait), ``RecordTooLargeError``, and ``KafkaTimeoutError`` when
        metadata or buffer space did not come within ``max_block_ms``.
        """
        if (
            self._plain
            and headers is None
            and partition is None
            and timestamp_ms is None
            and callback is None
            and (value is None or type(value) is bytes)
            and (key is None or type(key) is bytes)
            and topic in self._legal_topics
            and not self._closed
            and self.sender.fatal_error is None
        ):
            # the fast path for a plain record to a topic already sent to, inline (a call costs ~0.1 us of the
            # ~2 us a record takes here): the fresh cached metadata, the partition (murmur2 of the key, else the
            # current sticky one) and a lock-free append to its open batch (RecordAccumulator.append_plain).
            # Anything else (a new batch, a stale cache, a size to check against the limits) takes the full
            # path below, from the start, so this path never decides anything alone.
            tm = self.metadata.topic(topic)
            if (
                tm is not None
                and tm.partitions
                and (len(key) if key else 0) + (len(value) if value else 0) <= self._plain_limit
            ):
                part = self._sticky_of(topic) if key is None else partition_for_key(key, len(tm.partition_ids))
                if part is not None and part in tm.partitions:
                    fut = self.accumulator.append_plain(tm.tps[part], now_ms(), key, value)
                    if fut is not None:
                        return fut
        self._check_can_send(topic)
        cfg = self.config
        kb, vb, hdrs = self._serialize(key, value, headers)
        start = time.monotonic()
        tm = self.metadata.wait_for_topic(topic, cfg.max_block_ms)
        tm, placed = self._place(topic, tm, kb, partition)
        sticky = placed is None
        part = self._default_partitioner.sticky.partition(topic, tm.partition_ids, tm.available) if sticky else placed
        ts = now_ms() if timestamp_ms is None else int(timestamp_ms)
        left_ms = cfg.max_block_ms - (time.monotonic() - start) * 1000
        if self._txn is not None and self._txn.state.maybe_add(tm.tps[part]):
            self.sender.wakeup()  # its AddPartitionsToTxn goes now, not when the batch is ready
        fut = self.accumulator.append(tm.tps[part], ts, kb, vb, hdrs, callback, left_ms if left_ms > 0 else 0.0, sticky)
        if fut is None:  # KIP-480: the sticky partition's batch is full or sent: move on
            part = self._default_partitioner.on_new_batch(topic, tm.partition_ids, tm.available, part)
            if self._txn is not None and self._txn.state.maybe_add(tm.tps[part]):
                self.sender.wakeup()
            left_ms = cfg.max_block_ms - (time.monotonic() - start) * 1000
            fut = self.accumulator.append(tm.tps[part], ts, kb, vb, hdrs, callback, max(0.0, left_ms))
        return fut

    def send_batch(self, topic: str, records: Iterable, partition: int | None = None) -> RecordFutures:
        """Queue many records of one topic in one go; returns their futures in order (a ``RecordFutures``
        sequence: the futures are made when first looked at).

        ``records`` holds tuples ``(key, value[, partition[, headers[, timestamp_ms]]])``; ``partition``
        overrides theirs. Placement is ``send``'s: explicit partition, user partitioner, murmur2 of the key,
        and for keyless records the topic's sticky partition, which moves on (KIP-480) each time the records
        put there fill ``batch_size``, so one large call spreads over partitions as Kafka's producer spreads
        a stream. Every record is checked first (size, partition), so a bad one fails the call before
        anything is queued; then each partition's records are encoded in one go (storage._crecords) under
        one accumulator lock per batch. Why: ``send`` costs ~8-15 us per record in Python, and callers such
        as the HTTP gateway hand over thousands of records at a time.
        """
        self._check_can_send(topic)
        start = time.monotonic()
        tm = self.metadata.wait_for_topic(topic, self.config.max_block_ms)  # (a wait: the collector stays on)
        with gc_paused():
            try:
                return place_and_append(self, topic, records, partition, tm, start)
            except BaseException:
                if self._txn is not None and self._txn.state.pending:
                    self.sender.wakeup()  # partitions queued before a bad record: the Sender adds them
                raise

    def _check_can_send(self, topic) -> None:
        if type(topic) is not str or topic not in self._legal_topics:
            self._check_topic(topic)
        if self._closed:
            raise IllegalStateError("cannot send after the producer is closed")
        if self.sender.fatal_error is not None:
            raise IllegalStateError(f"the producer's sender failed: {self.sender.fatal_error}")
        if self._txn is not None:
            self._txn.state.check_can_send()

    def _check_topic(self, topic) -> None:
        """Kafka's ``Topic.validate`` (InvalidTopicError), remembered per legal name: a bad name fails the
        call at once instead of waiting ``max_block_ms`` for metadata that can never come."""
        validate_topic_name(topic)
        if len(self._legal_topics) < 10_000:
            self._legal_topics.add(topic)

    def _serialize(self, key: Any, value: Any, headers) -> tuple[bytes | None, bytes | None, tuple]:
        """Key, value and headers as bytes, size-checked (``send_batch``'s per-record work)."""
        cfg = self.config
        kb = (
            key
            if (key is None or type(key) is bytes) and cfg.key_serializer is None
            else to_bytes(key, "key", cfg.key_serializer)
        )
        vb = (
            value
            if (value is None or type(value) is bytes) and cfg.value_serializer is None
            else to_bytes(value, "value", cfg.value_serializer)
        )
        hdrs = _headers(headers) if headers else ()
        size = (len(kb) if kb else 0) + (len(vb) if vb else 0) + RECORD_OVERHEAD + 61
        if hdrs:
            size += sum(len(k) + len(v or b"") for k, v in hdrs)
        if size > self._max_record_size:
            limit = "max_request_size" if size > cfg.max_request_size else "buffer_memory"
            raise RecordTooLargeError(
                f"the record is {size} bytes when serialized, which is larger than {limit} ({getattr(cfg, limit)})"
            )
        return kb, vb, hdrs

    def _place(self, topic: str, tm, kb: bytes | None, partition: int | None) -> tuple:
        """``(tm, partition)`` of a record placed by its explicit partition (``tm`` refreshed once when it does
        not know it: the partition may have been added since), the user partitioner or murmur2 of its key;
        partition None for a keyless record under the default partitioner (the caller's sticky choice)."""
        if partition is not None:
            return self._check_partition(topic, tm, partition), partition
        if self._user_partitioner is not None:
            part = int(self._user_partitioner(topic, kb, tm.partition_ids, tm.available))
            if part not in tm.partitions:
                raise ValueError(f"partitioner returned {part}, not a partition of {topic!r}")
            return tm, part
        if kb is not None:
            return tm, partition_for_key(kb, len(tm.partition_ids))
        return tm, None

    def _check_partition(self, topic: str, tm, partition: int):
        """``tm`` (refreshed once if the partition is unknown: it may have been added since) or ValueError."""
        if partition in tm.partitions:
            return tm
        self.metadata.refresh([topic], force=True)
        tm = self.metadata.wait_for_topic(topic, self.config.max_block_ms)
        if partition not in tm.partitions:
            raise ValueError(
                f"invalid partition {partition} for topic {topic!r}: it has partitions 0..{len(tm.partition_ids) - 1}"
            )
        return tm

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until each record is acknowledged or failed."""
        acc = self.accumulator
        with acc._lock:
            acc.flushes_in_progress += 1
        try:
            self.sender.wakeup()
            deadline = None if timeout is None else time.monotonic() + timeout
            for batch in acc.incomplete_snapshot():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.done.wait(left):
                    raise KafkaTimeoutError(f"flush did not finish within {timeout} s")
        finally:
            with acc._lock:
                acc.flushes_in_progress -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush (within ``timeout`` seconds, forever by default), then stop the sender; records still
        unsent when the timeout passes fail with an error."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        with self.accumulator._lock:
            self.accumulator.closed = True
        self.sender.running = False
        self.sender.wakeup()
        self.sender.join(timeout)
        if self.sender.is_alive():
            self.sender.force_close = True
            self.sender.wakeup()
            self.sender.join(5.0)

    # -- transactions (rafka/producer/transactions.py) -----------------------------------------------------
    def _transactions(self) -> Transactions:
        if self._txn is None:
            raise IllegalStateError("transactional methods need a Producer(transactional_id=...)")
        if self._closed:
            raise IllegalStateError("the producer is closed")
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id with its coordinator, fencing older instances (call once)."""
        self._transactions().init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit a consumer group's ``offsets`` atomically with this transaction's records
        (``group_metadata``: ``consumer.group_metadata()`` or the group id)."""
        self._transactions().send_offsets_to_transaction(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._transactions().commit_transaction(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._transactions().abort_transaction(timeout)

    # -- metadata ----------------------------------------------------------------------------------
    def partitions_for(self, topic: str) -> list[PartitionInfo]:
        if type(topic) is not str or topic not in self._legal_topics:
            self._check_topic(topic)
        tm = self.metadata.wait_for_topic(topic, self.config.max_block_ms)
        return [tm.partitions[p] for p in tm.partition_ids]

    @property
    def producer_id(self) -> int:
        return self.sender.producer_id

    def metrics(self) -> dict:
        acc = self.accumulator
        return {
            "buffer_available_bytes": acc.pool.available,
            "buffer_total_bytes": acc.pool.total,
            "incomplete_batches": len(acc.incomplete_snapshot()),
            "producer_id": self.sender.producer_id,
        }

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
