"""Log compaction (``cleanup.policy=compact`` and ``compact,delete``): Kafka's LogCleaner, one pass per call.

Time-based and size-based retention (the ``delete`` policy) is ``Log.delete_old_segments``; this module
only compacts. ``clean_log(log, now_ms)`` is what ``Log.compact(now_ms)`` calls.

What is cleaned. The cleanable range is the longest run of non-active segments, from the first, that lie
entirely below ``last_stable_offset`` (the Log passes ``min(high watermark, first unstable offset)``: data
above the HW may still be truncated, open transactions are undecided) and, with
``min.compaction.lag.ms`` > 0, whose largest timestamp is at least that old. The active segment is never
cleaned (Kafka). Every pass rewrites the whole cleanable range (no cleaner-offset checkpoint yet).

How (Kafka's two passes):
  1. Offset map: key -> offset of its latest record over the cleanable range. Records of aborted
     transactions do not count; a transaction's records count once its COMMIT is seen (markers above the
     range are looked up in the later segments, headers only). Batch CRCs are verified.
  2. Rewrite each segment in order. A record is kept iff it has a key, its offset is the map's offset for
     that key, and it is not an expired tombstone. Per batch (Kafka's ``filterTo``):
     - offsets are preserved: a partially kept batch is rebuilt with its original base offset, last
       offset delta, producer id/epoch/base sequence, transactional/control flags, partition leader
       epoch, compression and timestamp type; a fully kept batch is copied byte for byte;
     - a batch left with no record is dropped, unless it is the last batch of a producer still in
       ``active_producers`` (then an empty batch keeps its offsets and sequences, so idempotence
       survives compaction), or a marker kept for fencing;
     - records of aborted transactions are dropped; records of transactions with no marker anywhere in
       the log are kept untouched;
     - tombstones (null value) and markers of transactions with no data left get a delete horizon
       (``now + delete.retention.ms``, KIP-534, in the batch's attributes/base timestamp) the first
       time they are cleaned, and are removed by a pass after that horizon;
     - records with a null key are removed (the Log rejects them at append for compacted topics with
       CORRUPT_MESSAGE, as Kafka does; they can only exist if the policy changed).
  Consecutive cleaned segments are grouped into one while their cleaned size fits ``segment.bytes`` and
  their offsets fit a 32-bit relative offset (Kafka groups small cleaned segments the same way); an
  unchanged lone segment is not rewritten.

Swap protocol (crash-safe, Kafka's file suffixes). Each group is written to a new ``LogSegment`` with
suffix ``.cleaned`` (leftovers of a crashed pass removed first), fsynced, then handed to
``Log.replace_segments(new, olds)``: rename ``.cleaned`` -> ``.swap`` (the commit point), delete the old
segments, drop the suffix. On open the Log deletes ``*.cleaned`` files and completes every ``.swap``
(the segments with base offsets in ``[swap base, swap next offset)`` are the ones it replaces; an old
segment of the group past that range contributed no batch, so keeping it is consistent).

Concurrency: not thread-safe. Only the owning Log calls it, from its single owner (the replica actor).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from crc32c import crc32c

from protocol.errors import CorruptMessageError, InvalidRecordError
from storage.codecs import decompress
from storage.control import parse_control_record
from storage.records import (
    ATTRIBUTES_POS,
    BATCH_HEADER,
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CRC_POS,
    DELETE_HORIZON_MASK,
    LAST_OFFSET_DELTA_POS,
    LOG_OVERHEAD,
    MAGIC,
    RECORDS_POS,
    BatchHeader,
    RecordBatch,
    RecordBatchBuilder,
    crc_ok,
)
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment
from storage.varint import _ZZ1, _ZZ2, decode_varint

CLEANED_SUFFIX = ".cleaned"
SEGMENT_EXTENSIONS = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
INT32_MAX = 0x7FFFFFFF
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass
class CleanerStats:
    """What one ``compact_log`` pass did. ``replacements``: ``(new_segment, old_segments)`` per group
    handed to ``replace_segments``, in offset order."""

    segments_cleaned: int = 0
    groups_swapped: int = 0
    batches_read: int = 0
    batches_kept: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0
    null_key_records_removed: int = 0
    markers_removed: int = 0
    bytes_read: int = 0
    bytes_after: int = 0
    first_offset: int = 0
    end_offset: int = 0  # first offset not cleaned (the cleanable range is [first_offset, end_offset))
    distinct_keys: int = 0
    replacements: list = field(default_factory=list)


def _segment_file_names(base_offset: int, suffix: str = "") -> list[str]:
    return [f"{base_offset:020d}{ext}{suffix}" for ext in SEGMENT_EXTENSIONS]


def _scan_keys(h: BatchHeader, data: bytes | bytearray, m: dict) -> None:
    """Pass 1's hot loop: ``m[key] = offset`` for each record of the batch, reading only the Length,
    TimestampDelta (skipped), OffsetDelta and Key fields of the record grammar (storage/records.py);
    values and headers are never decoded. Malformed records raise ``InvalidRecordError``."""
    compression = h.attributes & COMPRESSION_MASK
    if compression:
        data, p = decompress(compression, memoryview(data)[RECORDS_POS:]), 0
    else:
        p = RECORDS_POS
    end = len(data)
    base = h.base_offset
    zz1, zz2 = _ZZ1, _ZZ2
    try:
        for _ in range(h.records_count):
            z = data[p]  # Length
            if z < 128:
                n = zz1[z]
                p += 1
            elif data[p + 1] < 128:
                n = zz2[z][data[p + 1]]
                p += 2
            else:
                n, p = decode_varint(data, p)
            rend = p + n
            if n < 6 or rend > end:
                raise ValueError(f"record length {n} does not fit the batch")
            p += 1  # Attributes
            while data[p] >= 128:  # TimestampDelta
                p += 1
            z = data[p + 1]  # OffsetDelta
            if z < 128:
                off = zz1[z]
                p += 2
            elif data[p + 2] < 128:
                off = zz2[z][data[p + 2]]
                p += 3
            else:
                off, p = decode_varint(data, p + 1)
            z = data[p]  # KeyLength
            if z < 128:
                n = zz1[z]
                p += 1
            elif data[p + 1] < 128:
                n = zz2[z][data[p + 1]]
                p += 2
            else:
                n, p = decode_varint(data, p)
            m[data[p : p + n] if n >= 0 else None] = base + off
            p = rend
    except (IndexError, ValueError) as e:
        raise InvalidRecordError(f"record batch at offset {base} holds a malformed record: {e}") from None


def _control_type(h: BatchHeader, data: bytes) -> int:
    records = RecordBatch(data, 0, header=h).records()
    return parse_control_record(records[0])[0]


def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: no records, same offsets, sequence and producer fields."""
    attributes = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    buf = bytearray(
        BATCH_HEADER.pack(
            h.base_offset,
            BATCH_OVERHEAD - LOG_OVERHEAD,
            h.partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            h.last_offset_delta,
            h.max_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            0,
        )
    )
    _U32.pack_into(buf, CRC_POS, crc32c(memoryview(buf)[ATTRIBUTES_POS:]))
    return bytes(buf)


