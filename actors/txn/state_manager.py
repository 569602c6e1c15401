"""The transaction coordinator's partitions on the coordinator runtime (Kafka's TransactionStateManager):
the runtime loads and unloads ``__transaction_state`` partitions; here records are appended then replayed,
the marker jobs run (WriteTxnMarkers to every partition, then CompleteCommit/CompleteAbort, with a parked
AddPartitionsToTxn of the id's next transaction in the same append) and the timers abort timed-out
transactions and expire idle ids. Composed by actors/txn_coordinator.py; calls the runtime and the markers.
"""

from __future__ import annotations

import asyncio
import logging
import time

from actors.coordinator.context import CoordinatorContext
from actors.coordinator.runtime import CoordinatorRuntime
from actors.txn import service as svc
from actors.txn.markers import TxnMarkerChannel
from actors.txn.service import ParkedAdd
from actors.txn.shard import MarkerJob, TxnConfig, TxnResult
from protocol import errors as E
from protocol.clock import now_ms

log = logging.getLogger("rafka.txn_coordinator")


def _error(exc: E.KafkaError) -> dict:
    return {"error_code": exc.code, "error_message": str(exc)}


class TransactionStateManager:
    """The ``__transaction_state`` partitions led here (``runtime.parts``), their appends, jobs and timers."""

    def __init__(
        self,
        broker_id: int,
        config: TxnConfig,
        append_timeout_ms: int,
        markers: TxnMarkerChannel,
        abort_check_s: float,
        expire_check_s: float,
    ):
        self.broker_id, self.markers = broker_id, markers
        self.abort_check_s, self.expire_check_s = abort_check_s, expire_check_s
        self.runtime = CoordinatorRuntime(
            svc.txn_kind(config),
            broker_id,
            append_timeout_ms,
            log,
            on_loaded=self._on_loaded,
            on_unloaded=self._on_unloaded,
            now_ms=now_ms,
        )
        # AddPartitionsToTxn waiting (at most one per id) for the id's transaction to complete, per partition
        self.adds: dict[CoordinatorContext, dict[str, ParkedAdd]] = {}
        # completed: transactions ended here; markers_ms / complete_ms: their total time writing markers and
        # then appending CompleteCommit/CompleteAbort (the window in which the id answers CONCURRENT_TRANSACTIONS)
        # parked_adds: AddPartitionsToTxn that waited for the previous transaction's markers; combined_appends:
        # those whose Ongoing record went out with the Complete one
        self.stats = {
            "appends": 0,
            "aborted_timeouts": 0,
            "completed": 0,
            "markers_ms": 0.0,
            "complete_ms": 0.0,
            "parked_adds": 0,
            "combined_appends": 0,
            "end_txns": 0,
            "end_txn_ms": 0.0,
            "verification_tokens": 0,  # KIP-890 tokens answered to rafka's producers instead of pushes
        }

    # ================================================================== load / unload
    def _on_loaded(self, part: CoordinatorContext, gen: int) -> None:
        """Resume the markers of every transaction found in a Prepare state; start the timers."""
        for job in part.shard.pending_jobs():
            self.start_markers(part, job)
        part.spawn(self._timers(part, gen))

    def _on_unloaded(self, part: CoordinatorContext, gen: int) -> None:
        for w in self.adds.pop(part, {}).values():  # they retry and are routed again (NOT_COORDINATOR, or the new load)
            if not w.fut.done():
                w.fut.set_result(None)

    def parked(self, part: CoordinatorContext) -> dict[str, ParkedAdd]:
        """The AddPartitionsToTxn parked on ``part`` (a partition no longer led keeps none)."""
        table = self.adds.get(part)
        if table is None:
            table = {}
            if self.runtime.parts.get(part.partition) is part:
                self.adds[part] = table
        return table

    def wake(self, part: CoordinatorContext, transactional_id: str) -> None:
        """The id's state moved (or its append failed): its parked AddPartitionsToTxn tries again."""
        w = self.adds.get(part, {}).get(transactional_id)
        if w is not None and not w.combined and not w.fut.done():
            w.fut.set_result(None)

    # ================================================================== append, then replay
    async def apply(self, part: CoordinatorContext, res: TxnResult, tid: str) -> dict:
        """Append ``res``'s records (acks=all, not chained), replay them, start the marker jobs they begin."""
        if not res.records:
            return res.response
        gen = part.gen
        self.stats["appends"] += 1
        code = await self.runtime.append_alone(part, res.records)
        if not self.runtime.current(part, gen):
            return _error(E.NotCoordinatorError(f"{svc.TXN_TOPIC}-{part.partition} moved while appending"))
        if code:
            part.shard.append_failed(tid)
            self.wake(part, tid)
            mapped = svc.append_error(code)
            return {"error_code": mapped, "error_message": f"{svc.TXN_TOPIC} append failed with error {code}"}
        for rec in res.records:
            job = part.shard.replay(rec)
            if job is not None:
                self.start_markers(part, job)
            self.wake(part, rec.transactional_id)
        return res.response

    # ================================================================== markers (WriteTxnMarkers)
    def start_markers(self, part: CoordinatorContext, job: MarkerJob) -> None:
        part.spawn(self._markers(part, part.gen, job))

    async def _markers(self, part: CoordinatorContext, gen: int, job: MarkerJob) -> None:
        """Markers to every partition (TxnMarkerChannel), then CompleteCommit/CompleteAbort (retried)."""
        t0 = time.perf_counter()
        if not await self.markers.write(job, lambda: self.runtime.current(part, gen)):
            return
        t1 = time.perf_counter()
        delay = 0.02
        tid = job.transactional_id
        while self.runtime.current(part, gen):
            w = self.adds.get(part, {}).get(tid)
            if w is not None and w.fut.done():
                w = None
            res = part.shard.markers_written(
                job, now_ms(), None if w is None else (w.producer_id, w.producer_epoch, w.partitions)
            )
            if w is not None and res.response.get("then_added"):
                w.combined = True
                self.stats["combined_appends"] += 1
            else:
                w = None
            ans = await self.apply(part, res, tid)
            if w is not None and not w.fut.done():  # the parked AddPartitionsToTxn's answer (or: try again)
                w.fut.set_result(None if ans.get("error_code") else ans)
            if not ans.get("error_code"):
                st = self.stats
                st["completed"] += 1
                st["markers_ms"] += round((t1 - t0) * 1000, 1)
                st["complete_ms"] += round((time.perf_counter() - t1) * 1000, 1)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ================================================================== timers
    async def _timers(self, part: CoordinatorContext, gen: int) -> None:
        """Every ``abort_check_s`` abort transactions past their timeout; every ``expire_check_s`` expire ids."""
        next_expire = time.monotonic() + self.expire_check_s
        while True:
            await asyncio.sleep(self.abort_check_s)
            if not self.runtime.current(part, gen):
                return
            try:
                for res in part.shard.abort_expired(now_ms()):
                    self.stats["aborted_timeouts"] += 1
                    await self.apply(part, res, res.records[0].transactional_id)
                if time.monotonic() >= next_expire:
                    next_expire = time.monotonic() + self.expire_check_s
                    for res in part.shard.expire_ids(now_ms()):
                        await self.apply(part, res, res.records[0].transactional_id)
            except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
                log.exception("b%d: transaction timers of %s-%d", self.broker_id, svc.TXN_TOPIC, part.partition)
