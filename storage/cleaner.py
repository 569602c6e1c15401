"""Log compaction (``cleanup.policy=compact``): Kafka's LogCleaner, one pass per call: the offset map, the
rewrite of each cleanable segment into ``.cleaned`` segments and the ``CleanerGate`` that lets the owner abort
a pass built on another thread. Called by storage/log.py (``plan_clean``); imports storage only. What
is kept, the swap protocol and the threading: docs/internals.md (storage/).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from protocol.errors import CorruptMessageError
from storage.cleaner_records import INT32_MAX, control_type, empty_batch, rebuild_batch, scan_keys
from storage.records import (
    BATCH_HEADER,
    CONTROL_ABORT,
    LOG_OVERHEAD,
    BatchHeader,
    RecordBatch,
    crc_ok,
)
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment

CLEANED_SUFFIX = ".cleaned"
SEGMENT_EXTENSIONS = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


YIELD_GIL_S = 0.002  # a pass built on a thread offers the GIL this often


class CleaningAborted(Exception):
    """The pass's log removed or rewrote segments while the pass was built: nothing is swapped."""


class CleanerGate:
    """Between a pass built on a worker thread and the Log's owner (Kafka's ``abortAndPauseCleaning``):
    every read of a log segment by the build holds the gate's lock, and ``abort`` (owner thread) marks the
    pass aborted and then takes the lock once, so when it returns no read is in progress and none will
    start. Reads are short (one chunk of a segment), so ``abort`` blocks the owner briefly at most."""

    __slots__ = ("_lock", "aborted")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.aborted = False

    def guarded(self, it: Iterator) -> Iterator:
        """``it``'s items, each ``next`` taken under the lock; raises CleaningAborted once aborted."""
        end = object()
        handed = time.perf_counter()
        while True:
            with self._lock:
                self.check()
                item = next(it, end)
            if item is end:
                return
            now = time.perf_counter()
            if now - handed >= YIELD_GIL_S:  # let the owner's event loop in (else it waits the 5 ms interval)
                time.sleep(0)
                handed = now
            yield item

    def read(self, fn, *args):
        with self._lock:
            self.check()
            return fn(*args)

    def check(self) -> None:
        if self.aborted:
            raise CleaningAborted("the log changed under the cleaner")

    def abort(self) -> None:
        self.aborted = True
        with self._lock:
            pass


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


