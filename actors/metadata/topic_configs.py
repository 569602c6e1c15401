"""Topic config overrides as the controller accepts them (Kafka's ControllerConfigurationValidator over
Kafka 4's ``LogConfig`` definitions): every topic config name Kafka defines, each value checked with Kafka's
type, range or valid list, a bad one -> INVALID_CONFIG with Kafka's message. The names ``storage.log.LogConfig``
knows are acted on (passed to the replicas); the rest are stored and described only. Pure; called by
controller_logic, controller_requests, config_sources and the broker's auto topic creation.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from protocol.errors import InvalidConfigError, KafkaError
from storage.log import LogConfig
from storage.log_config import SEGMENT_BYTES_MIN, config_keys

__all__ = [
    "validate_topic_configs",
    "topic_config_keys",
    "acted_on_keys",
    "acted_on",
    "replica_configs",
    "effective_topic_configs",
    "topic_config_type",
    "config_str",
    "truthy",
    "KAFKA_TOPIC_CONFIGS",
    "INTERNAL_TOPIC_CONFIGS",
]

LONG_MAX, INT_MAX = (1 << 63) - 1, (1 << 31) - 1
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = "BOOLEAN", "STRING", "INT", "LONG", "DOUBLE", "LIST"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")  # BrokerCompressionType
TIERED_STORAGE_OFF = (
    "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."
)


class ConfigDef(NamedTuple):
    """One of Kafka's ``LogConfig`` definitions: ConfigDef type, default (as DescribeConfigs shows it) and
    validator: ``("min", lo)`` (Range.atLeast), ``("range", lo, hi)`` (Range.between), ``("in", values)``
    (ValidString), ``("list_in", values)`` (ValidList), ``("gzip",)`` (GZIP's level validator),
    ``("throttled",)`` (ThrottledReplicaListValidator) or None."""

    type: str
    default: str
    validator: tuple | None = None


# Kafka 4's LogConfig.CONFIG, in its order (message.format.version and message.timestamp.difference.max.ms
# are gone in 4.0; message.downconversion.enable is kept there as a deprecated no-op)
KAFKA_TOPIC_CONFIGS: dict[str, ConfigDef] = {
    # KIP-1030: at least 1 MiB (Kafka 4.1's LogConfig, KAFKA-19080); tiny segments: internal.segment.bytes
    "segment.bytes": ConfigDef(INT, "1073741824", ("min", SEGMENT_BYTES_MIN)),
    "segment.ms": ConfigDef(LONG, "604800000", ("min", 1)),
    "segment.jitter.ms": ConfigDef(LONG, "0", ("min", 0)),
    "segment.index.bytes": ConfigDef(INT, "10485760", ("min", 4)),
    "flush.messages": ConfigDef(LONG, str(LONG_MAX), ("min", 1)),
    "flush.ms": ConfigDef(LONG, str(LONG_MAX), ("min", 0)),
    "retention.bytes": ConfigDef(LONG, "-1"),
    "retention.ms": ConfigDef(LONG, "604800000", ("min", -1)),
    "max.message.bytes": ConfigDef(INT, "1048588", ("min", 0)),
    "index.interval.bytes": ConfigDef(INT, "4096", ("min", 0)),
    "delete.retention.ms": ConfigDef(LONG, "86400000", ("min", 0)),
    "min.compaction.lag.ms": ConfigDef(LONG, "0", ("min", 0)),
    "max.compaction.lag.ms": ConfigDef(LONG, str(LONG_MAX), ("min", 1)),
    "file.delete.delay.ms": ConfigDef(LONG, "60000", ("min", 0)),
    "min.cleanable.dirty.ratio": ConfigDef(DOUBLE, "0.5", ("range", 0, 1)),
    "cleanup.policy": ConfigDef(LIST, "delete", ("list_in", ("compact", "delete"))),
    "unclean.leader.election.enable": ConfigDef(BOOLEAN, "false"),
    "min.insync.replicas": ConfigDef(INT, "1", ("min", 1)),
    "compression.type": ConfigDef(STRING, "producer", ("in", COMPRESSION_TYPES)),
    "compression.gzip.level": ConfigDef(INT, "-1", ("gzip",)),
    "compression.lz4.level": ConfigDef(INT, "9", ("range", 1, 17)),
    "compression.zstd.level": ConfigDef(INT, "3", ("range", -131072, 22)),
    "preallocate": ConfigDef(BOOLEAN, "false"),
    "message.timestamp.type": ConfigDef(STRING, "CreateTime", ("in", ("CreateTime", "LogAppendTime"))),
    "message.timestamp.before.max.ms": ConfigDef(LONG, str(LONG_MAX), ("min", 0)),
    "message.timestamp.after.max.ms": ConfigDef(LONG, "3600000", ("min", 0)),
    "leader.replication.throttled.replicas": ConfigDef(LIST, "", ("throttled",)),
    "follower.replication.throttled.replicas": ConfigDef(LIST, "", ("throttled",)),
    "message.downconversion.enable": ConfigDef(BOOLEAN, "true"),
    "remote.storage.enable": ConfigDef(BOOLEAN, "false"),
    "local.retention.ms": ConfigDef(LONG, "-2", ("min", -2)),
    "local.retention.bytes": ConfigDef(LONG, "-2", ("min", -2)),
    "remote.log.copy.disable": ConfigDef(BOOLEAN, "false"),
    "remote.log.delete.on.disable": ConfigDef(BOOLEAN, "false"),
}

# Kafka's internal topic configs (LogConfig.defineInternal): accepted by name (LogConfig.validateNames takes
# every defined name) and described only when a topic sets one. internal.segment.bytes overrides segment.bytes
# for tests (LogConfig.segmentSize()); Kafka leaves it unvalidated, rafka keeps the old floor of 14 bytes.
INTERNAL_TOPIC_CONFIGS: dict[str, ConfigDef] = {
    "internal.segment.bytes": ConfigDef(INT, "", ("min", 14)),
}

_INTEGER = re.compile(r"[+-]?[0-9]+")
_THROTTLED_ENTRY = re.compile(r"([0-9]+:[0-9]+)?")


def config_str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def truthy(v) -> bool:
    return str(v).strip().lower() == "true"


def acted_on_keys() -> frozenset:
    """The topic config names storage's ``LogConfig`` acts on (its optional ones included); the replicas get
    only these."""
    return config_keys()


def topic_config_keys() -> frozenset:
    """Every topic config name accepted: Kafka's (its internal ones too) and whatever storage's ``LogConfig``
    knows."""
    return frozenset(KAFKA_TOPIC_CONFIGS) | frozenset(INTERNAL_TOPIC_CONFIGS) | acted_on_keys()


def acted_on(configs: dict | None) -> dict:
    """The overrides the replicas' ``LogConfig`` takes (stored-only names dropped)."""
    keys = acted_on_keys()
    return {k: v for k, v in (configs or {}).items() if k in keys}


# the stored configs the replication throttle reads in the replicas (actors/server/replication_quota.py), besides LogConfig's
THROTTLE_CONFIGS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def replica_configs(configs: dict | None) -> dict:
    """The overrides a topic's replicas get (LeaderAndIsr, topic config updates): LogConfig's and the throttle's."""
    out = acted_on(configs)
    out.update({k: v for k, v in (configs or {}).items() if k in THROTTLE_CONFIGS})
    return out


def topic_config_type(name: str) -> str | None:
    """Kafka's ConfigDef type of a topic config (``INT``, ``LIST``...), None when Kafka defines no such name."""
    d = KAFKA_TOPIC_CONFIGS.get(name) or INTERNAL_TOPIC_CONFIGS.get(name)
    return d.type if d is not None else None


def _invalid(name: str, value, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value} for configuration {name}: {why}")  # Kafka's ConfigException


def _parse(name: str, d: ConfigDef, value: str):
    """A value parsed as Kafka's ``ConfigDef.parseType`` does (strings trimmed), then validated."""
    s = value.strip()
    if d.type == BOOLEAN:
        if s.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return s.lower() == "true"
    if d.type in (INT, LONG):
        top = INT_MAX if d.type == INT else LONG_MAX
        if not _INTEGER.fullmatch(s) or not -top - 1 <= int(s) <= top:
            raise _invalid(name, value, f"Not a number of type {d.type}")
        parsed: object = int(s)
    elif d.type == DOUBLE:
        try:
            parsed = float(s)
        except ValueError:
            raise _invalid(name, value, "Not a number of type DOUBLE") from None
    elif d.type == LIST:
        parsed = [] if not s else [i.strip() for i in s.split(",")]
    else:
        parsed = s
    v = d.validator
    if v is None:
        return parsed
    kind = v[0]
    if kind in ("min", "range"):
        assert isinstance(parsed, (int, float))
        if parsed < v[1]:
            raise _invalid(name, value, f"Value must be at least {v[1]}")
        if kind == "range" and parsed > v[2]:
            raise _invalid(name, value, f"Value must be no more than {v[2]}")
    elif kind == "in" and parsed not in v[1]:
        raise _invalid(name, value, "String must be one of: " + ", ".join(v[1]))
    elif kind == "list_in":
        assert isinstance(parsed, list)
        for item in parsed:
            if item not in v[1]:
                raise _invalid(name, item, "String must be one of: " + ", ".join(v[1]))
    elif kind == "gzip":
        assert isinstance(parsed, int)
        if parsed > 9 or (parsed < 1 and parsed != -1):
            raise _invalid(name, value, "Value must be between 1 and 9 or equal to -1")
    elif kind == "throttled":
        assert isinstance(parsed, list)
        if not (all(_THROTTLED_ENTRY.fullmatch(i) for i in parsed) or "".join(parsed) == "*"):
            raise _invalid(
                name,
                value,
                f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
            )
    return parsed


def _check_combined(configs: dict[str, str]) -> None:
    """Kafka's checks across configs (LogConfig.validateValues, validateTopicLogConfigValues) on a topic's
    whole override set."""
    lo = int(configs.get("min.compaction.lag.ms", KAFKA_TOPIC_CONFIGS["min.compaction.lag.ms"].default))
    hi = int(configs.get("max.compaction.lag.ms", KAFKA_TOPIC_CONFIGS["max.compaction.lag.ms"].default))
    if lo > hi:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({lo}) > max.compaction.lag.ms ({hi})"
        )
    if truthy(configs.get("remote.storage.enable", "false")):
        raise InvalidConfigError(TIERED_STORAGE_OFF)  # rafka has no remote log storage system


