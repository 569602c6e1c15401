"""One ``__consumer_offsets`` partition a group coordinator leads or loads (Kafka's CoordinatorRuntime
CoordinatorContext): its shard, load state, the chain of pending appends, the parked JoinGroup/SyncGroup
futures and its timer. Plain asyncio, no Ray: the actor (actors/group_coordinator.py) drives it.
``records_batch`` builds the one RecordBatch of a coordinator write (pure).
"""

from __future__ import annotations

import asyncio

from actors.group.classic_group import GroupCoordinatorConfig
from actors.group.service import ACTIVE, COORDINATOR_LOAD_IN_PROGRESS, LOADING, NONE
from actors.group.shard import GroupCoordinatorShard
from storage.records import RecordBatchBuilder

__all__ = ["CoordinatorContext", "LoadRetry", "records_batch", "list_groups"]


class LoadRetry(Exception):
    """A transient condition while reading the partition: try the load again."""


def records_batch(records, timestamp_ms: int, producer_id: int = -1, producer_epoch: int = -1) -> bytes:
    """The shard's durable records as one RecordBatch (key/value bytes as the records encode them); with a
    producer id, a transactional batch of that producer (TxnOffsetCommit; no sequence: coordinator origin)."""
    size = sum(len(r.key_bytes()) + len(r.value_bytes() or b"") + 32 for r in records)
    b = RecordBatchBuilder(
        batch_size=size + 1024,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=producer_id >= 0,
    )
    for r in records:
        b.append(timestamp_ms, r.key_bytes(), r.value_bytes())
    return bytes(b.build())  # (a small batch built record by record: bytes already, no copy)


class CoordinatorContext:
    """One ``__consumer_offsets`` partition this coordinator leads (or is loading)."""

    def __init__(self, partition: int, epoch: int, replica, config: GroupCoordinatorConfig):
        self.partition, self.epoch, self.replica, self.config = partition, epoch, replica, config
        self.shard = GroupCoordinatorShard(config)
        self.state = LOADING
        self.gen = 0  # bumped on every (re)load and unload: stale tasks stop
        self.tail: asyncio.Task | None = None  # the latest append's outcome (error code, 0 = acked)
        self.parked: dict[tuple, list[asyncio.Future]] = {}
        self.timer: asyncio.Task | None = None
        self.timer_deadline: int | None = None
        self.tasks: list[asyncio.Task] = []  # load and cleanup
        self.loaded_records = 0
        self.appends = 0
        self.markers: list = []  # EndTxnMarkers that arrived while loading (applied after the load)

    def take_markers(self) -> list:
        out, self.markers = self.markers, []
        return out

    def fail_parked(self, code: int) -> None:
        for futs in self.parked.values():
            for f in futs:
                if not f.done():
                    f.set_result(code)
        self.parked.clear()

    def stop_tasks(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_deadline = None, None
        for t in self.tasks:
            t.cancel()
        self.tasks = []

    def park(self, key) -> asyncio.Future:
        """A JoinGroup/SyncGroup answer that comes later (completed by ``complete`` or ``fail_parked``)."""
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

    def describe(self) -> dict:
        return {
            "state": self.state,
            "leader_epoch": self.epoch,
            "groups": self.shard.group_ids(),
            "loaded_records": self.loaded_records,
            "appends": self.appends,
            "parked": sum(len(v) for v in self.parked.values()),
            "next_deadline": self.timer_deadline,
        }


def list_groups(parts: dict[int, CoordinatorContext], states_filter=None, types_filter=None):
    """ListGroups over the partitions led here -> ``(groups, code, tails)``: the loaded partitions' groups,
    COORDINATOR_LOAD_IN_PROGRESS while one is still loading, and the pending appends the answer waits for."""
    groups, code, tails = [], NONE, []
    for p in sorted(parts):
        part = parts[p]
        if part.state == LOADING:
            code = COORDINATOR_LOAD_IN_PROGRESS
        elif part.state == ACTIVE:
            groups += part.shard.list_groups(states_filter, types_filter)["groups"]
            if part.tail is not None:
                tails.append(part.tail)
    return groups, code, tails
