"""What a commit asks of the brokers (Kafka's ControllerBrokerRequestBatch): ``prior_state`` (before replay)
and ``derive_requests`` (after) -> LeaderAndIsr / StopReplica / topic configs / UpdateMetadata per broker;
``LeaderAcks`` tracks the leader epochs the brokers confirmed running. Pure; called by the controller shell,
sent by controller_channel_manager. docs/internals.md ("Controller") lists which record asks for what.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.metadata.image import MetadataImage
from actors.metadata.partition_change import NO_LEADER
from actors.metadata.topic_configs import replica_configs
from protocol.control_messages import FULL, LeaderAndIsrPartitionState, LeaderAndIsrRequest, StopReplicaRequest

__all__ = [
    "BrokerRequestBatch",
    "LeaderAcks",
    "derive_requests",
    "dirty_keys",
    "full_state",
    "partition_state",
    "prior_state",
]

REGISTER, FENCE = "register", "fence"


@dataclass(frozen=True, slots=True)
class BrokerRequestBatch:
    """Per-broker requests of one commit. ``channel_events`` in record order: ``(REGISTER, broker_id,
    broker_epoch)`` or ``(FENCE, broker_id, broker_epoch)``; the other maps are in the order the records
    first touched each broker (the order the actor sends them)."""

    channel_events: list[tuple[str, int, int]] = field(default_factory=list)
    stop_replica: dict[int, StopReplicaRequest] = field(default_factory=dict)  # (delete_partitions)
    topic_configs: dict[int, list[tuple[str, dict]]] = field(default_factory=dict)  # broker -> [(topic, configs)]
    leader_and_isr: dict[int, LeaderAndIsrRequest] = field(default_factory=dict)  # INCREMENTAL
    metadata_version: int = 0  # UpdateMetadata to every live broker


def partition_state(
    image: MetadataImage, topic: str, p: int, controller_epoch: int, is_new: bool = False
) -> LeaderAndIsrPartitionState:
    """One partition as LeaderAndIsr carries it."""
    t = image.topics[topic]
    s = t.partitions[p]
    return LeaderAndIsrPartitionState(
        topic=topic,
        partition=p,
        controller_epoch=controller_epoch,
        leader=s.leader,
        leader_epoch=s.leader_epoch,
        isr=tuple(s.isr),
        partition_epoch=s.partition_epoch,
        replicas=tuple(s.replicas),
        adding_replicas=tuple(s.adding),
        removing_replicas=tuple(s.removing),
        is_new=is_new,
        topic_id=t.topic_id,
        configs=replica_configs(t.configs),
    )


def full_state(image: MetadataImage, broker_id: int, controller_epoch: int) -> LeaderAndIsrRequest:
    """Every partition the broker hosts (a FULL LeaderAndIsr: what a (re)registered broker is sent)."""
    states = [partition_state(image, t.name, p, controller_epoch) for t, p, _ in image.partitions_of_broker(broker_id)]
    return LeaderAndIsrRequest(controller_epoch, tuple(states), FULL)


def prior_state(image: MetadataImage, records: list[dict]) -> dict:
    """Before replay: ``(topic, p) -> state dict`` of changed partitions, ``name -> topic dict`` of removed
    topics (the first state seen, i.e. the one before this commit)."""
    before: dict = {}
    for r in records:
        if r["type"] == "PartitionChange":
            key = (r["topic"], r["partition"])
            if key not in before:
                s = image.partition(*key)
                assert s is not None, f"change of unknown partition {key}"
                before[key] = s.to_dict()
        elif r["type"] == "RemoveTopic":
            before[r["name"]] = image.topics[r["name"]].to_dict()
    return before


def dirty_keys(records: list[dict]) -> tuple[set[str], set[int], bool]:
    """What of GCS KV a commit changes: topic names, broker ids, and whether the producer id block moved."""
    # a ConfigRecord's "name" is the config key; its topic is its "resource" (an alter_configs-only commit
    # must republish topics/<topic> with the new configs, never touch a topic named like the key)
    topics: set[str] = {
        r["resource"] if r["type"] == "ConfigRecord" else (r.get("topic") or r["name"])
        for r in records
        if r["type"] in ("Topic", "Partition", "PartitionChange", "ConfigRecord", "RemoveTopic")
    }
    brokers = {r["broker_id"] for r in records if r["type"] in ("RegisterBroker", "FenceBroker")}
    return topics, brokers, any(r["type"] == "ProducerIds" for r in records)


def derive_requests(
    image: MetadataImage, records: list[dict], prior: dict, controller_epoch: int
) -> BrokerRequestBatch:
    """After replay: the requests the records ask of each broker (see the module docstring)."""
    lai: dict[int, dict[tuple[str, int], bool]] = {}  # broker -> {(topic, p): is_new}
    stop: dict[int, list[tuple[str, int]]] = {}
    configs: dict[int, set[str]] = {}
    events: list[tuple[str, int, int]] = []
    for r in records:
        t = r["type"]
        if t == "Partition" and r["topic"] in image.topics:
            for b in r["replicas"]:
                lai.setdefault(b, {})[(r["topic"], r["partition"])] = True
        elif t == "PartitionChange" and r["topic"] in image.topics:
            old = prior[(r["topic"], r["partition"])]
            if (old["leader_epoch"], old["replicas"]) != (r["leader_epoch"], r["replicas"]):
                for b in r["replicas"]:
                    lai.setdefault(b, {}).setdefault((r["topic"], r["partition"]), False)
            for b in old["replicas"]:
                if b not in r["replicas"]:
                    stop.setdefault(b, []).append((r["topic"], r["partition"]))
        elif t == "RemoveTopic":
            for p, s in prior[r["name"]]["partitions"].items():
                for b in s["replicas"]:
                    stop.setdefault(b, []).append((r["name"], p))
        elif t == "ConfigRecord" and r["resource"] in image.topics:
            for s in image.topics[r["resource"]].partitions.values():
                for b in s.replicas:
                    configs.setdefault(b, set()).add(r["resource"])
        elif t == "RegisterBroker":
            events.append((REGISTER, r["broker_id"], r["broker_epoch"]))
        elif t == "FenceBroker":
            events.append((FENCE, r["broker_id"], r["broker_epoch"]))
    topic_configs = {
        b: [(n, replica_configs(image.topics[n].configs)) for n in sorted(names) if n in image.topics]
        for b, names in configs.items()
    }
    states = {
        b: tuple(
            partition_state(image, t, p, controller_epoch, new) for (t, p), new in keys.items() if t in image.topics
        )
        for b, keys in lai.items()
    }
    requests = {b: LeaderAndIsrRequest(controller_epoch, s) for b, s in states.items() if s}
    stops = {b: StopReplicaRequest(controller_epoch, tuple(parts), True) for b, parts in stop.items()}
    return BrokerRequestBatch(events, stops, topic_configs, requests, image.version)


class LeaderAcks:
    """The highest leader epoch each partition's leader confirmed running (from LeaderAndIsr responses)."""

    def __init__(self) -> None:
        self.acked: dict[tuple[str, int], int] = {}

    def on_response(self, broker_id: int, res) -> bool:
        """A broker's LeaderAndIsr response; True when a partition's confirmed leader epoch went up."""
        changed = False
        for pr in (res.get("partitions") if isinstance(res, dict) else None) or ():
            if pr.get("error_code") == 0 and pr.get("leader") == broker_id:
                key = (pr["topic"], pr["partition"])
                if pr["leader_epoch"] > self.acked.get(key, -1):
                    self.acked[key] = pr["leader_epoch"]
                    changed = True
        return changed

    def ready(self, image: MetadataImage, keys) -> bool:
        """Every partition of ``keys`` still in the image has a leader running its current epoch."""
        for topic, p in keys:
            s = image.partition(topic, p)
            if s is None:
                continue
            if s.leader == NO_LEADER or self.acked.get((topic, p), -1) < s.leader_epoch:
                return False
        return True

    def forget_removed(self, image: MetadataImage) -> None:
        for key in list(self.acked):
            if key[0] not in image.topics:
                self.acked.pop(key, None)
