"""The transaction coordinator's partition tasks (a mixin of ``TxnCoordinatorActor``, actors/txn_coordinator.py):
loading a ``__transaction_state`` partition on election (Kafka's loadTransactionsForTxnTopicPartition) and
unloading it on resignation, the marker jobs (WriteTxnMarkers to every partition, then CompleteCommit /
CompleteAbort, with a parked AddPartitionsToTxn of the id's next transaction in the same append), and the
timers (transaction.timeout.ms aborts, transactional.id.expiration.ms)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ray.exceptions import RayActorError, RayTaskError

from actors.coordinator.leadership import LeaderEpochs
from actors.txn import service as svc
from actors.txn.markers import TxnMarkerChannel
from actors.txn.records import TxnRecord, decode_key, decode_value
from actors.txn.service import ACTIVE, FAILED, TxnPartition
from actors.txn.shard import MarkerJob, TxnConfig, TxnCoordinatorShard, TxnResult
from protocol import errors as E
from protocol.messages import FetchRequest
from storage.records import decode_records

log = logging.getLogger("rafka.txn_coordinator")


def now_ms() -> int:
    return int(time.time() * 1000)


class TxnPartitionTasks:
    broker_id: int
    config: TxnConfig
    parts: dict[int, TxnPartition]
    epochs: LeaderEpochs
    markers: TxnMarkerChannel
    stats: dict
    abort_check_s: float
    expire_check_s: float

    _apply: Callable[[TxnPartition, TxnResult, str], Awaitable[dict]]  # the actor's append, then replay

    # ================================================================== leadership
    async def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        p, epoch = int(partition), int(leader_epoch)
        cur = self.parts.get(p)
        if not self.epochs.elected(
            p, epoch, None if cur is None else cur.epoch, cur is not None and cur.state != FAILED
        ):
            return {"error_code": 0, "ignored": True}
        if cur is not None:
            self._unload(cur)
        part = self.parts[p] = TxnPartition(p, epoch, replica, TxnCoordinatorShard(epoch, self.config))
        part.tasks.append(asyncio.get_running_loop().create_task(self._load(part, part.gen)))
        return {"error_code": 0}

    async def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        p, cur = int(partition), self.parts.get(int(partition))
        unload = self.epochs.resigned(
            p, None if leader_epoch is None else int(leader_epoch), None if cur is None else cur.epoch
        )
        if unload is None:
            return {"error_code": 0, "ignored": True}
        if unload and cur is not None:
            self._unload(cur)
        return {"error_code": 0}

    def _unload(self, part: TxnPartition) -> None:
        part.gen += 1
        part.state = FAILED
        part.stop_tasks()
        if self.parts.get(part.partition) is part:
            del self.parts[part.partition]
        log.info("b%d: unloaded %s-%d (epoch %d)", self.broker_id, svc.TXN_TOPIC, part.partition, part.epoch)

    def _current(self, part: TxnPartition, gen: int) -> bool:
        return self.parts.get(part.partition) is part and part.gen == gen

    async def _load(self, part: TxnPartition, gen: int) -> None:
        target = None
        while self._current(part, gen):
            try:
                st = await part.replica.state.remote()
                if st.get("leader_epoch", -1) > part.epoch and st.get("role") != "leader":
                    self._unload(part)
                    return
                if st.get("role") == "leader" and st.get("leader_epoch") == part.epoch:
                    target = st["log_end_offset"] if target is None else target
                    if st["high_watermark"] >= target:
                        records = await self._read_partition(part, st["log_start_offset"], st["high_watermark"])
                        if not self._current(part, gen):
                            return
                        for rec in records:
                            part.shard.replay(rec, loading=True)
                        part.loaded_records, part.state = len(records), ACTIVE
                        for job in part.shard.pending_jobs():
                            self._start_markers(part, job)
                        part.tasks.append(asyncio.get_running_loop().create_task(self._timers(part, gen)))
                        log.info(
                            "b%d: loaded %s-%d epoch %d: %d records, %d transactional ids",
                            self.broker_id,
                            svc.TXN_TOPIC,
                            part.partition,
                            part.epoch,
                            len(records),
                            len(part.shard.txns),
                        )
                        return
            except (RayActorError, RayTaskError, E.KafkaError) as e:
                if isinstance(e, E.CorruptMessageError):
                    log.error(
                        "b%d: %s-%d is corrupt, not loading it: %s", self.broker_id, svc.TXN_TOPIC, part.partition, e
                    )
                    part.state = FAILED
                    return
                log.info("b%d: loading %s-%d: retrying (%s)", self.broker_id, svc.TXN_TOPIC, part.partition, e)
            await asyncio.sleep(0.05)

    async def _read_partition(self, part: TxnPartition, start: int, hw: int) -> list[TxnRecord]:
        out: list[TxnRecord] = []
        offset = start
        while offset < hw:
            res = await part.replica.fetch.remote(FetchRequest(offset, 1 << 20, current_leader_epoch=part.epoch))
            if res["error_code"]:
                E.raise_for_code(res["error_code"], res.get("error_message"))
            if res["next_offset"] <= offset:
                raise E.CoordinatorLoadInProgressError(f"fetch at {offset} below HW {hw} returned no batches")
            for r in decode_records(res["records"]):  # control batches are skipped: none are written here
                if offset <= r.offset < hw and r.key is not None:
                    out.append(TxnRecord(decode_key(r.key), decode_value(r.value)))
            offset = res["next_offset"]
        return out

    # ================================================================== markers (WriteTxnMarkers)
    def _start_markers(self, part: TxnPartition, job: MarkerJob) -> None:
        part.tasks.append(asyncio.get_running_loop().create_task(self._markers(part, part.gen, job)))

    async def _markers(self, part: TxnPartition, gen: int, job: MarkerJob) -> None:
        """Markers to every partition (TxnMarkerChannel), then CompleteCommit/CompleteAbort (retried)."""
        t0 = time.perf_counter()
        if not await self.markers.write(job, lambda: self._current(part, gen)):
            return
        t1 = time.perf_counter()
        delay = 0.02
        tid = job.transactional_id
        while self._current(part, gen):
            w = part.parked.get(tid)
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
            ans = await self._apply(part, res, tid)
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
    async def _timers(self, part: TxnPartition, gen: int) -> None:
        next_expire = time.monotonic() + self.expire_check_s
        while True:
            await asyncio.sleep(self.abort_check_s)
            if not self._current(part, gen):
                return
            try:
                for res in part.shard.abort_expired(now_ms()):
                    self.stats["aborted_timeouts"] += 1
                    await self._apply(part, res, res.records[0].transactional_id)
                if time.monotonic() >= next_expire:
                    next_expire = time.monotonic() + self.expire_check_s
                    for res in part.shard.expire_ids(now_ms()):
                        await self._apply(part, res, res.records[0].transactional_id)
            except Exception:  # noqa: BLE001 - a coordinator bug must not stop the timers
                log.exception("b%d: transaction timers of %s-%d", self.broker_id, svc.TXN_TOPIC, part.partition)
