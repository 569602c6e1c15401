"""KIP-890 part 1 at a partition leader: a transactional produce whose producer has no transaction open here is
verified first, by the coordinator's push, the producer's signed token, or a call to the coordinator.
:class:`VerificationState` is pure; :class:`TxnVerifier` adds the calls to the broker (FindCoordinator) and the
coordinator. Held by the leader's write path (leader_writes.py); the rules: docs/internals.md, "Replication:
module notes"."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from ray.exceptions import RayActorError, RayError, RayTaskError

from actors.channels.replica_lookup import broker_handle_async, named_actor_async
from actors.metadata.kv import cluster_key
from protocol import errors as E
from protocol.txn_messages import AddPartitionsToTxnRequest
from protocol.txn_tokens import check

log = logging.getLogger("actors.replica")

TXN_KEY = 1
VERIFY_TIMEOUT_S = 10.0


class VerificationState:
    """Which producers are verified for the open transaction of one partition. ``leader_epoch`` reads the
    replica's current leader epoch (a leadership change ends every verification)."""

    MAX_ENDED = 100_000  # producers whose last marker start is remembered; beyond, the oldest go into the floor
    UNKNOWN_START = 1 << 62  # a marker that does not say its transaction's start (an admin abort) blocks pushes

    def __init__(self, leader_epoch: Callable[[], int] = lambda: 0) -> None:
        self.leader_epoch = leader_epoch
        self.marker_gen: dict[int, int] = {}
        self.verified: dict[int, tuple[int, int, int]] = {}
        self.ended_start: dict[int, int] = {}  # producer id -> the latest start of a transaction marked here
        self.ended_floor = -1  # the ended starts forgotten beyond MAX_ENDED: no push at or below it is taken
        self.pushes = {"taken": 0, "stale": 0}

    def token(self, producer_id: int, producer_epoch: int) -> tuple[int, int, int]:
        return producer_epoch, self.marker_gen.get(producer_id, 0), self.leader_epoch()

    def is_verified(self, producer_id: int, producer_epoch: int) -> bool:
        return self.verified.get(producer_id) == self.token(producer_id, producer_epoch)

    def verified_with(self, producer_id: int, token: tuple[int, int, int]) -> bool:
        """Record a verification that started at ``token``; False if a marker came in between."""
        if self.token(producer_id, token[0]) != token:
            return False
        self.verified[producer_id] = token
        return True

    def pushed(self, producer_id: int, producer_epoch: int, txn_start_ms: int) -> bool:
        """The coordinator's push for the transaction that started at ``txn_start_ms`` (the caller checked the
        leader epoch): :meth:`take`, counted."""
        taken = self.take(producer_id, producer_epoch, txn_start_ms)
        self.pushes["taken" if taken else "stale"] += 1
        return taken

    def take(self, producer_id: int, producer_epoch: int, txn_start_ms: int) -> bool:
        """The coordinator's word (a push, or a token a produce carried) that the producer's transaction that
        started at ``txn_start_ms`` includes this partition: taken unless a marker of that transaction or a
        later one was already written here."""
        ended = max(self.ended_start.get(producer_id, -1), self.ended_floor)
        if txn_start_ms < 0 or txn_start_ms <= ended:
            return False
        self.verified[producer_id] = self.token(producer_id, producer_epoch)
        return True

    def marker_written(self, producer_id: int, txn_start_ms: int = -1) -> None:
        self.marker_gen[producer_id] = self.marker_gen.get(producer_id, 0) + 1
        self.verified.pop(producer_id, None)
        start = txn_start_ms if txn_start_ms >= 0 else self.UNKNOWN_START
        ended = self.ended_start
        ended[producer_id] = max(ended.pop(producer_id, -1), start)  # (re-inserted: the dict keeps marker order)
        if len(ended) > self.MAX_ENDED:
            oldest = next(iter(ended))
            self.ended_floor = max(self.ended_floor, ended.pop(oldest))


