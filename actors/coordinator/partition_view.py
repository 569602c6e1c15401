"""Which topic partitions exist, as a coordinator's requests need to know (Kafka's KafkaApis checks an
OffsetCommit's and a TxnOffsetCommit's partitions against the broker's metadataCache before the coordinator is
asked): the partitions of the topics asked about, read from the cluster's metadata by name and kept for
``max_age_ms``. A topic or partition not in the view is read again at once (it may be new), so only existing
ones are cached; a deleted topic is noticed within ``max_age_ms``. Pure (the reads are the caller's, through
``to_read`` / ``update``); used by actors/group_coordinator.py.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["PartitionView", "DEFAULT_MAX_AGE_MS"]

DEFAULT_MAX_AGE_MS = 5000

TP = tuple[str, int]


class PartitionView:
    """Topic name -> (its partition numbers, when they were read). Not thread-safe: one actor's event loop."""

    def __init__(self, max_age_ms: int = DEFAULT_MAX_AGE_MS):
        self.max_age_ms = max_age_ms
        self._topics: dict[str, tuple[frozenset[int], int]] = {}

    def to_read(self, asked: Iterable[TP], now_ms: int) -> list[str]:
        """The topics of ``asked`` to read before answering: unknown here, older than ``max_age_ms``, or
        without one of the partitions asked."""
        out = set()
        for topic, partition in asked:
            known = self._topics.get(topic)
            if known is None or now_ms - known[1] >= self.max_age_ms or int(partition) not in known[0]:
                out.add(topic)
        return sorted(out)

    def update(self, names: Iterable[str], topics: dict, now_ms: int) -> None:
        """The topics ``names`` as just read: ``topics`` maps each existing one to its metadata (the KV's
        ``{"partitions": {p: ...}}``, keys ints or strings); a name missing from it does not exist."""
        for name in names:
            t = topics.get(name)
            if t is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = (frozenset(int(p) for p in (t.get("partitions") or ())), now_ms)

    def existing(self, asked: Iterable[TP]) -> set[TP]:
        """Those of ``asked`` the view holds."""
        out = set()
        for topic, partition in asked:
            known = self._topics.get(topic)
            if known is not None and int(partition) in known[0]:
                out.add((topic, int(partition)))
        return out
