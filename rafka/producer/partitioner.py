"""Kafka's default partitioner, byte-for-byte compatible with the Java client.

Keyed records: ``toPositive(murmur2(key)) % num_partitions`` (``org.apache.kafka.common.utils.Utils``),
so a key lands on the same partition number as with any Java/librdkafka (``murmur2_random``) producer.

Records without a key: KIP-480 sticky partitioning. The producer sticks to one partition per topic until
the batch it is filling for that partition is full or has been sent; then it switches to a random
*different* available partition (a partition whose leader is known). This keeps batches large under
low-rate, keyless traffic instead of spraying one-record batches over every partition.

A user partitioner is any callable ``partitioner(topic, key_bytes, all_partitions, available_partitions)
-> int`` (serialized key, sorted partition ids, partitions with a live leader); it is consulted for
every record sent without an explicit ``partition=``.

Thread safety: ``StickyPartitionCache`` is used from ``Producer.send`` on any thread; it guards its map
with a lock.
"""

from __future__ import annotations

import random
import struct
import threading
from typing import Callable, Sequence

__all__ = ["murmur2", "py_murmur2", "to_positive", "partition_for_key", "StickyPartitionCache", "DefaultPartitioner"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def py_murmur2(data: bytes) -> int:
    """``Utils.murmur2`` from the Java client: a signed 32-bit MurmurHash2 with Kafka's seed (the compiled
    ``storage._crecords.murmur2`` is its twin, used when built)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for (k,) in struct.iter_unpack("<I", data[: n4 << 2]):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    base = length & ~3
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


try:
    from storage._crecords import murmur2
except ImportError:  # no compiled extension
    murmur2 = py_murmur2


def to_positive(n: int) -> int:
    """``Utils.toPositive``: clears the sign bit (not ``abs``: ``abs(MIN_VALUE)`` stays negative in Java)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's Java producer picks for a serialized key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions  # to_positive, inline (send's per-record path)


class StickyPartitionCache:
    """KIP-480: the current sticky partition per topic, changed only by ``next_partition``."""

    def __init__(self, rng: random.Random | None = None):
        self._lock = threading.Lock()
        self._current: dict[str, int] = {}
        # the topic's sticky partition now or None, as ``current``: the dict's own ``get`` for the producer's
        # per-record fast path (no Python frame)
        self.lookup: Callable[[str], int | None] = self._current.get
        self._rng = rng or random.Random()

    def current(self, topic: str) -> int | None:
        """The topic's sticky partition now, or None: a lock-free read (a dict read is atomic; writes hold the
        lock), for the producer's fast path, which falls back to ``partition`` on None."""
        return self._current.get(topic)

    def partition(self, topic: str, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        with self._lock:
            part = self._current.get(topic)
            if part is not None and part in all_partitions:
                return part
        return self.next_partition(topic, all_partitions, available, part)

    def next_partition(
        self, topic: str, all_partitions: Sequence[int], available: Sequence[int], prev: int | None
    ) -> int:
        """Move the topic off ``prev`` (its batch is full or sent) to a random other partition."""
        with self._lock:
            cur = self._current.get(topic)
            if cur is not None and cur != prev and cur in all_partitions:
                return cur  # another thread already switched
            pool = list(available) if available else list(all_partitions)
            if not pool:
                raise ValueError(f"topic {topic!r} has no partitions")
            if len(pool) > 1 and prev in pool:
                pool.remove(prev)
            new = pool[self._rng.randrange(len(pool))]
            self._current[topic] = new
            return new


Partitioner = Callable[[str, "bytes | None", Sequence[int], Sequence[int]], int]


class DefaultPartitioner:
    """murmur2 for keyed records, KIP-480 sticky for null keys (``on_new_batch`` switches)."""

    def __init__(self, rng: random.Random | None = None):
        self.sticky = StickyPartitionCache(rng)

    def __call__(self, topic: str, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        if key is not None:
            return all_partitions[partition_for_key(key, len(all_partitions))]
        return self.sticky.partition(topic, all_partitions, available)

    def on_new_batch(self, topic: str, all_partitions: Sequence[int], available: Sequence[int], prev: int) -> int:
        return self.sticky.next_partition(topic, all_partitions, available, prev)
