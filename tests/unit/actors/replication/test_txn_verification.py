"""The partition leader's KIP-890 verification (actors/replication/txn_verification.py) without Ray: the coordinator call
(``_ask``) is replaced by a scripted one, so sharing, caching and the error mapping are checked directly."""

from __future__ import annotations

import asyncio

import pytest

from actors.replication.txn_verification import TxnVerifier, VerificationState
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


# ---- the coordinator's pushes (VerificationState.pushed) ------------------------------------------------------
def test_a_pushed_transaction_produces_without_asking_until_its_marker():
    async def run():
        v = ScriptedVerifier([OK])
        assert v.state.pushed(7, 0, txn_start_ms=1000)
        await v.verify("tx", 7, 0)
        assert v.asked == [] and v.calls == 0
        v.state.marker_written(7, txn_start_ms=1000)  # that transaction ended here
        await v.verify("tx", 7, 0)  # the next one (not pushed) asks
        assert len(v.asked) == 1
        assert v.state.pushes == {"taken": 1, "stale": 0}

    asyncio.run(run())


def test_a_push_that_arrives_after_its_transactions_marker_is_refused():
    """The push's ack timed out and it came in late: taking it would verify the producer's next
    transaction for this partition without an AddPartitionsToTxn (a hanging transaction, KIP-890)."""

    async def run():
        v = ScriptedVerifier([{"error_code": E.InvalidTxnStateError.code, "error_message": "not in the txn"}])
        v.state.marker_written(7, txn_start_ms=1000)
        assert not v.state.pushed(7, 0, txn_start_ms=1000)
        assert not v.state.pushed(7, 0, txn_start_ms=999)  # an even older one
        assert not v.state.is_verified(7, 0)
        with pytest.raises(E.InvalidTxnStateError):  # the late write asks, and the coordinator says no
            await v.verify("tx", 7, 0)
        assert v.state.pushes == {"taken": 0, "stale": 2}
        assert v.state.pushed(7, 0, txn_start_ms=1001)  # the next transaction's own push is taken

    asyncio.run(run())


def test_a_leadership_change_ends_every_verification_pushed_or_asked():
    epoch = [3]
    s = VerificationState(lambda: epoch[0])
    assert s.pushed(7, 0, 10)
    assert s.verified_with(8, s.token(8, 2))
    assert s.is_verified(7, 0) and s.is_verified(8, 2)
    epoch[0] = 4  # this replica lost and regained the leadership (or another leader epoch began)
    assert not s.is_verified(7, 0) and not s.is_verified(8, 2)
    token = s.token(9, 0)
    epoch[0] = 5
    assert not s.verified_with(9, token)  # an ask that spanned a leadership change does not count


def test_a_marker_without_its_transactions_start_refuses_every_later_push_of_that_producer():
    s = VerificationState()
    s.marker_written(7)  # an admin abort (rafka txn abort-hanging) does not know the start
    assert not s.pushed(7, 0, 1 << 40)
    assert s.pushed(8, 0, 5)  # other producers are not affected


def test_the_forgotten_ends_beyond_the_cap_still_refuse_pushes_at_or_below_them():
    s = VerificationState()
    s.MAX_ENDED = 3
    for pid, start in ((1, 50), (2, 10), (3, 30), (4, 20)):
        s.marker_written(pid, start)
    assert len(s.ended_start) == 3 and 1 not in s.ended_start and s.ended_floor == 50
    assert not s.pushed(1, 0, 50) and not s.pushed(9, 0, 40)  # at or below the floor: refused, they ask
    assert s.pushed(1, 0, 51)
    s.marker_written(2, 60)  # a producer marked again moves to the newest end
    s.marker_written(5, 70)
    assert 2 in s.ended_start and 3 not in s.ended_start and s.ended_floor == 50


# ---- tokens the producer carries (protocol/txn_tokens.py) ----------------------------------------------------
KEY = b"k" * 32


@pytest.fixture
def token_key(monkeypatch):
    import actors.metadata.kv as T

    monkeypatch.setitem(T._KEYS, "c", KEY)  # what the first token's check reads from the cluster's KV
    return KEY


def test_a_produce_with_the_coordinators_token_is_verified_without_asking_until_its_marker(token_key):
    from protocol.txn_tokens import sign

    async def run():
        v = ScriptedVerifier([OK])
        tok = sign(token_key, "tx", 7, 0, 1000, "t", 0)
        await v.verify("tx", 7, 0, 1000, tok)
        assert v.asked == [] and v.state.is_verified(7, 0)
        assert v.tokens == {"taken": 1, "stale": 0, "bad": 0} and v.state.pushes == {"taken": 0, "stale": 0}
        v.state.marker_written(7, txn_start_ms=1000)  # the transaction ended here
        await v.verify("tx", 7, 0, 1000, tok)  # its token again (a late retry): stale, so the produce asks
        assert len(v.asked) == 1 and v.tokens["stale"] == 1

    asyncio.run(run())


@pytest.mark.parametrize(
    "change",
    ["transactional_id", "producer_id", "producer_epoch", "start", "topic", "partition", "forged", "short"],
)
def test_a_token_for_anything_else_is_not_taken_and_the_produce_asks(token_key, change):
    """A token signed for another transactional id, producer, epoch, transaction start, topic or partition,
    one not signed with the cluster's key, or one of the wrong size: the leader asks the coordinator, which
    decides (here: the partition is not in the transaction)."""
    from protocol.txn_tokens import sign

    args = {
        "transactional_id": "tx",
        "producer_id": 7,
        "producer_epoch": 0,
        "start": 1000,
        "topic": "t",
        "partition": 0,
    }
    other = {
        "transactional_id": "ty",
        "producer_id": 8,
        "producer_epoch": 1,
        "start": 1001,
        "topic": "u",
        "partition": 1,
    }
    if change in other:
        args[change] = other[change]
    key = b"x" * 32 if change == "forged" else token_key
    tok = sign(key, *args.values())
    if change == "short":
        tok = tok[:8]

    async def run():
        v = ScriptedVerifier([{"error_code": E.InvalidTxnStateError.code, "error_message": "not in the txn"}])
        with pytest.raises(E.InvalidTxnStateError):
            await v.verify("tx", 7, 0, 1000, tok)
        assert len(v.asked) == 1 and not v.state.is_verified(7, 0)
        assert v.tokens == {"taken": 0, "stale": 0, "bad": 1}

    asyncio.run(run())


# ---- the coordinator's producer errors (issue 45: a fenced producer is told so) -------------------------------
@pytest.mark.parametrize(
    "code, raised",
    [
        (E.ProducerFencedError.code, E.InvalidProducerEpochError),  # Kafka's AddPartitionsToTxnManager mapping
        (E.InvalidProducerEpochError.code, E.InvalidProducerEpochError),
        (E.InvalidProducerIdMappingError.code, E.InvalidProducerIdMappingError),
        (E.InvalidTxnStateError.code, E.InvalidTxnStateError),  # the partition is not in the transaction
    ],
)
def test_the_coordinators_verification_error_reaches_the_produce_as_kafka_maps_it(code, raised):
    async def run():
        v = ScriptedVerifier([{"error_code": code, "error_message": "epoch 1 is current"}])
        with pytest.raises(raised) as exc:
            await v.verify("tx-zombie", 7, 0)
        assert type(exc.value) is raised and "t-0" in exc.value.message
        assert not v.state.is_verified(7, 0)

    asyncio.run(run())
