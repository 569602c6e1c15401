"""Plain value types shared by the clients (kafka-python / Java client shapes)."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordMetadata(NamedTuple):
    """What a successful send resolves to: where the record landed."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: object
    value: object
    headers: tuple  # ((str, bytes | None), ...)
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int = -1


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    leader: int  # -1 when there is no leader
    replicas: tuple
    isr: tuple
    leader_epoch: int = -1


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to consume, with optional metadata (Kafka's OffsetAndMetadata)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
