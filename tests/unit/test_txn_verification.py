"""The partition leader's KIP-890 verification (actors/txn_verification.py) without Ray: the coordinator call
(``_ask``) is replaced by a scripted one, so sharing, caching and the error mapping are checked directly."""

from __future__ import annotations

import asyncio

import pytest

from actors.txn_verification import TxnVerifier
from protocol import errors as E


class ScriptedVerifier(TxnVerifier):
    def __init__(self, answers):
        super().__init__("c", 1, "t", 0)
        self.answers = list(answers)
        self.asked: list[tuple] = []
        self.gate: asyncio.Event | None = None

    async def _ask(self, transactional_id, producer_id, producer_epoch):
        self.asked.append((transactional_id, producer_id, producer_epoch))
        if self.gate is not None:
            await self.gate.wait()
        ans = self.answers.pop(0)
        if isinstance(ans, BaseException):
            raise ans
        self._coordinators[transactional_id] = object()  # what the real lookup caches
        return ans


OK = {"error_code": 0, "error_message": None}


def test_concurrent_produces_of_one_producer_share_one_verification():
    async def run():
        v = ScriptedVerifier([OK])
        v.gate = asyncio.Event()
        waiters = [asyncio.ensure_future(v.verify("tx", 7, 0)) for _ in range(5)]
        await asyncio.sleep(0)
        v.gate.set()
        await asyncio.gather(*waiters)
        assert len(v.asked) == 1 and v.calls == 1
        assert v.state.is_verified(7, 0)
        await v.verify("tx", 7, 0)  # verified: no call at all
        assert len(v.asked) == 1 and not v._inflight

    asyncio.run(run())


def test_a_marker_ends_the_verification_and_the_next_transaction_asks_again():
    async def run():
        v = ScriptedVerifier([OK, OK])
        await v.verify("tx", 7, 0)
        v.state.marker_written(7)
        assert not v.state.is_verified(7, 0)
        await v.verify("tx", 7, 0)
        assert len(v.asked) == 2

    asyncio.run(run())


def test_a_shared_failure_reaches_every_waiter_and_the_next_call_asks_again():
    async def run():
        v = ScriptedVerifier([{"error_code": E.InvalidTxnStateError.code, "error_message": "not added"}, OK])
        v.gate = asyncio.Event()
        waiters = [asyncio.ensure_future(v.verify("tx", 7, 0)) for _ in range(3)]
        await asyncio.sleep(0)
        v.gate.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, E.InvalidTxnStateError) for r in results)
        assert len(v.asked) == 1 and not v.state.is_verified(7, 0)
        v.gate = None
        await v.verify("tx", 7, 0)
        assert len(v.asked) == 2 and v.state.is_verified(7, 0)

    asyncio.run(run())


@pytest.mark.parametrize(
    "code", [E.NotCoordinatorError.code, E.CoordinatorLoadInProgressError.code, E.ConcurrentTransactionsError.code]
)
def test_coordinator_trouble_is_retriable_for_the_producer_and_drops_the_cached_coordinator(code):
    async def run():
        v = ScriptedVerifier([OK, {"error_code": code, "error_message": "busy"}])
        await v.verify("tx", 7, 0)
        assert "tx" in v._coordinators
        v.state.marker_written(7)
        with pytest.raises(E.NotEnoughReplicasError):
            await v.verify("tx", 7, 0)
        assert "tx" not in v._coordinators  # found again (FindCoordinator) on the producer's retry

    asyncio.run(run())


def test_a_marker_written_while_verifying_refuses_the_produce():
    async def run():
        v = ScriptedVerifier([OK])
        v.gate = asyncio.Event()
        w = asyncio.ensure_future(v.verify("tx", 7, 0))
        await asyncio.sleep(0)
        v.state.marker_written(7)  # the transaction ended meanwhile
        v.gate.set()
        with pytest.raises(E.InvalidTxnStateError):
            await w
        assert not v.state.is_verified(7, 0)

    asyncio.run(run())


def test_a_produce_without_transactional_id_is_refused_without_asking():
    v = ScriptedVerifier([])
    with pytest.raises(E.InvalidTxnStateError):
        asyncio.run(v.verify(None, 7, 0))
    assert v.asked == []
