"""Kafka's ``org.apache.kafka.common.replica`` (KIP-392): the broker's ``replica.selector.class`` picks the replica a
consumer reads from. ``LeaderSelector`` (the default) always names the leader; ``RackAwareReplicaSelector`` names
a replica in the client's rack (the leader if it is there, else the most caught-up follower). Pure: the views
come from the leader's follower bookkeeping (actors/replication/read_replica.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

from protocol import errors as E

REPLICA_SELECTOR_CLASS = "replica.selector.class"
KAFKA_PACKAGE = "org.apache.kafka.common.replica."


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a Fetch v11+ tells about its client (Kafka's DefaultClientMetadata): its ``client.rack``."""

    rack_id: str = ""
    client_id: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the selector sees it (Kafka's DefaultReplicaView); ``rack`` None: the broker set none."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int

    def sort_key(self) -> tuple[int, int]:
        """Kafka's ReplicaView.comparator: the higher LEO, then the more recently caught up, is the greater."""
        return (self.log_end_offset, -self.time_since_last_caught_up_ms)


@dataclass(frozen=True, slots=True)
class PartitionView:
    """The replicas a consumer may be sent to (the leader among them) and the leader (Kafka's PartitionView)."""

    replicas: tuple[ReplicaView, ...]
    leader: ReplicaView


class ReplicaSelector(Protocol):
    def select(self, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None: ...


class LeaderSelector:
    """Kafka's LeaderSelector: the leader, always (a broker without ``replica.selector.class`` acts so)."""

    def select(self, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
        return partition.leader


class RackAwareReplicaSelector:
    """Kafka's RackAwareReplicaSelector: with a ``client.rack``, the leader when it is in that rack, else the
    most caught-up replica there; the leader when the client names no rack or no replica is in it."""

    def select(self, client: ClientMetadata, partition: PartitionView) -> ReplicaView | None:
        if not client.rack_id:
            return partition.leader
        same = [r for r in partition.replicas if r.rack == client.rack_id]
        if not same or any(r.broker_id == partition.leader.broker_id for r in same):
            return partition.leader
        return max(same, key=ReplicaView.sort_key)


SELECTORS: dict[str, type] = {"LeaderSelector": LeaderSelector, "RackAwareReplicaSelector": RackAwareReplicaSelector}


@functools.lru_cache(maxsize=16)
def selector_for(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names (Kafka's full class name, or the bare class name); None when
    unset (Kafka's ReplicaManager then computes no preferred read replica at all). InvalidConfigError for any
    other name: a broker with a selector it cannot load does not start, as Kafka's."""
    name = str(class_name or "").strip()
    if not name:
        return None
    short = name.removeprefix(KAFKA_PACKAGE)
    cls = SELECTORS.get(short)
    if cls is None or ("." in name and not name.startswith(KAFKA_PACKAGE)):
        known = ", ".join(KAFKA_PACKAGE + n for n in SELECTORS)
        raise E.InvalidConfigError(f"{REPLICA_SELECTOR_CLASS}={class_name!r} is not a replica selector ({known})")
    selector: ReplicaSelector = cls()
    return selector
