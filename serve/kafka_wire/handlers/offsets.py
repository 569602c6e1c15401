"""ListOffsets (api key 2, v1-7: earliest -2, latest -1, or by timestamp; read_committed answers the LSO
as latest) and OffsetForLeaderEpoch (api key 23, v2-4: the end offset of a leader epoch, KIP-279), each
partition asked of its leader replica with the typed messages of protocol/messages.py."""

from __future__ import annotations

import asyncio

from protocol.messages import ListOffsetsRequest, OffsetForLeaderEpochRequest
from serve.kafka_wire import responses


async def list_offsets(backend, request, version: int):
    mod = responses.response_module(2, version)
    isolation = int(getattr(request, "isolation_level", 0))
    calls, where = [], []
    for t in request.topics:
        for p in t.partitions:
            req = ListOffsetsRequest(
                timestamp=int(p.timestamp),
                current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                isolation_level=isolation,
            )
            calls.append(backend.list_offsets(t.name, p.partition_index, req))
            where.append((t.name, p.partition_index))
    results = await asyncio.gather(*calls)
    per_topic = responses.by_topic(
        (
            name,
            responses.make(
                mod,
                "ListOffsetsPartitionResponse",
                partition_index=p,
                error_code=responses.error_code(r.get("error_code", 0)),
                timestamp=r.get("timestamp", -1),
                offset=r.get("offset", -1),
                leader_epoch=r.get("leader_epoch", -1),
            ),
        )
        for (name, p), r in zip(where, results)
    )
    topics = tuple(
        responses.make(mod, "ListOffsetsTopicResponse", name=n, partitions=ps) for n, ps in per_topic.items()
    )
    return responses.make(mod, "ListOffsetsResponse", throttle_time=responses.ZERO, topics=topics)


async def offset_for_leader_epoch(backend, request, version: int):
    mod = responses.response_module(23, version)
    calls, where = [], []
    for t in request.topics:
        for p in t.partitions:
            req = OffsetForLeaderEpochRequest(
                leader_epoch=int(p.leader_epoch), current_leader_epoch=int(p.current_leader_epoch)
            )
            calls.append(backend.offset_for_leader_epoch(t.topic, p.partition, req))
            where.append((t.topic, p.partition))
    results = await asyncio.gather(*calls)
    per_topic = responses.by_topic(
        (
            name,
            responses.make(
                mod,
                "EpochEndOffset",
                error_code=responses.error_code(r.get("error_code", 0)),
                partition=p,
                leader_epoch=r.get("leader_epoch", -1),
                end_offset=r.get("end_offset", -1),
            ),
        )
        for (name, p), r in zip(where, results)
    )
    topics = tuple(
        responses.make(mod, "OffsetForLeaderTopicResult", topic=n, partitions=ps) for n, ps in per_topic.items()
    )
    return responses.make(mod, "OffsetForLeaderEpochResponse", throttle_time=responses.ZERO, topics=topics)
