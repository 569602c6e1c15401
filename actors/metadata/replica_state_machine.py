"""Kafka's OfflineReplica / OnlineReplica transitions for single replicas: ``offline_replicas`` /
``online_replicas`` -> ``(records, results)`` when a live broker reports replica actors dead or running
again. Pure decisions over the image; called by the controller shell (``replicas_offline`` /
``replicas_online``); uses partition_change. docs/internals.md ("Controller") has the rules.
"""

from __future__ import annotations

from actors.metadata.partition_change import PartitionChangeBuilder
from protocol.errors import (
    BrokerIdNotRegisteredError,
    KafkaError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
    error_response,
)


def _result(topic, p, exc: KafkaError | None = None) -> dict:
    code, msg = error_response(exc) if exc is not None else (0, None)
    return {"topic": topic, "partition": p, "error_code": code, "error_message": msg}


def _check_broker(image, broker_id: int, broker_epoch: int) -> KafkaError | None:
    b = image.brokers.get(broker_id)
    if b is None:
        return BrokerIdNotRegisteredError(f"Broker {broker_id} is not registered")
    if b.broker_epoch != broker_epoch or not b.alive:
        return StaleBrokerEpochError(
            f"Broker {broker_id} epoch {broker_epoch} is not the live registered one ({b.broker_epoch}, "
            f"alive={b.alive})"
        )
    return None


def _changes(logic, broker_id: int, broker_epoch: int, partitions, build) -> tuple[list[dict], list[dict]]:
    image = logic.image
    err = _check_broker(image, broker_id, broker_epoch)
    records, results = [], []
    for item in partitions or ():
        topic, p = (item[0], item[1]) if isinstance(item, (list, tuple)) and len(item) == 2 else (item, None)
        if err is not None:
            results.append(_result(topic, p, err))
            continue
        s = image.partition(topic, p) if isinstance(topic, str) and isinstance(p, int) else None
        if s is None or broker_id not in s.replicas:
            results.append(
                _result(topic, p, UnknownTopicOrPartitionError(f"Broker {broker_id} hosts no replica of {topic}-{p}"))
            )
            continue
        rec = build(topic, p, s)
        if rec is not None:
            records.append(rec)
        results.append(_result(topic, p))
    return records, results


def offline_replicas(logic, broker_id: int, broker_epoch: int, partitions) -> tuple[list[dict], list[dict]]:
    def build(topic, p, s):
        alive = logic.image.alive_brokers() - {broker_id}  # the replica cannot lead while it is down
        b = PartitionChangeBuilder(topic, p, s, alive, logic.unclean_enabled(topic))
        if broker_id in s.isr and len(s.isr) > 1:
            b.set_isr([r for r in s.isr if r != broker_id])
            b.bump_leader_epoch = True
        return b.build()

    return _changes(logic, broker_id, broker_epoch, partitions, build)


def online_replicas(logic, broker_id: int, broker_epoch: int, partitions) -> tuple[list[dict], list[dict]]:
    def build(topic, p, s):
        if s.leader != -1:
            return None
        return PartitionChangeBuilder(topic, p, s, logic.image.alive_brokers(), logic.unclean_enabled(topic)).build()

    return _changes(logic, broker_id, broker_epoch, partitions, build)
