"""Kafka's OfflineReplica / OnlineReplica transitions for single replicas (the ZooKeeper controller's
``ReplicaStateMachine``; in KRaft a broker reports offline log directories the same way), as pure
controller decisions over a ``MetadataImage``. No Ray, no I/O.

A broker stays alive while one of its replica actors dies (its process SIGKILLed or OOM-killed, or frozen
past ``broker.session.timeout.ms``). The broker reports it, and the controller must not wait for the
replica to come back:

- ``offline_replicas(logic, broker_id, broker_epoch, partitions)``: for each partition, the replica of
  ``broker_id`` leaves the ISR when others remain in it (the leader epoch goes up, as when the
  controller fences a broker), and leadership moves to the first other live ISR member; a replica that
  was the only ISR member and led leaves the partition leaderless (-1, ISR kept: it names the replica
  holding every acknowledged record), unless unclean election is enabled for the topic. A replica that
  was not in the ISR changes nothing.
- ``online_replicas(logic, broker_id, broker_epoch, partitions)``: the recreated replica runs again;
  partitions left leaderless elect a leader (the replica is eligible again: in the ISR, or unclean).
  It then rejoins the ISR the normal way, through the leader's ISR expansion once it caught up.

Both return ``(records, results)``: at most one PartitionChange record per partition and one result
``{topic, partition, error_code, error_message}`` per requested partition. A broker that is not
registered or not the live incarnation (``broker_epoch``) gets STALE_BROKER_EPOCH /
BROKER_ID_NOT_REGISTERED for every partition; a partition it does not host, UNKNOWN_TOPIC_OR_PARTITION.
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
