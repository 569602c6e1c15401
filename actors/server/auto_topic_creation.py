"""Topic auto-creation (Kafka's AutoTopicCreationManager), the broker's pure half: whether a topic a client
asked for may be created (``auto.create.topics.enable``, never an internal topic, a valid name) and the
CreateTopics entry the broker sends the controller. Called by the broker shell; no Ray, no I/O.
docs/internals.md ("Broker") has the configs.
"""

from __future__ import annotations

from actors.metadata.topic_configs import truthy
from protocol.errors import InvalidConfigError, UnknownTopicOrPartitionError
from protocol.names import INTERNAL_TOPICS
from storage.topic import validate_topic_name

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