def _rebuild(h: BatchHeader, records, delete_horizon_ms: int | None) -> bytes:
    """A batch of ``records`` (a subset of ``h``'s) keeping every batch-level field and the offset range."""
    b = RecordBatchBuilder(
        compression_type=h.compression_type,
        timestamp_type=h.timestamp_type,
        base_offset=h.base_offset,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        partition_leader_epoch=h.partition_leader_epoch,
        batch_size=INT32_MAX,
        delete_horizon_ms=delete_horizon_ms,
    )
    for r in records:
        b.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
    out = bytearray(b.build())
    if _I32.unpack_from(out, LAST_OFFSET_DELTA_POS)[0] != h.last_offset_delta:
        # Kafka's overrideLastOffset: the last sequence (base_sequence + delta) must survive
        _I32.pack_into(out, LAST_OFFSET_DELTA_POS, h.last_offset_delta)
        _U32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)


class _SourceOutput:
    __slots__ = ("segment", "parts", "metas", "size", "changed", "last_offset")

    def __init__(self, segment: LogSegment):
        self.segment = segment
        self.parts: list[bytes] = []
        self.metas: list[tuple[int, int, int, int]] = []  # (position, size, last offset, max timestamp)
        self.size = 0
        self.changed = False
        self.last_offset = segment.base_offset

    def add(self, data: bytes, last_offset: int, max_timestamp: int) -> None:
        self.metas.append((self.size, len(data), last_offset, max_timestamp))
        self.parts.append(data)
        self.size += len(data)


