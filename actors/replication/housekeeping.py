"""A partition replica's periodic work (Kafka's isr-expiration task, log flusher, log-retention task and the
LogCleaner pass for compacted topics) over the pure Partition and its Log: plain asyncio, no Ray. Held and run by
the replica shell (actors/replica.py) while it leads or follows; a compaction pass builds on a worker thread
(storage/log.py, storage/cleaner.py) so the process goes on serving."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from actors.replication.partition import Partition
from actors.replication.partition_state import FOLLOWER, LEADER
from protocol import errors as E
from protocol.clock import now_ms
from storage.cleaner import CleaningAborted

log = logging.getLogger("rafka.replica")


class ReplicaHousekeeping:
    def __init__(self, partition: Partition, stats: dict, name: str, start_ms: int):
        self.partition, self.stats, self.name = partition, stats, name
        self.last_flush_ms = self.last_retention_ms = self.last_clean_ms = start_ms
        # the first offset the last committed pass did not clean (Kafka's cleaner checkpoint, kept in memory):
        # a pass is due when a cleanable segment exists past it; 0 at first (an active segment at 0: no
        # closed segment, nothing to clean)
        self.cleaned_up_to = 0
        self.clean_task: asyncio.Task | None = None  # the pass under way

    async def run(self, conf_of: Callable[[], dict], submit_isr: Callable) -> None:
        """ISR expiration (every lag/2), flush.ms, retention and compaction, until the replica stops."""
        while self.partition.role in (LEADER, FOLLOWER):
            conf = conf_of()
            interval = max(
                0.01,
                min(
                    conf["replica.lag.time.max.ms"] / 2000.0,
                    conf["log.flush.scheduler.interval.ms"] / 1000.0,
                    conf["log.retention.check.interval.ms"] / 1000.0,
                    conf["log.cleaner.backoff.ms"] / 1000.0,
                ),
            )
            await asyncio.sleep(interval)
            try:
                self.tick(now_ms(), conf, submit_isr)
            except Exception:
                log.exception("housekeeping of %s", self.name)

    def cancel(self) -> None:
        """The replica stops: a pass under way is abandoned (the Log's close or delete aborts its build)."""
        if self.clean_task is not None:
            self.clean_task.cancel()
            self.clean_task = None

    def tick(self, t: int, conf: dict, submit_isr: Callable) -> None:
        lg = self.partition.log
        proposal = self.partition.maybe_shrink_isr(t, conf["replica.lag.time.max.ms"])
        if proposal is not None:
            submit_isr(proposal)
        if t - self.last_flush_ms >= conf["log.flush.scheduler.interval.ms"]:
            self.last_flush_ms = t
            lg.maybe_flush(t)  # flush.ms / flush.messages policy of the Log
        if t - self.last_retention_ms >= conf["log.retention.check.interval.ms"]:
            self.last_retention_ms = t
            lg.delete_old_segments(t)
            lg.producer_state.remove_expired_producers(t)
        if t - self.last_clean_ms >= conf["log.cleaner.backoff.ms"] and (
            self.clean_task is None or self.clean_task.done()
        ):
            self.last_clean_ms = t
            if self.compaction_due():
                self.clean_task = asyncio.ensure_future(self.compact(t))

    def compaction_due(self) -> bool:
        """Maybe: a closed segment exists past the last pass's range (only closed segments are cleaned; the plan
        then tells whether one of them is cleanable yet: below the HW, older than min.compaction.lag.ms)."""
        lg = self.partition.log
        return lg.config.compact and lg.active_segment.base_offset > self.cleaned_up_to

    async def compact(self, t: int) -> None:
        """The log cleaner for ``cleanup.policy=compact``: plan on the loop, build on a worker thread,
        commit on the loop. A corrupt batch marks nothing: it is logged and retried at the next backoff,
        like Kafka's uncleanable partitions; an aborted pass is retried at the next backoff too."""
        lg = self.partition.log
        started = time.perf_counter()
        try:
            p = lg.begin_clean(t, dirty_from=self.cleaned_up_to)
        except Exception:  # the log closed under the task
            log.exception("compaction of %s", self.name)
            return
        if p is None:  # nothing cleanable past the last pass yet: asked again at the next backoff
            return
        try:
            await asyncio.to_thread(p.build)
        except CleaningAborted:
            pass
        except E.CorruptMessageError:
            log.exception("compaction of %s hit a corrupt batch", self.name)
        except asyncio.CancelledError:
            p.gate.abort()  # the replica stops; its Log is closing or gone
            raise
        except Exception:
            log.exception("compaction of %s", self.name)
        stats = lg.end_clean(p)
        if stats is None:
            return
        self.cleaned_up_to = stats.end_offset
        self.stats["compaction_passes"] = self.stats.get("compaction_passes", 0) + 1
        self.stats["compaction_last_pass_ms"] = round((time.perf_counter() - started) * 1000, 1)
        self.stats["compaction_records_removed"] = (
            self.stats.get("compaction_records_removed", 0) + stats.records_read - stats.records_kept
        )
