"""DelayedOperationPurgatory on plain asyncio (no Ray)."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors.replication.purgatory import DelayedOperation, DelayedOperationPurgatory


class Counter:
    def __init__(self):
        self.value = 0


class WaitFor(DelayedOperation):
    """Completes when ``state.value >= target``; answers ("ok"|"timeout"|"cancelled", value)."""

    def __init__(self, state: Counter, target: int, delay_ms: float):
        super().__init__(delay_ms)
        self.state, self.target = state, target
        self.completions = 0
        self.expirations = 0
        self.checks = 0

    def try_complete(self) -> bool:
        self.checks += 1
        if self.state.value >= self.target:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1
        return ("timeout" if self.expired else "ok", self.state.value)

    def on_expiration(self):
        self.expirations += 1


class Answering(WaitFor):
    def on_cancel(self):
        return ("cancelled", self.state.value)


def run(coro):
    return asyncio.run(coro)


def test_completes_immediately_without_watching():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        s.value = 5
        op = WaitFor(s, 3, 1000)
        assert p.try_complete_else_watch(op, ["k"]) is True
        assert p.delayed() == 0 and p.watched() == 0
        assert await op.wait() == ("ok", 5)

    run(main())


def test_check_and_complete_wakes_the_waiter():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = WaitFor(s, 2, 5000)
        assert p.try_complete_else_watch(op, ["k"]) is False
        assert p.delayed() == 1 and p.watched() == 1
        waiter = asyncio.ensure_future(op.wait())
        s.value = 1
        assert p.check_and_complete("k") == 0
        assert not waiter.done()
        s.value = 2
        assert p.check_and_complete("k") == 1
        assert await waiter == ("ok", 2)
        assert p.delayed() == 0 and p.watched() == 0 and p.num_keys() == 0
        assert p.check_and_complete("k") == 0  # nothing left under the key
        assert op.completions == 1 and op.expirations == 0

    run(main())


def test_expires_after_delay_once():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = WaitFor(s, 10, 50)
        t0 = time.monotonic()
        p.try_complete_else_watch(op, ["a", "b"])
        assert await op.wait() == ("timeout", 0)
        elapsed = time.monotonic() - t0
        assert 0.04 <= elapsed < 1.0
        assert op.expired and op.expirations == 1 and op.completions == 1
        assert p.delayed() == 0
        # the completed op is dropped lazily from the watch lists
        s.value = 10
        assert p.check_and_complete("a") == 0
        assert p.check_and_complete("b") == 0
        assert p.watched() == 0

    run(main())


def test_completes_exactly_once_across_keys_and_timer():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = WaitFor(s, 1, 30)
        p.try_complete_else_watch(op, ["a", "b", "a"])  # duplicate key watched once
        assert p.watched() == 2
        s.value = 1
        assert p.check_and_complete("b") == 1
        assert p.check_and_complete("a") == 0
        assert op.force_complete() is False
        await asyncio.sleep(0.06)  # the timer was cancelled: no expiration
        assert op.completions == 1 and op.expirations == 0
        assert await op.wait() == ("ok", 1)

    run(main())


def test_many_waiters_only_satisfied_complete():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        ops = [WaitFor(s, t, 5000) for t in range(1, 101)]
        for op in ops:
            p.try_complete_else_watch(op, ["k"])
        s.value = 40
        assert p.check_and_complete("k") == 40
        assert p.delayed() == 60 and p.watched() == 60
        s.value = 100
        assert p.check_all() == 60
        results = await asyncio.gather(*(op.wait() for op in ops))
        assert [r[0] for r in results] == ["ok"] * 100

    run(main())


def test_shutdown_cancels_pending_and_refuses_new():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        plain = WaitFor(s, 5, 5000)
        answering = Answering(s, 5, 5000)
        p.try_complete_else_watch(plain, ["k"])
        p.try_complete_else_watch(answering, ["k"])
        w1 = asyncio.ensure_future(plain.wait())
        w2 = asyncio.ensure_future(answering.wait())
        await asyncio.sleep(0)
        assert p.shutdown() == 2
        with pytest.raises(asyncio.CancelledError):
            await w1
        assert await w2 == ("cancelled", 0)
        assert plain.cancelled and plain.completions == 0
        late = Answering(s, 5, 5000)
        assert p.try_complete_else_watch(late, ["k"]) is True
        assert await late.wait() == ("cancelled", 0)
        assert p.delayed() == 0 and p.watched() == 0

    run(main())


def test_cancel_for_key():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        a, b = Answering(s, 5, 5000), Answering(s, 5, 5000)
        p.try_complete_else_watch(a, ["x"])
        p.try_complete_else_watch(b, ["y"])
        assert p.cancel_for_key("x") == 1
        assert await a.wait() == ("cancelled", 0)
        assert not b.completed and p.delayed() == 1
        s.value = 5
        assert p.check_and_complete("y") == 1

    run(main())


def test_on_complete_exception_reaches_waiter_not_completer():
    class Broken(WaitFor):
        def on_complete(self):
            raise ValueError("boom")

    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = Broken(s, 1, 5000)
        p.try_complete_else_watch(op, ["k"])
        s.value = 1
        assert p.check_and_complete("k") == 1
        with pytest.raises(ValueError, match="boom"):
            await op.wait()

    run(main())


def test_try_complete_exception_completes_with_error():
    class BadCheck(WaitFor):
        def try_complete(self):
            if self.state.value:
                raise RuntimeError("bad check")
            return False

    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = BadCheck(s, 1, 5000)
        p.try_complete_else_watch(op, ["k"])
        s.value = 1
        assert p.check_and_complete("k") == 1
        with pytest.raises(RuntimeError, match="bad check"):
            await op.wait()
        assert p.delayed() == 0

    run(main())


def test_purge_sweeps_completed_entries():
    async def main():
        p, s = DelayedOperationPurgatory(purge_interval=10), Counter()
        ops = [WaitFor(s, 1, 5000) for _ in range(30)]
        for op in ops:
            p.try_complete_else_watch(op, ["a", "b"])
        assert p.watched() == 60
        s.value = 1
        p.check_and_complete("a")  # completes all 30; their "b" entries go stale and get purged
        assert p.delayed() == 0
        assert p.watched() <= 10
        p.check_and_complete("b")
        assert p.watched() == 0 and p.num_keys() == 0

    run(main())


def test_zero_delay_expires_on_next_loop_turn():
    async def main():
        p, s = DelayedOperationPurgatory(), Counter()
        op = WaitFor(s, 1, 0)
        assert p.try_complete_else_watch(op, ["k"]) is False
        assert await asyncio.wait_for(op.wait(), 1.0) == ("timeout", 0)

    run(main())


def test_needs_a_key():
    async def main():
        p = DelayedOperationPurgatory()
        with pytest.raises(ValueError):
            p.try_complete_else_watch(WaitFor(Counter(), 1, 10), [])

    run(main())


class Untimed(Answering):
    timed = False


def test_an_untimed_operation_waits_past_its_delay_until_completed_or_cancelled():
    """``timed = False`` (a follower session's per-partition wait): no expiry timer; the key completes it, or its
    waiter cancels it; a timed one beside it still expires."""

    async def go():
        state, purg = Counter(), DelayedOperationPurgatory()
        waits, timed, cancelled = Untimed(state, 1, 10), Answering(state, 1, 10), Untimed(state, 5, 10)
        for op in (waits, timed, cancelled):
            assert not purg.try_complete_else_watch(op, ["k"])
        await asyncio.sleep(0.1)
        expired_meanwhile = (timed.completed, waits.completed, cancelled.completed)
        state.value = 1
        purg.check_and_complete("k")
        cancelled.cancel()
        return expired_meanwhile, await timed.wait(), await waits.wait(), await cancelled.wait(), purg

    expired_meanwhile, timed_ans, waits_ans, cancelled_ans, purg = run(go())
    assert expired_meanwhile == (True, False, False)
    assert timed_ans == ("timeout", 0) and waits_ans == ("ok", 1) and cancelled_ans == ("cancelled", 1)
    assert purg.delayed() == 0
