"""The C record decoder (storage/_crecords.c) against the pure-Python reference in storage/records.py.

Differential: random records (None keys/values, headers, varints of every width, negative and 64-bit
deltas, every codec, LogAppendTime) decode to identical lists through both paths, and random or mutated
batches fail with the same error types (thousands of them: a crash here takes the test run down).
Also: the extension is built and is what ``decode_records`` uses (so CI catches a broken build), the
RAFKA_PURE_PYTHON switch, the defer-to-Python contract for values past 64 bits, and no leaked references.
"""

from __future__ import annotations

import os
import pickle
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.records as records
from protocol.errors import KafkaError
from rafka.structs import ConsumerRecord
from storage import codecs
from storage.records import (
    BATCH_HEADER,
    BATCH_OVERHEAD,
    GZIP,
    LOG_OVERHEAD,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    decode_records,
    encode_varint,
)

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
FORCED_PURE = os.environ.get("RAFKA_PURE_PYTHON", "") not in ("", "0")
ROOT = Path(__file__).resolve().parents[3]
DIFF = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# An ImportError here is a broken build. Under RAFKA_PURE_PYTHON=1 the differential tests still compare
# against the extension, imported directly.
from storage import _crecords  # noqa: E402

if FORCED_PURE:
    _crecords.set_record_type(Record)
C_DECODE = _crecords.decode_into

INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL = st.integers(-200, 200)
DELTA = st.one_of(SMALL, st.integers(-(2**40), 2**40), INT64)
BLOB = st.one_of(st.none(), st.binary(max_size=40), st.integers(0, 70_000).map(lambda n: b"v" * n))
HEADERS = st.lists(st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=30))), max_size=4)


# ------------------------------------------------------------------------------------------------
# helpers


def enc_record(tsd: int, od: int, key, value, headers=(), attrs: int = 0) -> bytes:
    """One record in the v2 grammar, any deltas (the builder only writes well-formed, increasing ones)."""
    body = [bytes([attrs]), encode_varint(tsd), encode_varint(od)]
    body += [b"\x01"] if key is None else [encode_varint(len(key)), key]
    body += [b"\x01"] if value is None else [encode_varint(len(value)), value]
    body.append(encode_varint(len(headers)))
    for hk, hv in headers:
        hk = hk.encode("utf-8") if isinstance(hk, str) else hk
        body += [encode_varint(len(hk)), hk]
        body += [b"\x01"] if hv is None else [encode_varint(len(hv)), hv]
    body = b"".join(body)
    return encode_varint(len(body)) + body


def raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def wrap(
    body: bytes,
    count: int,
    codec: int = NONE,
    log_append: bool = False,
    base_offset: int = 0,
    base_ts: int = 1000,
    max_ts: int = 2000,
) -> bytes:
    """A batch with a correct CRC around a records body (compressed here when ``codec``)."""
    if codec:
        body = codecs.compress(codec, body)
    head = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
            -1,
            2,
            0,
            codec | (8 if log_append else 0),
            max(count - 1, 0),
            base_ts,
            max_ts,
            -1,
            -1,
            -1,
            count,
        )
    )
    head += body
    struct.pack_into(">I", head, 17, crc32c(memoryview(head)[21:]))
    return bytes(head)


def outcome(fn, c: bool):
    """``("ok", repr, value)`` or ``("error", type)`` of ``fn()`` through the C or the pure path."""
    saved = records._c_decode
    records._c_decode = C_DECODE if c else None
    try:
        got = fn()
    except KafkaError as e:
        assert e.message
        return ("error", type(e))
    finally:
        records._c_decode = saved
    assert all(type(r) is Record and type(r.headers) is tuple for r in got)
    # repr tells bytes from bytearray and tuple from list, which == does not
    return ("ok", repr(got), got)


def same(fn):
    c, pure = outcome(fn, True), outcome(fn, False)
    assert c == pure
    return c


# ------------------------------------------------------------------------------------------------
# the build and the switch


