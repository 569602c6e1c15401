"""Topic auto-creation (Kafka's AutoTopicCreationManager), the broker's pure half: whether a topic a client
asked for may be created, and the CreateTopics entry the broker sends the controller (no Ray, no I/O).

Broker configs, Kafka's names and defaults:

    auto.create.topics.enable   true   a Metadata request (allow_auto_topic_creation) or a rafka Producer
                                       naming an unknown topic creates it
    num.partitions              1      its partition count
    default.replication.factor  1      its replication factor; the controller refuses more than the live
                                       brokers with INVALID_REPLICATION_FACTOR, as Kafka does

Internal topics (``__consumer_offsets``, ``__transaction_state``) are never auto-created here (their
coordinators create them on first use) and an invalid name answers INVALID_TOPIC_EXCEPTION (17).
"""

from __future__ import annotations

from actors.metadata.topic_configs import truthy
from protocol.errors import InvalidConfigError, UnknownTopicOrPartitionError
from storage.topic import validate_topic_name

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
AUTO_CREATE_KEY = "auto.create.topics.enable"


def enabled(config: dict) -> bool:
    """``auto.create.topics.enable`` of a broker config (Kafka's default: true)."""
    return truthy(config.get(AUTO_CREATE_KEY, True))


def creatable_topic(name: object, config: dict) -> dict:
    """The controller's create_topics entry for auto-creating ``name``; raises UNKNOWN_TOPIC_OR_PARTITION
    when auto-creation is off or the name is internal, INVALID_TOPIC_EXCEPTION for an invalid name,
    INVALID_CONFIG for a non-integer ``num.partitions`` / ``default.replication.factor``."""
    if not enabled(config):
        raise UnknownTopicOrPartitionError(f"Topic {name!r} does not exist and {AUTO_CREATE_KEY} is false.")
    if name in INTERNAL_TOPICS:
        raise UnknownTopicOrPartitionError(f"Internal topic {name!r} is not auto-created by Metadata requests.")
    validate_topic_name(name)
    try:
        partitions = int(config.get("num.partitions", 1))
        rf = int(config.get("default.replication.factor", 1))
    except (TypeError, ValueError) as e:
        raise InvalidConfigError(f"Invalid num.partitions / default.replication.factor: {e}") from None
    return {"name": name, "num_partitions": partitions, "replication_factor": rf, "configs": {}}
