"""BoundedKVReads: a KV read the GCS does not answer (the head node down) is given up after its deadline, the
next one fails at once while the first still hangs (one thread held, not the pool), and reads work again once it
returns."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from actors.metadata.kv import BoundedKVReads, KVUnavailableError


def test_a_hung_read_is_given_up_and_holds_one_thread_until_the_gcs_answers():
    gcs_up = threading.Event()
    calls: list[str] = []

    def hung_read(key):
        calls.append(key)
        gcs_up.wait(30)
        return f"value of {key}"

    async def scenario():
        reads = BoundedKVReads(timeout_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(KVUnavailableError, match="within 0.3 s"):
            await reads.call(hung_read, "a")
        assert 0.25 < time.monotonic() - t0 < 5
        t0 = time.monotonic()
        with pytest.raises(KVUnavailableError, match="earlier read"):
            await reads.call(hung_read, "b")
        assert time.monotonic() - t0 < 0.2 and calls == ["a"]  # not started behind the hung one
        gcs_up.set()
        await asyncio.sleep(0.1)
        assert await reads.call(hung_read, "c") == "value of c"

    asyncio.run(scenario())


def test_a_read_that_fails_raises_its_own_error():
    def broken(key):
        raise ConnectionError(f"no {key}")

    async def scenario():
        with pytest.raises(ConnectionError, match="no k"):
            await BoundedKVReads(timeout_s=1).call(broken, "k")

    asyncio.run(scenario())
