"""Typed messages of the actor calls that cross a process, in the style of Kafka's ``FetchParams`` and
generated ``*RequestData``/``*ResponseData``: frozen, slotted dataclasses. On the Ray call they travel as
the dicts they always were (``to_dict``/``from_dict``), so callers that index a response keep working.

Fetch (``ReplicaActor.fetch``): a consumer (``replica_id`` -1) reads up to the high watermark
(``isolation_level`` 0) or the last stable offset (1); a follower (``replica_id`` = its broker id) reads up
to the log end and gets the leader's ``log_end_offset`` and ``leader_epoch`` too. A response carries its
``next_offset`` (where the next fetch continues: the offset after its last batch, the fetch offset when it
holds no batch), so no reader walks the batch headers to find it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(frozen=True, slots=True)
class FetchRequest:
    fetch_offset: int
    max_bytes: int = 1048576
    max_wait_ms: int = 0
    min_bytes: int = 1
    replica_id: int = CONSUMER_REPLICA_ID
    current_leader_epoch: int = -1
    isolation_level: int = READ_UNCOMMITTED

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int = 0
    error_message: str | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1
    records: bytes = b""
    next_offset: int = -1
    log_end_offset: int | None = None  # follower fetches only
    leader_epoch: int | None = None  # follower fetches only

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.log_end_offset is None:
            del d["log_end_offset"]
        if self.leader_epoch is None:
            del d["leader_epoch"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> FetchResponse:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})
