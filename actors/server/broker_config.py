"""One config dict serves every broker of a cluster (``LocalCluster(broker_config=...)``, ``rafka cluster start
--config``); its ``broker.<id>.<name>`` entries are broker ``<id>``'s own lines, as each Kafka broker has its
own server.properties (and per-broker dynamic configs). Pure; applied by the broker shell at start.
"""

from __future__ import annotations


def broker_prefix(broker_id: int) -> str:
    return f"broker.{broker_id}."


def broker_overrides(config: dict, broker_id: int) -> dict:
    """``config`` with broker ``broker_id``'s own ``broker.<id>.<name>`` entries applied as ``<name>`` (the
    entries themselves stay, so a reader can tell a broker's own value from the shared one)."""
    prefix = broker_prefix(broker_id)
    own = {k[len(prefix) :]: v for k, v in config.items() if k.startswith(prefix)}
    return {**config, **own} if own else dict(config)


# Kafka 4's floor of the broker's default segment size (KIP-1030: ``log.segment.bytes`` atLeast 1 MiB); the topic
# config has the same floor (storage/log_config.py), and tests use ``internal.segment.bytes`` as Kafka's do.
MIN_LOG_SEGMENT_BYTES = 1024 * 1024


def validate(config: dict) -> None:
    """The broker configs a broker refuses to start with (Kafka's KafkaConfig validation), as InvalidConfigError."""
    from protocol.errors import InvalidConfigError

    raw = config.get("log.segment.bytes")
    if raw is not None:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(
                f"Invalid value {raw} for configuration log.segment.bytes: Not a number of type INT"
            ) from None
        if value < MIN_LOG_SEGMENT_BYTES:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration log.segment.bytes: Value must be at least {MIN_LOG_SEGMENT_BYTES}"
            )
    from actors.server.replica_selector import REPLICA_SELECTOR_CLASS, selector_for

    selector_for(config.get(REPLICA_SELECTOR_CLASS))  # KIP-392: a selector Kafka could not load stops the broker
