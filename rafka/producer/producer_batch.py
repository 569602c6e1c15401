"""A producer batch and the record futures that point into it (Kafka's ``ProducerBatch``,
``FutureRecordMetadata``, ``BufferPool``), for rafka/producer/accumulator.py and the sender.

A record's future is a light ``FutureRecordMetadata``: its batch and its index in it, as in the Java client:
one event per batch, not per record. A batch keeps nothing per record but the bytes; each record's
``RecordMetadata`` (timestamp, serialized sizes) is read back from them when first asked for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Callable

from protocol.clock import now_ms  # noqa: F401 (re-exported through rafka.producer.accumulator)
from protocol.errors import KafkaTimeoutError, RecordTooLargeError
from rafka.structs import RecordMetadata, TopicPartition
from storage.records import NO_SEQUENCE, RecordBatchBuilder, decode_records

log = logging.getLogger("rafka.producer")

_new_metadata = tuple.__new__  # RecordMetadata(...) minus NamedTuple's Python-level __new__


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class BufferPool:
    """``buffer_memory`` bytes handed out per batch; allocation blocks, fairly, up to a deadline."""

    def __init__(self, total: int):
        self.total = total
        self.available = total
        self._cond = threading.Condition()
        self.waiters = 0

    def allocate(self, size: int, max_block_ms: float) -> None:
        if size > self.total:
            raise RecordTooLargeError(f"a batch of {size} bytes is larger than buffer_memory ({self.total})")
        deadline = time.monotonic() + max_block_ms / 1000.0
        with self._cond:
            if self.available >= size and not self.waiters:
                self.available -= size
                return
            self.waiters += 1
            try:
                while self.available < size:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise KafkaTimeoutError(
                            f"failed to allocate {size} bytes within max_block_ms ({max_block_ms:.0f} ms): "
                            f"buffer_memory ({self.total} bytes) is full"
                        )
                    self._cond.wait(left)
                self.available -= size
            finally:
                self.waiters -= 1
                self._cond.notify_all()

    def release(self, size: int) -> None:
        with self._cond:
            self.available += size
            self._cond.notify_all()


class ProducerBatch:
    """One RecordBatch being filled, then in flight, then done (base offset) or failed (error)."""

    __slots__ = (
        "tp",
        "builder",
        "created_ms",
        "reserved",
        "callbacks",
        "attempts",
        "next_attempt_ms",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "payload",
        "base_offset",
        "log_append_time",
        "error",
        "done",
        "closed",
        "busy",
        "_meta",
        "last_error",
        "_cb_lock",
        "parts",
        "parent",
    )

    def __init__(self, tp: TopicPartition, builder: RecordBatchBuilder, created_ms: float, reserved: int):
        self.tp = tp
        self.builder = builder
        self.created_ms = created_ms
        self.reserved = reserved
        self.callbacks: list = []
        self.attempts = 0
        self.next_attempt_ms = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.payload: bytes | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.last_error: BaseException | None = None
        self.done = threading.Event()
        self._cb_lock = threading.Lock()
        self.closed = False  # no more appends (drained at least once)
        # a locked append is changing the builder in Python: lock-free appends (batch_append) keep off
        self.busy = False
        self._meta: list[tuple[int, int, int]] | None = None  # (timestamp, key size, value size), on demand
        # KIP-126: a batch the leader refused as too large is split into ``parts`` ((child, index of its first
        # record here), in order); it is done once they all are, and each record answers from its own child
        self.parts: list[tuple[ProducerBatch, int]] | None = None
        self.parent: ProducerBatch | None = None

    @property
    def record_count(self) -> int:
        return self.builder._count

    def try_append(
        self, timestamp: int, key: bytes | None, value: bytes | None, headers, callback: Callable | None
    ) -> "FutureRecordMetadata | None":
        if self.closed:
            return None
        self.busy = True  # set before the builder is read: a lock-free append either ended or keeps off
        try:
            if not self.builder.append(timestamp, key, value, headers):
                return None
            idx = self.builder._count - 1
        finally:
            self.busy = False
        if callback is not None:
            self.callbacks.append((idx, callback))
        return FutureRecordMetadata(self, idx)

    def is_full(self) -> bool:
        return self.builder.estimated_size >= self.builder.batch_size

    def seal(self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool = False) -> bytes:
        """Freeze the batch and build its bytes once; retries resend exactly these bytes."""
        if self.payload is None:
            self.closed = True
            b = self.builder
            b.producer_id, b.producer_epoch, b.base_sequence = producer_id, producer_epoch, base_sequence
            b.is_transactional = transactional
            self.producer_id, self.producer_epoch, self.base_sequence = producer_id, producer_epoch, base_sequence
            self.payload = b.build()
        return self.payload

    def reseal(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """Build the bytes again under a new producer id/epoch and sequence (KIP-360: after a sequence gap
        the idempotent producer re-sequences the batches it has not had acknowledged)."""
        self.payload = None
        return self.seal(producer_id, producer_epoch, base_sequence, self.builder.is_transactional)

    def record_meta(self) -> list[tuple[int, int, int]]:
        """Each record's (timestamp, serialized key size, serialized value size), read back from the batch's
        bytes the first time a RecordMetadata is asked for: ``send`` keeps nothing per record but the bytes."""
        meta = self._meta
        if meta is None:
            raw = self.payload if self.payload is not None else self.builder.build()
            meta = self._meta = [
                (r.timestamp, -1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value))
                for r in decode_records(raw)
            ]
        return meta

    def leaf(self, idx: int) -> tuple["ProducerBatch", int]:
        """The batch that holds record ``idx`` now, and its index there (itself unless split, KIP-126)."""
        b = self
        while b.parts is not None:
            for child, first in reversed(b.parts):
                if idx >= first:
                    b, idx = child, idx - first
                    break
        return b, idx

    def split_into(self, parts: list[tuple["ProducerBatch", int]]) -> None:
        for child, _first in parts:
            child.parent = self
        self.parts = parts

    def _part_done(self) -> None:
        """A child finished: once every one has, this batch is done (each record answers from its own child)."""
        assert self.parts is not None
        if all(child.done.is_set() for child, _ in self.parts):
            self._settle()

    def _outcome(self, idx: int) -> tuple[RecordMetadata | None, BaseException | None]:
        """Record ``idx``'s ``(metadata, error)`` once done, from the batch that holds it."""
        b, i = self.leaf(idx)
        return (None, b.error) if b.error is not None else (b.metadata(i), None)

    def _settle(self) -> None:
        """Done (once): the waiters wake, each callback runs with its record's outcome, and the batch this one
        is a part of (KIP-126) hears of it."""
        with self._cb_lock:
            if self.done.is_set():
                return
            self.done.set()
            callbacks = self.callbacks
        for idx, cb in callbacks:
            _run_callback(cb, *self._outcome(idx))
        if self.parent is not None:
            self.parent._part_done()

    def metadata(self, idx: int) -> RecordMetadata:
        if self.parts is not None:
            b, i = self.leaf(idx)
            return b.metadata(i)
        ts, ks, vs = self.record_meta()[idx]
        if self.log_append_time != -1:
            ts = self.log_append_time
        off = self.base_offset + idx if self.base_offset >= 0 else -1
        return _new_metadata(RecordMetadata, (self.tp.topic, self.tp.partition, off, ts, ks, vs))

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        with self._cb_lock:
            if self.done.is_set():
                return
            self.base_offset, self.log_append_time = base_offset, log_append_time
        self._settle()

    def fail(self, exc: BaseException) -> None:
        with self._cb_lock:
            if self.done.is_set():
                return
            self.error = exc
        self._settle()

    def add_callback(self, idx: int, fn: Callable) -> None:
        with self._cb_lock:
            if not self.done.is_set():
                self.callbacks.append((idx, fn))
                return
        _run_callback(fn, *self._outcome(idx))


