"""``Producer.send_batch``'s placement in C (``storage._crecords.place_plain``) against its Python loop, and the
compiled ``murmur2`` against the Python one: the same records must land on the same partitions, in the same
order, in the same batches, with the same futures, whichever places them.

``place_and_append`` runs here on a stand-in of the producer's state (real ``RecordAccumulator``,
``DefaultPartitioner`` with a seeded random, ``TopicMetadata``, the ``Producer``'s own placement methods); the
sender is a recorder of wake-ups (no thread, nothing is sent).
"""

from __future__ import annotations

import random
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.config import ProducerConfig
from rafka.metadata import TopicMetadata
from rafka.producer import send_batch
from rafka.producer.accumulator import RECORD_OVERHEAD, RecordAccumulator
from rafka.producer.partitioner import DefaultPartitioner, py_murmur2
from rafka.producer.producer import Producer
from rafka.producer.producer_batch import RecordFutures
from storage import _crecords
from storage.records import decode_records

TS = 1_700_000_000_000


class _Sender:
    def __init__(self):
        self.wakeups = 0

    def wakeup(self):
        self.wakeups += 1

    def add_partitions_now(self):
        self.wakeups += 1


def producer_state(partitions=(0, 1, 2, 3, 4, 5), batch_size=2048, seed=7, user_partitioner=None, max_message=None):
    cfg = ProducerConfig(batch_size=batch_size, partitioner=user_partitioner)
    fake = types.SimpleNamespace(
        config=cfg,
        _max_record_size=cfg.max_request_size,
        _plain_limit=cfg.max_request_size - RECORD_OVERHEAD - 61,  # as Producer.__init__ derives it
        _txn=None,
        _default_partitioner=DefaultPartitioner(random.Random(seed)),
        _user_partitioner=user_partitioner,
        accumulator=RecordAccumulator(batch_size, 1 << 30, 0, 0, 100, 1000, 120000),
        sender=_Sender(),
    )
    for name in ("_serialize", "_place", "_check_partition"):
        setattr(fake, name, types.MethodType(getattr(Producer, name), fake))
    configs = {} if max_message is None else {"max.message.bytes": str(max_message)}
    tm = TopicMetadata(
        {"name": "t", "configs": configs, "partitions": {p: {"leader": 1, "replicas": [1]} for p in partitions}}
    )
    return fake, tm


def place(records, partition=None, compiled=True, monkeypatch=None, **kw):
    fake, tm = producer_state(**kw)
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain if compiled else None)
    monkeypatch.setattr(send_batch, "now_ms", lambda: TS)
    try:
        futs = send_batch.place_and_append(fake, "t", records, partition, tm, 0.0)
    except Exception as e:  # the same failure from both, with nothing queued
        assert not fake.accumulator._queues
        return None, type(e), str(e)
    batches = {
        tp.partition: [decode_records(b.builder.build()) for b in dq] for tp, dq in fake.accumulator._queues.items()
    }
    where = [(f._batch.tp.partition, f._idx, id(f._batch)) for f in futs]
    ids = {}  # batch identities renamed by first appearance, so the two runs compare
    where = [(p, i, ids.setdefault(b, len(ids))) for p, i, b in where]
    contents = {
        p: [[(r.key, r.value, r.timestamp, tuple(r.headers)) for r in b] for b in bs] for p, bs in batches.items()
    }
    return futs, where, contents


def both(records, monkeypatch, partition=None, **kw):
    c = place(records, partition, True, monkeypatch, **kw)
    py = place(records, partition, False, monkeypatch, **kw)
    assert c[1] == py[1]
    assert c[2] == py[2]
    assert c[0] is None or len(c[0]) == len(records)
    return c


record = st.one_of(
    st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=300)),  # keyless / keyed
    st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=50), st.sampled_from([None, 0, 3, 5])),
    st.tuples(
        st.none() | st.binary(max_size=8),
        st.binary(max_size=50),
        st.none() | st.integers(0, 5),
        st.sampled_from([None, (), [], [("h", b"v")], (("k", None),)]),
        st.none() | st.integers(0, 2**40),
    ),
    st.tuples(st.text(max_size=5), st.text(max_size=20)),  # str: the Python loop converts them
    st.lists(st.binary(max_size=20), min_size=2, max_size=2),  # a list, not a tuple
    st.tuples(st.none(), st.binary(max_size=9), st.sampled_from([9, -1, True])),  # not a partition: ValueError
    st.tuples(st.none(), st.binary(max_size=9), st.none(), st.none(), st.sampled_from([-5, "x"])),  # bad timestamps
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(record, max_size=300),
    st.sampled_from([None, 2]),
    st.sampled_from([256, 2048]),
    st.sampled_from([None, 200, 6000]),  # the topic's max.message.bytes: bulk batches, batch.size ones, smaller bulk
)
def test_compiled_placement_matches_the_python_loop(records, partition, batch_size, max_message):
    with pytest.MonkeyPatch.context() as mp:
        both(records, mp, partition, batch_size=batch_size, max_message=max_message)


