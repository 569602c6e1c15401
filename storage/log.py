"""One partition's log: Kafka's UnifiedLog/LocalLog (synchronous) over segments, with its leader epoch cache,
producer state and checkpoints; ``LogConfig`` (storage/log_config.py) is re-exported here. Single owner (the
replica actor), single-threaded but for a cleaner pass's build. The directory layout, the crash-safe order of
every mutation and flushing: docs/internals.md (storage/).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable

from protocol.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from storage import cleaner, log_validator
from storage.checkpoint import create_marker, fsync_dir, write_offset_checkpoint
from storage.cleaner import CleanerStats, CleanPass
from storage.epoch_cache import LeaderEpochCache
from storage.log_config import LogConfig
from storage.log_dirs import describe_failure, is_storage_failure
from storage.log_loader import (
    CLEAN_SHUTDOWN_FILE,
    EPOCH_FILE,
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    load_log,
    replay_producer_state,
    update_producer_state,
)
from storage.log_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    offset_by_timestamp,
)
from storage.log_results import FetchDataInfo, LogAppendInfo, LogOffsetSnapshot
from storage.producer_state import ProducerStateManager, in_sequence
from storage.records import (
    CONTROL_MASK,
    BatchHeader,
    parse_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn, carry_aborted, collect_aborted

log = logging.getLogger(__name__)

__all__ = [
    "LogConfig",
    "Log",
    "LogAppendInfo",
    "FetchDataInfo",
    "LogOffsetSnapshot",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "EARLIEST_LOCAL_TIMESTAMP",
    "RECOVERY_POINT_FILE",
    "HIGH_WATERMARK_FILE",
    "LOG_START_OFFSET_FILE",
    "EPOCH_FILE",
    "CLEAN_SHUTDOWN_FILE",
]

CHECKPOINT_INTERVAL_MS = 1000  # flushes triggered by flush.messages/flush.ms checkpoint at most this often


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def _dirty_enough(p: CleanPass, dirty_from: int, now_ms: int, config: LogConfig) -> bool:
    """Nothing past ``dirty_from`` has no dirty bytes and no first dirty record: never enough."""
    clean = sum(s.size for s in p.cleanable if s.next_offset <= dirty_from)
    dirty_segments = [s for s in p.cleanable if s.next_offset > dirty_from]
    dirty = sum(s.size for s in dirty_segments)
    if clean + dirty and dirty / (clean + dirty) > config.min_cleanable_dirty_ratio:
        return True
    first = dirty_segments[0].first_batch_timestamp() if dirty_segments else -1
    return 0 <= first < now_ms - config.max_compaction_lag_ms


def _io_guarded(method):
    """A Log operation whose OSError (or KafkaStorageError raised from one) is the log directory failing: the log
    goes offline for good (``Log.fail``: every later call raises KafkaStorageError, nothing is written again) and
    its ``on_dir_failure`` is told, once (Kafka's ``LocalLog.maybeHandleIOException``)."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            if self.failure is not None or not is_storage_failure(exc):
                raise
            raise self.fail(exc) from exc

    return guarded


# ---------------------------------------------------------------------------------------------- log


class Log:
    """A partition's segmented log in ``dir``; opening it recovers it. Appends, reads, truncation, DeleteRecords
    and retention (``delete_records``, ``delete_old_segments``), and compaction's per-log half (``compact``,
    ``begin_clean``/``end_clean``, ``replace_segments``; the pass itself is storage/cleaner.py)."""

    def __init__(self, dir: str, config: LogConfig | None = None, now_ms: int | None = None):
        self.dir = os.path.abspath(dir)
        os.makedirs(self.dir, exist_ok=True)
        self.config = config if config is not None else LogConfig()
        now = _now(now_ms)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._written: dict[str, int] = {}  # checkpoint file -> value last written
        self._unflushed = 0
        self._cleaning: CleanPass | None = None  # the compaction pass between begin_clean and end_clean
        self._last_flush_ms = self._last_checkpoint_ms = now
        self.failure: KafkaStorageError | None = None  # set once the directory failed (``fail``)
        # told (directory, error) when an I/O error takes this log offline (the replica reports its log dir)
        self.on_dir_failure: Callable[[str, KafkaStorageError], None] | None = None
        self.epoch_cache = LeaderEpochCache(os.path.join(self.dir, EPOCH_FILE))
        self.producer_state = ProducerStateManager(self.dir)
        self._load(now)

    # ------------------------------------------------------------------ state
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def recovery_point(self) -> int:
        return self._rp

    @property
    def last_stable_offset(self) -> int:
        return self.producer_state.last_stable_offset(self._hw)

    def fetch_offset_snapshot(self) -> LogOffsetSnapshot:
        """Log start, log end, high watermark and last stable offset in one value (Kafka's
        ``UnifiedLog.fetchOffsetSnapshot``)."""
        hw = self._hw
        return LogOffsetSnapshot(self._log_start_offset, self._leo, hw, self.producer_state.last_stable_offset(hw))

    @property
    def latest_epoch(self) -> int:
        return self.epoch_cache.latest_epoch

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        """New configs apply from now on (index sizes to segments created from now on)."""
        self.config = config

    @_io_guarded
    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark (clamped into ``[log_start_offset, log_end_offset]``); returns it."""
        self._hw = min(max(hw, self._log_start_offset), self._leo)
        written = self._written.get(HIGH_WATERMARK_FILE)
        if written is not None and self._hw < written:
            # A lowered HW (truncation, a follower adopting its leader's) is checkpointed at once: a
            # crash must never bring back a HW above what this replica last knew.
            write_offset_checkpoint(os.path.join(self.dir, HIGH_WATERMARK_FILE), self._hw)
            self._written[HIGH_WATERMARK_FILE] = self._hw
        self.producer_state.on_high_watermark_updated(self._hw)
        return self._hw

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for_epoch(epoch, self._leo)

    def _check_open(self) -> None:
        if self.failure is not None:
            raise KafkaStorageError(self.failure.message)
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    def fail(self, exc: BaseException) -> KafkaStorageError:
        """The log's directory failed (``exc``, an I/O error): the log is offline from now on, its files closed
        without a flush or the clean-shutdown marker (the next open recovers from the recovery point, cutting a
        torn write); ``on_dir_failure`` is told once. Returns the KafkaStorageError its callers raise."""
        if self.failure is not None:
            return self.failure
        self.failure = KafkaStorageError(
            f"Error while writing to the log of {os.path.basename(self.dir)} in dir {os.path.dirname(self.dir)}: "
            f"{describe_failure(exc)}; the log is offline until the broker restarts"
        )
        log.error("%s", self.failure.message)
        self.abandon()
        if self.on_dir_failure is not None:
            try:
                self.on_dir_failure(os.path.dirname(self.dir), self.failure)
            except Exception:  # noqa: BLE001 - the owner's callback must not hide the storage error
                log.exception("log %s: the directory-failure callback failed", self.dir)
        return self.failure

    def abandon(self) -> None:
        """Close every file without writing anything (a failed directory's logs: Kafka's ``closeHandlers``)."""
        self._abort_cleaning()
        for seg in self._segments:
            seg.abandon()
        self._closed = True

    # ------------------------------------------------------------------ loading and recovery
    def _new_segment(self, base: int, now_ms: int, suffix: str = "") -> LogSegment:
        c = self.config
        return LogSegment(self.dir, base, c.index_interval_bytes, c.segment_index_bytes, now_ms, suffix)

    def _load(self, now: int) -> None:
        loaded = load_log(self.dir, self.config, self.epoch_cache, self.producer_state, self._new_segment, now)
        self._segments = loaded.segments
        self._bases = [seg.base_offset for seg in loaded.segments]
        self._log_start_offset, self._leo, self._hw = (
            loaded.log_start_offset,
            loaded.log_end_offset,
            loaded.high_watermark,
        )
        self._rp = self._leo  # every recovered segment was fsynced; trusted ones were below the old point
        self._written.update(loaded.checkpoints)
        self._write_checkpoints()  # those that changed, or were missing or unreadable

    def _replay_producer_state(self, start: int) -> None:
        replay_producer_state(self._segments, self._bases, self.producer_state, start, self._leo)
        # transactions whose markers the replay found below the high watermark are stable already
        self.producer_state.on_high_watermark_updated(self._hw)

    # ------------------------------------------------------------------ checkpoints and flushing
    def _write_checkpoints(self) -> None:
        """Persist the recovery point, high watermark and log start offset that changed (each atomically)."""
        for name, value in (
            (RECOVERY_POINT_FILE, self._rp),
            (HIGH_WATERMARK_FILE, self._hw),
            (LOG_START_OFFSET_FILE, self._log_start_offset),
        ):
            if self._written.get(name) != value:
                write_offset_checkpoint(os.path.join(self.dir, name), value)
                self._written[name] = value

    @_io_guarded
    def flush(self, now_ms: int | None = None, checkpoint: bool = True) -> None:
        """fsync every segment above the recovery point, move the recovery point to the log end and
        (unless ``checkpoint`` is False) persist the recovery point, high watermark and log start."""
        self._check_open()
        now = _now(now_ms)
        if self._leo > self._rp or self._unflushed:
            for seg in self._segments[max(bisect_right(self._bases, self._rp) - 1, 0) :]:
                seg.flush()
            self._rp = self._leo
        self._unflushed = 0
        self._last_flush_ms = now
        if checkpoint:
            self._write_checkpoints()
            self._last_checkpoint_ms = now

    @_io_guarded
    def maybe_flush(self, now_ms: int) -> bool:
        """Apply the flush policy (``flush.messages``, ``flush.ms``, rolled-but-unflushed segments);
        returns whether it flushed. The owner may call this on a timer."""
        c = self.config
        if (
            self._unflushed >= c.flush_messages
            or (now_ms - self._last_flush_ms >= c.flush_ms and self._leo > self._rp)
            or self._rp < self._bases[-1]
        ):
            self.flush(now_ms, checkpoint=now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS)
            return True
        return False

    # ------------------------------------------------------------------ append
    @_io_guarded
    def append_as_leader(
        self, batches: bytes, leader_epoch: int, now_ms: int, origin: str = log_validator.CLIENT
    ) -> LogAppendInfo:
        """Validate (storage/log_validator.py, Kafka's LogValidator: every record of every batch; one bad
        batch refuses the whole append), assign offsets (rewriting each batch's base offset in place) and
        the partition leader epoch, check producer sequences, and append. A duplicate batch writes nothing
        and returns its original offsets with ``duplicate=True``. ``origin``: ``"client"`` (producers) or
        ``"coordinator"`` (a coordinator's own writes, e.g. transaction markers)."""
        self._check_open()
        n = len(batches)
        if n == 0:
            return LogAppendInfo(-1, -1, -1, -1, self._log_start_offset, 0, 0, False)
        c = self.config
        if n > c.segment_size:
            raise RecordListTooLargeError(f"append of {n} bytes exceeds segment.bytes {c.segment_size}")
        buf = bytearray(batches)
        infos = log_validator.validate_leader_append(buf, c, now_ms, origin)
        if c.compression_type != "producer":  # the topic's codec (Kafka's LogValidator recompression)
            buf, infos = log_validator.convert_compression(buf, infos, c)
            n = len(buf)
            if n > c.segment_size:
                raise RecordListTooLargeError(f"append of {n} bytes exceeds segment.bytes {c.segment_size}")
        records = sum(h.records_count for _, _, h in infos)
        producers = any(h.producer_id >= 0 for _, _, h in infos)
        if producers:
            dup = self._check_producers(buf, infos, origin == log_validator.CLIENT)
            if dup is not None:
                return LogAppendInfo(dup[0], dup[1], -1, -1, self._log_start_offset, dup[1] - dup[0] + 1, 0, True)
        append_time = c.message_timestamp_type == "LogAppendTime"
        first = offset = self._leo
        seg_batches, max_ts = [], -1
        for pos, size, h in infos:
            set_base_offset(buf, pos, offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            if append_time:
                set_log_append_time(buf, pos, now_ms)
            ts = now_ms if append_time else h.max_timestamp
            last = offset + h.last_offset_delta
            seg_batches.append((pos, size, last, ts))
            if ts > max_ts:
                max_ts = ts
            offset = last + 1
        self._maybe_roll(n, max_ts, offset - 1, first, now_ms)
        if leader_epoch >= 0 and leader_epoch > self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(leader_epoch, first)
        self._segments[-1].append(buf, seg_batches)
        self._leo = offset
        ps, seg = self.producer_state, self._segments[-1]
        if producers:
            for pos, _, h in infos:
                if h.producer_id >= 0:
                    update_producer_state(ps, seg, parse_header(buf, pos), now_ms, buf, pos)
        ps.map_end_offset = offset
        self._after_append(records, now_ms)
        return LogAppendInfo(
            first, offset - 1, max_ts, now_ms if append_time else -1, self._log_start_offset, records, n, False
        )

    def _check_producers(self, buf, infos, sequences: bool = True) -> tuple[int, int] | None:
        """Producer-state check of a leader append; several batches of one producer in one append must
        continue each other (producer_state checks each against the state before this append). A
        coordinator's own transactional writes (TxnOffsetCommit) carry no sequence: only their epoch is
        checked (Kafka validates sequences for the client origin only)."""
        seen: dict[int, BatchHeader] = {}
        for pos, _, h in infos:
            pid = h.producer_id
            if pid < 0:
                continue
            prev = seen.get(pid)
            if prev is None:
                dup = self.producer_state.check(h, buf, pos, sequences)
                if dup is not None:
                    return dup
            elif (
                h.producer_epoch != prev.producer_epoch
                or h.attributes & CONTROL_MASK
                or (sequences and not in_sequence(prev.last_sequence, h.base_sequence))
            ):
                raise OutOfOrderSequenceNumberError(
                    f"batches of producer {pid} in one append do not continue each other: sequence "
                    f"{h.base_sequence} epoch {h.producer_epoch} after {prev.last_sequence} "
                    f"epoch {prev.producer_epoch}"
                )
            seen[pid] = h
        return None

    @_io_guarded
    def append_as_follower(self, batches: bytes, now_ms: int | None = None) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs: the first must start
        at the log end (a compacted topic may skip ahead), each must continue the previous one."""
        self._check_open()
        n = len(batches)
        if n == 0:
            return LogAppendInfo(-1, -1, -1, -1, self._log_start_offset, 0, 0, False)
        if n > self.config.segment_size:
            raise RecordListTooLargeError(f"append of {n} bytes exceeds segment.bytes {self.config.segment_size}")
        now = _now(now_ms)
        gaps_ok = self.config.compact
        expected = self._leo
        seg_batches, headers, pos, records, max_ts, first = [], [], 0, 0, -1, None
        while pos < n:
            h = validate_batch(batches, pos)
            base = h.base_offset
            if base != expected and not (gaps_ok and base > expected):
                raise UnexpectedAppendOffsetError(
                    f"follower append: batch at position {pos} starts at offset {base}, expected {expected} "
                    f"(log end offset {self._leo})"
                )
            if first is None:
                first = base
            size, last = h.size_in_bytes, base + h.last_offset_delta
            seg_batches.append((pos, size, last, h.max_timestamp))
            headers.append((pos, h))
            max_ts = max(max_ts, h.max_timestamp)
            records += h.records_count
            expected = last + 1
            pos += size
        assert first is not None  # n > 0: at least one batch was read
        self._maybe_roll(n, max_ts, expected - 1, first, now)
        cache, latest = self.epoch_cache, self.epoch_cache.latest_epoch
        for _, h in headers:
            if h.partition_leader_epoch >= 0 and h.partition_leader_epoch > latest:
                cache.assign(h.partition_leader_epoch, h.base_offset)
                latest = h.partition_leader_epoch
        self._segments[-1].append(batches, seg_batches)
        self._leo = expected
        ps, seg = self.producer_state, self._segments[-1]
        for p, h in headers:
            if h.producer_id >= 0:
                update_producer_state(ps, seg, h, -1, batches, p)
        ps.map_end_offset = expected
        self._after_append(records, now)
        return LogAppendInfo(first, expected - 1, max_ts, -1, self._log_start_offset, records, n, False)

    def _after_append(self, records: int, now_ms: int) -> None:
        self._unflushed += records
        c = self.config
        if self._unflushed >= c.flush_messages or now_ms - self._last_flush_ms >= c.flush_ms:
            self.flush(now_ms, checkpoint=now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS)

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, first_offset: int, now_ms: int) -> None:
        seg, c = self._segments[-1], self.config
        if seg.should_roll(size, max_ts, max_offset, now_ms, c.segment_size, c.segment_ms, c.segment_jitter_ms):
            self.roll(now_ms, first_offset)
        elif seg.size == 0 and not seg.can_convert_to_relative_offset(max_offset):
            self.roll(now_ms, first_offset)

    @_io_guarded
    def roll(self, now_ms: int | None = None, new_base: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base`` (default: the log end); an empty active segment is
        reused (or replaced when ``new_base`` differs). Snapshots producer state at the new base."""
        self._check_open()
        now = _now(now_ms)
        new_base = self._leo if new_base is None else new_base
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == new_base:
                return active
            if new_base < active.base_offset:
                raise KafkaStorageError(f"cannot roll to {new_base} below the active segment {active.base_offset}")
            active.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            if new_base < active.next_offset:
                raise KafkaStorageError(f"cannot roll to {new_base}: the active segment ends at {active.next_offset}")
            active.on_become_inactive()
        seg = self._new_segment(new_base, now)
        if seg.size:
            seg.close()
            raise KafkaStorageError(f"log {self.dir}: segment {new_base} already exists with data")
        self._segments.append(seg)
        self._bases.append(new_base)
        log.info("Rolled new log segment at offset %d in %s", new_base, self.dir)
        self.producer_state.map_end_offset = self._leo
        if new_base == self._leo:
            self.producer_state.take_snapshot(new_base)
        return seg

    # ------------------------------------------------------------------ read
    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    @_io_guarded
    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, min_one_message: bool = True
    ) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, stopping before the batch holding
        ``max_offset`` (exclusive, e.g. the high watermark) and within ``max_bytes`` (at least one batch
        when ``min_one_message``). ``OffsetOutOfRangeError`` outside ``[log_start, log_end]``."""
        self._check_open()
        leo = self._leo
        if start_offset < self._log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, {leo}] of {self.dir}"
            )
        empty = FetchDataInfo(b"", start_offset, start_offset)
        if start_offset == leo or (max_offset is not None and start_offset >= max_offset):
            return empty
        segs, bases = self._segments, self._bases
        for i in range(self._segment_index(start_offset), len(segs)):
            seg, max_pos = segs[i], None
            if max_offset is not None and max_offset < (bases[i + 1] if i + 1 < len(bases) else leo):
                found = seg.translate_offset(max_offset)
                max_pos = found[0] if found is not None else None
            r = seg.read(start_offset, max_bytes, max_pos, min_one_message)
            if r is not None:
                return FetchDataInfo(*r)
        return empty

    @_io_guarded
    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)`` (marker at or
        after the start, first offset below the bound), for a read_committed fetch: Kafka's
        ``LocalLog.collectAbortedTransactions`` over the txn indexes from the segment holding the start."""
        self._check_open()
        segs = self._segments[self._segment_index(start_offset) :]
        return collect_aborted((s.txn_index for s in segs), start_offset, upper_bound_offset)

    # ------------------------------------------------------------------ offsets by time
    @_io_guarded
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets: ``(offset, timestamp, leader_epoch)`` of the first record with a timestamp >=
        ``timestamp``; -2/-4 earliest (log start), -1 latest (log end), -3 the record with the largest
        timestamp. None when no record qualifies (or for other negative timestamps)."""
        self._check_open()
        return offset_by_timestamp(self._segments, self._log_start_offset, self._leo, self.epoch_cache, timestamp)

    # ------------------------------------------------------------------ truncation
    @_io_guarded
    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove every batch at or above ``offset`` (a batch holding it goes whole); returns whether
        anything was removed. Below the first segment this is ``truncate_fully_and_start_at``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return False
        self._abort_cleaning()
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset, now_ms)
            return True
        # Order (crash-safe at every step): lower the recovery point (so the next open scans from the
        # segment holding `offset`) and the high watermark first; delete whole segments from the highest
        # base down (what a crash leaves is a prefix of the old log, never one with a hole); truncate the
        # segment holding `offset`; then the epoch cache, producer state and checkpoints follow the data.
        self._lower_checkpoints(offset)
        i = bisect_right(self._bases, offset)
        while len(self._segments) > i:
            self._segments.pop().delete()
            self._bases.pop()
        self._segments[-1].truncate_to(offset)
        self._leo = self._segments[-1].next_offset
        self._log_start_offset = min(self._log_start_offset, self._leo)
        self._hw = min(self._hw, self._leo)
        self._rp = min(self._rp, self._leo)
        self.epoch_cache.truncate_from_end(self._leo)
        replay_from = self.producer_state.truncate(self._leo, self._log_start_offset, now_ms)
        self._replay_producer_state(replay_from)
        self._write_checkpoints()
        return True

    def _lower_checkpoints(self, offset: int) -> None:
        """Persist a recovery point and high watermark no higher than ``offset`` before data above it goes."""
        self._rp, self._hw = min(self._rp, offset), min(self._hw, offset)
        self._write_checkpoints()

    @_io_guarded
    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete everything; the log restarts empty at ``offset`` (log start = end = high watermark)."""
        self._check_open()
        self._abort_cleaning()
        # Order: lowered checkpoints; segments deleted from the highest base down (a crash leaves a prefix
        # of the old log, or none: an empty log at the old start); the epoch cache and producer snapshots;
        # only then the new segment and the checkpoints that name it.
        self._lower_checkpoints(offset)
        while self._segments:
            self._segments.pop().delete()
            self._bases.pop()
        self.epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._segments, self._bases = [self._new_segment(offset, _now(now_ms))], [offset]
        self._leo = self._log_start_offset = self._hw = self._rp = offset
        self._write_checkpoints()

    # ------------------------------------------------------------------ DeleteRecords and retention
    # Data goes from the start of the log only, in whole segments, in a crash-safe order (docs/internals.md).
    @_io_guarded
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high watermark,
        else OffsetOutOfRangeError), persist it, drop whole segments below it; returns the log start."""
        self._check_open()
        if offset > self._hw:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.dir} to {offset}: above the high watermark {self._hw}"
            )
        if offset > self._log_start_offset:
            self._advance_log_start(offset)
            self._delete_segments(
                self._deletable(lambda seg, nxt: nxt is not None and nxt <= self._log_start_offset),
                None,
                "DeleteRecords",
            )
        return self._log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        """The log start checkpoint first, then the epoch cache: a crash between them leaves a cache that
        starts below the log start, which open cuts (never one starting above it)."""
        self._log_start_offset = offset
        self._write_checkpoints()
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.evict_unretained(offset)

    @_io_guarded
    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: with ``cleanup.policy`` delete, whole segments older than ``retention.ms`` (by their
        largest timestamp) and the oldest segments beyond ``retention.bytes`` (never the active one); in
        any case segments wholly below the log start offset. Only segments below the high watermark go.
        Returns the number of segments deleted."""
        self._check_open()
        c, deleted = self.config, 0
        if c.delete and c.retention_ms >= 0:
            deleted += self._delete_segments(
                self._deletable(lambda seg, nxt: now_ms - seg.largest_timestamp() > c.retention_ms),
                now_ms,
                f"retention time {c.retention_ms}ms breach",
            )
        if c.delete and c.retention_bytes >= 0:
            excess = [self.size_in_bytes - c.retention_bytes]

            def over(seg, nxt):
                if nxt is not None and excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False

            deleted += self._delete_segments(
                self._deletable(over), now_ms, f"retention size {c.retention_bytes} breach"
            )
        deleted += self._delete_segments(
            self._deletable(lambda seg, nxt: nxt is not None and nxt <= self._log_start_offset),
            now_ms,
            "log start offset breach",
        )
        return deleted

    def _deletable(self, predicate) -> list[LogSegment]:
        out = []
        for i, seg in enumerate(self._segments):
            nxt = self._bases[i + 1] if i + 1 < len(self._bases) else None
            upper = nxt if nxt is not None else self._leo
            if upper > self._hw or (nxt is None and seg.size == 0) or not predicate(seg, nxt):
                break
            out.append(seg)
        return out

    def _delete_segments(self, segs: list[LogSegment], now_ms: int | None, why: str = "log start offset breach") -> int:
        if not segs:
            return 0
        log.info(  # Kafka's UnifiedLog line
            "Deleting segments of %s due to %s: %s",
            self.dir,
            why,
            ", ".join(f"LogSegment(baseOffset={seg.base_offset}, size={seg.size})" for seg in segs),
        )
        self._abort_cleaning()  # a pass under way may be reading these segments
        if segs[-1] is self._segments[-1]:
            self.roll(now_ms)  # never leave the log without an active segment
        for seg in segs:  # lowest first: a crash leaves a suffix; open raises the log start to its base
            self._segments.pop(0)
            self._bases.pop(0)
            seg.delete()
        self._rp = max(self._rp, self._bases[0])
        if self._bases[0] > self._log_start_offset:
            self._advance_log_start(self._bases[0])
            log.info("Incremented log start offset to %d due to segment deletion", self._bases[0])
        self.producer_state.delete_snapshots_below(self._bases[0])
        self._write_checkpoints()
        return len(segs)

    # ------------------------------------------------------------------ compaction
    # begin_clean / end_clean on the owner thread around a pass's build on any thread (storage/cleaner.py), or
    # compact for the three in a row; every operation that removes or rewrites segments aborts a pass first.
    @_io_guarded
    def begin_clean(self, now_ms: int, dirty_from: int = 0) -> CleanPass | None:
        """Plan a pass (owner thread): None when ``cleanup.policy`` has no compact, a pass is already under
        way, or the range is not dirty enough. ``dirty_from`` is where the owner's last pass ended (Kafka's
        cleaner checkpoint): the planned segments below it are the clean section, the rest the dirty one. A
        pass runs when the dirty section's share of the bytes is over ``min.cleanable.dirty.ratio``, or when
        its first record is older than ``max.compaction.lag.ms`` (Kafka's LogCleanerManager)."""
        self._check_open()
        if self._cleaning is not None:
            return None
        p = cleaner.plan_clean(self, now_ms)
        if p is not None and not _dirty_enough(p, dirty_from, now_ms, self.config):
            p = None
        self._cleaning = p
        return p

    def end_clean(self, p: CleanPass) -> CleanerStats | None:
        """After ``p.build()`` returned or raised (owner thread): swap the built segments in and return the
        pass's stats, or, when the pass was aborted (so when the log closed) or failed, delete them and return
        None."""
        if self._cleaning is p:
            self._cleaning = None
        if p.gate.aborted or p.failed:
            p.discard()
            return None
        return p.commit()

    def _abort_cleaning(self) -> None:
        """Before segments are removed or rewritten: stop the pass under way (it swaps nothing)."""
        p = self._cleaning
        if p is not None:
            self._cleaning = None
            p.gate.abort()

    def compact(self, now_ms: int) -> CleanerStats:
        """One pass on the calling thread (``begin_clean``, ``build``, ``end_clean``); empty stats when
        there is nothing to clean. Raises what the build raised (CorruptMessageError: nothing changed)."""
        p = self.begin_clean(now_ms)
        if p is None:
            return CleanerStats()
        try:
            p.build()
        finally:
            stats = self.end_clean(p)
        return stats if stats is not None else CleanerStats()

    @_io_guarded
    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment]) -> None:
        """Swap a cleaned segment (built with suffix ``.cleaned``, covering exactly the offsets of the
        contiguous ``old_segments``) into the log: flush it, rename it ``.swap`` (the commit point:
        recovery completes an interrupted swap), delete the old segments, drop the suffix."""
        self._check_open()
        if not old_segments or any(s not in self._segments for s in old_segments):
            raise ValueError("old_segments must be segments of this log")
        if new_segment.base_offset != old_segments[0].base_offset or old_segments[-1] is self._segments[-1]:
            raise ValueError("the cleaned segment must start where the old ones start, before the active one")
        olds = [s.txn_index for s in old_segments]
        if any(len(t) for t in olds):  # entries whose marker the cleaned segment still holds
            carry_aborted(
                new_segment.txn_index, olds, (h.base_offset for _, h in new_segment.iter_headers() if h.is_control)
            )
        new_segment.flush()
        new_segment.change_suffix(".swap")
        fsync_dir(self.dir)
        i = self._segments.index(old_segments[0])
        for seg in old_segments:
            seg.delete()
        del self._segments[i : i + len(old_segments)], self._bases[i : i + len(old_segments)]
        new_segment.change_suffix("")
        fsync_dir(self.dir)
        self._segments.insert(i, new_segment)
        self._bases.insert(i, new_segment.base_offset)

    # ------------------------------------------------------------------ lifecycle
    @_io_guarded
    def close(self) -> None:
        """Flush, checkpoint, snapshot producer state and mark the shutdown clean."""
        if self._closed:
            return
        if self.failure is not None:  # a failed directory is never written again
            self.abandon()
            return
        self._abort_cleaning()
        # Everything durable before the marker: it tells the next open that no repair is needed.
        self.active_segment.on_become_inactive()  # its final time index entry, fsynced below
        self.flush()
        self.active_segment.flush()
        self.producer_state.map_end_offset = self._leo
        self.producer_state.take_snapshot(self._leo)
        for seg in self._segments:
            seg.close()
        create_marker(os.path.join(self.dir, CLEAN_SHUTDOWN_FILE))
        self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the log's directory."""
        self._abort_cleaning()
        for seg in self._segments:
            seg.delete()
        self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Log({self.dir!r}, start={self._log_start_offset}, end={self._leo}, hw={self._hw}, segments={len(self._segments)})"