class _Compaction:
    def __init__(
        self,
        segments,
        last_stable_offset,
        now_ms,
        delete_retention_ms,
        min_compaction_lag_ms,
        segment_bytes,
        active_producers,
        replace_segments,
        index_interval_bytes,
        max_index_size,
    ):
        self.segments = list(segments)
        self.last_stable_offset = last_stable_offset
        self.now = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.lag_ms = min_compaction_lag_ms
        self.segment_bytes = segment_bytes
        self.producers = active_producers or {}
        self.replace = replace_segments
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.stats = CleanerStats()
        self.map: dict = {}
        self.outcomes: dict[tuple[int, int], bool] = {}  # (pid, txn first offset) -> aborted

    # ---------------------------------------------------------------- range
    def cleanable_segments(self) -> list[LogSegment]:
        out = []
        for seg in self.segments[:-1]:  # the last segment is the active one
            if seg.next_offset > self.last_stable_offset:
                break
            if self.lag_ms > 0 and seg.size and seg.largest_timestamp() > self.now - self.lag_ms:
                break
            out.append(seg)
        return out

    # ---------------------------------------------------------------- pass 1
    def build_offset_map(self, cleanable: list[LogSegment]) -> None:
        m, stats = self.map, self.stats
        open_txn: dict[int, int] = {}
        pending: dict[int, list] = {}
        for seg in cleanable:
            for pos, h, data in seg.iter_batches():
                if not crc_ok(data, 0, h):
                    raise CorruptMessageError(
                        f"segment {seg.log_path}: batch at position {pos} (offset "
                        f"{h.base_offset}) fails its CRC; not compacting"
                    )
                stats.batches_read += 1
                stats.records_read += h.records_count
                stats.bytes_read += len(data)
                if h.is_control:
                    if h.records_count:
                        self._on_marker(h.producer_id, _control_type(h, data), open_txn, pending)
                    continue
                if h.is_transactional and h.producer_id >= 0:
                    open_txn.setdefault(h.producer_id, h.base_offset)
                    keys: dict = {}
                    _scan_keys(h, data, keys)
                    pending.setdefault(h.producer_id, []).extend(keys.items())
                else:
                    _scan_keys(h, data, m)
        if open_txn:  # find the markers of transactions still open at the end of the range
            for seg in self.segments[len(cleanable) :]:
                for pos, h in seg.iter_headers():
                    if h.is_control and h.records_count and h.producer_id in open_txn:
                        data = seg.read_bytes(pos, LOG_OVERHEAD + h.batch_length)
                        self._on_marker(h.producer_id, _control_type(h, data), open_txn, pending)
                        if not open_txn:
                            break
                if not open_txn:
                    break
        m.pop(None, None)  # null keys never win a slot
        stats.distinct_keys = len(m)

    def _on_marker(self, pid: int, control_type: int, open_txn: dict, pending: dict) -> None:
        first = open_txn.pop(pid, None)
        records = pending.pop(pid, ())
        if first is None:
            return
        aborted = control_type == CONTROL_ABORT
        self.outcomes[(pid, first)] = aborted
        if not aborted:
            m = self.map
            for key, offset in records:
                if offset > m.get(key, -1):
                    m[key] = offset

    # ---------------------------------------------------------------- pass 2
    def _is_last_of_producer(self, h: BatchHeader) -> bool:
        e = self.producers.get(h.producer_id)
        if e is None:
            return False
        if e.batches:
            return h.base_offset + h.last_offset_delta == e.batches[-1].last_offset
        return h.is_control and h.producer_epoch == e.producer_epoch

    def filter_batch(self, h: BatchHeader, data: bytes, txn: dict, kept_offsets: list) -> bytes | None:
        """The bytes to write for one batch (``data`` itself when unchanged), or None to drop it."""
        stats, now = self.stats, self.now
        pid = h.producer_id
        is_control = h.is_control
        discard = False  # the batch's records all go
        empty_txn_marker = False
        records = None
        if is_control:
            if h.records_count:
                records = RecordBatch(data, 0, header=h).records()
                can_discard = txn.pop(pid, None) is None  # no data of its transaction left
            else:
                can_discard = True
            empty_txn_marker = can_discard
            discard = can_discard and h.has_delete_horizon and h.delete_horizon_ms <= now
        elif h.is_transactional and pid >= 0:
            aborted = self.outcomes.get((pid, txn.setdefault(pid, h.base_offset)))
            if aborted is None:  # no marker anywhere: undecided, keep as is
                return data
            if aborted:
                discard = True
                stats.aborted_records_removed += h.records_count
        if discard:
            retained = []
            if is_control:
                stats.markers_removed += 1
        elif is_control:
            retained = records or []
        else:
            last = h.base_offset + h.last_offset_delta
            i = bisect_left(kept_offsets, h.base_offset)
            if i == len(kept_offsets) or kept_offsets[i] > last:
                retained = []  # nothing in this batch is the latest of its key: skip decoding
            else:
                m = self.map
                keep_tombstones = not h.has_delete_horizon or now < h.delete_horizon_ms
                retained = []
                for r in RecordBatch(data, 0, header=h).records():
                    key = r[2]
                    if key is None:
                        stats.null_key_records_removed += 1
                    elif m.get(key) == r[0]:
                        if r[3] is not None or keep_tombstones:
                            retained.append(r)
                        else:
                            stats.tombstones_removed += 1
        if not retained:
            if pid >= 0 and self._is_last_of_producer(h):
                return data if h.records_count == 0 else _empty_batch(h)
            return None
        stats.records_kept += len(retained)
        horizon: int | None
        if h.has_delete_horizon:
            horizon = h.delete_horizon_ms
            needs_horizon = False
        else:
            needs_horizon = empty_txn_marker or (not is_control and any(r[3] is None for r in retained))
            horizon = now + self.delete_retention_ms if needs_horizon else None
        if len(retained) == h.records_count and not needs_horizon:
            return data
        return _rebuild(h, retained, horizon)

    def clean_segment(self, seg: LogSegment, txn: dict, kept_offsets: list) -> _SourceOutput:
        out = _SourceOutput(seg)
        for _, h, data in seg.iter_batches():
            result = self.filter_batch(h, data, txn, kept_offsets)
            last = h.base_offset + h.last_offset_delta
            out.last_offset = last
            if result is None:
                out.changed = True
                continue
            if result is not data:
                out.changed = True
            self.stats.batches_kept += 1
            out.add(
                result,
                last,
                h.max_timestamp
                if result is data
                else BatchHeader._make(BATCH_HEADER.unpack_from(result, 0)).max_timestamp,
            )
        return out

    # ---------------------------------------------------------------- groups and swaps
    def _new_cleaned(self, base_offset: int) -> LogSegment:
        for name in _segment_file_names(base_offset, CLEANED_SUFFIX):  # leftovers of a crashed pass
            path = os.path.join(self.segments[0].dir, name)
            if os.path.exists(path):
                os.remove(path)
        return LogSegment(
            self.segments[0].dir,
            base_offset,
            self.index_interval_bytes,
            self.max_index_size,
            created_ms=self.now,
            suffix=CLEANED_SUFFIX,
        )

    @staticmethod
    def _append(seg: LogSegment, out: _SourceOutput) -> None:
        if out.parts:
            seg.append(b"".join(out.parts), out.metas)

    def run(self) -> CleanerStats:
        stats = self.stats
        cleanable = self.cleanable_segments()
        if not cleanable:
            return stats
        stats.first_offset = cleanable[0].base_offset
        stats.end_offset = self.segments[len(cleanable)].base_offset  # the next segment starts there
        stats.segments_cleaned = len(cleanable)
        self.build_offset_map(cleanable)
        kept_offsets = sorted(self.map.values())
        txn: dict[int, int] = {}
        group: list[_SourceOutput] = []
        cleaned: LogSegment | None = None
        group_size = 0
        for seg in cleanable:
            out = self.clean_segment(seg, txn, kept_offsets)
            stats.bytes_after += out.size
            if group and (
                group_size + out.size > self.segment_bytes or out.last_offset - group[0].segment.base_offset > INT32_MAX
            ):
                self._finish_group(group, cleaned)
                group, cleaned, group_size = [], None, 0
            if group and cleaned is None:  # a second source: the group is rewritten after all
                cleaned = self._new_cleaned(group[0].segment.base_offset)
                self._append(cleaned, group[0])
                group[0].parts = []
            if cleaned is not None:
                self._append(cleaned, out)
                out.parts = []
            group.append(out)
            group_size += out.size
        self._finish_group(group, cleaned)
        return stats

    def _finish_group(self, group: list[_SourceOutput], cleaned: LogSegment | None) -> None:
        if cleaned is None:
            if not group[0].changed:
                return  # a lone unchanged segment: nothing to rewrite
            cleaned = self._new_cleaned(group[0].segment.base_offset)
            self._append(cleaned, group[0])
            group[0].parts = []
        cleaned.on_become_inactive()
        cleaned.flush()
        olds = [o.segment for o in group]
        self.replace(cleaned, olds)
        self.stats.groups_swapped += 1
        self.stats.replacements.append((cleaned, olds))


