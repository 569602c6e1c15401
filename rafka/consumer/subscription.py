"""Kafka's ``SubscriptionState``: what a consumer subscribed to, which partitions it is assigned, and each
assigned partition's ``TopicPartitionState`` (position, pause, pending reset, the fetch in flight).

The consumer owns one; its ``Fetcher`` reads and advances the partition states, and its
``ConsumerCoordinator`` (rafka/consumer/consumer_coordinator.py) sets the assignment the group gave it, seeks newly assigned
partitions to their committed offsets and commits ``all_consumed()``: the coordinator never reaches into
the consumer. Records handed to the application but not yet consumed (the consumer's iterator buffer) are
reported by the ``pending`` hook, so a commit never skips them.

Not thread-safe: the consumer's thread drives it, as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from protocol.errors import KafkaError
from rafka.structs import OffsetAndMetadata, TopicPartition


class TopicPartitionState:
    """One assigned partition (Kafka's ``SubscriptionState.TopicPartitionState`` plus this client's fetch
    bookkeeping). ``epoch`` is bumped by every seek/reset/reassign: replies to fetches sent under an older
    epoch are discarded."""

    __slots__ = (
        "tp",
        "position",
        "fetch_position",
        "epoch",
        "paused",
        "reset",
        "high_watermark",
        "log_start_offset",
        "last_stable_offset",
        "buffer",
        "in_flight",
        "retry_at",
        "preferred_read_replica",
        "preferred_read_replica_expires",
    )

    def __init__(self, tp: TopicPartition):
        self.tp = tp
        self.position: int | None = None  # next offset the application gets
        self.fetch_position: int | None = None  # next offset to fetch (ahead of position when buffered)
        self.epoch = 0
        self.paused = False
        self.reset: int | None = None  # EARLIEST/LATEST pending (seek_to_beginning/end)
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.buffer: list = []  # CompletedFetch replies not yet handed out
        self.in_flight: tuple[Any, int, int, bool] | None = None  # (ref, epoch, broker, to a follower)
        self.retry_at = 0.0
        # KIP-392: the replica the leader told this consumer to read from, until (monotonic s) metadata.max.age.ms
        self.preferred_read_replica: int | None = None
        self.preferred_read_replica_expires = 0.0

    def update_preferred_read_replica(self, broker_id: int, expires: float) -> None:
        """The leader answered ``preferred_read_replica``: fetch from ``broker_id`` until ``expires``."""
        self.preferred_read_replica, self.preferred_read_replica_expires = int(broker_id), expires

    def read_replica(self, now: float) -> int | None:
        """The preferred read replica still in force at ``now`` (an expired one is cleared: back to the leader,
        which may name it again), else None."""
        if self.preferred_read_replica is not None and now >= self.preferred_read_replica_expires:
            self.preferred_read_replica = None
        return self.preferred_read_replica

    def clear_preferred_read_replica(self) -> int | None:
        """Back to the leader (an error from the preferred replica, or metadata to refresh); the one cleared."""
        cleared, self.preferred_read_replica = self.preferred_read_replica, None
        return cleared

    def seek(self, offset: int) -> None:
        self.position = self.fetch_position = offset
        self.reset = None
        self.epoch += 1
        self.buffer.clear()
        self.in_flight = None


class SubscriptionState:
    """See the module docstring."""

    def __init__(self) -> None:
        self.assignment: dict[TopicPartition, TopicPartitionState] = {}
        self.topics: list[str] = []  # subscribe(topics)
        self.pattern: re.Pattern | None = None  # subscribe(pattern=...)
        self.listener: Any = None  # ConsumerRebalanceListener
        self.user_assigned = False  # assign() was used (manual assignment)
        self.pending: Callable[[], Iterable] = lambda: ()  # records handed out, not yet consumed
        self._on_assignment: list[Callable[[set[TopicPartition]], None]] = []

    # -- subscription ------------------------------------------------------------------------------
    @property
    def subscribed(self) -> bool:
        return bool(self.topics) or self.pattern is not None

    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern | None, listener) -> None:
        if pattern is not None:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            self.topics = []
        else:
            self.pattern = None
            self.topics = sorted(set(topics or ()))
        self.listener = listener

    def unsubscribe(self) -> None:
        self.topics, self.pattern, self.listener = [], None, None
        self.assign([])

    # -- assignment --------------------------------------------------------------------------------
    def on_assignment_change(self, callback: Callable[[set[TopicPartition]], None]) -> None:
        """``callback(new assignment)`` after each change (the consumer drops its iterator buffer)."""
        self._on_assignment.append(callback)

    def assign(self, partitions: Iterable) -> None:
        """The assignment becomes exactly ``partitions``; kept partitions keep their state."""
        new = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            new[tp] = self.assignment.get(tp) or TopicPartitionState(tp)
        self.assignment = new
        for cb in self._on_assignment:
            cb(set(new))

    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self.assignment)

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        st = self.assignment.get(tp)
        if st is None:
            raise KafkaError(f"partition {tp} is not assigned to this consumer")
        return st

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.state(tp).seek(offset)

    # -- positions ---------------------------------------------------------------------------------
    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Each assigned partition's position as the application sees it (what a commit stores): the first
        record handed out but not yet consumed, else the position; partitions without a valid position
        (a reset pending) are left out."""
        first: dict[tuple[str, int], int] = {}
        for r in self.pending():
            first.setdefault((r.topic, r.partition), r.offset)
        out = {}
        for tp, st in self.assignment.items():
            pos = first.get(tp, st.position)
            if pos is not None and st.reset is None:
                out[tp] = OffsetAndMetadata(pos)
        return out
