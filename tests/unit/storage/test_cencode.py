"""The C record encoders (storage/_crecords_encode.c): ``encode_many`` behind ``RecordBatchBuilder.append_many``
and ``append_one``, the fast path of ``RecordBatchBuilder.append`` (``Producer.send``'s per-record call).

Differential: ``append_many`` and ``append`` with the C fast path over random items (None/bytes/bytearray keys and values, str/bytes header names,
timestamps before the base, far from it, past 64 bits or invalid, wrong types, tiny batch sizes so batches
fill mid-run, builders that already hold records) must leave the builder exactly as ``append`` called item by
item does through pure Python: the same index where it stopped, the same batch bytes, the same exception type on
bad input.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.records as records
from protocol.errors import KafkaError
from storage import _crecords
from storage.records import RecordBatchBuilder, decode_records

DIFF = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BASE = 1_700_000_000_000
TS = st.one_of(
    st.integers(BASE - 100, BASE + 20_000),
    st.integers(-1, 2**63 - 1),
    st.sampled_from([-1, -2, 2**63, 2**64 + 5, BASE - 2**40]),
)
BLOB = st.one_of(
    st.none(),
    st.binary(max_size=30),
    st.integers(0, 20_000).map(lambda n: b"x" * n),
    st.binary(max_size=8).map(bytearray),
    st.sampled_from([7, "text"]),
)
HNAME = st.one_of(st.text(max_size=8), st.binary(max_size=8), st.sampled_from(["\ud800", 5]))
HVAL = st.one_of(st.none(), st.binary(max_size=20), st.binary(max_size=4).map(bytearray))
HEADERS = st.one_of(
    st.just(()),
    st.none(),
    st.lists(st.tuples(HNAME, HVAL), max_size=3).map(tuple),
    st.lists(st.tuples(HNAME, HVAL), min_size=1, max_size=3),
)
ITEM = st.tuples(TS, BLOB, BLOB, HEADERS)
CLEAN_ITEM = st.tuples(
    st.integers(BASE, BASE + 5000),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=9))), max_size=2).map(tuple),
)


def one_by_one(b: RecordBatchBuilder, items: list, start: int) -> int:
    for i in range(start, len(items)):
        it = items[i]
        if not b.append(it[0], it[1], it[2], it[3] if len(it) > 3 else ()):
            return i
    return len(items)


def run(path: str, items: list, batch_size: int, prefix: list, start: int):
    """``("ok", next, bytes)`` or ``("error", type, bytes)`` after appending ``items`` along ``path``."""
    b = RecordBatchBuilder(batch_size=batch_size)
    for ts, k, v, h in prefix:
        b.append(ts, k, v, h)
    saved = records._c_encode, records._c_append
    records._c_encode = _crecords.encode_many if path == "c" else None
    records._c_append = _crecords.append_one if path == "c_single" else None
    try:
        nxt = b.append_many(items, start) if path in ("c", "pure") else one_by_one(b, items, start)
    except (TypeError, ValueError, KafkaError, UnicodeError) as e:
        return ("error", type(e), b.record_count, b.build())
    finally:
        records._c_encode, records._c_append = saved
    return ("ok", nxt, b.record_count, b.build())


@DIFF
@given(
    items=st.lists(ITEM, max_size=25),
    batch_size=st.sampled_from([100, 400, 5000, 1 << 20]),
    prefix=st.lists(CLEAN_ITEM, max_size=3),
    start=st.integers(0, 3),
)
def test_append_many_matches_append(items, batch_size, prefix, start):
    start = min(start, len(items))
    single = run("single", items, batch_size, prefix, start)
    assert run("c", items, batch_size, prefix, start) == single
    assert run("pure", items, batch_size, prefix, start) == single
    assert run("c_single", items, batch_size, prefix, start) == single


@DIFF
@given(items=st.lists(CLEAN_ITEM, min_size=1, max_size=60), batch_size=st.sampled_from([200, 2000, 1 << 20]))
def test_append_many_fills_batches_and_round_trips(items, batch_size):
    """Feeding a stream into successive builders (the accumulator's loop) loses and reorders nothing."""
    out, i, batches = [], 0, 0
    while i < len(items):
        b = RecordBatchBuilder(batch_size=batch_size)
        j = b.append_many(items, i)
        assert j > i  # an empty batch always takes at least one record
        assert b.estimated_size <= batch_size or b.record_count == 1
        out += decode_records(b.build())
        i, batches = j, batches + 1
    assert [(r.timestamp, r.key, r.value, r.headers) for r in out] == [(ts, k, v, tuple(h)) for ts, k, v, h in items]


def test_append_many_takes_the_fast_path_for_plain_records(monkeypatch):
    calls = []
    real_append = RecordBatchBuilder.append
    monkeypatch.setattr(RecordBatchBuilder, "append", lambda self, *a: calls.append(a) or real_append(self, *a))
    b = RecordBatchBuilder(batch_size=1 << 20)
    items = [(BASE + i, b"k%d" % i, b"v" * i, (("h", b"1"),) if i % 3 == 0 else ()) for i in range(500)]
    assert b.append_many(items) == 500
    assert calls == []  # all 500 encoded in C
    items.append((BASE, bytearray(b"k"), b"v", ()))  # not bytes: goes through append (which converts)
    assert b.append_many(items, 500) == 501 and len(calls) == 1
    assert [r.key for r in decode_records(b.build())][-1] == b"k"


def test_encode_many_rejects_bad_arguments():
    with pytest.raises(TypeError):
        _crecords.encode_many((1, b"k", b"v"), 0, None, -1, 61, 100, 0)
    with pytest.raises(IndexError):
        _crecords.encode_many([], 1, None, -1, 61, 100, 0)
    with pytest.raises(TypeError):
        _crecords.encode_many([], 0, None, -1)
    # items that are not (ts, key, value) tuples stop the fast path at once
    assert _crecords.encode_many([[1, b"k", b"v"]], 0, None, -1, 61, 100, 0)[1] == 0
    assert _crecords.encode_many([(1, b"k")], 0, None, -1, 61, 100, 0)[1] == 0


def test_append_one_fast_path_and_fallbacks():
    b = RecordBatchBuilder(batch_size=200)
    assert _crecords.append_one(b, BASE, b"k", b"v" * 50) is True
    assert (b.record_count, b._base_ts, b._last_delta, b._max_ts) == (1, BASE, 0, BASE)
    assert _crecords.append_one(b, BASE - 5, None, None) is True  # an earlier timestamp: max stays
    assert (b.record_count, b._max_ts) == (2, BASE)
    assert _crecords.append_one(b, BASE, None, b"v" * 200) is False  # the batch is full: nothing changed
    before = (b.record_count, b.estimated_size, b.build())
    for ts, k, v in [(BASE, bytearray(b"k"), b"v"), (BASE, b"k", "text"), (-2, None, b"v"), (2**63, None, None)]:
        assert _crecords.append_one(b, ts, k, v) is None  # not the fast path's: the caller uses Python
    assert (b.record_count, b.estimated_size, b.build()) == before
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decode_records(b.build())] == [
        (0, BASE, b"k", b"v" * 50),
        (1, BASE - 5, None, None),
    ]
    empty = RecordBatchBuilder(batch_size=10)  # an empty batch takes one record however large
    assert _crecords.append_one(empty, BASE, None, b"x" * 100) is True and empty.record_count == 1
    with pytest.raises(TypeError):
        _crecords.append_one(b, BASE, None)
    with pytest.raises(AttributeError):
        _crecords.append_one(object(), BASE, None, None)


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(CLEAN_ITEM, min_size=1, max_size=40),
    more=st.lists(CLEAN_ITEM, max_size=5),
    codec=st.sampled_from([0, 1, 3, 4]),
)
def test_a_run_encoded_at_once_is_sealed_in_place(items, more, codec):
    """``append_many``'s first run carries the header's room (encode_many ``headroom``): ``build`` writes the header
    there and returns that very buffer, the same bytes a record-by-record builder makes, again after a reseal (new
    producer id and sequence) and after more records (then copied as usual); a compressed batch has no headroom."""

    def built(path_items, pid, seq, path):
        b = RecordBatchBuilder(batch_size=1 << 20, compression_type=codec)
        if path == "many":
            assert b.append_many(path_items) == len(path_items)
        else:
            one_by_one(b, path_items, 0)
        b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional = pid, 3, seq, True
        return b

    b = built(items, 7, 0, "many")
    first = b.build()
    assert first == built(items, 7, 0, "one").build()
    if codec:
        assert type(first) is bytes and not b._head
        return
    assert type(first) is bytearray and first is b._parts[0]  # sealed in place: no copy
    b.producer_id, b.base_sequence = 9, 40  # KIP-360's reseal rewrites the same buffer's header
    assert b.build() == built(items, 9, 40, "one").build()
    for ts, k, v, h in more:
        assert b.append(ts, k, v, h)
    out = b.build()
    assert out == built(items + more, 9, 40, "one").build()
    assert [r.value for r in decode_records(out)] == [it[2] for it in items + more]
