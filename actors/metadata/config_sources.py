"""Kafka's config sources for DescribeConfigs: each topic or broker config's value and where it comes from
(DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, with its synonyms). Pure; called by the
controller logic (topic configs) and the broker (broker configs); imports storage's ``LogConfig`` and the
replicas' config defaults. docs/internals.md ("Controller") has the rules.
"""

from __future__ import annotations

from actors.metadata.controller_config import ControllerConfig
from actors.metadata.topic_configs import KAFKA_TOPIC_CONFIGS, topic_config_type
from actors.replication.leader_and_isr import BROKER_TOPIC_DEFAULTS
from actors.replication.replica_config import REPLICA_DEFAULTS, WARM_POOL_DEFAULTS
from storage.log import LogConfig
from storage.log_config import config_kinds

DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# Kafka's ConfigSource names (the Java admin client's ConfigEntry.ConfigSource), by code
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}
# Kafka's ConfigType (DescribeConfigs v3+)
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
_TYPE_OF_KIND = {
    "int32": INT,
    "int64": LONG,
    "bool": BOOLEAN,
    "ratio": DOUBLE,
    "policy": LIST,
    "tstype": STRING,
    "compression": STRING,
}
_TYPE_CODES = {"BOOLEAN": BOOLEAN, "STRING": STRING, "INT": INT, "LONG": LONG, "DOUBLE": DOUBLE, "LIST": LIST}
# the LIST configs (IncrementalAlterConfigs APPEND / SUBTRACT apply to these only, as in Kafka)
LIST_CONFIGS = frozenset(k for k, kind in config_kinds().items() if kind == "policy") | frozenset(
    k for k, d in KAFKA_TOPIC_CONFIGS.items() if d.type == "LIST"
)

# a topic config -> its broker-level synonym (the broker default the replicas apply)
TOPIC_SYNONYM = {t: b for b, t in BROKER_TOPIC_DEFAULTS.items()} | {
    "unclean.leader.election.enable": "unclean.leader.election.enable"
}

DOCS = {
    "cleanup.policy": "A list of delete and/or compact: how old log segments are discarded.",
    "retention.ms": "How long a log keeps a segment before discarding it (delete policy); -1: no time limit.",
    "retention.bytes": "The largest size a partition's log grows to before old segments go; -1: no limit.",
    "segment.bytes": "The size of a log segment file (at least 1 MiB, KIP-1030).",
    "internal.segment.bytes": "The maximum size of a single log file. This should be used for testing only.",
    "segment.ms": "The time after which the active segment is rolled even if not full.",
    "max.message.bytes": "The largest record batch size allowed in this topic.",
    "min.insync.replicas": "The fewest in-sync replicas for an acks=all write to succeed.",
    "message.timestamp.type": "CreateTime (the producer's) or LogAppendTime (the broker's).",
    "unclean.leader.election.enable": "Whether a replica outside the ISR may become leader (data loss).",
    "auto.create.topics.enable": "Create an unknown topic when a client asks for it in a Metadata request.",
    "num.partitions": "The partition count of auto-created topics.",
    "default.replication.factor": "The replication factor of auto-created topics.",
    "replica.warm.pool.size": "Replica actor processes a broker keeps started and unbound, so creating a "
    "partition replica does not wait for a new process (rafka).",
    "replica.warm.pool.min.idle.cpus": "Idle CPUs the broker's node must have for a warm replica actor to be "
    "started; 0: start regardless of load (rafka).",
    "replica.host.max.partitions": "Replicas a broker keeps in one process: 1 starts an actor per replica; more "
    "shares ReplicaHost processes of up to this many replicas each (rafka).",
}


def broker_defaults() -> dict[str, str]:
    """The broker configs rafka acts on, with Kafka's defaults, as strings."""
    cc = ControllerConfig()
    out = {
        "auto.create.topics.enable": "true",
        "num.partitions": str(cc.num_partitions),
        "default.replication.factor": str(cc.default_replication_factor),
        "unclean.leader.election.enable": "false",
        "auto.leader.rebalance.enable": "true",
        "leader.imbalance.per.broker.percentage": str(cc.imbalance_percentage),
        "leader.imbalance.check.interval.seconds": str(int(cc.imbalance_check_interval_s)),
        "broker.session.timeout.ms": str(cc.session_timeout_ms),
        "broker.heartbeat.interval.ms": str(cc.heartbeat_interval_ms),
        "socket.request.max.bytes": "104857600",
        "connections.max.idle.ms": "600000",
    }
    out |= {k: str(v) for k, v in REPLICA_DEFAULTS.items()}
    out |= {k: str(v) for k, v in WARM_POOL_DEFAULTS.items()}
    topic_defaults = LogConfig().to_props()
    out |= {b: topic_defaults[t] for b, t in BROKER_TOPIC_DEFAULTS.items()}
    return out


def _str(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def config_type(name: str) -> int:
    kafka_type = topic_config_type(name)
    if kafka_type is not None:
        return _TYPE_CODES[kafka_type]
    kind = config_kinds().get(name)
    if kind is not None:
        return _TYPE_OF_KIND[kind]
    default = broker_defaults().get(TOPIC_SYNONYM.get(name, name), "")
    return BOOLEAN if default in ("true", "false") else LONG if default.lstrip("-").isdigit() else STRING


def topic_entries(effective: dict, overrides: dict, broker_config: dict) -> list[dict]:
    """``[{name, value, source, read_only, synonyms: [(name, value, source)]}]`` of a topic: ``effective``
    is the controller's view (overrides over storage defaults)."""
    defaults = broker_defaults()
    out = []
    for name, value in sorted(effective.items()):
        syn = []
        if name in overrides:
            syn.append((name, _str(overrides[name]), DYNAMIC_TOPIC_CONFIG))
        broker_key = TOPIC_SYNONYM.get(name)
        if broker_key is not None and broker_key in broker_config:
            syn.append((broker_key, _str(broker_config[broker_key]), STATIC_BROKER_CONFIG))
        syn.append((broker_key or name, defaults.get(broker_key, value) if broker_key else value, DEFAULT_CONFIG))
        source = syn[0][2]
        shown = value if source != STATIC_BROKER_CONFIG else syn[0][1]
        out.append({"name": name, "value": shown, "source": source, "read_only": False, "synonyms": syn})
    return out


def broker_entries(broker_config: dict | None) -> list[dict]:
    """This broker's configs (``None``: the cluster-wide defaults only)."""
    defaults = broker_defaults()
    static = {k: _str(v) for k, v in (broker_config or {}).items() if v is not None}
    out = []
    for name in sorted(set(defaults) | set(static)):
        syn = []
        if name in static:
            syn.append((name, static[name], STATIC_BROKER_CONFIG))
        if name in defaults:
            syn.append((name, defaults[name], DEFAULT_CONFIG))
        out.append({"name": name, "value": syn[0][1], "source": syn[0][2], "read_only": True, "synonyms": syn})
    return out
