"""Kafka's topic-name rule (``org.apache.kafka.common.internals.Topic.validate``), in one place for every
side: the client checks a name before it waits for metadata (``rafka.Producer.send``), the controller
before it creates a topic (actors/metadata/placement.py re-exports it).

    name := [a-zA-Z0-9._-]{1,249}, and not "." or ".."

Pure; any thread may call it.
"""

from __future__ import annotations

import re

from protocol.errors import InvalidTopicError

__all__ = ["MAX_TOPIC_NAME_LENGTH", "validate_topic_name"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name) -> None:
    """Raise ``InvalidTopicError`` (INVALID_TOPIC_EXCEPTION, 17) with Kafka's wording unless ``name`` is a
    legal topic name."""
    if not isinstance(name, str):
        raise InvalidTopicError(
            f"Topic name must be a string, not {type(name).__name__}"
            if name is not None
            else "Topic name is illegal, it can't be null"
        )
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            f"'.', '_' and '-'"
        )
