"""actors/replication/call_order.py without Ray: a channel's calls run in their numbers' order whatever order they
arrive in; a gap is waited for at most ``gap_wait_s`` and then skipped; late calls run at once; the
caller's numbering restarts for a new actor; malformed orders are INVALID_REQUEST."""

from __future__ import annotations

import asyncio
import random

import pytest

from actors.replication.call_order import CallOrder, check_order
from protocol.errors import InvalidRequestError


def run(coro):
    return asyncio.run(coro)


async def _call(co: CallOrder, order, log: list, work_s: float = 0.0):
    """A produce call's shape: enter, do the ordered part (append to ``log``), leave, then the unordered tail."""
    await co.enter(order)
    try:
        log.append(order[1] if order else None)
    finally:
        co.leave(order)
    if work_s:
        await asyncio.sleep(work_s)


def test_calls_arriving_in_any_order_run_in_number_order():
    async def main():
        for seed in range(20):
            co = CallOrder(gap_wait_s=5)
            log: list = []
            ns = list(range(50))
            random.Random(seed).shuffle(ns)
            tasks = []
            for n in ns:  # each arrives at its own moment, out of order
                tasks.append(asyncio.ensure_future(_call(co, ("c", n), log)))
                await asyncio.sleep(0)
            await asyncio.gather(*tasks)
            assert log == list(range(50)), seed
            assert co.stats["gaps_skipped"] == 0

    run(main())


def test_channels_are_independent():
    async def main():
        co = CallOrder(gap_wait_s=5)
        log: list = []
        b1 = asyncio.ensure_future(_call(co, ("b", 1), log))
        await asyncio.sleep(0.01)
        assert not b1.done()  # b's call 1 waits for b's call 0
        await _call(co, ("a", 0), log)  # channel a is not held up by b
        await _call(co, ("a", 1), log)
        await _call(co, ("b", 0), log)
        await b1
        assert log == [0, 1, 0, 1]

    run(main())


def test_the_next_call_waits_until_the_previous_one_left_not_only_entered():
    async def main():
        co = CallOrder(gap_wait_s=5)
        await co.enter(("c", 0))
        second = asyncio.ensure_future(co.enter(("c", 1)))
        await asyncio.sleep(0.02)
        assert not second.done()
        co.leave(("c", 0))
        await asyncio.wait_for(second, 1)
        co.leave(("c", 0))  # idempotent: a second leave changes nothing
        third = asyncio.ensure_future(co.enter(("c", 2)))
        await asyncio.sleep(0.02)
        assert not third.done()
        co.leave(("c", 1))
        await asyncio.wait_for(third, 1)

    run(main())


def test_a_gap_is_skipped_after_the_wait_and_the_late_call_runs_at_once(caplog):
    async def main():
        co = CallOrder(gap_wait_s=0.2)
        log: list = []
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await _call(co, ("c", 0), log)
        await _call(co, ("c", 2), log)  # call 1 is lost: call 2 waits 0.2 s, then goes on
        waited = loop.time() - t0
        assert 0.15 <= waited < 2.0
        t1 = loop.time()
        await _call(co, ("c", 3), log)  # the channel flows again
        await _call(co, ("c", 1), log)  # the lost call turns up late: it runs at once
        assert loop.time() - t1 < 0.1
        assert log == [0, 2, 3, 1]
        assert co.stats["gaps_skipped"] == 1 and co.stats["late"] == 1

    with caplog.at_level("WARNING", logger="rafka.replica"):
        run(main())
    assert any("calls 1..1 did not come within 0.2 s" in r.getMessage() for r in caplog.records)


def test_waiters_below_a_skipped_gap_are_released_with_it():
    async def main():
        co = CallOrder(gap_wait_s=0.5)
        log: list = []
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        far = asyncio.ensure_future(_call(co, ("c", 5), log))  # arrives first, waits for 0..4
        await asyncio.sleep(0.3)
        near = asyncio.ensure_future(_call(co, ("c", 3), log))  # waits for 0..2 (its own wait ends at 0.8 s)
        await asyncio.wait_for(asyncio.gather(far, near), 2.0)
        assert loop.time() - t0 < 0.7  # released when call 5's wait ended (0.5 s) and skipped past 3
        assert sorted(log) == [3, 5]

    run(main())


def test_a_new_channel_waits_for_its_call_0():
    async def main():
        co = CallOrder(gap_wait_s=5)
        log: list = []
        first_seen = asyncio.ensure_future(_call(co, ("new", 1), log))
        await asyncio.sleep(0.02)
        assert not first_seen.done()
        await _call(co, ("new", 0), log)
        await first_seen
        assert log == [0, 1]

    run(main())


def test_unordered_calls_never_wait_and_bad_orders_are_invalid_request():
    async def main():
        co = CallOrder(gap_wait_s=5)
        await co.enter(None)
        co.leave(None)
        for bad in (("c",), ["c", 0], ("c", -1), (1, 0), ("c", 1.0), ("c", True), "c:0"):
            with pytest.raises(InvalidRequestError):
                await co.enter(bad)
        waiting = asyncio.ensure_future(co.enter(("c", 1)))
        await asyncio.sleep(0.01)
        with pytest.raises(InvalidRequestError, match="came twice"):
            await co.enter(("c", 1))
        waiting.cancel()

    run(main())
    assert check_order(("x", 0)) == ("x", 0)


def test_idle_channels_are_forgotten_beyond_the_cap_but_not_ones_with_waiters():
    async def main():
        co = CallOrder(gap_wait_s=5, max_channels=3)
        held = asyncio.ensure_future(co.enter(("held", 1)))
        await asyncio.sleep(0)
        for i in range(10):
            await co.enter((f"c{i}", 0))
            co.leave((f"c{i}", 0))
        assert co.describe()["channels"] == 3
        await co.enter(("held", 0))
        co.leave(("held", 0))
        await asyncio.wait_for(held, 1)

    run(main())
