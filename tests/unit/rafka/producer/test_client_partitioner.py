"""Kafka's default partitioner: murmur2 vectors from Kafka's own tests, keyed placement, KIP-480 sticky."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from rafka.producer.partitioner import DefaultPartitioner, StickyPartitionCache, murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_java_utils_vectors():
    for data, expected in JAVA_MURMUR2.items():
        assert murmur2(data) == expected, data


def test_partition_for_key_matches_java_default_partitioner():
    # partitions of 1000 computed by the Java client's DefaultPartitioner (kafka-python's compatibility test)
    expected = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}
    for key, part in expected.items():
        assert partition_for_key(key, 1000) == part, key


def test_to_positive_is_a_mask_not_abs():
    assert to_positive(-2147483648) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_murmur2_agrees_with_an_independent_implementation(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


def test_keyed_records_always_land_on_the_same_partition():
    p = DefaultPartitioner()
    parts = list(range(6))
    for i in range(200):
        key = f"user-{i}".encode()
        first = p("t", key, parts, parts)
        assert all(p("t", key, parts, parts[:2]) == first for _ in range(3))  # availability is ignored for keys
        assert first == to_positive(murmur2(key)) % 6


def test_null_keys_stick_until_a_new_batch_then_move_elsewhere():
    p = DefaultPartitioner(rng=random.Random(7))
    parts = list(range(6))
    first = p("t", None, parts, parts)
    assert all(p("t", None, parts, parts) == first for _ in range(50))
    seen = {first}
    cur = first
    for _ in range(60):
        nxt = p.on_new_batch("t", parts, parts, cur)
        assert nxt != cur
        assert p("t", None, parts, parts) == nxt
        seen.add(nxt)
        cur = nxt
    assert seen == set(parts)  # random over every partition


def test_sticky_prefers_available_partitions_and_is_per_topic():
    cache = StickyPartitionCache(random.Random(1))
    for _ in range(30):
        p = cache.next_partition("a", [0, 1, 2, 3], [2, 3], None)
        assert p in (2, 3)
    assert cache.next_partition("one", [0], [0], 0) == 0  # a single partition has nowhere else to go
    a = cache.partition("a", [0, 1, 2, 3], [2, 3])
    cache.next_partition("b", [0, 1, 2, 3], [0, 1, 2, 3], None)
    assert cache.partition("a", [0, 1, 2, 3], [2, 3]) == a


def test_stale_switch_request_does_not_move_twice():
    cache = StickyPartitionCache(random.Random(3))
    cur = cache.partition("t", [0, 1, 2], [0, 1, 2])
    moved = cache.next_partition("t", [0, 1, 2], [0, 1, 2], cur)
    # a second thread that also saw the old partition fill up must not switch again
    assert cache.next_partition("t", [0, 1, 2], [0, 1, 2], cur) == moved
