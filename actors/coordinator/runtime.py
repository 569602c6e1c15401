"""The coordinator runtime (Kafka's CoordinatorRuntime), one per coordinator actor and kind: the partitions
led here (a CoordinatorContext each), leadership news in LeaderAndIsr order, loading, unloading and
reloading, routing a request to its partition, the writer's appends and the deadline timer. One event loop,
no lock. The group and transaction coordinator actors own one and plug their kind in; it calls the loader,
the writer and the timer beside it, never group/ or txn/.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from actors.coordinator import loader, writer
from actors.coordinator.context import ACTIVE, FAILED, LOADING, NOT_COORDINATOR, CoordinatorContext, route_code
from actors.coordinator.leadership import LeaderEpochs
from actors.coordinator.shard import CoordinatorKind
from protocol.clock import now_ms as wall_ms

Hook = Callable[[CoordinatorContext, int], None]  # (context, its generation)


class CoordinatorRuntime:
    """``on_loaded(ctx, gen)`` runs when a partition starts serving, ``on_unloaded(ctx, gen)`` when it stops
    (unload or reload); ``on_deadline(ctx)`` when the shard's ``next_deadline()`` passes (no timer without)."""

    def __init__(
        self,
        kind: CoordinatorKind,
        broker_id: int,
        append_timeout_ms: int,
        log: logging.Logger,
        on_loaded: Hook | None = None,
        on_unloaded: Hook | None = None,
        on_deadline: Callable[[CoordinatorContext], Awaitable[None]] | None = None,
        now_ms: Callable[[], int] = wall_ms,
    ):
        self.kind, self.broker_id, self.append_timeout_ms, self.log = kind, broker_id, append_timeout_ms, log
        self.on_loaded, self.on_unloaded, self.on_deadline, self.now_ms = on_loaded, on_unloaded, on_deadline, now_ms
        self.parts: dict[int, CoordinatorContext] = {}
        self.epochs = LeaderEpochs()  # newest leader epoch seen per partition

    # ================================================================== leadership
    def on_elected(self, partition: int, leader_epoch: int, replica) -> dict:
        """This broker's replica of the partition leads at ``leader_epoch``: load it."""
        p, epoch = int(partition), int(leader_epoch)
        cur = self.parts.get(p)
        if not self.epochs.elected(
            p, epoch, None if cur is None else cur.epoch, cur is not None and cur.state != FAILED
        ):
            return {"error_code": 0, "ignored": True}
        if cur is not None:
            self.unload(cur)
        part = self.parts[p] = CoordinatorContext(p, epoch, replica, self.kind.new_shard(epoch))
        self.start_load(part)
        return {"error_code": 0}

    def on_resigned(self, partition: int, leader_epoch: int | None = None) -> dict:
        """This broker no longer leads the partition (follower at ``leader_epoch``, or stopped: None)."""
        p, cur = int(partition), self.parts.get(int(partition))
        unload = self.epochs.resigned(
            p, None if leader_epoch is None else int(leader_epoch), None if cur is None else cur.epoch
        )
        if unload is None:
            return {"error_code": 0, "ignored": True}
        if unload and cur is not None:
            self.unload(cur)
        return {"error_code": 0}

    def unload(self, part: CoordinatorContext, code: int = NOT_COORDINATOR) -> None:
        gen = part.gen
        part.gen += 1
        part.state = FAILED
        part.stop_tasks()
        part.fail_parked(code)
        if self.parts.get(part.partition) is part:
            del self.parts[part.partition]
        if self.on_unloaded is not None:
            self.on_unloaded(part, gen)
        self.log.info("b%d: unloaded %s-%d (epoch %d)", self.broker_id, self.kind.topic, part.partition, part.epoch)

    def start_load(self, part: CoordinatorContext) -> None:
        part.gen += 1
        part.state = LOADING
        part.stop_tasks()
        part.tail = None
        part.spawn(self._load(part, part.gen))

    def reload(self, part: CoordinatorContext, gen: int, code: int) -> None:
        """An append of generation ``gen`` failed with ``code``: answer the parked calls, load the shard again
        from the partition (the truth)."""
        if not self.current(part, gen) or part.state != ACTIVE:
            return  # already unloaded or reloading
        self.log.warning(
            "b%d: append to %s-%d failed (error %d): reloading", self.broker_id, self.kind.topic, part.partition, code
        )
        part.fail_parked(code)
        if self.on_unloaded is not None:
            self.on_unloaded(part, gen)
        self.start_load(part)

    def current(self, part: CoordinatorContext, gen: int) -> bool:
        return self.parts.get(part.partition) is part and part.gen == gen

    def serving(self, part: CoordinatorContext, gen: int) -> bool:
        return self.current(part, gen) and part.state == ACTIVE

    async def _load(self, part: CoordinatorContext, gen: int) -> None:
        outcome = await loader.load_shard(
            part, self.kind, lambda: self.current(part, gen), self.now_ms, self.broker_id, self.log
        )
        if not self.current(part, gen):
            return
        if outcome == loader.MOVED:
            self.unload(part)  # a newer epoch moved leadership away
        elif outcome == loader.FAILED:
            part.state = FAILED
        elif outcome is not None and not isinstance(outcome, str):
            for record in part.take_deferred():  # written to the partition while it loaded
                outcome.replay(record)
            part.shard, part.state = outcome, ACTIVE
            self.rearm(part)
            if self.on_loaded is not None:
                self.on_loaded(part, gen)

    # ================================================================== requests
    def route(self, partition: int) -> tuple[CoordinatorContext | None, int]:
        """The serving context of ``partition``, or None and the error its request answers."""
        part = self.parts.get(partition)
        code = route_code(None if part is None else part.state)
        return (None, code) if code else (part, code)

    def append(self, part: CoordinatorContext, records, txn: writer.TxnWrite | None = None) -> asyncio.Task:
        """Chained on the partition's tail (the task answers this or the first earlier failure)."""
        return writer.append(part, records, self.append_timeout_ms, self.now_ms(), txn)

    async def append_alone(self, part: CoordinatorContext, records) -> int:
        """One append's own error code (0 = acknowledged), not chained to the others."""
        return await writer.answer_code(writer.submit(part, records, self.append_timeout_ms, self.now_ms()))

    # ================================================================== the timer
    def rearm(self, part: CoordinatorContext) -> None:
        """Arm the partition's timer at its shard's next deadline (after every write)."""
        if part.state != ACTIVE or self.on_deadline is None:
            return
        gen = part.gen
        part.timer.arm(part.shard.next_deadline(), lambda deadline: self._fire(part, gen, deadline))

    async def _fire(self, part: CoordinatorContext, gen: int, deadline: int) -> None:
        await asyncio.sleep(max(0, deadline - self.now_ms()) / 1000)
        if not self.serving(part, gen) or self.on_deadline is None:
            return
        part.timer.fired()
        await self.on_deadline(part)
        self.rearm(part)
