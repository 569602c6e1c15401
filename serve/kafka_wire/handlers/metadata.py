"""Metadata (api key 3, v0-12): brokers with their advertised host:port, topics with stable topic ids
(the controller's 16-byte id as a UUID), partitions with leader, leader epoch, replicas, ISR and the
replicas whose broker is down (offline). All topics when the request names none (null; v0: empty).
Unknown names answer UNKNOWN_TOPIC_OR_PARTITION (3), unknown ids UNKNOWN_TOPIC_ID (100).

Topic auto-creation (Kafka's AutoTopicCreationManager): an unknown topic named in a request that allows it
(``allow_auto_topic_creation``, v4+; always on v0-3) is created when the broker's
``auto.create.topics.enable`` is true (Kafka's default), with ``num.partitions`` partitions and
``default.replication.factor`` replicas (actors/server/auto_topic_creation.py), and answered
LEADER_NOT_AVAILABLE (5) until its partitions have leaders: the client asks again. Internal topics are
never auto-created here; an invalid name answers INVALID_TOPIC_EXCEPTION (17), a replication factor above
the live brokers INVALID_REPLICATION_FACTOR (38)."""

from __future__ import annotations

import asyncio
import uuid

from protocol.names import INTERNAL_TOPICS
from serve.kafka_wire import responses
from serve.kafka_wire.topic_ids import topic_uuid

UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_ID = 3, 5, 100
NOT_REQUESTED = -(2**31)  # authorized operations: "not asked for"
NIL = uuid.UUID(int=0)


def _partitions(mod, topic: dict, alive: set[int]) -> tuple:
    out = []
    for p, s in sorted(topic.get("partitions", {}).items()):
        leader = s.get("leader", -1)
        replicas = tuple(s.get("replicas", ()))
        out.append(
            responses.make(
                mod,
                "MetadataResponsePartition",
                error_code=responses.error_code(0 if leader >= 0 else LEADER_NOT_AVAILABLE),
                partition_index=int(p),
                leader_id=leader,
                leader_epoch=s.get("leader_epoch", -1),
                replica_nodes=replicas,
                isr_nodes=tuple(s.get("isr", ())),
                offline_replicas=tuple(r for r in replicas if r not in alive),
            )
        )
    return tuple(out)


def _topic(mod, name, tid, code, parts=(), internal=False):
    return responses.make(
        mod,
        "MetadataResponseTopic",
        error_code=responses.error_code(code),
        name=name,
        topic_id=tid,
        is_internal=internal,
        partitions=parts,
        topic_authorized_operations=NOT_REQUESTED,
    )


async def handle(backend, request, version: int):
    mod = responses.response_module(3, version)
    md = await backend.metadata()
    topics: dict = md["topics"]
    alive = {b["id"] for b in md["brokers"] if b.get("alive", True)}
    endpoints = await backend.endpoints(md["brokers"])
    brokers = tuple(
        responses.make(mod, "MetadataResponseBroker", node_id=bid, host=host, port=port, rack=rack)
        for bid, (host, port, rack) in sorted(endpoints.items())
        if bid in alive
    )
    by_id = {topic_uuid(t["topic_id"]): n for n, t in topics.items()}
    wanted = request.topics
    if wanted is None or (version == 0 and not wanted):
        asked = [(n, None) for n in sorted(topics)]
    else:
        asked = [(getattr(t, "name", None), getattr(t, "topic_id", None)) for t in wanted]
    if any(n is not None and n not in topics for n, _ in asked):
        # a topic this broker's cache lacks may be just created (its UpdateMetadata not here yet): KV's version
        # is read, and the topic listed as soon as the controller committed it
        md = await backend.metadata(fresh=True)
        topics = md["topics"]
        by_id = {topic_uuid(t["topic_id"]): n for n, t in topics.items()}
    created: dict[str, int] = {}
    if getattr(request, "allow_auto_topic_creation", True) and backend.auto_create_topics_enable:
        missing = list(dict.fromkeys(n for n, _ in asked if n is not None and n not in topics))
        missing = [n for n in missing if n not in INTERNAL_TOPICS]
        answers = await asyncio.gather(*(backend.auto_create_topic(n) for n in missing))
        created = {n: (r.get("error_code") or LEADER_NOT_AVAILABLE) for n, r in zip(missing, answers)}
    out = []
    for name, tid in asked:
        if name is None and tid is not None and tid != NIL:
            name = by_id.get(tid)
            if name is None:
                out.append(_topic(mod, None, tid, UNKNOWN_TOPIC_ID))
                continue
        t = topics.get(name) if name is not None else None
        if t is None:
            out.append(_topic(mod, name, NIL, created.get(name, UNKNOWN_TOPIC_OR_PARTITION)))
            continue
        parts = _partitions(mod, t, alive)
        out.append(_topic(mod, name, topic_uuid(t["topic_id"]), 0, parts, name in INTERNAL_TOPICS))
    return responses.make(
        mod,
        "MetadataResponse",
        throttle_time=responses.ZERO,
        error_code=responses.error_code(0),  # v13+ (KIP-1102: REBOOTSTRAP_REQUIRED is never sent here)
        brokers=brokers,
        cluster_id=backend.cluster_id,
        controller_id=backend.broker_id,
        topics=tuple(out),
        cluster_authorized_operations=NOT_REQUESTED,
    )
