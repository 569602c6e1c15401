"""The group coordinator's writes to its ``__consumer_offsets`` partition (Kafka's PartitionWriter, the
narrow interface a coordinator needs to write its log): a handler's durable records go out as one
RecordBatch to the leading replica's ``produce(acks=-1, current_leader_epoch=epoch)``.

Appends travel on the replica's internal channel (actors/channels/data_channel.py: one TCP connection per replica
from this coordinator's event loop, submitted synchronously in handler order), and the replica appends one
connection's requests in the order they came (actors/replication/call_order.py), so the log (what a reload replays) has
the records in handler order. They are chained on the partition's ``tail``: each append's task answers its
own error code (0 = acknowledged) or the first failure of an earlier append, so a request is answered only
once its records and every earlier record are acknowledged (the coordinator's answers keep handler order).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from actors.channels.data_channel import loop_channel, produce_timeout_s
from actors.coordinator.runtime import CoordinatorContext, records_batch
from actors.group import service as svc
from protocol.channel_frames import API_PRODUCE, internal_produce_fields
from protocol.errors import KafkaError
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
    if txn is None:
        req = ProduceRequest(records_batch(records, now_ms), -1, commit_timeout_ms, current_leader_epoch=part.epoch)
    else:
        req = ProduceRequest(
            records_batch(records, now_ms, txn.producer_id, txn.producer_epoch),
            -1,
            commit_timeout_ms,
            current_leader_epoch=part.epoch,
            transactional_id=txn.transactional_id,
            origin="coordinator",
        )
    fut = loop_channel(internal=True).submit_here(
        part.replica, API_PRODUCE, internal_produce_fields(req), req.records, produce_timeout_s(req)
    )
    part.appends += 1
    task = asyncio.get_running_loop().create_task(acked(fut, part.tail))
    part.tail = task
    return task


async def acked(fut: asyncio.Future, previous: asyncio.Task | None) -> int:
    """The replica's error code for this append (0 = acknowledged), or the first earlier failure."""
    try:
        res = await fut
        code = res["error_code"] or svc.NONE
    except KafkaError:  # the replica died, or its connection broke or timed out
        code = svc.NOT_COORDINATOR
    if previous is not None:  # an append is acknowledged only if every earlier one was
        prev = await asyncio.shield(previous)
        code = prev or code
    return code
