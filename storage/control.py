"""Control batches: the COMMIT/ABORT markers of transactions (Kafka's EndTransactionMarker).

A control batch is a transactional RecordBatch v2 (attributes bit 5 set) holding one record:

    key   := version:int16 (0) type:int16 (0 = ABORT, 1 = COMMIT)
    value := version:int16 (0) coordinator_epoch:int32

Pure functions; any thread may call them.
"""

from __future__ import annotations

import struct

from protocol.errors import InvalidRecordError
from storage.records import CONTROL_ABORT, CONTROL_COMMIT, Record, RecordBatchBuilder

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CONTROL_KEY",
    "CONTROL_VALUE",
    "build_control_batch",
    "parse_control_record",
]

CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def build_control_batch(
    control_type: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker (Kafka's EndTransactionMarker)."""
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise ValueError(f"control type must be CONTROL_ABORT (0) or CONTROL_COMMIT (1), not {control_type}")
    b = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    b.append(timestamp_ms, CONTROL_KEY.pack(0, control_type), CONTROL_VALUE.pack(0, coordinator_epoch))
    return bytes(b.build())  # (a small batch built record by record: bytes already, no copy)


def parse_control_record(record: Record) -> tuple[int, int]:
    """``(control_type, coordinator_epoch)`` of a record from a control batch."""
    key, value = record.key, record.value
    if key is None or len(key) < CONTROL_KEY.size:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has a key of "
            f"{0 if key is None else len(key)} bytes, at least 4 needed"
        )
    version, control_type = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record at offset {record.offset} has key version {version}")
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise InvalidRecordError(f"control record at offset {record.offset} has unknown type {control_type}")
    if value is None or len(value) < CONTROL_VALUE.size:
        raise InvalidRecordError(
            f"control record at offset {record.offset} has a value of "
            f"{0 if value is None else len(value)} bytes, at least 6 needed"
        )
    version, coordinator_epoch = CONTROL_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"control record at offset {record.offset} has value version {version}")
    return control_type, coordinator_epoch
