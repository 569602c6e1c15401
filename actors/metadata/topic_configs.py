"""Topic config overrides as the controller accepts them (Kafka's ControllerConfigurationValidator): a
request's overrides normalized to the strings the metadata records carry, a bad one -> INVALID_CONFIG;
``storage.log.LogConfig`` is the authority on names and values. Pure; called by controller_logic and the
broker's auto topic creation.
"""

from __future__ import annotations

from protocol.errors import InvalidConfigError, KafkaError
from storage.log import LogConfig

__all__ = ["validate_topic_configs", "topic_config_keys", "config_str", "truthy"]


def config_str(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def truthy(v) -> bool:
    return str(v).strip().lower() == "true"


def topic_config_keys() -> frozenset:
    """The topic config names storage understands (``LogConfig.to_props`` keys)."""
    return frozenset(LogConfig().to_props())


def validate_topic_configs(configs: object) -> dict[str, str]:
    """Normalize topic config overrides to strings; INVALID_CONFIG on an unknown key or a bad value
    (``storage.log.LogConfig.from_props`` decides)."""
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
            raise InvalidConfigError(f"Invalid value None for configuration {k}")
        out[k] = config_str(v)
    try:
        LogConfig.from_props(dict(out))
    except KafkaError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise InvalidConfigError(f"Invalid topic config: {e}") from None
    return out