class TxnVerifier:
    """The calls behind :class:`VerificationState`. The coordinator's handle is cached per transactional id
    (dropped on any failure or coordinator error, so a moved coordinator is found again on the producer's
    retry), and concurrent produces of one producer that need verifying share one call: the batches a
    producer has in flight to a partition at the start of a transaction ask the coordinator once, not once
    each (Kafka's AddPartitionsToTxnManager likewise sends one verification per transactional id)."""

    MAX_CACHED = 1024

    def __init__(
        self, cluster: str, broker_id: int, topic: str, partition: int, leader_epoch: Callable[[], int] = lambda: 0
    ):
        self.cluster, self.broker_id, self.tp = cluster, broker_id, (topic, partition)
        self.state = VerificationState(leader_epoch)
        self.calls = 0
        self.tokens = {"taken": 0, "stale": 0, "bad": 0}  # produces that came with a verification token
        self._broker: Any = None
        self._coordinators: dict[str, Any] = {}  # transactional id -> coordinator actor handle
        self._inflight: dict[tuple, asyncio.Future] = {}

    async def verify(
        self,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        txn_start_ms: int = -1,
        txn_token: bytes = b"",
    ) -> None:
        """Raise the Kafka error a transactional produce answers if the coordinator does not have this
        partition in the producer's ongoing transaction (or cannot be asked). A produce carrying the
        coordinator's token for this partition (protocol/txn_tokens.py) is verified by it, as by a push."""
        if self.state.is_verified(producer_id, producer_epoch):
            return
        if txn_token and await self._token_taken(
            transactional_id, producer_id, producer_epoch, txn_start_ms, txn_token
        ):
            return
        if not isinstance(transactional_id, str) or not transactional_id:
            raise E.InvalidTxnStateError(
                f"transactional produce from producer {producer_id} to {self.tp[0]}-{self.tp[1]} without a "
                "transactional_id (the leader verifies it with the transaction coordinator)"
            )
        token = self.state.token(producer_id, producer_epoch)
        key = (transactional_id, producer_id, token)
        fut = self._inflight.get(key)
        if fut is None:
            fut = self._inflight[key] = asyncio.ensure_future(self._verify(transactional_id, producer_id, token))
            fut.add_done_callback(functools.partial(self._done, key))
        await asyncio.shield(fut)

    async def _token_taken(self, transactional_id, producer_id: int, producer_epoch: int, start_ms, token) -> bool:
        """The token checks (the cluster's key, read once per process) and is not stale (``take``: no marker of
        that transaction or a later one written here). Otherwise the produce asks the coordinator."""
        try:
            key = await cluster_key(self.cluster)
        except (ValueError, RayError) as e:
            log.warning("%s-%d: no verification key (%s): asking the coordinator", *self.tp, e)
            return False
        topic, partition = self.tp
        if check(key, token, transactional_id, producer_id, producer_epoch, start_ms, topic, partition):
            if self.state.take(producer_id, producer_epoch, start_ms):
                self.tokens["taken"] += 1
                return True
            self.tokens["stale"] += 1
            return False
        self.tokens["bad"] += 1
        return False

    def _done(self, key: tuple, fut: asyncio.Future) -> None:
        if self._inflight.get(key) is fut:
            del self._inflight[key]
        if not fut.cancelled():
            fut.exception()  # retrieved: a shared failure is raised to each waiter, never logged as lost

    async def _verify(self, transactional_id: str, producer_id: int, token: tuple[int, int, int]) -> None:
        producer_epoch = token[0]
        self.calls += 1
        try:
            ans = await self._ask(transactional_id, producer_id, producer_epoch)
        except (RayActorError, RayTaskError, ValueError, asyncio.TimeoutError) as e:
            self._coordinators.pop(transactional_id, None)
            self._broker = None
            # retriable for the producer (Kafka maps coordinator trouble during verification likewise)
            raise E.NotEnoughReplicasError(f"could not verify the transaction with its coordinator: {e}") from None
        code = ans["error_code"]
        if code in (
            E.CoordinatorLoadInProgressError.code,
            E.CoordinatorNotAvailableError.code,
            E.NotCoordinatorError.code,
            E.ConcurrentTransactionsError.code,
        ):
            self._coordinators.pop(transactional_id, None)
            raise E.NotEnoughReplicasError(f"transaction coordinator busy: {ans.get('error_message')}")
        if code in (E.ProducerFencedError.code, E.InvalidProducerEpochError.code):
            # Kafka's AddPartitionsToTxnManager: "producers expect to handle INVALID_PRODUCER_EPOCH" on a
            # produce (librdkafka: fatal _FENCED for a transactional producer)
            raise E.InvalidProducerEpochError(
                f"produce to {self.tp[0]}-{self.tp[1]} by producer {producer_id} epoch {producer_epoch} of "
                f"{transactional_id!r}: {ans.get('error_message') or 'fenced by a newer instance'}"
            )
        if code == E.InvalidProducerIdMappingError.code:
            raise E.InvalidProducerIdMappingError(
                f"produce to {self.tp[0]}-{self.tp[1]}: {ans.get('error_message') or 'unknown producer id'}"
            )
        if code:
            raise E.InvalidTxnStateError(
                f"{self.tp[0]}-{self.tp[1]} is not in the ongoing transaction of {transactional_id!r} "
                f"(producer {producer_id} epoch {producer_epoch}): {ans.get('error_message')}"
            )
        if not self.state.verified_with(producer_id, token):
            raise E.InvalidTxnStateError(
                f"the transaction of {transactional_id!r} ended while its produce to {self.tp[0]}-{self.tp[1]} "
                "was being verified"
            )

    async def _ask(self, transactional_id: str, producer_id: int, producer_epoch: int) -> dict:
        """AddPartitionsToTxn (verify only) at the coordinator of ``transactional_id``, found through this
        broker (FindCoordinator, key type 1) unless its handle is cached."""
        coordinator = self._coordinators.get(transactional_id)
        if coordinator is None:
            if self._broker is None:
                self._broker = await broker_handle_async(self.cluster, self.broker_id)
            found = await asyncio.wait_for(
                self._broker.find_coordinator.remote(transactional_id, TXN_KEY), VERIFY_TIMEOUT_S
            )
            if found["error_code"]:
                raise E.NotEnoughReplicasError(f"transaction coordinator unavailable: {found.get('error_message')}")
            coordinator = await named_actor_async(found["coordinator"])
            if len(self._coordinators) >= self.MAX_CACHED:
                self._coordinators.clear()
            self._coordinators[transactional_id] = coordinator
        req = AddPartitionsToTxnRequest(transactional_id, producer_id, producer_epoch, (self.tp,), verify_only=True)
        return await asyncio.wait_for(coordinator.add_partitions_to_txn.remote(req), VERIFY_TIMEOUT_S)
