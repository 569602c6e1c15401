"""Typed messages of the replica actor's calls (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
DeleteRecords), as Kafka's generated ``*RequestData``/``*ResponseData``: frozen, slotted dataclasses. A request
travels as the dataclass (``check_request``: anything else is INVALID_REQUEST), a response as its dict
(``to_dict``/``from_dict``). Built by the clients and brokers, served by actors/replica.py; imports only
protocol.errors. The fields' meaning: docs/internals.md (protocol/).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar, cast

from protocol.errors import InvalidRequestError, error_response

CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1

R = TypeVar("R")


_FIELDS: dict[type, tuple[tuple[str, Any], ...]] = {}
_INT_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, default) of a message class's fields, in order (computed once per class)."""
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple((f.name, f.default) for f in fields(cls))
    return got


def _int_fields(cls: type) -> tuple[str, ...]:
    got = _INT_FIELDS.get(cls)
    if got is None:
        got = _INT_FIELDS[cls] = tuple(f.name for f in fields(cls) if f.type == "int")
    return got


def check_request(req: object, cls: type[R], method: str) -> R:
    """``req`` if it is a ``cls`` whose integer fields hold integers, else INVALID_REQUEST saying what came."""
    if type(req) is not cls:
        raise InvalidRequestError(
            f"{method} takes one {cls.__name__} (protocol.messages), got {type(req).__name__} {req!r:.60}"
        )
    for name in _int_fields(cls):
        value = getattr(req, name)
        if type(value) is not int:
            raise InvalidRequestError(f"{cls.__name__}.{name} must be an int, got {type(value).__name__} {value!r:.60}")
    return cast(R, req)


class _Response:
    """``to_dict``/``from_dict``/``error`` of the response dataclasses. Fields named in ``_OMIT_DEFAULT``
    are left out of the dict while they hold their default (optional fields of some answers only)."""

    __slots__ = ()
    _OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        omit = self._OMIT_DEFAULT
        d = {}
        for name, default in _fields(type(self)):
            value = getattr(self, name)
            if not (name in omit and value == default):
                d[name] = value
        return d

    @classmethod
    def from_dict(cls: type[R], d: dict) -> R:
        return cls(**{name: d[name] for name, _ in _fields(cls) if name in d})

    @classmethod
    def error(cls, exc: BaseException, **fields_: Any) -> dict:
        """The answer (as a dict) to a request that failed with ``exc``: its Kafka code and message, every
        other field at its default unless given."""
        code, message = error_response(exc)
        return cls(error_code=code, error_message=message, **fields_).to_dict()  # type: ignore[call-arg]


# ---- produce -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProduceRequest:
    records: bytes
    acks: int = -1
    timeout_ms: int = 30000
    current_leader_epoch: int = -1
    transactional_id: str | None = None  # a transactional producer's id: the leader verifies (KIP-890)
    # rafka's producer: its transaction's start and the coordinator's token for this partition, which the
    # leader checks instead of asking the coordinator (protocol/txn_tokens.py); b"": none
    txn_start_ms: int = -1
    txn_token: bytes = b""
    # Kafka's AppendOrigin: "client" (producers), "coordinator" (a group/transaction coordinator's own
    # records: no sequence check); set only by rafka's coordinators, never by a client or gateway
    origin: str = "client"
    # (channel, n): the n-th produce of one ordered channel to this replica (a client listener connection:
    # actors/channels/client_channel.py numbers them), appended after the channel's earlier ones (actors/replication/call_order.py)
    order: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class ProduceResponse(_Response):
    _OMIT_DEFAULT: ClassVar[tuple[str, ...]] = ("duplicate", "record_errors")

    error_code: int = 0
    error_message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    duplicate: bool = False  # in the dict only when true
    # KIP-467: ((batch_index, message), ...) of the records that failed validation (in the dict only when any)
    record_errors: tuple[tuple[int, str | None], ...] = ()


# ---- fetch ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FetchRequest:
    fetch_offset: int
    max_bytes: int = 1048576
    max_wait_ms: int = 0
    min_bytes: int = 1
    replica_id: int = CONSUMER_REPLICA_ID
    current_leader_epoch: int = -1
    isolation_level: int = READ_UNCOMMITTED
    # Kafka's minOneMessage: the first batch goes whole even over max_bytes (else: only what fits, maybe nothing;
    # the wire Fetch reads later partitions so once the response's fetch.max.bytes is spent)
    min_one_message: bool = True
    # KIP-392: the client's metadata (Fetch v11+ carries it): None, none (only the leader serves the fetch); else
    # its ``client.rack`` ("" when it set none): any replica serves it up to its HW, and the leader's
    # ``replica.selector.class`` may answer a preferred read replica instead of records
    client_rack: str | None = None

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_leader(self) -> bool:
        """Kafka's FetchParams.fetchOnlyLeader: a follower's fetch, or a consumer's without client metadata."""
        return self.replica_id >= 0 or self.client_rack is None


@dataclass(frozen=True, slots=True)
class FetchResponse(_Response):
    _OMIT_DEFAULT: ClassVar[tuple[str, ...]] = (
        "log_end_offset",
        "leader_epoch",
        "aborted_transactions",
        "preferred_read_replica",
    )

    error_code: int = 0
    error_message: str | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1
    records: bytes = b""
    next_offset: int = -1
    log_end_offset: int | None = None  # follower fetches (and OFFSET_OUT_OF_RANGE answers) only
    leader_epoch: int | None = None  # follower fetches only
    # read_committed only: (producer_id, first_offset) of the aborted transactions overlapping the records
    aborted_transactions: tuple[tuple[int, int], ...] | None = None
    # KIP-392: the broker the consumer should fetch from instead (no records then); -1: this one
    preferred_read_replica: int = -1


# ---- list offsets --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    timestamp: int
    current_leader_epoch: int = -1
    isolation_level: int = READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


# ---- offset for leader epoch ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochRequest:
    leader_epoch: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    leader_epoch: int = -1
    end_offset: int = -1


# ---- delete records ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    """DeleteRecords (``ReplicaActor.delete_records``, leader only): move the log start offset up to
    ``offset`` (-1: the high watermark; above it, or below -1, answers OFFSET_OUT_OF_RANGE). Followers
    follow the leader's log start on their next fetch."""

    offset: int
    current_leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse(_Response):
    error_code: int = 0
    error_message: str | None = None
    low_watermark: int = -1