class CleanPass:
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
        # (last offset of its last batch or None, epoch) per producer, snapshotted on the owner thread
        self.producers = {
            pid: (e.batches[-1].last_offset if e.batches else None, e.producer_epoch)
            for pid, e in (active_producers or {}).items()
        }
        self.replace = replace_segments
        self.gate = CleanerGate()
        self.cleanable: list[LogSegment] = []
        self.built: list[tuple[LogSegment, list[LogSegment]]] = []  # (cleaned, olds) per finished group
        self._made: list[LogSegment] = []  # every .cleaned segment this pass created
        self.failed = False
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
        guarded = self.gate.guarded
        for seg in cleanable:
            for pos, h, data in guarded(seg.iter_batches()):
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
                        self._on_marker(h.producer_id, control_type(h, data), open_txn, pending)
                    continue
                if h.is_transactional and h.producer_id >= 0:
                    open_txn.setdefault(h.producer_id, h.base_offset)
                    keys: dict = {}
                    scan_keys(h, data, keys)
                    pending.setdefault(h.producer_id, []).extend(keys.items())
                else:
                    scan_keys(h, data, m)
        if open_txn:  # find the markers of transactions still open at the end of the range
            for seg in self.segments[len(cleanable) :]:
                for pos, h in guarded(seg.iter_headers()):
                    if h.is_control and h.records_count and h.producer_id in open_txn:
                        data = self.gate.read(seg.read_bytes, pos, LOG_OVERHEAD + h.batch_length)
                        self._on_marker(h.producer_id, control_type(h, data), open_txn, pending)
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
        last_offset, epoch = e
        if last_offset is not None:
            return h.base_offset + h.last_offset_delta == last_offset
        return h.is_control and h.producer_epoch == epoch

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
                return data if h.records_count == 0 else empty_batch(h)
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
        return rebuild_batch(h, retained, horizon)

    def clean_segment(self, seg: LogSegment, txn: dict, kept_offsets: list) -> _SourceOutput:
        out = _SourceOutput(seg)
        for _, h, data in self.gate.guarded(seg.iter_batches()):
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
        self.gate.check()  # an aborted pass creates nothing more (its log may be gone)
        for name in _segment_file_names(base_offset, CLEANED_SUFFIX):  # leftovers of a crashed pass
            path = os.path.join(self.segments[0].dir, name)
            if os.path.exists(path):
                os.remove(path)
        seg = LogSegment(
            self.segments[0].dir,
            base_offset,
            self.index_interval_bytes,
            self.max_index_size,
            created_ms=self.now,
            suffix=CLEANED_SUFFIX,
        )
        self._made.append(seg)
        return seg

    def _append(self, seg: LogSegment, out: _SourceOutput) -> None:
        self.gate.check()
        if out.parts:
            seg.append(b"".join(out.parts), out.metas)

    def plan(self) -> bool:
        """Owner thread: pick the cleanable range (segment sizes, timestamps); False when there is none."""
        self.cleanable = self.cleanable_segments()
        return bool(self.cleanable)

    @property
    def end_offset(self) -> int:
        """The first offset past the planned range (the next segment's base)."""
        return self.segments[len(self.cleanable)].base_offset

    def build(self) -> CleanerStats:
        """Any thread: the offset map and the ``.cleaned`` segments, flushed, kept in ``built`` (nothing is
        swapped). Raises CleaningAborted (gate), CorruptMessageError (a bad CRC in the range); ``failed``
        then tells the owner to discard the pass."""
        try:
            return self._build()
        except BaseException:
            self.failed = True
            raise

    def _build(self) -> CleanerStats:
        stats, cleanable = self.stats, self.cleanable
        stats.first_offset = cleanable[0].base_offset
        stats.end_offset = self.end_offset  # the next segment starts there
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

    def commit(self) -> CleanerStats:
        """Owner thread: swap every built group in (``replace_segments``), in offset order."""
        for cleaned, olds in self.built:
            self.replace(cleaned, olds)
            self.stats.groups_swapped += 1
            self.stats.replacements.append((cleaned, olds))
        self.built, self._made = [], []
        return self.stats

    def discard(self) -> None:
        """Owner thread, after the build ended: delete the ``.cleaned`` segments made so far."""
        for cleaned in self._made:
            cleaned.delete()
        self.built, self._made = [], []

    def run(self) -> CleanerStats:
        """Plan, build and commit on the calling thread."""
        if not self.plan():
            return self.stats
        try:
            self.build()
        except BaseException:
            self.discard()
            raise
        return self.commit()

    def _finish_group(self, group: list[_SourceOutput], cleaned: LogSegment | None) -> None:
        if cleaned is None:
            if not group[0].changed:
                return  # a lone unchanged segment: nothing to rewrite
            cleaned = self._new_cleaned(group[0].segment.base_offset)
            self._append(cleaned, group[0])
            group[0].parts = []
        cleaned.on_become_inactive()
        cleaned.flush()
        self.built.append((cleaned, [o.segment for o in group]))


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
    return CleanPass(
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


def plan_clean(log, now_ms: int) -> CleanPass | None:
    """A pass over ``log`` with its configs, bounded by its last stable offset (so by its high watermark),
    keeping its active producers' last batches, planned on the log's owner thread (storage/log.py);
    None unless ``cleanup.policy`` includes ``compact`` and some segment is cleanable."""
    c = log.config
    if not c.compact:
        return None
    p = CleanPass(
        log.segments,
        log.last_stable_offset,
        now_ms,
        c.delete_retention_ms,
        c.min_compaction_lag_ms,
        c.segment_size,
        log.producer_state.producers,
        log.replace_segments,
        c.index_interval_bytes,
        c.segment_index_bytes,
    )
    return p if p.plan() else None
