"""The leader's record walk in C (``_crecords.validate_records``) against its pure-Python twin
(``log_validator._walk_records``): identical answers, tuple for tuple, message for message.

Random well-formed batches (builder-made, every codec, headers, null keys and values, negative and large
timestamp deltas, LogAppendTime) pass both with the same max timestamp; random mutations of valid records
under a recomputed CRC get the same verdict from both; and whatever the walk accepts, both record decoders
(the consumers' path) decode, with offsets base..base+count-1: the leader can no longer write a batch a
consumer cannot read.
"""

from __future__ import annotations

import random

from batch_forge import NOW, enc_record, wrap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.records as records
from protocol.errors import KafkaError
from storage import _crecords, codecs, log_validator
from storage.log_config import LogConfig
from storage.records import GZIP, LZ4, NONE, RECORDS_POS, SNAPPY, ZSTD, RecordBatchBuilder, decode_records

ALL_CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
C_WALK = _crecords.validate_records
PY_WALK = log_validator._walk_records
C_DECODE = _crecords.decode_into
DIFF = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64 = (-(1 << 63), (1 << 63) - 1)

BLOB = st.one_of(st.none(), st.binary(max_size=40), st.integers(0, 3000).map(lambda n: b"v" * n))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)


def both(data, start, end, count, base_ts, lat, compacted, lo, hi):
    c = C_WALK(data, start, end, count, base_ts, lat, compacted, lo, hi)
    py = PY_WALK(data, start, end, count, base_ts, lat, compacted, lo, hi)
    assert c == py, (c, py)
    return c


def decodes(batch: bytes) -> list | None:
    """The records through both decoders (None if either refuses); they must agree."""
    out = []
    for decoder in (C_DECODE, None):
        saved = records._c_decode
        records._c_decode = decoder
        try:
            out.append(decode_records(batch))
        except KafkaError:
            out.append(None)
        finally:
            records._c_decode = saved
    assert repr(out[0]) == repr(out[1])
    return out[0]


@DIFF
@given(
    recs=st.lists(st.tuples(st.integers(-1, 2**45), BLOB, BLOB, HEADERS), min_size=1, max_size=25),
    codec=st.sampled_from(ALL_CODECS),
    lat=st.booleans(),
    compacted=st.booleans(),
)
def test_valid_batches_pass_both(recs, codec, lat, compacted):
    b = RecordBatchBuilder(compression_type=codec, timestamp_type=int(lat), batch_size=1 << 22)
    for ts, k, v, h in recs:
        assert b.append(ts, k if k is not None or not compacted else b"", v, h)
    batch = b.build()
    body = batch[RECORDS_POS:]
    data = codecs.decompress(codec, body) if codec else batch
    start = 0 if codec else RECORDS_POS
    got = both(data, start, len(data), len(recs), recs[0][0], lat, compacted, *INT64)
    assert got == (0, len(recs), -1 if lat else max([-1] + [r[0] for r in recs]))
    infos = log_validator.validate_leader_append(bytearray(batch), LogConfig(message_timestamp_after_max_ms=2**62), NOW)
    assert len(infos) == 1


@DIFF
@given(
    body=st.binary(max_size=200),
    count=st.integers(0, 12),
    base_ts=st.integers(*INT64),
    lat=st.booleans(),
    compacted=st.booleans(),
    lo=st.integers(*INT64),
    hi=st.integers(*INT64),
)
def test_random_regions_same_verdict(body, count, base_ts, lat, compacted, lo, hi):
    both(body, 0, len(body), count, base_ts, lat, compacted, lo, hi)


def _mutate(rng: random.Random, blob: bytes) -> bytes:
    b = bytearray(blob)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if op < 0.6 and b:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op < 0.75:
            i = rng.randint(0, len(b))
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op < 0.9 and b:
            i = rng.randrange(len(b))
            del b[i : i + rng.randint(1, 8)]
        else:
            del b[rng.randint(0, len(b)) :]
    return bytes(b)


