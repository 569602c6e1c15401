"""What a kind of coordinator plugs into the runtime (Kafka's CoordinatorShard, CoordinatorShardBuilder and
the loader's Deserializer): the shard interface and the :class:`CoordinatorKind` that names its topic,
builds its shards, decodes its records and maps a failed append to the error a request answers.
The group and transaction coordinators (actors/group/, actors/txn/) implement them; pure, imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol


class CoordinatorShard(Protocol):
    """The state of one internal-topic partition: ``replay`` is its only mutator."""

    def replay(self, record: Any) -> Any:
        """Apply one record (appended here, or read back while loading)."""

    def load(self, records: Iterable[Any], now_ms: int) -> int:
        """Rebuild from the partition's records read from its start; the number of records replayed."""

    def next_deadline(self) -> int | None:
        """The earliest time (ms) the shard's timer must fire, or None (the runtime's timer sleeps until it)."""


@dataclass(frozen=True)
class CoordinatorKind:
    """One kind of coordinator: its internal topic and how its records and errors read."""

    topic: str
    new_shard: Callable[[int], CoordinatorShard]  # leader epoch -> an empty shard
    decode: Callable[[bytes | None, bytes | None, int], Any]  # key, value, producer id (-1) -> record or None
    end_txn: Callable[[int, bool], Any]  # a transaction marker: producer id, committed -> record or None
    append_error: Callable[[int], int]  # the replica's error code of a failed append -> the request's
    summary: Callable[[Any], str]  # the loaded shard in the load's log line ("3 groups")