def test_extension_is_built_and_used(monkeypatch):
    if FORCED_PURE:
        assert records.ACCELERATED is False and records._c_decode is None
        return
    assert records.ACCELERATED is True, "storage._crecords is not built: run `pip install -e .`"
    assert records._c_decode is _crecords.decode_into
    for source in (ROOT / "storage").glob("_crecords*.[ch]"):  # a source tree (editable install): not stale
        assert os.path.getmtime(_crecords.__file__) >= os.path.getmtime(source), (
            f"{_crecords.__file__} is older than {source}: rebuild with `pip install -e .`"
        )
    calls = []

    def spy(*args):
        calls.append(args[3])
        return _crecords.decode_into(*args)

    monkeypatch.setattr(records, "_c_decode", spy)
    data = RecordBatchBuilder().build()
    b = RecordBatchBuilder(base_offset=5)
    for i in range(3):
        b.append(100 + i, b"k", b"v%d" % i)
    data += b.build()
    assert [r.offset for r in decode_records(data)] == [5, 6, 7]
    assert calls == [3]  # the empty batch never reaches a decoder


@pytest.mark.parametrize("value, accelerated", [("1", False), ("0", True), ("", True)])
def test_pure_python_switch(value, accelerated):
    code = (
        "import storage.records as r; b = r.RecordBatchBuilder(); b.append(1, b'k', b'v', [('h', None)]);"
        "assert r.decode_records(b.build()) == [r.Record(0, 1, b'k', b'v', (('h', None),))];"
        "print(r.ACCELERATED)"
    )
    env = dict(os.environ, RAFKA_PURE_PYTHON=value)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(accelerated)


# ------------------------------------------------------------------------------------------------
# the decode_into contract


def test_decode_into_appends_and_reports_done():
    body = enc_record(0, 0, b"k", b"v", [("h", b"x")]) + enc_record(-3, 1, None, None)
    out = ["before"]
    assert _crecords.decode_into(body, 0, len(body), 2, 10, 1000, None, out) is True
    assert out == ["before", Record(10, 1000, b"k", b"v", (("h", b"x"),)), Record(11, 997, None, None, ())]
    assert type(out[1]) is Record and type(out[2]) is Record and out[2].headers == ()
    out = []
    padded = b"junk" + body + b"more"  # a region inside a larger buffer (a fetch payload)
    assert _crecords.decode_into(padded, 4, 4 + len(body), 2, 0, 0, 5555, out) is True
    assert [r.timestamp for r in out] == [5555, 5555]  # LogAppendTime


@pytest.mark.parametrize(
    "body, start, end, count, match",
    [
        (enc_record(0, 0, b"k", b"v"), 0, 10**6, 1, "past the end"),
        (enc_record(0, 0, b"k", b"v"), 3, 2, 1, "past the end"),
        (enc_record(0, 0, b"k", b"v")[:-1], 0, None, 1, "fit"),
        (enc_record(0, 0, b"k", b"v") + b"\x00", 0, None, 1, "remain"),
        (enc_record(0, 0, b"k", b"v"), 0, None, 2, "past the end"),
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00]), 0, None, 1, "negative key length -2"),
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x05, 0x00]), 0, None, 1, "negative value length -3"),
        (bytes([0x0C, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01]), 0, None, 1, "header count -1"),
        (bytes([0x0E, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x01, 0x01]), 0, None, 1, "header key length -1"),
        (
            bytes([0x12, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02]) + b"h" + bytes([0x03]),
            0,
            None,
            1,
            "header value length -2",
        ),
        (bytes([0x12, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02]) + b"\xff" + bytes([0x01]), 0, None, 1, "utf-8"),
        (bytes([0x0C, 0x00] + [0xFF] * 11), 0, None, 1, "fit"),
        (bytes([0x20, 0x00] + [0xFF] * 10 + [0x01, 0x00, 0x01, 0x01, 0x00]), 0, None, 1, "longer than 10 bytes"),
        (bytes([0xFF] * 9 + [0x7F]), 0, None, 1, "record length varint does not fit 64 bits"),
    ],
)
def test_decode_into_errors_leave_out_untouched(body, start, end, count, match):
    end = len(body) if end is None else end
    good = enc_record(0, 0, b"k", b"v")
    out = []
    assert _crecords.decode_into(good + body, 0, len(good), 1, 0, 0, None, out)
    with pytest.raises(ValueError, match=match):
        _crecords.decode_into(body, start, end, count, 0, 0, None, out)
    assert out == [Record(0, 0, b"k", b"v", ())]


