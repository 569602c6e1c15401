"""The producer's lock-free append (``RecordAccumulator.append_plain`` over ``storage._crecords.batch_append``).

``Producer.send`` puts a plain record into its partition's open batch without the accumulator's lock. These
tests race it against the sender's side (drain, seal, expire, abort) from real threads and check Kafka's
promise: every record whose future was handed out is in exactly the batch and at exactly the index its future
names, in the bytes that batch sends, and nothing else is there. A batch is closed before it leaves its
queue; the C append checks ``closed`` and appends in one step under the GIL.
"""

from __future__ import annotations

import random
import sys
import threading

import pytest

from rafka.producer.accumulator import RecordAccumulator, monotonic_ms
from rafka.producer.producer_batch import RecordFutures
from rafka.structs import TopicPartition
from storage import records
from storage.records import decode_records

TPS = [TopicPartition("t", p) for p in range(3)]


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """Switch threads every 10 us instead of 5 ms, so the races below interleave often (with a
    ``batch_append`` that ignores ``busy`` or ``closed``, they fail within a run or two)."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(saved)


def make(batch_size=600, delivery_timeout_ms=120000):
    return RecordAccumulator(batch_size, 1 << 30, 0, 0, 100, 1000, delivery_timeout_ms)


def append(acc, tp, key: bytes, value: bytes):
    """What ``Producer.send`` does: the lock-free path, else the locked one (which opens new batches)."""
    fut = acc.append_plain(tp, 1_700_000_000_000, key, value)
    return fut if fut is not None else acc.append(tp, 1_700_000_000_000, key, value, (), None, 1000)


def check_every_future_lands(futs_by_writer: list[list], sent_batches: list) -> None:
    payload = {id(b): decode_records(b.payload) for b in sent_batches}
    seen = set()
    for futs in futs_by_writer:
        for key, fut in futs:
            recs = payload.get(id(fut._batch))
            assert recs is not None, f"record {key!r} went into a batch that was never sent"
            assert recs[fut._idx].key == key, f"record {key!r} is not at index {fut._idx} of its batch"
            seen.add((id(fut._batch), fut._idx))
    assert sum(len(r) for r in payload.values()) == len(seen)  # and nothing else is in the batches


def race(acc, writers: list) -> list:
    """Run ``writers`` (callables, one thread each) against a sender thread that drains 1-3 batches at a
    time and seals each (building its bytes once: a late append would be missing from them) until the
    writers are done and the queues are empty; returns the sealed batches in send order."""
    stop = threading.Event()
    sent: list = []

    def sender():
        rng = random.Random(7)
        seq = 0
        while not stop.is_set() or acc.has_undrained():
            for tp in TPS:
                for b in acc.drain(tp, 1 << 20, rng.randint(1, 3)):
                    b.seal(1, 0, seq)
                    seq += b.record_count
                    sent.append(b)

    s = threading.Thread(target=sender)
    ws = [threading.Thread(target=w) for w in writers]
    s.start()
    for t in ws:
        t.start()
    for t in ws:
        t.join()
    stop.set()
    s.join()
    return sent


def test_lock_free_appends_race_the_sender_and_lose_nothing():
    acc = make()
    writers_futs: list[list] = [[] for _ in range(4)]

    def writer(w: int):
        rng = random.Random(w)
        for i in range(6000):
            key = b"%d-%d" % (w, i)
            writers_futs[w].append((key, append(acc, rng.choice(TPS), key, b"v" * rng.randint(0, 40))))

    sent = race(acc, [lambda w=w: writer(w) for w in range(4)])
    assert sum(len(f) for f in writers_futs) == 24000
    check_every_future_lands(writers_futs, sent)
    for futs in writers_futs:  # per writer and partition, the records keep their order across batches
        pos = {}
        for _key, fut in futs:
            tp = fut._batch.tp
            at = (sent.index(fut._batch), fut._idx)
            assert at > pos.get(tp, (-1, -1))
            pos[tp] = at


def test_expired_and_aborted_batches_are_closed_to_lock_free_appends():
    acc = make(batch_size=1 << 20, delivery_timeout_ms=0)
    f = append(acc, TPS[0], b"a", b"1")
    assert acc.append_plain(TPS[0], 1, b"b", b"2") is not None  # the open batch takes it without the lock
    (expired,) = acc.expired(monotonic_ms())
    assert expired is f._batch and expired.closed
    assert acc.append_plain(TPS[0], 1, b"c", b"3") is None  # no open batch now
    assert records._c_batch_append(expired, 1, b"c", b"3") is False  # and the expired one refuses
    g = append(acc, TPS[1], b"d", b"4")
    (aborted,) = acc.abort_all(RuntimeError("closing"))
    assert aborted is g._batch and records._c_batch_append(aborted, 1, b"e", b"5") is False
    assert [r.key for r in decode_records(expired.builder.build())] == [b"a", b"b"]


def test_plain_append_leaves_the_rest_to_the_locked_path():
    acc = make(batch_size=200)
    assert acc.append_plain(TPS[0], 1, None, b"x") is None  # no batch yet: append opens one
    first = acc.append(TPS[0], 1, None, b"x" * 100, (), None, 1000)
    assert acc.append_plain(TPS[0], 2, None, b"y" * 100) is None  # would pass batch_size: a new batch is due
    assert acc.append_plain(TPS[0], 2, None, bytearray(b"y")) is None  # not bytes: converted by append
    fut = acc.append_plain(TPS[0], 3, b"k", None)
    assert fut is not None and fut._batch is first._batch and fut._idx == 1
    (batch,) = acc.drain(TPS[0], 1 << 20, 10)
    batch.seal(5, 0, 0)
    batch.complete(100)
    md = fut.get(1)
    assert (md.offset, md.timestamp, md.serialized_key_size, md.serialized_value_size) == (101, 3, 1, -1)
    assert first.get(1).serialized_value_size == 100


def test_lock_free_appends_never_interleave_with_locked_ones():
    """Locked appends change the builder in several Python steps (a record with headers, send_batch's runs
    through ``append_many``); meanwhile the batch is ``busy`` and lock-free appends keep off. Mixed from many
    threads on the same partitions, every batch's offset deltas stay dense and each record sits where its
    future says."""
    acc = make(batch_size=4000)
    futs: list[list] = [[] for _ in range(6)]

    def plain(w: int):
        for i in range(5000):
            key = b"p%d-%d" % (w, i)
            futs[w].append((key, append(acc, TPS[i % 3], key, b"v")))

    def with_headers(w: int):
        for i in range(3000):
            key = b"h%d-%d" % (w, i)
            futs[w].append((key, acc.append(TPS[i % 3], 1, key, b"v", (("h", b"x" * (i % 9)),), None, 1000)))

    def runs(w: int):
        for i in range(300):
            items = [(1, b"r%d-%d-%d" % (w, i, j), b"v", ()) for j in range(12)]
            runs_, _ = acc.append_many(TPS[i % 3], items, 1000)  # (batch, first index, count) runs
            got = RecordFutures({0: runs_}, [0] * len(items))
            futs[w].extend(zip([k for _, k, _, _ in items], got))

    kinds = [plain, plain, with_headers, with_headers, runs, runs]
    sent = race(acc, [lambda w=w, f=f: f(w) for w, f in enumerate(kinds)])
    for b in sent:
        assert [r.offset for r in decode_records(b.payload)] == list(range(b.record_count))
    check_every_future_lands(futs, sent)
