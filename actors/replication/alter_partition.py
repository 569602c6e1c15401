"""The leader's AlterPartition sender for one partition (Kafka's AlterPartitionManager, one partition), held by
the replica shell: it sends the Partition's ``AlterPartitionProposal`` to the controller's ``alter_partition``,
retrying while the controller is away or answers a retriable error, and hands the answer back to the Partition
(``apply_isr`` / ``alter_partition_refused``); what that changed goes to ``on_isr_applied``. One task at a time on
the replica's event loop; a role change cancels it, the partition's ``generation`` makes a late answer a no-op."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import ray
from ray.exceptions import RayActorError

from actors.replication.partition import Partition
from actors.replication.partition_state import LEADER, AlterPartitionProposal, LeaderHwChange
from protocol import errors as E
from protocol.clock import now_ms
from protocol.control_messages import AlterPartitionRequest, AlterPartitionResponse
from protocol.names import RAY_NAMESPACE, controller_name

log = logging.getLogger("actors.replica")


class AlterPartitionManager:
    def __init__(self, cluster: str, partition: Partition, on_isr_applied: Callable[[LeaderHwChange], None]):
        self.cluster, self.partition, self.on_isr_applied = cluster, partition, on_isr_applied
        self._controller: Any = None
        self._task: asyncio.Task | None = None

    def submit(self, proposal: AlterPartitionProposal) -> None:
        p = self.partition
        old, new = list(p.isr), list(proposal.new_isr)
        log.info(
            "%s ISR from %s to %s (%s)",
            "Shrinking" if len(new) < len(old) else "Expanding" if len(new) > len(old) else "Changing",
            old,
            new,
            proposal.reason,
        )
        self._task = asyncio.ensure_future(self._send(p.generation, proposal))

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _controller_handle(self):
        if self._controller is None:
            loop = asyncio.get_running_loop()
            self._controller = await loop.run_in_executor(
                None, lambda: ray.get_actor(controller_name(self.cluster), namespace=RAY_NAMESPACE)
            )
        return self._controller

    async def _send(self, gen: int, proposal: AlterPartitionProposal) -> None:
        """AlterPartition with retries while the controller is being re-elected."""
        p = self.partition
        new_isr = proposal.new_isr
        backoff = 0.05
        while p.generation == gen and p.role == LEADER:
            try:
                ctrl = await self._controller_handle()
                req = AlterPartitionRequest(
                    p.topic, p.partition, p.broker_id, p.leader_epoch, tuple(new_isr), p.partition_epoch
                )
                resp: AlterPartitionResponse = await ctrl.alter_partition.remote(req)
            except (RayActorError, ValueError) as exc:  # dead, restarting or not yet named
                self._controller = None
                log.info("alter_partition: controller unavailable (%s), retrying", type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            if p.generation != gen:
                return
            code = resp.error_code
            if code == 0:
                log.info("ISR updated to %s and partition epoch updated to %d", list(resp.isr), resp.partition_epoch)
                self._applied(p.apply_isr(resp.isr, resp.partition_epoch, now_ms()))
                return
            if E.for_code(code).retriable:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            log.info(
                "%s-%d b%d: alter_partition to %s refused: %s",
                p.topic,
                p.partition,
                p.broker_id,
                list(new_isr),
                E.for_code(code).name,
            )
            self._applied(p.alter_partition_refused(resp, now_ms()))
            return

    def _applied(self, change: LeaderHwChange | None) -> None:
        if change is None:  # nothing adopted (a newer LeaderAndIsr already said more)
            return
        self._task = None
        self.on_isr_applied(change)
