"""A coordinator's writes to its partition (Kafka's PartitionWriter): records as one RecordBatch to the
leading replica's ``produce(acks=-1, current_leader_epoch=epoch)`` on its internal channel
(actors/channels/data_channel.py), submitted synchronously so appends keep handler order. ``append``
chains them on the context's tail (an answer waits for every earlier append); ``submit`` does not.
Called by the runtime's owners (actors/group_coordinator.py, actors/txn_coordinator.py); no Ray call.
"""

from __future__ import annotations

import asyncio
from typing import Iterable, NamedTuple

from actors.channels.data_channel import loop_channel, produce_timeout_s
from actors.coordinator.context import CoordinatorContext
from protocol.channel_frames import API_PRODUCE, internal_produce_fields
from protocol.errors import KafkaError, NotCoordinatorError
from protocol.messages import ProduceRequest
from storage.records import RecordBatchBuilder

NOT_COORDINATOR = NotCoordinatorError.code


class TxnWrite(NamedTuple):
    """A TxnOffsetCommit's producer: its records go in a transactional batch of this producer."""

    producer_id: int
    producer_epoch: int
    transactional_id: str


def records_batch(records: Iterable, timestamp_ms: int, producer_id: int = -1, producer_epoch: int = -1) -> bytes:
    """The shard's durable records as one RecordBatch (key/value bytes as the records encode them); with a
    producer id, a transactional batch of that producer (TxnOffsetCommit; no sequence: coordinator origin)."""
    records = list(records)
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


def submit(
    part: CoordinatorContext, records, timeout_ms: int, now_ms: int, txn: TxnWrite | None = None
) -> asyncio.Future:
    """Send ``records`` now on the replica's internal channel; the future is the replica's answer."""
    if txn is None:
        req = ProduceRequest(records_batch(records, now_ms), -1, timeout_ms, current_leader_epoch=part.epoch)
    else:
        req = ProduceRequest(
            records_batch(records, now_ms, txn.producer_id, txn.producer_epoch),
            -1,
            timeout_ms,
            current_leader_epoch=part.epoch,
            transactional_id=txn.transactional_id,
            origin="coordinator",
        )
    return loop_channel(internal=True).submit_here(
        part.replica, API_PRODUCE, internal_produce_fields(req), req.records, produce_timeout_s(req)
    )


async def answer_code(fut: asyncio.Future) -> int:
    """The replica's error code of one append (0 = acknowledged); a broken channel is NOT_COORDINATOR."""
    try:
        res = await fut
        return res["error_code"] or 0
    except KafkaError:  # the replica died, or its connection broke or timed out
        return NOT_COORDINATOR


def append(
    part: CoordinatorContext, records, timeout_ms: int, now_ms: int, txn: TxnWrite | None = None
) -> asyncio.Task:
    """Submit ``records`` now (synchronously, so appends keep handler order); the task is the new tail."""
    fut = submit(part, records, timeout_ms, now_ms, txn)
    part.appends += 1
    task = asyncio.get_running_loop().create_task(acked(fut, part.tail))
    part.tail = task
    return task


async def acked(fut: asyncio.Future, previous: asyncio.Task | None) -> int:
    """The replica's error code for this append (0 = acknowledged), or the first earlier failure."""
    code = await answer_code(fut)
    if previous is not None:  # an append is acknowledged only if every earlier one was
        prev = await asyncio.shield(previous)
        code = prev or code
    return code