def compact_log(
    segments: Sequence[LogSegment],
    *,
    last_stable_offset: int,
    now_ms: int,
    replace_segments: Callable[[LogSegment, list[LogSegment]], None],
    delete_retention_ms: int = 86_400_000,
    min_compaction_lag_ms: int = 0,
    segment_bytes: int = 1 << 30,
    active_producers: Mapping | None = None,
    index_interval_bytes: int = 4096,
    max_index_size: int = 10 * 1024 * 1024,
) -> CleanerStats:
    """One compaction pass over ``segments`` (the log's segments in offset order, the active one last).

    ``last_stable_offset``: nothing at or above it is cleaned (Log: ``min(HW, first unstable offset)``).
    ``active_producers``: ``ProducerStateManager.producers`` (their last batches are kept).
    ``replace_segments(new, olds)``: swaps a flushed ``.cleaned`` segment in for the contiguous ``olds``
    (``Log.replace_segments``). Raises ``CorruptMessageError`` if a batch in the cleanable range fails
    its CRC (nothing is changed then).
    """
    if not segments:
        return CleanerStats()
    return _Compaction(
        segments,
        last_stable_offset,
        now_ms,
        delete_retention_ms,
        min_compaction_lag_ms,
        segment_bytes,
        active_producers,
        replace_segments,
        index_interval_bytes,
        max_index_size,
    ).run()


def clean_log(log, now_ms: int) -> CleanerStats:
    """``Log.compact(now_ms)``: one pass with the log's configs, bounded by its last stable offset (so by
    its high watermark), keeping its active producers' last batches. A no-op (empty stats) unless
    ``cleanup.policy`` includes ``compact``."""
    c = log.config
    if not c.compact:
        return CleanerStats()
    return compact_log(
        log.segments,
        last_stable_offset=log.last_stable_offset,
        now_ms=now_ms,
        replace_segments=log.replace_segments,
        delete_retention_ms=c.delete_retention_ms,
        min_compaction_lag_ms=c.min_compaction_lag_ms,
        segment_bytes=c.segment_bytes,
        active_producers=log.producer_state.producers,
        index_interval_bytes=c.index_interval_bytes,
        max_index_size=c.segment_index_bytes,
    )
