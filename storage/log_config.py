"""``LogConfig``: Kafka's topic-level log configs, their dotted names, defaults and validation
(``InvalidConfigError``); frozen, re-exported by storage/log.py. Used by the Log, the controller's topic configs
and the replica. The keys and their defaults: docs/internals.md (storage/).
"""

from __future__ import annotations

import dataclasses

from protocol.errors import InvalidConfigError

__all__ = ["LogConfig", "LONG_MAX", "INT_MAX", "COMPRESSION_TYPES", "config_kinds"]

LONG_MAX, INT_MAX = (1 << 63) - 1, (1 << 31) - 1

# dotted key -> (attribute, kind, default, minimum); kind: int32/int64/bool/ratio/policy/tstype/compression
_CONFIG_KEYS = {
    "segment.bytes": ("segment_bytes", "int32", 1073741824, 14),
    "segment.ms": ("segment_ms", "int64", 604800000, 1),
    "segment.jitter.ms": ("segment_jitter_ms", "int64", 0, 0),
    "segment.index.bytes": ("segment_index_bytes", "int32", 10485760, 4),
    "index.interval.bytes": ("index_interval_bytes", "int32", 4096, 0),
    "flush.messages": ("flush_messages", "int64", LONG_MAX, 1),
    "flush.ms": ("flush_ms", "int64", LONG_MAX, 0),
    "retention.ms": ("retention_ms", "int64", 604800000, -1),
    "retention.bytes": ("retention_bytes", "int64", -1, None),
    "cleanup.policy": ("cleanup_policy", "policy", "delete", None),
    "delete.retention.ms": ("delete_retention_ms", "int64", 86400000, 0),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "int64", 0, 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "int64", LONG_MAX, 1),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "ratio", 0.5, 0),
    "max.message.bytes": ("max_message_bytes", "int32", 1048588, 0),
    "message.timestamp.type": ("message_timestamp_type", "tstype", "CreateTime", None),
    "min.insync.replicas": ("min_insync_replicas", "int32", 1, 1),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "bool", False, None),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", "int64", LONG_MAX, 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", "int64", 3600000, 0),
    "compression.type": ("compression_type", "compression", "producer", None),
}
# compression.type's values (Kafka's BrokerCompressionType): 'producer' keeps the producer's codec
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _parse_value(key: str, kind: str, minimum, value):
    try:
        if kind in ("int32", "int64"):
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError("not an integer")
            v = int(value.strip()) if isinstance(value, str) else int(value)
            top = INT_MAX if kind == "int32" else LONG_MAX
            if v > top or v < -top - 1 or (minimum is not None and v < minimum):
                raise ValueError(f"must be in [{minimum if minimum is not None else -top - 1}, {top}]")
            return v
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise ValueError("must be true or false")
        if kind == "ratio":
            r = float(value)
            if not 0.0 <= r <= 1.0:
                raise ValueError("must be in [0, 1]")
            return r
        if kind == "policy":
            items = value.split(",") if isinstance(value, str) else list(value)
            items = [str(i).strip() for i in items]
            if not items or any(i not in ("delete", "compact") for i in items):
                raise ValueError("must be a list of delete and/or compact")
            return ",".join(dict.fromkeys(items))
        if kind == "tstype":
            if value not in ("CreateTime", "LogAppendTime"):
                raise ValueError("must be CreateTime or LogAppendTime")
            return value
        if kind == "compression":
            name = value.strip() if isinstance(value, str) else value  # (Kafka's ValidString: case matters)
            if name not in COMPRESSION_TYPES:
                raise ValueError(f"must be one of {', '.join(COMPRESSION_TYPES)}")
            return name
    except (ValueError, TypeError, AttributeError) as e:
        raise InvalidConfigError(f"invalid value {value!r} for configuration {key}: {e}") from None
    raise AssertionError(kind)


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Kafka's topic-level log configs (Kafka's defaults); keys of ``from_props``/``to_props`` are the dotted
    names. Any invalid value raises ``InvalidConfigError``, also when constructed directly."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    compression_type: str = "producer"

    def __post_init__(self):
        for key, (attr, kind, _, minimum) in _CONFIG_KEYS.items():
            object.__setattr__(self, attr, _parse_value(key, kind, minimum, getattr(self, attr)))

    @classmethod
    def from_props(cls, props: dict | None = None, defaults: "LogConfig | None" = None) -> "LogConfig":
        """A config from dotted keys (values as str or Python values) over ``defaults`` (Kafka's)."""
        values = {}
        for key, value in (props or {}).items():
            if key not in _CONFIG_KEYS:
                raise InvalidConfigError(f"unknown topic configuration {key!r}")
            values[_CONFIG_KEYS[key][0]] = value
        return dataclasses.replace(defaults, **values) if defaults is not None else cls(**values)

    def to_props(self) -> dict[str, str]:
        """Every config as dotted key -> string value (Kafka's DescribeConfigs shape)."""
        out = {}
        for key, (attr, kind, _, _) in _CONFIG_KEYS.items():
            v = getattr(self, attr)
            out[key] = ("true" if v else "false") if kind == "bool" else str(v)
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")


def config_kinds() -> dict[str, str]:
    """Each topic config's value kind: int32, int64, bool, ratio, policy (a list), tstype or compression (a
    string)."""
    return {key: kind for key, (_, kind, _, _) in _CONFIG_KEYS.items()}
