"""Errors raised by the clients: every Kafka error class from ``protocol.errors`` plus the client-side ones.

``KafkaTimeoutError`` is Kafka's client ``TimeoutException`` (buffer full past ``max_block_ms``, metadata
not available, ``delivery_timeout_ms`` expired); it is a ``TimeoutError`` so plain Python code can catch it.
"""

from __future__ import annotations

from protocol.errors import *  # noqa: F401,F403  (the Kafka error classes, re-exported)
from protocol.errors import KafkaError, OffsetOutOfRangeError, error_response, for_code, raise_for_code  # noqa: F401


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A client-side deadline passed (Kafka's org.apache.kafka.common.errors.TimeoutException)."""

    code, name, retriable = 7, "REQUEST_TIMED_OUT", True
    default_message = "The operation timed out."


class RecordTooLargeError(KafkaError):
    """A record is larger than max_request_size or buffer_memory (Kafka's RecordTooLargeException)."""

    code, name, retriable = 10, "MESSAGE_TOO_LARGE", False
    default_message = "The record is larger than the producer accepts."


class IllegalStateError(KafkaError):
    """The client was used in a state that does not allow the call (closed, unassigned partition, ...)."""

    code, name, retriable = -1, "ILLEGAL_STATE", False
    default_message = "Illegal client state."


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """auto_offset_reset='none' and there is no valid position (Kafka's NoOffsetForPartitionException)."""

    code, name, retriable = 1, "OFFSET_OUT_OF_RANGE", False
    default_message = "No valid offset and no reset policy for the partition."


class ClusterNotFoundError(KafkaError, ConnectionError):
    """connect() found no Ray cluster, or no rafka cluster with that name on it."""

    code, name, retriable = -1, "CLUSTER_NOT_FOUND", False
    default_message = "No rafka cluster found."


class CommitFailedError(KafkaError):
    """The commit cannot complete: the group rebalanced and the partitions may belong to another member
    (Kafka's CommitFailedException). Poll again (rejoining the group), then commit what you own."""

    code, name, retriable = -1, "COMMIT_FAILED", False
    default_message = "Commit cannot be completed since the group has already rebalanced."
