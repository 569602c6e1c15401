"""Produce (api key 0, v3-11): each partition's record batches go to the partition's leader replica as one
``protocol.messages.ProduceRequest``, bytes untouched (the leader validates, assigns offsets, checks the
idempotent producer's id/epoch/sequence, and with acks=all waits for the high watermark). Partitions are
written concurrently. acks=0 answers nothing (the writes still happen, in order with the connection)."""

from __future__ import annotations

import asyncio
import datetime

from protocol.messages import ProduceRequest

CORRUPT_MESSAGE = 2
EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


async def _one(backend, topic: str, partition: int, records, acks: int, timeout_ms: int, txn_id) -> dict:
    if not records:
        return {"error_code": CORRUPT_MESSAGE, "error_message": "no record batch"}
    req = ProduceRequest(records=bytes(records), acks=acks, timeout_ms=timeout_ms, transactional_id=txn_id)
    return await backend.produce(topic, partition, req)


async def handle(backend, request, version: int):
    from .. import apis

    acks = int(request.acks)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    txn_id = getattr(request, "transactional_id", None)
    calls, where = [], []
    for t in request.topic_data:
        for pd in t.partition_data:
            calls.append(_one(backend, t.name, pd.index, pd.records, acks, timeout_ms, txn_id))
            where.append((t.name, pd.index))
    results = await asyncio.gather(*calls)
    if acks == 0:
        return None
    mod = apis.response_module(0, version)
    per_topic = apis.by_topic((name, _partition_answer(mod, p, r)) for (name, p), r in zip(where, results))
    topics = tuple(
        apis.make(mod, "TopicProduceResponse", name=n, partition_responses=ps) for n, ps in per_topic.items()
    )
    return apis.make(mod, "ProduceResponse", responses=topics, throttle_time=apis.ZERO)


def _partition_answer(mod, p: int, r: dict):
    from .. import apis

    lat = r.get("log_append_time", -1)
    return apis.make(
        mod,
        "PartitionProduceResponse",
        index=p,
        error_code=apis.error_code(r.get("error_code", 0)),
        base_offset=r.get("base_offset", -1),
        log_append_time=None if lat is None or lat < 0 else EPOCH + datetime.timedelta(milliseconds=lat),
        log_start_offset=r.get("log_start_offset", -1),
        record_errors=(),
        error_message=r.get("error_message") if r.get("error_code") else None,
    )
