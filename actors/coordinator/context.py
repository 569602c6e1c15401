"""One internal-topic partition a coordinator leads or loads (Kafka's CoordinatorRuntime.CoordinatorContext):
its shard, load state, the generation stale tasks check, the chain of pending appends, its tasks, its
timer, the answers parked for later and the records that arrived while it loaded. Plain asyncio, no Ray;
owned by the runtime (actors/coordinator/runtime.py), read by the loader and the writer beside it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.coordinator.shard import CoordinatorShard
from actors.coordinator.timer import CoordinatorTimer
from protocol import errors as E

LOADING, ACTIVE, FAILED = "loading", "active", "failed"
NONE = E.NoError.code
NOT_COORDINATOR = E.NotCoordinatorError.code
COORDINATOR_LOAD_IN_PROGRESS = E.CoordinatorLoadInProgressError.code
COORDINATOR_NOT_AVAILABLE = E.CoordinatorNotAvailableError.code


def route_code(state: str | None) -> int:
    """The error of a request whose partition is in ``state`` (None: not led here)."""
    if state is None:
        return NOT_COORDINATOR
    if state == LOADING:
        return COORDINATOR_LOAD_IN_PROGRESS
    if state != ACTIVE:
        return COORDINATOR_NOT_AVAILABLE
    return NONE


class CoordinatorContext:
    """One partition this coordinator leads (or is loading) at ``epoch`` through ``replica``."""

    def __init__(self, partition: int, epoch: int, replica: Any, shard: CoordinatorShard):
        self.partition, self.epoch, self.replica = partition, epoch, replica
        self.shard: Any = shard  # the kind's shard (CoordinatorShard); its owner calls its handlers
        self.state = LOADING
        self.gen = 0  # bumped on every (re)load and unload: stale tasks stop
        self.tail: asyncio.Task | None = None  # the latest chained append's outcome (error code, 0 = acked)
        self.timer = CoordinatorTimer()
        self.tasks: list[asyncio.Task] = []  # load, cleanup, marker jobs
        self.parked: dict[Any, list[asyncio.Future]] = {}
        self.deferred: list = []  # records that arrived while loading (replayed after the load)
        self.loaded_records = 0
        self.appends = 0

    def take_deferred(self) -> list:
        out, self.deferred = self.deferred, []
        return out

    def spawn(self, coro) -> asyncio.Task:
        """A task of this partition: cancelled when it unloads or reloads."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.append(task)
        return task

    def stop_tasks(self) -> None:
        self.timer.cancel()
        for t in self.tasks:
            t.cancel()
        self.tasks = []

    def park(self, key) -> asyncio.Future:
        """An answer that comes later (completed by ``complete`` or ``fail_parked``)."""
        waiter = asyncio.get_running_loop().create_future()
        self.parked.setdefault(key, []).append(waiter)
        return waiter

    def complete(self, completions) -> None:
        """Answer parked calls, oldest first per key: ``completions`` are ``(key, response)``."""
        for key, response in completions:
            futs = self.parked.get(key)
            if futs:
                f = futs.pop(0)
                if not futs:
                    del self.parked[key]
                if not f.done():
                    f.set_result(response)

    def fail_parked(self, code: int) -> None:
        for futs in self.parked.values():
            for f in futs:
                if not f.done():
                    f.set_result(code)
        self.parked.clear()

    def describe(self) -> dict:
        return {
            "state": self.state,
            "leader_epoch": self.epoch,
            "loaded_records": self.loaded_records,
            "appends": self.appends,
            "parked": sum(len(v) for v in self.parked.values()),
            "next_deadline": self.timer.deadline,
        }