def validate_topic_configs(configs: object) -> dict[str, str]:
    """Normalize topic config overrides to strings; INVALID_CONFIG on an unknown name ("Unknown topic config
    name: ...") or a bad value (Kafka's "Invalid value ... for configuration ...: ..."), then storage's
    ``LogConfig.from_props`` checks the names it acts on."""
    if configs is None:
        return {}
    if not isinstance(configs, dict):
        raise InvalidConfigError(f"configs must be a mapping, got {type(configs).__name__}")
    keys = topic_config_keys()
    out = {}
    for k, v in configs.items():
        if not isinstance(k, str) or k not in keys:
            raise InvalidConfigError(f"Unknown topic config name: {k}")
        if v is None:
            raise InvalidConfigError(f"Null value not supported for topic configs: {k}")
        out[k] = config_str(v)
        d = KAFKA_TOPIC_CONFIGS.get(k) or INTERNAL_TOPIC_CONFIGS.get(k)
        if d is not None:
            _parse(k, d, out[k])
    _check_combined(out)
    try:
        LogConfig.from_props(acted_on(out))
    except KafkaError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidConfigError(f"Invalid topic config: {e}") from None
    return out


def effective_topic_configs(overrides: dict | None) -> dict[str, str]:
    """Every topic config's effective value: storage's ``LogConfig`` over the acted-on overrides, Kafka's
    default or the override for the stored-only ones."""
    out = {k: d.default for k, d in KAFKA_TOPIC_CONFIGS.items()}
    out.update(LogConfig.from_props(acted_on(overrides)).to_props())
    for k, v in (overrides or {}).items():
        if k not in out or k not in acted_on_keys():
            out[k] = config_str(v)
    return out
