"""Client configuration: Kafka's producer/consumer/admin config names in snake_case, Kafka's defaults.

``linger_ms`` is ``linger.ms``; either spelling is accepted (dots become underscores). An unknown key or
a bad value raises ``ValueError`` naming the key (with a suggestion for near misses), the way Kafka's
``ConfigDef`` raises ``ConfigException`` at construction, never later on a background thread.

Producer rules copied from ``KafkaProducer``/``ProducerConfig``:
- ``enable_idempotence`` defaults to True. Idempotence needs ``acks=all``, ``retries > 0`` and
  ``max_in_flight_requests_per_connection <= 5``: when the user set ``enable_idempotence=True``
  explicitly, a conflict is an error; when it was left at its default, a conflicting setting silently
  turns idempotence off (Kafka 3.2+ behaviour).
- ``delivery_timeout_ms >= linger_ms + request_timeout_ms``: an error when the user set
  ``delivery_timeout_ms``, otherwise it is raised to that sum.
- ``acks`` accepts ``"all"``, ``-1``, ``0``, ``1`` (``"-1"``/``"0"``/``"1"`` too); stored as ``-1/0/1``.

Defaults are Kafka 4.x's (``linger.ms`` is 5 since KIP-1030).
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

__all__ = ["ProducerConfig", "ConsumerConfig", "AdminConfig", "COMPRESSION_TYPES"]

INT32_MAX = 2147483647
COMPRESSION_TYPES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _int(lo: int = 0, hi: int | None = None) -> Callable[[str, Any], int]:
    def check(key: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, str) and v.strip().lstrip("-").isdigit():
                v = int(v)
            else:
                raise ValueError(f"invalid value {v!r} for config '{key}': expected an integer")
        if v < lo or (hi is not None and v > hi):
            rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
            raise ValueError(f"invalid value {v} for config '{key}': must be {rng}")
        return v

    return check


def _opt_int(lo: int = 0) -> Callable[[str, Any], int | None]:
    inner = _int(lo)

    def check(key: str, v: Any) -> int | None:
        return None if v is None else inner(key, v)

    return check


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"invalid value {v!r} for config '{key}': expected true or false")


def _choice(*options: str) -> Callable[[str, Any], str]:
    def check(key: str, v: Any) -> str:
        if not isinstance(v, str) or v.lower() not in options:
            raise ValueError(f"invalid value {v!r} for config '{key}': expected one of {', '.join(options)}")
        return v.lower()

    return check


def _str_or_none(key: str, v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise ValueError(f"invalid value {v!r} for config '{key}': expected a string")


def _callable_or_none(key: str, v: Any) -> Callable | None:
    if v is None or callable(v):
        return v
    raise ValueError(f"invalid value {v!r} for config '{key}': expected a callable or None")


def _strategies(key: str, v: Any) -> list[str]:
    """``partition_assignment_strategy``: assignor names (a list or a comma-separated string), in preference order."""
    from rafka.consumer.assignors import ASSIGNORS

    names = [n.strip() for n in v.split(",")] if isinstance(v, str) else list(v or ())
    if not names or any(n not in ASSIGNORS for n in names):
        raise ValueError(f"invalid value {v!r} for config '{key}': expected names from {sorted(ASSIGNORS)}")
    return names


def _acks(key: str, v: Any) -> int:
    norm = {"all": -1, "-1": -1, "0": 0, "1": 1, -1: -1, 0: 0, 1: 1}
    if (
        isinstance(v, bool)
        or (isinstance(v, str) and v.lower() not in norm)
        or (not isinstance(v, str) and v not in norm)
    ):
        raise ValueError(f"invalid value {v!r} for config '{key}': expected all, -1, 0 or 1")
    return norm[v.lower() if isinstance(v, str) else v]


class _Config:
    """Validated, attribute-access config. Subclasses define ``SPEC = {name: (default, validator)}``."""

    KIND = "client"
    SPEC: dict[str, tuple[Any, Callable[[str, Any], Any]]] = {}

    def __init__(self, **kwargs: Any):
        self.explicit: set[str] = set()
        values: dict[str, Any] = {}
        for raw_key, value in kwargs.items():
            key = raw_key.replace(".", "_")
            if key not in self.SPEC:
                near = difflib.get_close_matches(key, list(self.SPEC), n=1)
                hint = f" (did you mean '{near[0]}'?)" if near else ""
                raise ValueError(f"unknown {self.KIND} config '{raw_key}'{hint}")
            values[key] = self.SPEC[key][1](key, value)
            self.explicit.add(key)
        for key, (default, check) in self.SPEC.items():
            if key not in values:
                values[key] = check(key, default) if default is not None else None
        self.__dict__.update(values)
        self._validate()

    def _validate(self) -> None:
        """Cross-key rules; subclasses override."""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.SPEC}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in sorted(self.explicit))
        return f"{type(self).__name__}({shown})"


# rafka's own key (no Kafka equivalent): how produce/fetch reach the leader replica: "tcp", its client
# listener's connection (rafka/channel.py, the default), or "ray", one Ray actor call per request
DATA_CHANNEL = ("tcp", _choice("tcp", "ray"))


class ProducerConfig(_Config):
    KIND = "producer"
    SPEC = {
        "client_id": (None, _str_or_none),
        "data_channel": DATA_CHANNEL,
        "acks": ("all", _acks),
        "linger_ms": (5, _int(0)),
        "batch_size": (16384, _int(0)),
        "buffer_memory": (33554432, _int(0)),
        "max_block_ms": (60000, _int(0)),
        "max_request_size": (1048576, _int(1)),
        "compression_type": ("none", _choice(*COMPRESSION_TYPES)),
        "retries": (INT32_MAX, _int(0, INT32_MAX)),
        "retry_backoff_ms": (100, _int(0)),
        "retry_backoff_max_ms": (1000, _int(0)),
        "delivery_timeout_ms": (120000, _int(0)),
        "request_timeout_ms": (30000, _int(0)),
        "max_in_flight_requests_per_connection": (5, _int(1)),
        "enable_idempotence": (True, _bool),
        "metadata_max_age_ms": (300000, _int(0)),
        "key_serializer": (None, _callable_or_none),
        "value_serializer": (None, _callable_or_none),
        "partitioner": (None, _callable_or_none),
        "transactional_id": (None, _str_or_none),
        "transaction_timeout_ms": (60000, _int(1)),
    }

    def _validate(self) -> None:
        if self.transactional_id is not None and not self.transactional_id:
            raise ValueError("invalid config 'transactional_id': must be a non-empty string or None")
        if self.transactional_id is not None and not self.enable_idempotence:
            if "enable_idempotence" in self.explicit:
                raise ValueError("invalid config 'transactional_id': transactions require enable_idempotence=True")
        conflicts = []
        if self.acks != -1:
            conflicts.append(f"acks must be 'all' (got {self.acks})")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append(
                f"max_in_flight_requests_per_connection must be <= 5 (got {self.max_in_flight_requests_per_connection})"
            )
        if self.retries == 0:
            conflicts.append("retries must be > 0")
        if self.enable_idempotence and conflicts:
            if self.transactional_id is not None:
                raise ValueError("invalid config 'transactional_id': transactions require " + "; ".join(conflicts))
            if "enable_idempotence" in self.explicit:
                raise ValueError("invalid config 'enable_idempotence': idempotence requires " + "; ".join(conflicts))
            self.enable_idempotence = False
        floor = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < floor:
            if "delivery_timeout_ms" in self.explicit:
                raise ValueError(
                    f"invalid value {self.delivery_timeout_ms} for config 'delivery_timeout_ms': "
                    f"must be >= linger_ms + request_timeout_ms ({floor})"
                )
            self.delivery_timeout_ms = floor
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            self.retry_backoff_max_ms = self.retry_backoff_ms

    @property
    def compression_id(self) -> int:
        return COMPRESSION_TYPES[self.compression_type]


class ConsumerConfig(_Config):
    KIND = "consumer"
    SPEC = {
        "client_id": (None, _str_or_none),
        "data_channel": DATA_CHANNEL,
        "fetch_min_bytes": (1, _int(0)),
        "fetch_max_bytes": (52428800, _int(0)),
        "fetch_max_wait_ms": (500, _int(0)),
        "max_partition_fetch_bytes": (1048576, _int(1)),
        "max_poll_records": (500, _int(1)),
        "auto_offset_reset": ("latest", _choice("earliest", "latest", "none")),
        "isolation_level": ("read_uncommitted", _choice("read_uncommitted", "read_committed")),
        "key_deserializer": (None, _callable_or_none),
        "value_deserializer": (None, _callable_or_none),
        "request_timeout_ms": (30000, _int(0)),
        "default_api_timeout_ms": (60000, _int(0)),
        "retry_backoff_ms": (100, _int(0)),
        "metadata_max_age_ms": (300000, _int(0)),
        "check_crcs": (True, _bool),
        # KIP-392: the consumer's rack; set, it fetches from the replica the leader's replica.selector.class names
        "client_rack": ("", _str_or_none),
        "consumer_timeout_ms": (None, _opt_int(0)),
        # consumer groups (subscribe / commits: rafka/consumer/consumer_coordinator.py)
        "group_id": (None, _str_or_none),
        "group_instance_id": (None, _str_or_none),
        "enable_auto_commit": (True, _bool),
        "auto_commit_interval_ms": (5000, _int(0)),
        "session_timeout_ms": (45000, _int(1)),
        "heartbeat_interval_ms": (3000, _int(1)),
        "max_poll_interval_ms": (300000, _int(1)),
        "partition_assignment_strategy": (("range", "cooperative-sticky"), _strategies),
    }

    def _validate(self) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"invalid value {self.heartbeat_interval_ms} for config 'heartbeat_interval_ms': "
                f"must be lower than session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.group_id is not None and not self.group_id:
            raise ValueError("invalid value '' for config 'group_id': must be non-empty or None")

    @property
    def isolation_id(self) -> int:
        return 0 if self.isolation_level == "read_uncommitted" else 1


class AdminConfig(_Config):
    KIND = "admin"
    SPEC = {
        "client_id": (None, _str_or_none),
        "request_timeout_ms": (30000, _int(0)),
        "default_api_timeout_ms": (60000, _int(0)),
        "retry_backoff_ms": (100, _int(0)),
    }
