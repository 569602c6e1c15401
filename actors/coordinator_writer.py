"""The group coordinator's writes to its ``__consumer_offsets`` partition (Kafka's PartitionWriter, the
narrow interface a coordinator needs to write its log): a handler's durable records go out as one
RecordBatch to the leading replica's ``produce(acks=-1, current_leader_epoch=epoch)``.

Appends are numbered (``ProduceRequest.order``, actors/call_order.py): Ray may run calls to the replica
out of order, and the replica appends them in the order submitted, so the log (what a reload replays) has
the records in handler order. They are chained on the partition's ``tail``: each append's task answers its
own error code (0 = acknowledged) or the first failure of an earlier append, so a request is answered only
once its records and every earlier record are acknowledged (the coordinator's answers keep handler order).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from ray.exceptions import RayActorError, RayTaskError

from actors import group_service as svc
from actors.coordinator_runtime import CoordinatorContext, records_batch
from protocol.messages import ProduceRequest


class TxnWrite(NamedTuple):
    """A TxnOffsetCommit's producer: its records go in a transactional batch of this producer."""

    producer_id: int
    producer_epoch: int
    transactional_id: str


def append(
    part: CoordinatorContext, records, commit_timeout_ms: int, now_ms: int, txn: TxnWrite | None = None
) -> asyncio.Task:
    """Submit ``records`` now (synchronously, so appends keep handler order); the task is the new tail."""
    order = part.order.stamp(part.partition, None)  # one replica per context: numbered from 0
    if txn is None:
        req = ProduceRequest(
            records_batch(records, now_ms), -1, commit_timeout_ms, current_leader_epoch=part.epoch, order=order
        )
    else:
        req = ProduceRequest(
            records_batch(records, now_ms, txn.producer_id, txn.producer_epoch),
            -1,
            commit_timeout_ms,
            current_leader_epoch=part.epoch,
            transactional_id=txn.transactional_id,
            origin="coordinator",
            order=order,
        )
    ref = part.replica.produce.remote(req)
    part.appends += 1
    task = asyncio.get_running_loop().create_task(acked(ref, part.tail))
    part.tail = task
    return task


async def acked(ref, previous: asyncio.Task | None) -> int:
    """The replica's error code for this append (0 = acknowledged), or the first earlier failure."""
    try:
        res = await ref
        code = res["error_code"] or svc.NONE
    except (RayActorError, RayTaskError):
        code = svc.NOT_COORDINATOR
    if previous is not None:  # an append is acknowledged only if every earlier one was
        prev = await asyncio.shield(previous)
        code = prev or code
    return code
