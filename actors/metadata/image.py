"""The cluster metadata image (Kafka's MetadataImage): brokers, topics, partitions, configs, changed only by
``replay(record)``, which asserts each transition. Pure; replayed by the controller shell and the store,
read by controller_logic and controller_requests. Its records (Kafka's KRaft metadata records, msgpack-able
dicts with a ``type``):

====================  ==========================================================================
RegisterBroker        broker_id, broker_epoch, node_id, rack, log_dir   (broker alive)
FenceBroker           broker_id, broker_epoch                           (broker not alive)
Topic                 name, topic_id
Partition             topic, topic_id, partition, replicas, isr, leader, leader_epoch,
                      partition_epoch, adding, removing
PartitionChange       topic, partition + the complete new partition state (as Partition)
ConfigRecord          resource_type "topic", resource, name, value (None deletes the override)
RemoveTopic           name, topic_id
ProducerIds           broker_id, broker_epoch, next_producer_id
SnapshotVersion       version   (ends a snapshot: sets the version instead of bumping it)
====================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.metadata.partition_change import (
    MetadataInvariantError,
    PartitionRegistration,
    check_partition,
    check_transition,
)

__all__ = ["MetadataImage", "BrokerInfo", "TopicInfo"]


@dataclass
class BrokerInfo:
    broker_id: int
    broker_epoch: int
    node_id: str | None = None
    rack: str | None = None
    log_dir: str = ""
    alive: bool = True
    directory_id: str = ""  # its log directory's meta.properties directory.id (KIP-858)

    def to_dict(self) -> dict:  # the KV shape of internals.md
        return {
            "id": self.broker_id,
            "node_id": self.node_id,
            "rack": self.rack,
            "log_dir": self.log_dir,
            "epoch": self.broker_epoch,
            "alive": self.alive,
            "directory_id": self.directory_id,
        }

    @property
    def rack_key(self) -> str | None:
        return self.rack or self.node_id


@dataclass
class TopicInfo:
    name: str
    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "topic_id": self.topic_id,
            "configs": dict(self.configs),
            "partitions": {p: s.to_dict() for p, s in sorted(self.partitions.items())},
        }


class MetadataImage:
    def __init__(self):
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.next_producer_id = 0
        self.version = 0

    # ---- replay: the only mutation -------------------------------------------------------------
    def replay(self, rec: dict) -> None:
        t = rec["type"]
        fn = getattr(self, "_replay_" + t, None)
        if fn is None:
            raise MetadataInvariantError(f"unknown metadata record type {t!r}")
        fn(rec)
        if t != "SnapshotVersion":
            self.version += 1

    def _replay_RegisterBroker(self, r):
        old = self.brokers.get(r["broker_id"])
        if old is not None and r["broker_epoch"] <= old.broker_epoch:
            raise MetadataInvariantError(f"broker {r['broker_id']} epoch went down")
        self.brokers[r["broker_id"]] = BrokerInfo(
            r["broker_id"],
            r["broker_epoch"],
            r.get("node_id"),
            r.get("rack"),
            r.get("log_dir", ""),
            True,
            r.get("directory_id", ""),
        )

    def _replay_FenceBroker(self, r):
        b = self.brokers.get(r["broker_id"])
        if b is None or b.broker_epoch != r["broker_epoch"]:
            raise MetadataInvariantError(f"fencing unknown broker incarnation {r}")
        b.alive = False

    def _replay_Topic(self, r):
        if r["name"] in self.topics:
            raise MetadataInvariantError(f"topic {r['name']} exists")
        self.topics[r["name"]] = TopicInfo(r["name"], r["topic_id"])

    def _replay_Partition(self, r):
        t = self.topics.get(r["topic"])
        if t is None or r["partition"] in t.partitions or r["partition"] != len(t.partitions):
            raise MetadataInvariantError(f"bad new partition {r}")
        s = PartitionRegistration.from_dict(r)
        check_partition(s, f"{r['topic']}-{r['partition']}")
        t.partitions[r["partition"]] = s

    def _replay_PartitionChange(self, r):
        t = self.topics.get(r["topic"])
        if t is None or r["partition"] not in t.partitions:
            raise MetadataInvariantError(f"change of unknown partition {r}")
        new = PartitionRegistration.from_dict(r)
        check_transition(t.partitions[r["partition"]], new, f"{r['topic']}-{r['partition']}")
        t.partitions[r["partition"]] = new

    def _replay_ConfigRecord(self, r):
        t = self.topics.get(r["resource"])
        if t is None:
            raise MetadataInvariantError(f"config of unknown topic {r}")
        if r["value"] is None:
            t.configs.pop(r["name"], None)
        else:
            t.configs[r["name"]] = r["value"]

    def _replay_RemoveTopic(self, r):
        t = self.topics.get(r["name"])
        if t is None or t.topic_id != r["topic_id"]:
            raise MetadataInvariantError(f"removing unknown topic {r}")
        del self.topics[r["name"]]

    def _replay_ProducerIds(self, r):
        if r["next_producer_id"] <= self.next_producer_id:
            raise MetadataInvariantError("producer id block went backwards")
        self.next_producer_id = r["next_producer_id"]

    def _replay_SnapshotVersion(self, r):
        self.version = r["version"]

    # ---- snapshots and KV ----------------------------------------------------------------------
    def snapshot_records(self) -> list[dict]:
        """Records that rebuild this image exactly (brokers, topics, configs, ids, then the version)."""
        out: list[dict] = []
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(
                {
                    "type": "RegisterBroker",
                    "broker_id": b.broker_id,
                    "broker_epoch": b.broker_epoch,
                    "node_id": b.node_id,
                    "rack": b.rack,
                    "log_dir": b.log_dir,
                    "directory_id": b.directory_id,
                }
            )
            if not b.alive:
                out.append({"type": "FenceBroker", "broker_id": b.broker_id, "broker_epoch": b.broker_epoch})
        for t in self.topics.values():
            out.append({"type": "Topic", "name": t.name, "topic_id": t.topic_id})
            for k, v in sorted(t.configs.items()):
                out.append(
                    {"type": "ConfigRecord", "resource_type": "topic", "resource": t.name, "name": k, "value": v}
                )
            for p, s in sorted(t.partitions.items()):
                out.append(
                    {"type": "Partition", "topic": t.name, "topic_id": t.topic_id, "partition": p, **s.to_dict()}
                )
        if self.next_producer_id:
            out.append(
                {"type": "ProducerIds", "broker_id": -1, "broker_epoch": -1, "next_producer_id": self.next_producer_id}
            )
        out.append({"type": "SnapshotVersion", "version": self.version})
        return out

    @classmethod
    def from_records(cls, records) -> "MetadataImage":
        img = cls()
        for r in records:
            img.replay(r)
        return img

    @classmethod
    def from_kv(cls, brokers: list[dict], topics: list[dict], version: int, next_producer_id: int):
        img = cls()
        for b in brokers:
            img.brokers[b["id"]] = BrokerInfo(
                b["id"],
                b["epoch"],
                b.get("node_id"),
                b.get("rack"),
                b.get("log_dir", ""),
                bool(b.get("alive")),
                b.get("directory_id", ""),
            )
        for t in topics:
            parts = {int(p): PartitionRegistration.from_dict(s) for p, s in t["partitions"].items()}
            for p, s in parts.items():
                check_partition(s, f"{t['name']}-{p}")
            img.topics[t["name"]] = TopicInfo(t["name"], t["topic_id"], dict(t.get("configs") or {}), parts)
        img.version, img.next_producer_id = version, next_producer_id
        return img

    # ---- queries -------------------------------------------------------------------------------
    def alive_brokers(self) -> set[int]:
        return {b.broker_id for b in self.brokers.values() if b.alive}

    def partition(self, topic: str, p: int) -> PartitionRegistration | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(p)

    def partitions_of_broker(self, broker_id: int):
        for t in self.topics.values():
            for p, s in t.partitions.items():
                if broker_id in s.replicas:
                    yield t, p, s

    def describe_topic(self, name: str) -> dict:
        t = self.topics[name]
        alive = self.alive_brokers()
        parts = []
        for p, s in sorted(t.partitions.items()):
            d = s.to_dict()
            d["partition"] = p
            d["offline_replicas"] = [r for r in s.replicas if r not in alive]
            parts.append(d)
        return {
            "name": name,
            "topic_id": t.topic_id,
            "error_code": 0,
            "error_message": None,
            "configs": dict(t.configs),
            "partitions": parts,
        }
