"""The producer's accumulator without Ray: batching, memory backpressure, futures, drain/retry order."""

import threading
import time

import pytest

from protocol.errors import KafkaTimeoutError, NotEnoughReplicasError, RecordTooLargeError
from rafka.producer.accumulator import BufferPool, RecordAccumulator, monotonic_ms
from rafka.structs import TopicPartition
from storage.records import decode_records, iter_batch_headers

TP = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def make(batch_size=1024, buffer_memory=1 << 20, linger_ms=5, delivery_timeout_ms=120000):
    return RecordAccumulator(batch_size, buffer_memory, linger_ms, 0, 100, 1000, delivery_timeout_ms)


def test_records_fill_a_batch_up_to_batch_size_then_a_new_one():
    acc = make(batch_size=1024)
    futs = [acc.append(TP, 1000 + i, b"k%d" % i, b"v" * 100, (), None, 1000) for i in range(30)]
    assert futs[0]._batch is futs[1]._batch and futs[0]._batch is not futs[-1]._batch
    batches = acc.drain(TP, 1 << 20, 100)
    assert len(batches) >= 3
    for b in batches:
        assert b.builder.estimated_size <= 1024
    total = 0
    for _i, b in enumerate(batches):
        raw = b.seal(42, 0, total)
        ((_, h),) = list(iter_batch_headers(raw))
        assert (h.producer_id, h.base_sequence, h.records_count) == (42, total, b.record_count)
        total += b.record_count
    assert total == 30
    recs = [r for b in batches for r in decode_records(b.payload)]
    assert [r.key for r in recs] == [b"k%d" % i for i in range(30)]


def test_futures_resolve_with_offsets_and_callbacks_fire_once():
    acc = make()
    seen = []
    futs = [acc.append(TP, 5, None, b"x", (), lambda md, exc: seen.append((md, exc)), 1000) for _ in range(3)]
    late = []
    futs[2].add_callback(late.append)
    (batch,) = acc.drain(TP, 1 << 20, 10)
    assert not futs[0].done()
    with pytest.raises(KafkaTimeoutError):
        futs[0].get(timeout=0.01)
    batch.seal(-1, -1, -1)
    batch.complete(100)
    acc.finish(batch)
    assert [f.get(timeout=1).offset for f in futs] == [100, 101, 102]
    assert [md.offset for md, exc in seen] == [100, 101, 102] and all(e is None for _, e in seen)
    assert late[0].offset == 102
    after = []
    futs[0].add_both(lambda md, exc: after.append(md.offset))  # added after completion: runs at once
    assert after == [100]
    assert acc.pool.available == acc.pool.total


def test_failed_batch_raises_through_every_future():
    acc = make()
    errs = []
    f = acc.append(TP, 5, None, b"x", (), lambda md, exc: errs.append(exc), 1000)
    f.add_errback(errs.append)
    (batch,) = acc.drain(TP, 1 << 20, 10)
    batch.fail(NotEnoughReplicasError("isr too small"))
    with pytest.raises(NotEnoughReplicasError):
        f.get()
    assert f.failed() and len(errs) == 2


def test_buffer_full_blocks_then_times_out_after_max_block_ms():
    acc = make(batch_size=1000, buffer_memory=3000)
    for p in range(3):
        acc.append(TopicPartition("t", p), 1, None, b"x", (), None, 1000)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="max_block_ms"):
        acc.append(TopicPartition("t", 3), 1, None, b"x", (), None, 200)
    waited = time.monotonic() - t0
    assert 0.18 <= waited < 2.0
    # appends into an existing batch need no new memory
    acc.append(TopicPartition("t", 0), 1, None, b"y", (), None, 0)


def test_blocked_append_resumes_when_a_batch_completes():
    acc = make(batch_size=1000, buffer_memory=2000)
    acc.append(TP, 1, None, b"x", (), None, 1000)
    acc.append(TP1, 1, None, b"x", (), None, 1000)
    (batch,) = acc.drain(TP, 1 << 20, 10)
    done = []
    th = threading.Thread(target=lambda: done.append(acc.append(TopicPartition("t", 2), 1, None, b"z", (), None, 5000)))
    th.start()
    time.sleep(0.2)
    assert not done and acc.pool.waiters == 1
    batch.complete(0)
    acc.finish(batch)
    th.join(5)
    assert done and done[0]._batch.tp == TopicPartition("t", 2)


def test_abort_on_new_batch_only_when_no_open_batch_has_room():
    acc = make(batch_size=300)
    assert acc.append(TP, 1, None, b"x", (), None, 1000, abort_on_new_batch=True) is None  # nothing open
    first = acc.append(TP, 1, None, b"x" * 100, (), None, 1000)
    assert acc.append(TP, 1, None, b"y" * 100, (), None, 1000, abort_on_new_batch=True) is not None
    assert acc.append(TP, 1, None, b"z" * 100, (), None, 1000, abort_on_new_batch=True) is None  # full
    assert first._batch.record_count == 2


def test_pool_rejects_impossible_sizes():
    with pytest.raises(RecordTooLargeError):
        BufferPool(100).allocate(101, 10)


def test_ready_waits_for_linger_unless_full_or_flushing():
    acc = make(batch_size=200, linger_ms=50)
    acc.append(TP, 1, None, b"x", (), None, 1000)
    now = monotonic_ms()
    ready, next_ms = acc.ready(now, lambda tp, first: True)
    assert ready == [] and 0 < next_ms <= 50
    assert acc.ready(now + 60, lambda tp, first: True)[0] == [TP]
    acc.flushes_in_progress = 1
    assert acc.ready(now, lambda tp, first: True)[0] == [TP]
    acc.flushes_in_progress = 0
    for _ in range(10):  # fill past one batch: sendable at once
        acc.append(TP1, 1, None, b"y" * 50, (), None, 1000)
    assert TP1 in acc.ready(now, lambda tp, first: True)[0]
    assert TP1 not in acc.ready(now, lambda tp, first: tp != TP1)[0]


def test_drain_respects_max_bytes_and_retried_batches_go_alone_in_sequence_order():
    acc = make(batch_size=100)
    for _i in range(12):
        acc.append(TP, 1, None, b"v" * 60, (), None, 1000)
    first = acc.drain(TP, 250, 100)
    assert 1 <= len(first) <= 3
    seq = 0
    for b in first:
        b.seal(7, 0, seq)
        seq += b.record_count
    now = monotonic_ms()
    for b in reversed(first):  # failures come back in any order
        acc.reenqueue(b, now)
    assert acc.ready(now, lambda tp, first: True)[0] == []  # backing off
    later = now + 1000
    assert acc.ready(later, lambda tp, first: True)[0] == [TP]
    for expect in first:
        (got,) = acc.drain(TP, 1 << 20, 100)
        assert got is expect and got.attempts == 1
    rest = acc.drain(TP, 1 << 20, 100)
    assert len(rest) == 12 - len(first) and all(b.attempts == 0 for b in rest)


def test_undrained_batches_expire_after_delivery_timeout():
    acc = make(delivery_timeout_ms=100)
    acc.append(TP, 1, None, b"x", (), None, 1000)
    now = monotonic_ms()
    assert acc.expired(now) == []
    (b,) = acc.expired(now + 150)
    assert b.tp == TP and not acc.has_undrained()
