"""Typed messages of the control plane, named and shaped like Kafka's generated ones: controller -> broker
-> replica (LeaderAndIsr, StopReplica) and leader replica -> controller (AlterPartition, one partition per
request). They travel over Ray as these objects; the brokers' answers stay dicts (``to_dict``). Built and
read by actors/ (the controller, the broker, the replica); semantics in docs/internals.md (protocol/).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "INCREMENTAL",
    "FULL",
    "NO_LEADER",
    "LeaderAndIsrPartitionState",
    "LeaderAndIsrRequest",
    "LeaderAndIsrPartitionError",
    "LeaderAndIsrResponse",
    "StopReplicaRequest",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
]

INCREMENTAL, FULL = 0, 1  # LeaderAndIsrRequest.type (Kafka's LeaderAndIsr v5+ Type field)
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState:
    """One partition as LeaderAndIsr carries it (Kafka's LeaderAndIsrPartitionState)."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False
    topic_id: str | None = None
    configs: dict[str, str] = field(default_factory=dict, hash=False)  # the topic's overrides (not hashed)

    def __post_init__(self) -> None:
        for name in ("isr", "replicas", "adding_replicas", "removing_replicas"):
            object.__setattr__(self, name, tuple(int(b) for b in getattr(self, name)))

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrRequest:
    controller_epoch: int
    partition_states: tuple[LeaderAndIsrPartitionState, ...] = ()
    type: int = INCREMENTAL

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_states", tuple(self.partition_states))
        if self.type not in (INCREMENTAL, FULL):
            raise ValueError(f"LeaderAndIsr type {self.type} is neither INCREMENTAL nor FULL")

    @property
    def full(self) -> bool:
        return self.type == FULL


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionError:
    """One partition's answer (Kafka's LeaderAndIsrPartitionError, plus the state's leader and epoch so the
    controller can tell which leader epochs are running; ``ignored``: the replica runs it or a newer one)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    error_code: int = 0
    error_message: str | None = None
    ignored: bool = False

    def to_dict(self) -> dict:
        d = {
            "topic": self.topic,
            "partition": self.partition,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "error_code": self.error_code,
            "error_message": self.error_message,
        }
        if self.ignored:
            d["ignored"] = True
        return d


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponse:
    error_code: int = 0
    error_message: str | None = None
    partitions: tuple[LeaderAndIsrPartitionError, ...] = ()

    def to_dict(self) -> dict:
        return {
            "error_code": self.error_code,
            "error_message": self.error_message,
            "partitions": [p.to_dict() for p in self.partitions],
        }


@dataclass(frozen=True, slots=True)
class StopReplicaRequest:
    """StopReplica of some partitions (``delete_partitions``: remove their logs too)."""

    controller_epoch: int
    partitions: tuple[tuple[str, int], ...] = ()
    delete_partitions: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple((str(t), int(p)) for t, p in self.partitions))


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """The leader's ISR proposal for one partition (Kafka's AlterPartitionRequestData, one partition)."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "new_isr", tuple(int(b) for b in self.new_isr))


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    error_code: int = 0
    error_message: str | None = None
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "isr", tuple(int(b) for b in self.isr))

    @classmethod
    def from_dict(cls, d: dict) -> AlterPartitionResponse:
        return cls(
            error_code=d.get("error_code", 0),
            error_message=d.get("error_message"),
            leader=d.get("leader", NO_LEADER),
            leader_epoch=d.get("leader_epoch", -1),
            isr=tuple(d.get("isr") or ()),
            partition_epoch=d.get("partition_epoch", -1),
        )

    def to_dict(self) -> dict:
        return {
            "error_code": self.error_code,
            "error_message": self.error_message,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "partition_epoch": self.partition_epoch,
        }