def test_bulk_batches_take_the_call_and_give_back_the_memory_they_do_not_hold(monkeypatch):
    # batch.size 2,048: send_batch's batches go up to the topic's max.message.bytes (here 50,000) instead
    fake, tm = producer_state(batch_size=2048, max_message=50_000)
    acc = fake.accumulator
    total = acc.pool.available
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain)
    records = [(b"k%d" % i, b"v" * 100) for i in range(3000)]  # ~340 KB over 6 partitions
    futs = send_batch.place_and_append(fake, "t", records, None, tm, 0.0)
    batches = [b for dq in acc._queues.values() for b in dq]
    assert all(2048 < b.builder.estimated_size <= 50_000 for b in batches[:3])
    assert all(b.is_full() for b in batches)  # closed to later appends: the Sender takes them at once
    assert all(b.reserved == b.builder.estimated_size for b in batches)
    assert acc.pool.available == total - sum(b.reserved for b in batches)
    assert sum(b.builder._count for b in batches) == 3000 and len(futs) == 3000
    for b in batches:  # the Sender's finish gives each batch's memory back
        acc.finish(b)
    assert acc.pool.available == total
    # a plain send after it opens its own batch.size batch: the bulk ones take nothing more
    before = {id(b): b.builder._count for b in batches}
    assert acc.append_plain(batches[0].tp, 1, b"x", b"y") is None
    assert {id(b): b.builder._count for b in batches} == before


def test_keyless_records_move_the_sticky_partition_as_python_does(monkeypatch):
    records = [(None, b"x" * 100)] * 5000  # ~ 45 sticky moves at batch.size 10,000
    futs, where, contents = both(records, monkeypatch, batch_size=10_000)
    assert len({p for p, _, _ in where}) > 1
    assert sum(len(b) for bs in contents.values() for b in bs) == 5000


def test_keyed_records_land_where_murmur2_puts_them(monkeypatch):
    keys = [b"key-%d" % i for i in range(2000)]
    futs, where, _ = both([(k, b"v") for k in keys], monkeypatch)
    assert [p for p, _, _ in where] == [(py_murmur2(k) & 0x7FFFFFFF) % 6 for k in keys]


def test_a_partition_beyond_the_topic_and_a_gap_in_the_ids_go_to_python(monkeypatch):
    # partition ids 0, 1, 3 (2 unknown): a record to 2 or 7 fails the call (after a metadata refresh attempt)
    fake, tm = producer_state(partitions=(0, 1, 3))
    fake.metadata = types.SimpleNamespace(refresh=lambda *a, **k: None, wait_for_topic=lambda *a, **k: tm)
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain)
    for bad in (2, 7, -1):
        with pytest.raises(ValueError, match="invalid partition"):
            send_batch.place_and_append(fake, "t", [(None, b"a", 0)] * 50 + [(None, b"b", bad)], None, tm, 0.0)
        assert not fake.accumulator._queues  # nothing queued: the call is all or nothing
    futs = send_batch.place_and_append(fake, "t", [(None, b"a", 3), (None, b"b", 0)] * 20, None, tm, 0.0)
    assert [f._batch.tp.partition for f in futs] == [3, 0] * 20


def test_a_partition_added_during_the_call_is_taken_after_the_refresh(monkeypatch):
    # the call's metadata knows partitions 0-2; a record to 4 makes the Python loop refresh it (the partition
    # was added since), and the compiled loop then places on the refreshed topic, 4 included
    fake, tm = producer_state(partitions=(0, 1, 2))
    _, grown = producer_state(partitions=(0, 1, 2, 3, 4))
    refreshed = []
    fake.metadata = types.SimpleNamespace(
        refresh=lambda *a, **k: refreshed.append(1), wait_for_topic=lambda *a, **k: grown
    )
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain)
    records = [(None, b"a", 0)] * 10 + [(None, b"b", 4)] + [(None, b"c", q) for q in (4, 3, 0, 4)] * 50
    futs = send_batch.place_and_append(fake, "t", records, None, tm, 0.0)
    assert refreshed == [1]
    assert [f._batch.tp.partition for f in futs] == [r[2] for r in records]


def test_a_user_partitioner_places_every_unpartitioned_record(monkeypatch):
    calls = []

    def part(topic, key, all_parts, available):
        calls.append(key)
        return 1

    records = [(None, b"a"), (b"k", b"b"), (None, b"c", 4)]
    futs, where, _ = both(records * 10, monkeypatch, user_partitioner=part)
    assert [p for p, _, _ in where] == [1, 1, 4] * 10
    assert len(calls) == 2 * 10 * 2  # both runs asked it for every record without a partition


def test_generators_and_tuples_of_records_are_taken(monkeypatch):
    recs = [(b"k%d" % i, b"v") for i in range(100)]
    _, a, _ = both(recs, monkeypatch)
    _, b, _ = both(tuple(recs), monkeypatch)
    assert a == b
    fake, tm = producer_state()
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain)
    futs = send_batch.place_and_append(fake, "t", (r for r in recs), None, tm, 0.0)
    assert len(futs) == 100 and [f._batch.tp.partition for f in futs] == [p for p, _, _ in a]


def test_record_futures_are_made_when_looked_at_and_act_as_the_list(monkeypatch):
    fake, tm = producer_state()
    monkeypatch.setattr(send_batch, "_place_plain", _crecords.place_plain)
    futs = send_batch.place_and_append(fake, "t", [(b"k%d" % i, b"v") for i in range(50)], None, tm, 0.0)
    assert isinstance(futs, RecordFutures) and len(futs) == 50 and futs._list is None
    first = futs[0]
    assert futs._list is not None and futs[0] is first  # made once
    assert list(futs) == futs and futs == list(futs) and futs[-1] is list(futs)[-1]
    assert len(futs[10:20]) == 10 and len([] + futs) == 50 and len(futs + []) == 50
    assert send_batch.place_and_append(fake, "t", [], None, tm, 0.0) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_compiled_murmur2_is_the_python_one(data):
    assert _crecords.murmur2(data) == py_murmur2(data)


def test_murmur2_known_values():
    # Kafka's own test vectors (org.apache.kafka.common.utils.UtilsTest.testMurmur2)
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    }
    for data, want in cases.items():
        assert _crecords.murmur2(data) == want == py_murmur2(data)
