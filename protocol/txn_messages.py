"""Typed messages of the transaction calls (KIP-98: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions, ListTransactions): frozen, slotted dataclasses.
A request travels as the object, a response as the dict of its typed class. The clients call the coordinators,
the transaction coordinator calls the leaders (WriteTxnMarkers); who calls whom: docs/internals.md (protocol/).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    METHOD: ClassVar[str] = "init_producer_id"

    transactional_id: str | None
    transaction_timeout_ms: int = 60000
    producer_id: int = -1  # KIP-360: the caller's current id/epoch when it recovers, else -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest:
    METHOD: ClassVar[str] = "add_partitions_to_txn"

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartitionKey, ...]
    verify_only: bool = False  # KIP-890: only check that they are in the ongoing transaction
    # rafka's producer: answer a verification token per partition (protocol/txn_tokens.py) instead of pushing
    # the verification to each partition's leader
    want_tokens: bool = False


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest:
    METHOD: ClassVar[str] = "add_offsets_to_txn"

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    METHOD: ClassVar[str] = "end_txn"

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersRequest:
    """A COMMIT (``committed``) or ABORT marker for one producer on the receiving partition."""

    METHOD: ClassVar[str] = "write_txn_markers"

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transactional_id: str = ""  # for logs and errors only
    txn_start_ms: int = -1  # the transaction's start at its coordinator (-1: not known, as for an admin abort)


@dataclass(frozen=True, slots=True)
class TxnVerifiedRequest:
    """The coordinator's push to a partition leader (KIP-890 verification state, actors/replication/txn_verification.py):
    the ongoing transaction of this producer, started at ``txn_start_ms``, includes the receiving partition."""

    METHOD: ClassVar[str] = "txn_verified"

    producer_id: int
    producer_epoch: int
    txn_start_ms: int
    leader_epoch: int  # the receiving replica takes the push only at this leader epoch
    transactional_id: str = ""  # for logs only


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    METHOD: ClassVar[str] = "txn_offset_commit"

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[tuple[str, int, int, str, int], ...]  # (topic, partition, offset, metadata, leader epoch or -1)
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeTransactionsRequest:
    METHOD: ClassVar[str] = "describe_transactions"

    transactional_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListTransactionsRequest:
    METHOD: ClassVar[str] = "list_transactions"

    state_filters: tuple[str, ...] = ()
    producer_id_filters: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnResponse:
    """The answer of EndTxn, AddOffsetsToTxn and WriteTxnMarkers."""

    error_code: int = 0
    error_message: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error_code: int = 0
    error_message: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse:
    """``results``: ``[(topic, partition, error_code)]`` (sent as ``{topic, partition, error_code}`` dicts);
    ``error_code`` is the first failure (0 if none)."""

    error_code: int = 0
    error_message: str | None = None
    results: tuple[tuple[str, int, int], ...] = field(default_factory=tuple)
    # want_tokens: the transaction's start and ``[(topic, partition, token)]`` (in the dict only when given)
    txn_start_ms: int = -1
    tokens: tuple[tuple[str, int, bytes], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "error_code": self.error_code,
            "error_message": self.error_message,
            "results": [{"topic": t, "partition": p, "error_code": c} for t, p, c in self.results],
        }
        if self.tokens:
            out["txn_start_ms"] = self.txn_start_ms
            out["tokens"] = [[t, p, tok] for t, p, tok in self.tokens]
        return out
