"""What ``storage.log.Log`` answers with: ``LogAppendInfo`` (an append), ``FetchDataInfo`` (a read) and
``LogOffsetSnapshot`` (Kafka's name: the log's offsets read together). Plain value types, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type is LogAppendTime
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool


class FetchDataInfo(NamedTuple):
    records: bytes  # whole batches
    first_offset: int  # base offset of the first batch returned (the fetch offset when empty)
    next_offset: int  # where the next fetch continues (the fetch offset when empty)


@dataclass(frozen=True, slots=True)
class LogOffsetSnapshot:
    """The log's offsets read together (Kafka's ``LogOffsetSnapshot``): what one fetch or ListOffsets
    answer reports, consistent with itself: ``log_start_offset <= high_watermark <= log_end_offset`` and
    ``last_stable_offset <= high_watermark`` (the LSO is the HW unless a transaction is open below it)."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
