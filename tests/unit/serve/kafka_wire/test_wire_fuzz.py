"""Fuzzing the Kafka wire listener's decode-and-dispatch (serve/kafka_wire, no Ray): hypothesis builds real
requests of every served (API key, version) from kio's own types, encodes them, and derives hundreds of
mutants from each (byte flips, truncations, insertions, a lying api key/version, trailing bytes): at least
100,000 frames in all. Every frame must end in one of the outcomes the listener is built for: rejected as
a RequestError (the Processor closes that connection with a log line), answered (ApiVersions, or an error
answer built without the broker), or handed to the broker (``Backend``: here a tripwire that records the
call). Anything else (a handler crashing on a request that decoded) is a bug, reported with its frame."""

from __future__ import annotations

import asyncio
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.static.primitive import Records

from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis

st.register_type_strategy(Records, st.binary(max_size=96))

SERVED = [(k, v) for k, (lo, hi) in sorted(versions.SUPPORTED.items()) for v in range(lo, hi + 1)]
MUTANTS_PER_REQUEST = 520
EXAMPLES = 200  # 200 x (1 + 520) > 100,000 frames
FRAMES = {"total": 0, "rejected": 0, "answered": 0, "reached": 0}


class Reached(Exception):
    """The request decoded and its handler asked the broker: the end of the listener's own work."""


class Tripwire:
    broker_id = 0
    cluster_id = "fuzz"
    auto_create_topics_enable = False

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise Reached(name)

        return call


def mutants(frame: bytes, rng: random.Random) -> list[bytes]:
    payload = bytearray(frame[4:])
    out = []
    for _ in range(MUTANTS_PER_REQUEST):
        p = bytearray(payload)
        op = rng.randrange(7)
        if op == 0:  # flip 1-4 bytes anywhere
            for _ in range(rng.randint(1, 4)):
                p[rng.randrange(len(p))] = rng.randrange(256)
        elif op == 1:  # truncate
            del p[rng.randrange(len(p)) :]
        elif op == 2:  # insert junk
            i = rng.randrange(len(p) + 1)
            p[i:i] = rng.randbytes(rng.randint(1, 16))
        elif op == 3:  # another served api key/version on this body
            k, v = rng.choice(SERVED)
            p[0:4] = k.to_bytes(2, "big") + v.to_bytes(2, "big")
        elif op == 4:  # any api key/version at all
            p[0:4] = rng.randbytes(4)
        elif op == 5:  # bytes after the request (Kafka ignores them)
            p += rng.randbytes(rng.randint(1, 8))
        else:  # flip a byte of the body only (the header stays valid)
            if len(p) > 12:
                p[rng.randrange(12, len(p))] ^= 1 << rng.randrange(8)
        out.append(bytes(p))
    return out


async def run_frames(apis: KafkaApis, payloads: list[bytes]) -> list[tuple[bytes, BaseException]]:
    bad = []
    for payload in payloads:
        FRAMES["total"] += 1
        try:
            if len(payload) < 8:
                raise codec.RequestError("shorter than a header")  # the Processor's framing catches these
            await apis.handle(payload)
            FRAMES["answered"] += 1
        except codec.RequestError:
            FRAMES["rejected"] += 1
        except Reached:
            FRAMES["reached"] += 1
        except Exception as e:  # noqa: BLE001 - what the test is looking for
            bad.append((payload, e))
    return bad


@st.composite
def requests(draw):
    key, version = draw(st.sampled_from(SERVED))
    req = draw(st.from_type(load_request_schema(key, version)))
    return key, version, req


# derandomized: the same 100,000+ frames every run (CI stays reproducible); RAFKA_FUZZ_RANDOM=1 explores anew
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not os.environ.get("RAFKA_FUZZ_RANDOM"),
    database=None,
)
@given(requests(), st.integers(0, 2**32))
def test_mutated_real_requests_never_crash_a_handler(kvr, seed):
    key, version, req = kvr
    frame = codec.encode_request(seed % 2**31, req)
    apis = KafkaApis(Tripwire())
    payloads = [frame[4:], *mutants(frame, random.Random(seed))]
    bad = asyncio.run(run_frames(apis, payloads))
    if bad:
        payload, e = bad[0]
        k, v, _ = codec.header_prefix(payload)
        raise AssertionError(
            f"{len(bad)} frame(s) crashed a handler; first: api {k} v{v} (built as {key} v{version}): "
            f"{type(e).__name__}: {e}; payload {payload[:120].hex()}"
        ) from e


def test_the_fuzz_ran_enough_frames_of_each_outcome():
    """Runs after the fuzz (file order): at least 100,000 frames, and every outcome occurred."""
    assert FRAMES["total"] >= 100_000, FRAMES
    assert min(FRAMES["rejected"], FRAMES["answered"], FRAMES["reached"]) > 0, FRAMES