def test_thousands_of_mutated_batches_same_verdict_and_decodable_when_accepted():
    rng = random.Random(13)
    verdicts = {0: 0, 1: 0, 2: 0, 3: 0}
    for i in range(6000):
        n = rng.randint(1, 6)
        recs = [
            enc_record(
                rng.choice([0, 1, -1, 200, -70_000, 2**40]),
                j,
                rng.choice([None, b"", b"key", rng.randbytes(150)]),
                rng.choice([None, b"", b"v" * 30]),
                [("h", b"x"), ("é", None), ("k", b"")][: rng.randint(0, 3)],
                rng.randrange(256),
            )
            for j in range(n)
        ]
        body = _mutate(rng, b"".join(recs)) if i % 10 else b"".join(recs)
        count = n if rng.random() < 0.85 else rng.randint(1, n + 2)
        codec = ALL_CODECS[i % 5]
        lat = rng.random() < 0.2
        compacted = rng.random() < 0.3
        base_ts = rng.choice([NOW, NOW - 10**9, 2**63 - 100, -(2**63) + 100])
        lo, hi = (NOW - 10**6, NOW + 10**6) if rng.random() < 0.5 else INT64
        batch = wrap(
            codecs.compress(codec, body) if codec else body,
            count,
            attributes=codec | (8 if lat else 0),
            base_ts=base_ts,
        )
        data = codecs.decompress(codec, batch[RECORDS_POS:]) if codec else batch
        start = 0 if codec else RECORDS_POS
        verdict = both(data, start, len(data), count, base_ts, lat, compacted, lo, hi)
        verdicts[verdict[0]] += 1
        if verdict[0] == 0:  # accepted: every consumer decodes it, offsets dense from the base
            got = decodes(batch)
            assert got is not None, verdict
            assert [r.offset for r in got] == list(range(count))
            if not lat:
                assert verdict[2] == max([-1] + [r.timestamp for r in got])
    assert all(v > 200 for v in verdicts.values()), verdicts  # every outcome well exercised


def test_walker_switch_follows_the_extension():
    assert log_validator.ACCELERATED == (log_validator._c_walk is not None)
    good = enc_record(0, 0, b"k", b"v")
    for walk in (C_WALK, PY_WALK):
        assert walk(good, 0, len(good), 1, NOW, False, True, *INT64) == (0, 1, NOW)
        assert walk(good, 0, len(good), 2, NOW, False, True, *INT64)[:2] == (1, 1)
        assert walk(good, 0, len(good), 1, NOW, False, True, NOW + 1, NOW + 2) == (3, 0, NOW)


LEAK_PROBE = """
import gc, sys
from storage import _crecords
from storage.varint import encode_varint
rec = lambda od, key: (lambda b: encode_varint(len(b)) + b)(bytes([0, 0]) + encode_varint(od) + (
    b"\\x01" if key is None else encode_varint(len(key)) + key) + b"\\x02v\\x02" + b"\\x02h\\x02x")
good = rec(0, b"k") + rec(1, b"k")
cases = [(good, 2, True, False), (good, 2, False, False), (good + b"\\x05junk", 2, True, False),
         (rec(0, None), 1, True, True)]  # ok, timestamp out of [0, 500], malformed, null key
for data, n, lat, compacted in cases:
    print(_crecords.validate_records(data, 0, len(data), n, 1000, lat, compacted, 0, 500)[0], end=" ")
def run():
    for _ in range(20000):
        for data, n, lat, compacted in cases:
            _crecords.validate_records(data, 0, len(data), n, 1000, lat, compacted, 0, 500)
run(); gc.collect()
blocks = sys.getallocatedblocks()
run(); gc.collect()
print(sys.getallocatedblocks() - blocks)
"""


def test_validate_records_leaks_nothing():
    """80,000 walks ending in every status (ok, malformed with a message, null key, timestamp) leave no
    memory blocks behind; counted in a fresh interpreter (Ray's threads allocate in the suite's)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "RAFKA_PURE_PYTHON"}
    out = subprocess.run(
        [sys.executable, "-c", LEAK_PROBE],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    *statuses, blocks = out.stdout.split()
    assert statuses == ["0", "3", "1", "2"]
    assert int(blocks) < 50  # a leaked message or tuple per call would be > 20,000
