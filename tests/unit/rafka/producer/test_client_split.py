"""KIP-126 in the producer (``RecordAccumulator.split``, ``ProducerBatch.leaf``): a batch its leader refused as too
large becomes smaller batches at the front of its partition's queue, sealed under its own producer id and
sequence range, and every future, callback and ``wait_all`` answer of its records answers from the part that
holds the record. Pure client logic: no cluster, nothing sent."""

from __future__ import annotations

from protocol.errors import NotEnoughReplicasError
from rafka.producer.accumulator import RecordAccumulator
from rafka.producer.producer_batch import RecordFutures, wait_all
from rafka.structs import TopicPartition
from storage.records import decode_records

TP = TopicPartition("t", 0)


def sent_batch(acc: RecordAccumulator, n: int, pid: int = 7, seq: int = 50):
    """A bulk batch of ``n`` records, drained and sealed as the Sender does, and its records' futures."""
    items = [(1_700_000_000_000 + i, b"k%d" % i, b"v" * 40, ()) for i in range(n)]
    runs, _ = acc.append_many(TP, items, 1000, 1 << 20)
    futs = RecordFutures({0: runs}, [0] * n)
    (batch,) = acc.drain(TP, 1 << 30, 5)
    batch.seal(pid, 0, seq, False)
    batch.attempts = 1
    return batch, futs


def test_parts_keep_the_sequence_range_in_order_at_the_front_of_the_queue():
    acc = RecordAccumulator(600, 1 << 24, 0, 0, 100, 1000, 120000)
    batch, futs = sent_batch(acc, 100)
    later = acc.append(TP, 1, b"later", b"x", (), None, 1000)  # a fresh batch queued meanwhile
    reserved = batch.reserved
    parts = acc.split(batch, 0.0)
    assert len(parts) > 2 and all(p.builder.estimated_size <= 600 for p in parts)
    queued = list(acc._queues[TP])
    assert queued[: len(parts)] == parts and queued[-1] is later._batch
    firsts = [first for _, first in batch.parts]
    assert [p.base_sequence for p in parts] == [50 + f for f in firsts]
    assert all(p.producer_id == 7 and p.closed and p.attempts == 2 for p in parts)
    records = [r.key for p in parts for r in decode_records(p.payload)]
    assert records == [b"k%d" % i for i in range(100)]
    assert batch.reserved == 0 and parts[0].reserved == reserved  # the first part took the batch's memory
    assert all(p.reserved == 0 for p in parts[1:])
    assert acc.incomplete.isdisjoint({batch}) and set(parts) <= acc.incomplete


def test_every_record_answers_from_its_own_part():
    acc = RecordAccumulator(600, 1 << 24, 0, 0, 100, 1000, 120000)
    batch, futs = sent_batch(acc, 60)
    early: list = []
    futs[5].add_callback(lambda md: early.append(md.offset))  # registered before the split
    parts = acc.split(batch, 0.0)
    assert not futs[0].done()
    bad = NotEnoughReplicasError("the middle part failed")
    base = 1000
    for k, part in enumerate(parts):
        if k == 1:
            part.fail(bad)
        else:
            part.complete(base)
        base += part.record_count + 3  # another producer's records between the parts
        assert futs[0].done() == (k == len(parts) - 1)
    firsts = [first for _, first in batch.parts]
    middle = range(firsts[1], firsts[2])
    late: list = []
    futs[59].add_callback(lambda md: late.append(md.offset))  # registered after it finished
    answers = wait_all(futs, 1, offsets_only=True)
    for i, f in enumerate(futs):
        if i in middle:
            assert f.failed() and f.exception() is bad and answers[i] is bad
        else:
            assert f.succeeded() and answers[i] == (0, f.get(1).offset)
    assert futs[firsts[2]].get(1).offset == 1000 + (firsts[2] - firsts[1]) + 3 + firsts[1] + 3
    assert early == [futs[5].get(1).offset] and late == [futs[59].get(1).offset]