def _run_callback(cb: Callable, metadata, exc) -> None:
    try:
        cb(metadata, exc)
    except Exception:  # a user callback must never kill the sender thread
        log.exception("producer callback raised")


class FutureRecordMetadata:
    """The result of ``Producer.send``: resolves to ``RecordMetadata`` or raises the batch's error."""

    __slots__ = ("_batch", "_idx")

    def __init__(self, batch: ProducerBatch, idx: int):
        self._batch, self._idx = batch, idx

    def done(self) -> bool:
        return self._batch.done.is_set()

    is_done = property(done)

    def succeeded(self) -> bool:
        return self.done() and self._batch.leaf(self._idx)[0].error is None

    def failed(self) -> bool:
        return self.done() and self._batch.leaf(self._idx)[0].error is not None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.done.wait(timeout):
            raise KafkaTimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.leaf(self._idx)[0].error

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged (``timeout`` in seconds) and return where it landed."""
        err = self.exception(timeout)
        if err is not None:
            raise err
        return self._batch.metadata(self._idx)

    result = get

    @property
    def value(self) -> RecordMetadata | None:
        return self._batch.metadata(self._idx) if self.succeeded() else None

    def add_callback(self, fn: Callable, *args) -> "FutureRecordMetadata":
        """``fn(*args, metadata)`` on success (kafka-python's signature)."""
        return self.add_both(lambda md, exc: fn(*args, md) if exc is None else None)

    def add_errback(self, fn: Callable, *args) -> "FutureRecordMetadata":
        """``fn(*args, exception)`` on failure."""
        return self.add_both(lambda md, exc: fn(*args, exc) if exc is not None else None)

    def add_both(self, fn: Callable) -> "FutureRecordMetadata":
        """``fn(metadata, exception)`` once done (Java's ``Callback.onCompletion`` order)."""
        self._batch.add_callback(self._idx, fn)
        return self


class RecordFutures(Sequence):
    """``Producer.send_batch``'s futures, in the records' order, made when first looked at. Until then the
    call's records are runs of their batches (``(batch, first index, count)``, per partition, in order) and
    each record's partition (``where``): a caller that never looks (send, then ``flush``) pays nothing per
    record for them. A read-only sequence otherwise like the list it stands for."""

    __slots__ = ("_runs", "_where", "_n", "_list")

    def __init__(self, runs: dict[int, list[tuple]], where: list[int]):
        self._runs: dict[int, list[tuple]] | None = runs
        self._where: list[int] | None = where
        self._n = len(where)
        self._list: list[FutureRecordMetadata] | None = None

    def _all(self) -> list[FutureRecordMetadata]:
        out = self._list
        if out is None:
            assert self._runs is not None and self._where is not None
            per = [
                (p, [FutureRecordMetadata(b, k) for b, first, count in runs for k in range(first, first + count)])
                for p, runs in self._runs.items()
            ]
            if len(per) == 1:
                out = per[0][1]
            else:
                nexts = {p: iter(fs).__next__ for p, fs in per}
                out = [nexts[p]() for p in self._where]
            self._list, self._runs, self._where = out, None, None
        return out

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __add__(self, other) -> list:
        return self._all() + list(other)

    def __radd__(self, other) -> list:
        return list(other) + self._all()

    def __eq__(self, other) -> bool:
        if isinstance(other, RecordFutures):
            other = other._all()
        return isinstance(other, list) and self._all() == other

    __hash__ = None  # type: ignore[assignment]  # (as a list's)

    def __repr__(self) -> str:
        return f"RecordFutures({self._n} records)"


def wait_all(futures: list[FutureRecordMetadata], timeout: float | None = None, offsets_only: bool = False) -> list:
    """Each future's ``RecordMetadata`` (``(partition, offset)`` with ``offsets_only``) or its batch's error,
    in order, with one wait per batch instead of one per record (``Producer.send_batch`` callers hand over
    thousands of records). Raises ``KafkaTimeoutError`` when a record is not acknowledged within
    ``timeout`` seconds overall."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list = []
    append = out.append
    last = None
    for f in futures:
        b = f._batch
        if b is not last:
            if not b.done.is_set():
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not b.done.wait(left):
                    raise KafkaTimeoutError(f"record not acknowledged within {timeout} s")
            last, err, part, base = b, b.error, b.tp.partition, b.base_offset
        lb, idx = b, f._idx
        if b.parts is not None:  # split (KIP-126): the record's own part answers
            lb, idx = b.leaf(idx)
            err, base = lb.error, lb.base_offset
        if err is not None:
            append(err)
        elif offsets_only:
            append((part, base + idx if base >= 0 else -1))
        else:
            append(lb.metadata(idx))
    return out
