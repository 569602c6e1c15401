"""Replica placement (Kafka's ``AdminUtils.assignReplicasToBrokers``, rack-aware or not) and, re-exported from
storage/topic.py, the topic-name rule. Pure, with randomness from the caller's ``random.Random``; called by
controller_logic. docs/internals.md ("Controller") has the walk.
"""

from __future__ import annotations

import random

from protocol.errors import InvalidReplicationFactorError
from storage.topic import MAX_TOPIC_NAME_LENGTH, validate_topic_name  # noqa: F401  (Kafka's Topic.validate)


def unify_collision_chars(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics differing only by them."""
    return name.replace(".", "_")


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign_rack_unaware(
    brokers: list[int],
    num_partitions: int,
    rf: int,
    rng: random.Random,
    start_partition: int = 0,
    start_index: int = -1,
) -> list[list[int]]:
    n = len(brokers)
    if rf < 1 or rf > n:
        raise InvalidReplicationFactorError(f"Replication factor: {rf} larger than available brokers: {n}.")
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out = []
    pid = max(0, start_partition)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[_replica_index(first, shift, j, n)])
        out.append(replicas)
        pid += 1
    return out


def rack_alternated(broker_racks: dict[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: one broker per rack in turn (racks and brokers sorted)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(broker_racks):
        by_rack.setdefault(broker_racks[b], []).append(b)
    racks = sorted(by_rack)
    iters = {r: iter(by_rack[r]) for r in racks}
    out: list[int] = []
    i = 0
    while len(out) < len(broker_racks):
        nxt = next(iters[racks[i]], None)
        if nxt is not None:
            out.append(nxt)
        i = (i + 1) % len(racks)
    return out


def assign_rack_aware(
    broker_racks: dict[int, str],
    num_partitions: int,
    rf: int,
    rng: random.Random,
    start_partition: int = 0,
    start_index: int = -1,
) -> list[list[int]]:
    arranged = rack_alternated(broker_racks)
    n = len(arranged)
    if rf < 1 or rf > n:
        raise InvalidReplicationFactorError(f"Replication factor: {rf} larger than available brokers: {n}.")
    num_racks = len(set(broker_racks.values()))
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    out = []
    pid = max(0, start_partition)
    for _ in range(num_partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {broker_racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                b = arranged[_replica_index(first, shift * num_racks, k, n)] if n > 1 else arranged[0]
                k += 1
                rack = broker_racks[b]
                if (rack not in racks_used or len(racks_used) == num_racks) and (
                    b not in brokers_used or len(brokers_used) == n
                ):
                    replicas.append(b)
                    racks_used.add(rack)
                    brokers_used.add(b)
                    break
        out.append(replicas)
        pid += 1
    return out


def assign_replicas(
    broker_racks: dict[int, str | None],
    num_partitions: int,
    rf: int,
    rng: random.Random,
    start_partition: int = 0,
    first_broker: int | None = None,
) -> list[list[int]]:
    """Place ``num_partitions`` partitions of ``rf`` replicas on the given (alive) brokers.

    ``broker_racks`` maps broker id to its rack key (rack, else node id, else None). Rack-aware when
    every broker has a key and there are at least two distinct keys. ``start_partition`` and
    ``first_broker`` (the first replica of the topic's partition 0) continue an existing topic's
    placement when partitions are added, as Kafka does.
    """
    if not broker_racks:
        raise InvalidReplicationFactorError("Replication factor: %d larger than available brokers: 0." % rf)
    keys = set(broker_racks.values())
    rack_aware = None not in keys and len(keys) >= 2
    if rack_aware:
        order = rack_alternated(broker_racks)  # type: ignore[arg-type]
    else:
        order = sorted(broker_racks)
    start_index = order.index(first_broker) if first_broker in order else -1
    if rack_aware:
        return assign_rack_aware(
            broker_racks,  # type: ignore[arg-type]
            num_partitions,
            rf,
            rng,
            start_partition,
            start_index,
        )
    return assign_rack_unaware(order, num_partitions, rf, rng, start_partition, start_index)