def test_values_past_64_bits_defer_to_the_reference_decoder():
    top = 2**63 - 1
    ten_byte = bytes([0x80] * 9 + [0x02])  # zigzag 2**64: a 10-byte varlong the Python decoder reads as 2**63
    overflowing = [  # (records body, base offset, base timestamp)
        (enc_record(1, 0, b"k", b"v"), 0, top),  # base timestamp + delta
        (enc_record(0, 5, b"k", b"v"), top - 1, 0),  # base offset + delta
        (enc_record(-1, 0, b"k", b"v"), 0, -(2**63)),
        (raw_record(b"\x00" + ten_byte + b"\x00\x02k\x02v\x00"), 0, 0),  # timestamp delta of 65 bits
        (raw_record(b"\x00\x00" + ten_byte + b"\x02k\x02v\x00"), 0, 0),  # offset delta of 65 bits
    ]
    for body, base_offset, base_ts in overflowing:
        out = [1]
        assert _crecords.decode_into(body, 0, len(body), 1, base_offset, base_ts, None, out) is False
        assert out == [1]
        data = wrap(body, 1, base_offset=base_offset, base_ts=base_ts)
        _, _, (r,) = same(lambda: decode_records(data))
        assert r.key == b"k" and not (-(2**63) <= r.offset <= top and -(2**63) <= r.timestamp <= top)
    # under LogAppendTime the timestamp delta is read but unused: no overflow to defer
    body, _, base_ts = overflowing[0]
    out = []
    assert _crecords.decode_into(body, 0, len(body), 1, 0, base_ts, 77, out) is True
    assert out == [Record(0, 77, b"k", b"v", ())]
    body = overflowing[3][0]
    assert _crecords.decode_into(body, 0, len(body), 1, 0, 0, 77, out) is True


LEAK_PROBE = """
import gc, pickle, sys
import storage.records as records
from protocol.errors import InvalidRecordError
assert records._c_decode is not None, "the C decoder is not built"
batches, keep = pickle.loads(sys.stdin.buffer.read()), []

class Shaped(tuple):  # a ConsumerRecord-like NamedTuple of 9 fields, counted like Record
    __slots__ = ()


def churn():
    for data in batches:
        try:
            got = records.decode_records(data)
        except InvalidRecordError:
            continue
        h = records.parse_header(data, 0)
        shaped = []
        records.decode_batch_into(data, 0, h, shaped, (Shaped, "t", 1, 5, h.base_offset + 3))
        if {keep}:
            keep.append(got)  # the self-check: a leak the probe must see

churn()
gc.collect()
refs, blocks = sys.getrefcount(records.Record) + sys.getrefcount(Shaped), sys.getallocatedblocks()
for _ in range(300):
    churn()
gc.collect()
print(sys.getrefcount(records.Record) + sys.getrefcount(Shaped) - refs, sys.getallocatedblocks() - blocks)
"""


