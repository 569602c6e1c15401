"""Produce (api key 0, v3-11): each partition's record batches go to the partition's leader replica as one
``protocol.messages.ProduceRequest``, bytes untouched (the leader validates, assigns offsets, checks the
idempotent producer's id/epoch/sequence, and with acks=all waits for the high watermark). Partitions are
written concurrently. acks=0 answers nothing (the writes still happen, in order with the connection).

``submit`` starts every partition's write at once, as tasks created in request order (each submits its
replica call in its first step, and asyncio starts tasks in creation order), and returns the awaitable
answer: the Processor runs a connection's non-transactional Produce requests that way one after another
without waiting for the earlier answers (``pipelinable``), so their acks=all waits overlap. The writes reach
each replica in submission order on the broker's connection to its client listener, and the replica appends
one connection's writes in that order (actors/channels/data_channel.py, actors/replication/call_order.py). A request carrying a
partition's batches above ``PIPELINE_MAX_PARTITION_BYTES`` is handled alone (sized when writes were Ray calls,
whose larger arguments went through the object store), as is a transactional one (its first write to a
partition waits for the KIP-890 verification): pipelining them measured no gain then (librdkafka 47-71k
records/s either way, alternated runs)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable

from protocol import errors as E
from protocol.messages import ProduceRequest
from serve.kafka_wire import responses

CORRUPT_MESSAGE = E.CorruptMessageError.code
EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)
PIPELINE_MAX_PARTITION_BYTES = 90 * 1024


def pipelinable(request) -> bool:
    """May this Produce request be submitted before the connection's earlier requests are answered?"""
    if getattr(request, "transactional_id", None) is not None:
        return False
    return all(
        pd.records is None or len(pd.records) <= PIPELINE_MAX_PARTITION_BYTES
        for t in request.topic_data
        for pd in t.partition_data
    )


def _answered(answer: dict) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(answer)
    return fut


def _submit_one(backend, topic: str, partition: int, records, acks: int, timeout_ms: int, txn_id) -> Awaitable[dict]:
    if not records:
        return _answered({"error_code": CORRUPT_MESSAGE, "error_message": "no record batch"})
    req = ProduceRequest(records=bytes(records), acks=acks, timeout_ms=timeout_ms, transactional_id=txn_id)
    # a task: asyncio starts tasks in creation order, and backend.produce submits its replica call before
    # its first suspension, so a later request's writes are submitted after this one's
    return asyncio.ensure_future(backend.produce(topic, partition, req))


def submit(backend, request, version: int) -> Awaitable:
    """Submit every partition's write now, in request order; the returned awaitable gives the response
    entity (None for acks=0)."""
    acks = int(request.acks)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    txn_id = getattr(request, "transactional_id", None)
    calls, where = [], []
    for t in request.topic_data:
        for pd in t.partition_data:
            calls.append(_submit_one(backend, t.name, pd.index, pd.records, acks, timeout_ms, txn_id))
            where.append((t.name, pd.index))
    return _respond(calls, where, acks, version)


async def _respond(calls: list, where: list, acks: int, version: int):
    results = await asyncio.gather(*calls)
    if acks == 0:
        return None
    mod = responses.response_module(0, version)
    per_topic = responses.by_topic((name, _partition_answer(mod, p, r)) for (name, p), r in zip(where, results))
    topics = tuple(
        responses.make(mod, "TopicProduceResponse", name=n, partition_responses=ps) for n, ps in per_topic.items()
    )
    return responses.make(mod, "ProduceResponse", responses=topics, throttle_time=responses.ZERO)


async def handle(backend, request, version: int):
    return await submit(backend, request, version)


def _partition_answer(mod, p: int, r: dict):
    lat = r.get("log_append_time", -1)
    return responses.make(
        mod,
        "PartitionProduceResponse",
        index=p,
        error_code=responses.error_code(r.get("error_code", 0)),
        base_offset=r.get("base_offset", -1),
        log_append_time=None if lat is None or lat < 0 else EPOCH + datetime.timedelta(milliseconds=lat),
        log_start_offset=r.get("log_start_offset", -1),
        record_errors=_record_errors(mod, r.get("record_errors") or ()),
        error_message=r.get("error_message") if r.get("error_code") else None,
    )


def _record_errors(mod, errors) -> tuple:
    """KIP-467 (v8+): the records of the partition's batch that failed validation, by index in the batch
    (librdkafka fails those with INVALID_RECORD and the batch's others with _INVALID_DIFFERENT_RECORD)."""
    if not errors or not hasattr(mod, "BatchIndexAndErrorMessage"):
        return ()
    return tuple(
        responses.make(mod, "BatchIndexAndErrorMessage", batch_index=int(i), batch_index_error_message=m)
        for i, m in errors
    )
