"""ListOffsets by timestamp over a log's segments: Kafka's ``UnifiedLog.fetchOffsetByTimestamp``.

Each segment's time index (its running maximum timestamp every ``index.interval.bytes``, and its final
maximum once inactive) narrows the search to one segment and a starting batch; the batches from there are
read until the first record whose timestamp is at or above the target.

Concurrency: called by the owning Log only (single-threaded).
"""

from __future__ import annotations

from storage.records import TIMESTAMP_LOG_APPEND_TIME, RecordBatch
from storage.segment import LogSegment

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP = -2, -1, -3, -4


def offset_by_timestamp(
    segments: list[LogSegment], log_start: int, log_end: int, epoch_cache, timestamp: int
) -> tuple[int, int, int] | None:
    """``(offset, timestamp, leader_epoch)`` of the first record at or after ``log_start`` with a timestamp
    >= ``timestamp``; -2/-4 earliest (log start), -1 latest (log end), -3 the record with the largest
    timestamp. None when no record qualifies (or for other negative timestamps)."""
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return log_start, -1, epoch_cache.epoch_for_offset(log_start)
    if timestamp == LATEST_TIMESTAMP:
        return log_end, -1, epoch_cache.latest_epoch
    if timestamp == MAX_TIMESTAMP:
        if log_end == log_start:
            return None
        best = max(segments, key=lambda s: s.max_timestamp_so_far)
        if best.max_timestamp_so_far < 0:
            return None
        return _find_in_segment(best, log_start, best.max_timestamp_so_far, best.offset_of_max_timestamp, exact=True)
    if timestamp < 0:
        return None
    for seg in segments:
        if seg.max_timestamp_so_far >= timestamp and seg.next_offset > log_start:
            found = _find_in_segment(seg, log_start, timestamp, seg.time_index.lookup(timestamp - 1)[1])
            if found is not None:
                return found
    return None


def _find_in_segment(seg: LogSegment, log_start: int, ts: int, from_offset: int, exact: bool = False):
    start = seg.offset_index.lookup(max(from_offset, log_start))[1]
    for pos, h in seg.iter_headers(start):
        if h.max_timestamp < ts or h.last_offset < log_start:
            continue
        epoch = h.partition_leader_epoch if h.partition_leader_epoch >= 0 else -1
        if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            return max(h.base_offset, log_start), h.max_timestamp, epoch
        for r in RecordBatch(seg.read_bytes(pos, h.size_in_bytes), 0, header=h):
            if r.offset >= log_start and (r.timestamp == ts if exact else r.timestamp >= ts):
                return r.offset, r.timestamp, epoch
    return None