@pytest.mark.parametrize("leak", [False, True], ids=["decoder", "probe-sees-a-leak"])
def test_no_leaked_references(leak):
    """300 rounds of decoding good, LogAppendTime, bad and deferred batches leave no objects behind.

    Counted in a fresh interpreter: in the suite's process, Ray's driver threads allocate while the test
    counts blocks. ``leak`` keeps the results, proving the probe sees a leak of that size."""
    good = wrap(enc_record(0, 0, b"k", b"v" * 50, [("h", b"x"), ("n", None)]) * 50, 50)
    lat = wrap(enc_record(7, 0, None, b"v", [("h", b"x")]) * 50, 50, log_append=True)
    bad = wrap(enc_record(0, 0, b"k", b"v", [("h", b"x")]) * 9 + bytes([0x12, 0, 0, 0, 1, 1, 2, 2, 0xFF, 1]), 10)
    deferred = wrap(enc_record(0, 0, b"k", b"v") + enc_record(1, 1, b"k", b"v"), 2, base_ts=2**63 - 1)
    env = {k: v for k, v in os.environ.items() if k != "RAFKA_PURE_PYTHON"}
    out = subprocess.run(
        [sys.executable, "-c", LEAK_PROBE.replace("{keep}", str(leak))],
        cwd=ROOT,
        env=env,
        input=pickle.dumps([good, lat, bad, deferred]),
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()
    refs, blocks = map(int, out.stdout.split())
    if leak:  # 300 rounds x 102 kept records: each holds its type and several blocks
        assert refs >= 300 * 102 and blocks > 30_000, (refs, blocks)
    else:
        assert refs == 0, f"{refs} references to Record leaked"
        assert blocks < 100, f"{blocks} memory blocks leaked"  # a leak of one object per record: > 30,000


# ------------------------------------------------------------------------------------------------
# differential: identical lists


@DIFF
@given(
    recs=st.lists(st.tuples(DELTA, DELTA, BLOB, BLOB, HEADERS, st.integers(0, 255)), max_size=12),
    base_offset=st.one_of(st.integers(0, 2**40), INT64),
    base_ts=st.one_of(st.integers(-1, 2**41), INT64),
    codec=st.sampled_from(ALL_CODECS),
    log_append=st.booleans(),
    max_ts=INT64,
)
def test_differential_any_records(recs, base_offset, base_ts, codec, log_append, max_ts):
    body = b"".join(enc_record(tsd, od, k, v, h, attrs) for tsd, od, k, v, h, attrs in recs)
    data = wrap(body, len(recs), codec, log_append, base_offset, base_ts, max_ts)
    got = same(lambda: decode_records(data))
    assert got[0] == "ok" and len(got[2]) == len(recs)
    assert same(lambda: list(RecordBatch(bytearray(data)))) == got  # the non-bytes path
    assert same(lambda: decode_records(memoryview(data), validate=False)) == got


def shaped(data: bytes, min_offset: int, c: bool):
    """The consumer's records of the batch ``data`` from ``min_offset`` (``decode_batch_into`` with a shape)."""
    saved = records._c_decode
    records._c_decode = C_DECODE if c else None
    try:
        out: list = []
        records.decode_batch_into(data, 0, records.parse_header(data, 0), out, (ConsumerRecord, "t", 3, 7, min_offset))
    except KafkaError as e:
        return ("error", type(e))
    finally:
        records._c_decode = saved
    assert all(type(r) is ConsumerRecord for r in out)
    return ("ok", repr(out), out)


@DIFF
@given(
    recs=st.lists(st.tuples(DELTA, DELTA, BLOB, BLOB, HEADERS, st.integers(0, 255)), max_size=12),
    base_offset=st.one_of(st.integers(0, 200), INT64),
    base_ts=st.one_of(st.integers(-1, 2**41), INT64),
    codec=st.sampled_from(ALL_CODECS),
    log_append=st.booleans(),
    max_ts=INT64,
    min_offset=st.one_of(st.integers(-5, 300), INT64, st.sampled_from([2**63, 2**70, -(2**70)])),
)
def test_differential_consumer_records(recs, base_offset, base_ts, codec, log_append, max_ts, min_offset):
    """With a shape the decoder builds rafka's ConsumerRecords from the position on, in one step: the same
    list through C and Python, and the same as converting the plain Records."""
    body = b"".join(enc_record(tsd, od, k, v, h, attrs) for tsd, od, k, v, h, attrs in recs)
    data = wrap(body, len(recs), codec, log_append, base_offset, base_ts, max_ts)
    got = shaped(data, min_offset, True)
    assert got == shaped(data, min_offset, False)
    plain = outcome(lambda: decode_records(data), True)
    assert got[0] == plain[0]
    if got[0] == "ok":
        tst = int(log_append)
        want = [ConsumerRecord("t", 3, r[0], r[1], tst, r[2], r[3], r[4], 7) for r in plain[2] if r[0] >= min_offset]
        assert got[2] == want


@DIFF
@given(
    recs=st.lists(
        st.tuples(st.integers(-1, 2**45), BLOB, BLOB, HEADERS, st.integers(1, 1000)), min_size=1, max_size=30
    ),
    base_offset=st.integers(0, 2**62),
    codec=st.sampled_from(ALL_CODECS),
    log_append=st.booleans(),
    batch_size=st.sampled_from([200, 5000, 1 << 20]),
)
def test_differential_builder_batches(recs, base_offset, codec, log_append, batch_size):
    parts, i = [], 0
    while i < len(recs):
        b = RecordBatchBuilder(
            compression_type=codec, base_offset=base_offset, batch_size=batch_size, timestamp_type=int(log_append)
        )
        while i < len(recs):
            ts, k, v, h, gap = recs[i]
            base_offset += gap
            if not b.append(ts, k, v, h, offset=base_offset):
                break
            i += 1
        parts.append(b.build())
    data = b"".join(parts)
    got = same(lambda: decode_records(data))
    assert got[0] == "ok" and len(got[2]) == len(recs)


def test_differential_big_batches():
    rng = random.Random(7)
    for codec in ALL_CODECS:
        b = RecordBatchBuilder(compression_type=codec, base_offset=10**12, batch_size=1 << 23)
        for i in range(5000):
            key = None if i % 7 == 0 else b"key-%d" % i
            value = None if i % 11 == 0 else rng.randbytes(rng.choice([0, 1, 100, 200, 3000]))
            headers = [("h%d" % j, None if j == 2 else b"x" * j) for j in range(i % 4)]
            assert b.append(1_700_000_000_000 + rng.randint(-5000, 5000), key, value, headers)
        got = same(lambda: decode_records(b.build()))
        assert got[0] == "ok" and len(got[2]) == 5000


# ------------------------------------------------------------------------------------------------
# differential: same error types, never a crash


@DIFF
@given(
    body=st.binary(max_size=300), count=st.integers(-3, 20), codec=st.sampled_from(ALL_CODECS), log_append=st.booleans()
)
def test_fuzz_random_records_region(body, count, codec, log_append):
    data = wrap(body, count, codec, log_append)
    same(lambda: decode_records(data))


def _mutate(rng: random.Random, blob: bytes) -> bytes:
    b = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.6 and b:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op < 0.75:
            i = rng.randint(0, len(b))
            b[i:i] = rng.randbytes(rng.randint(1, 12))
        elif op < 0.9 and b:
            i = rng.randrange(len(b))
            del b[i : i + rng.randint(1, 12)]
        else:
            del b[rng.randint(0, len(b)) :]
    return bytes(b)


def _seed_batch(rng: random.Random) -> tuple[bytes, int]:
    n = rng.randint(1, 8)
    body = b"".join(
        enc_record(
            rng.choice([0, 1, -1, 300, -70_000, 2**40, rng.randint(-(2**63), 2**63 - 1)]),
            i,
            rng.choice([None, b"", b"key", rng.randbytes(200)]),
            rng.choice([None, b"", b"value" * 40]),
            [("h", b"x"), ("é", None)][: rng.randint(0, 2)],
            rng.randrange(256),
        )
        for i in range(n)
    )
    return body, n


def fuzz_mutated_batches(seed: int, rounds: int) -> tuple[int, int]:
    """``(errors, oks)`` over ``rounds`` mutated batches, each decoded through both paths."""
    rng = random.Random(seed)
    errors = oks = 0
    for i in range(rounds):
        body, n = _seed_batch(rng)
        codec = ALL_CODECS[i % 5]
        log_append = rng.random() < 0.3
        base_ts = rng.choice([1000, 2**63 - 10, -(2**63) + 10])
        if i % 4 == 3:  # mutate the whole (compressed) batch, header included: read with validate=False
            data = _mutate(rng, wrap(body, n, codec, log_append, base_ts=base_ts))
            fn = (lambda d=data: decode_records(d, validate=False)) if len(data) >= BATCH_OVERHEAD else None
            if fn is None:
                continue
        else:  # mutate the records body under a good CRC (and the count, sometimes)
            count = n if rng.random() < 0.8 else rng.randint(-2, n + 2)
            data = wrap(_mutate(rng, body), count, codec, log_append, base_ts=base_ts)
            fn = (lambda d=data: decode_records(d)) if i % 2 else (lambda d=data: list(RecordBatch(d)))
        result = same(fn)
        errors += result[0] == "error"
        oks += result[0] == "ok"
    return errors, oks


def test_fuzz_thousands_of_mutated_batches():
    errors, oks = fuzz_mutated_batches(20240617, 4000)
    assert errors > 1000 and oks > 100  # both outcomes well exercised
