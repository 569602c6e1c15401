"""``LogConfig``: Kafka's topic-level log configs, their dotted names, defaults and validation
(``InvalidConfigError``); frozen, re-exported by storage/log.py. Used by the Log, the controller's topic configs
and the replica. The keys and their defaults: docs/internals.md (storage/).

``segment.bytes`` is at least 1 MiB (KIP-1030; Kafka 4.1's LogConfig ``atLeast(1024 * 1024)``, KAFKA-19080);
tests that want tiny segments set ``internal.segment.bytes`` instead, which wins over it when set (Kafka's
``LogConfig.segmentSize()``; the Log reads ``segment_size``).
"""

from __future__ import annotations

import dataclasses

from protocol.errors import InvalidConfigError

__all__ = [
    "LogConfig",
    "LONG_MAX",
    "INT_MAX",
    "COMPRESSION_TYPES",
    "SEGMENT_BYTES_MIN",
    "config_kinds",
    "config_keys",
]

LONG_MAX, INT_MAX = (1 << 63) - 1, (1 << 31) - 1

SEGMENT_BYTES_MIN = 1024 * 1024  # KIP-1030 (Kafka 4.1's LogConfig: segment.bytes atLeast(1024 * 1024))
INTERNAL_SEGMENT_BYTES_MIN = 14  # LegacyRecord.RECORD_OVERHEAD_V0, the floor segment.bytes had before KIP-1030
# KIP-390's levels (Kafka's CompressionType.GZIP/LZ4/ZSTD: defaultLevel, minLevel, maxLevel)
GZIP_LEVELS, LZ4_LEVELS, ZSTD_LEVELS = (-1, 1, 9), (9, 1, 17), (3, -131072, 22)

# dotted key -> (attribute, kind, default, minimum); kind: int32/int64/bool/ratio/policy/tstype/compression,
# or level (an int32 in a codec's range, ``_LEVEL_RANGES``); a default of None: unset unless given
_CONFIG_KEYS = {
    "segment.bytes": ("segment_bytes", "int32", 1073741824, SEGMENT_BYTES_MIN),
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
    "compression.gzip.level": ("compression_gzip_level", "level", GZIP_LEVELS[0], None),
    "compression.lz4.level": ("compression_lz4_level", "level", LZ4_LEVELS[0], None),
    "compression.zstd.level": ("compression_zstd_level", "level", ZSTD_LEVELS[0], None),
    # Kafka's LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG (defineInternal): for tests only, overrides segment.bytes
    "internal.segment.bytes": ("internal_segment_bytes", "int32", None, INTERNAL_SEGMENT_BYTES_MIN),
}
_LEVEL_RANGES = {
    "compression.gzip.level": GZIP_LEVELS,
    "compression.lz4.level": LZ4_LEVELS,
    "compression.zstd.level": ZSTD_LEVELS,
}
# compression.type's values (Kafka's BrokerCompressionType): 'producer' keeps the producer's codec
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _parse_value(key: str, kind: str, minimum, value):
    try:
        if kind == "level":
            default, lo, hi = _LEVEL_RANGES[key]
            v = _parse_value(key, "int32", None, value)
            if not lo <= v <= hi and not (key == "compression.gzip.level" and v == default):
                extra = f" or equal to {default}" if key == "compression.gzip.level" else ""
                raise ValueError(f"must be between {lo} and {hi}{extra}")
            return v
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
    compression_gzip_level: int = GZIP_LEVELS[0]
    compression_lz4_level: int = LZ4_LEVELS[0]
    compression_zstd_level: int = ZSTD_LEVELS[0]
    internal_segment_bytes: int | None = None

    def __post_init__(self):
        for key, (attr, kind, default, minimum) in _CONFIG_KEYS.items():
            value = getattr(self, attr)
            if value is None and default is None:
                continue  # an optional config left unset
            object.__setattr__(self, attr, _parse_value(key, kind, minimum, value))

    @property
    def segment_size(self) -> int:
        """The segment size the log rolls at: ``internal.segment.bytes`` when set, else ``segment.bytes``
        (Kafka's LogConfig.segmentSize())."""
        return self.internal_segment_bytes if self.internal_segment_bytes is not None else self.segment_bytes

    def compression_level(self, codec: int) -> int | None:
        """The topic's KIP-390 level for codec ``codec`` (1 gzip, 3 lz4, 4 zstd; None for the others), as
        Kafka's LogConfig.getCompression builds the topic's Compression."""
        return {1: self.compression_gzip_level, 3: self.compression_lz4_level, 4: self.compression_zstd_level}.get(
            codec
        )

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
        """Every config as dotted key -> string value (Kafka's DescribeConfigs shape); an optional one
        (``internal.segment.bytes``) only when set, as Kafka lists an internal config only from the topic's own
        overrides (ConfigHelperUtils.createResponseConfig: originals plus nonInternalValues)."""
        out = {}
        for key, (attr, kind, _, _) in _CONFIG_KEYS.items():
            v = getattr(self, attr)
            if v is None:
                continue
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
    string); the codecs' levels are int32."""
    return {key: "int32" if kind == "level" else kind for key, (_, kind, _, _) in _CONFIG_KEYS.items()}


def config_keys() -> frozenset:
    """Every topic config name ``LogConfig`` acts on, the optional ones included."""
    return frozenset(_CONFIG_KEYS)
