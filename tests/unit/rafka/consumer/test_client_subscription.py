"""SubscriptionState: the assignment keeps the state of partitions it keeps, tells its listeners, and
all_consumed() commits what the application has consumed (not records handed out and still pending)."""

from __future__ import annotations

import re

import pytest

from protocol.errors import KafkaError
from rafka.consumer.subscription import SubscriptionState
from rafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def rec(tp: TopicPartition, offset: int) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, None, b"v", (), -1)


def test_assign_keeps_state_of_kept_partitions_and_notifies():
    s, seen = SubscriptionState(), []
    s.on_assignment_change(seen.append)
    s.assign([A, B])
    s.seek(A, 7)
    kept = s.state(A)
    s.assign([("t", 0), C])  # plain tuples are partitions too
    assert s.assigned_partitions() == {A, C}
    assert s.state(A) is kept and s.state(A).position == 7
    assert s.state(C).position is None
    assert seen == [{A, B}, {A, C}]
    with pytest.raises(KafkaError, match="not assigned"):
        s.state(B)


def test_all_consumed_counts_pending_records_and_skips_resets():
    s = SubscriptionState()
    s.assign([A, B, C])
    s.seek(A, 10)  # poll handed out 5..9 of A, the iterator consumed 5 and 6: 7 is next
    s.seek(B, 3)
    s.state(C).reset = -2  # seek_to_beginning pending: no valid position to commit
    pending = [rec(A, 7), rec(A, 8), rec(A, 9)]
    s.pending = lambda: pending
    assert s.all_consumed() == {A: OffsetAndMetadata(7), B: OffsetAndMetadata(3)}
    pending.clear()
    assert s.all_consumed() == {A: OffsetAndMetadata(10), B: OffsetAndMetadata(3)}


def test_subscribe_by_topics_or_pattern_and_unsubscribe():
    s = SubscriptionState()
    assert not s.subscribed
    s.subscribe(["b", "a", "a"], None, listener="L")
    assert s.topics == ["a", "b"] and s.pattern is None and s.listener == "L" and s.subscribed
    s.subscribe(None, "t.*", None)
    assert s.topics == [] and s.pattern == re.compile("t.*")
    s.assign([A])
    s.unsubscribe()
    assert not s.subscribed and s.assigned_partitions() == set()
