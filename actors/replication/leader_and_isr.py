"""The broker's LeaderAndIsr / StopReplica decisions, pure (Kafka's ReplicaManager.becomeLeaderOrFollower and its
controller-epoch check): which hosted replicas to create, update, stop or delete, the stray partition
directories, the partition directory names and each replica's configs. No Ray, no I/O; actors/broker.py carries
them out."""

from __future__ import annotations

from dataclasses import dataclass

from actors.replication.replica_config import REPLICA_DEFAULTS, REPLICA_STRING_DEFAULTS
from protocol.control_messages import LeaderAndIsrPartitionError, LeaderAndIsrPartitionState
from protocol.errors import NotLeaderOrFollowerError, StaleControllerEpochError, error_response

__all__ = [
    "BROKER_TOPIC_DEFAULTS",
    "REPLICA_KEYS",
    "CREATE",
    "RECREATE",
    "UPDATE",
    "NOT_A_REPLICA",
    "ReplicaAction",
    "replica_action",
    "partition_result",
    "not_a_replica_error",
    "replicas_to_remove",
    "stray_partition_dirs",
    "partition_dir_name",
    "parse_partition_dir",
    "replica_props",
    "stale_controller_epoch",
]

# Kafka's broker-level defaults for topic configs (log.* name -> topic config name).
BROKER_TOPIC_DEFAULTS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
}
# the broker settings its replicas take (replica_config.py)
REPLICA_KEYS = (*REPLICA_DEFAULTS, *REPLICA_STRING_DEFAULTS)

NOT_A_REPLICA, CREATE, RECREATE, UPDATE = "not_a_replica", "create", "recreate", "update"


def stale_controller_epoch(request_epoch: int, known_epoch: int) -> dict | None:
    """The STALE_CONTROLLER_EPOCH answer to a request from an older controller, else None."""
    if request_epoch < known_epoch:
        code, msg = error_response(
            StaleControllerEpochError(f"Controller epoch {request_epoch} is older than {known_epoch}")
        )
        return {"error_code": code, "error_message": msg, "controller_epoch": known_epoch}
    return None


@dataclass(frozen=True, slots=True)
class ReplicaAction:
    kind: str  # NOT_A_REPLICA, CREATE, RECREATE (stop + delete the hosted one first) or UPDATE
    make_leader: bool  # become_leader, else become_follower
    state: LeaderAndIsrPartitionState  # what the replica actor is given


def replica_action(broker_id: int, s: LeaderAndIsrPartitionState, hosted_topic_id: str | None) -> ReplicaAction:
    """What to do with one partition state of a LeaderAndIsr; ``hosted_topic_id`` is the topic id of the
    replica this broker hosts for that partition, None when it hosts none."""
    if broker_id not in s.replicas:
        kind = NOT_A_REPLICA
    elif hosted_topic_id is None:
        kind = CREATE
    elif hosted_topic_id != s.topic_id:
        kind = RECREATE
    else:
        kind = UPDATE
    return ReplicaAction(kind, s.leader == broker_id, s)


def partition_result(
    s: LeaderAndIsrPartitionState, res: dict | None = None, error: dict | None = None
) -> LeaderAndIsrPartitionError:
    """One partition's entry of the LeaderAndIsr answer, from the replica's answer ``res`` or an error
    (``{error_code, error_message}``); an ``ignored`` state (the replica runs it or a newer one) is no error."""
    if error is not None:
        code, msg, ignored = error["error_code"], error.get("error_message"), False
    elif (res or {}).get("ignored"):
        code, msg, ignored = 0, (res or {}).get("error_message"), True
    else:
        code, msg, ignored = (res or {}).get("error_code", 0), (res or {}).get("error_message"), False
    return LeaderAndIsrPartitionError(s.topic, s.partition, s.leader, s.leader_epoch, code, msg, ignored)


def not_a_replica_error() -> dict:
    return {"error_code": NotLeaderOrFollowerError.code, "error_message": "this broker is not a replica"}


def replicas_to_remove(hosted, states) -> list[tuple[str, int]]:
    """The hosted partitions a full LeaderAndIsr (its ``LeaderAndIsrPartitionState``s) does not name."""
    keep = {s.key for s in states}
    return [k for k in hosted if k not in keep]


def partition_dir_name(topic: str, p: int) -> str:
    return f"{topic}-{p}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``<topic>-<partition>`` -> (topic, partition); None for anything else."""
    topic, _, p = name.rpartition("-")
    return (topic, int(p)) if topic and p.isdigit() else None


def stray_partition_dirs(names, states) -> list[str]:
    """The partition directories (of a listing of the broker's directory) a full LeaderAndIsr does not name."""
    keep = {s.key for s in states}
    out = []
    for name in names:
        key = parse_partition_dir(name)
        if key is not None and key not in keep:
            out.append(name)
    return out


def replica_props(broker_config: dict, topic_configs: dict | None) -> dict:
    """A replica's configs: the broker's topic defaults (renamed), its replica settings, the topic overrides."""
    props = {}
    for k, v in broker_config.items():
        if k in BROKER_TOPIC_DEFAULTS:
            props[BROKER_TOPIC_DEFAULTS[k]] = v
        elif k in REPLICA_KEYS:
            props[k] = v
    props.update(topic_configs or {})
    return props
