"""One partition's log: Kafka's UnifiedLog/LocalLog (synchronous) over segments (storage/segment.py), with
its leader epoch cache (storage/epoch_cache.py), producer state (storage/producer_state.py) and
checkpoints. ``LogConfig`` (Kafka's topic configs) lives in storage/log_config.py and is re-exported here.

Directory of one partition (``Log(dir)``)::

    00000000000000000000.log / .index / .timeindex    segments, named by base offset
    00000000000000000000.snapshot                      producer state (at each roll and close)
    leader-epoch-checkpoint                            the epoch cache (its grammar: epoch_cache.py)
    recovery-point-checkpoint                          every batch below it is fsynced
    high-watermark-checkpoint, log-start-offset-checkpoint
    .kafka_cleanshutdown                               written by close(), removed by open

    offset checkpoint file := "0" NL offset NL          (version 0; ASCII decimal; atomic rewrite:
                                                          tmp + fsync + rename + directory fsync)

Recovery on open (Kafka's LogLoader): leftover ``.cleaned``/``.deleted``/``.tmp`` files are removed and an
interrupted segment swap (``.log.swap``) is completed; without the clean-shutdown marker every segment
from the one holding the recovery point on is scanned (length, magic, CRC, offsets increasing -- exactly
contiguous when ``cleanup.policy`` is ``delete`` only --, leader epochs non-decreasing) and the log is
truncated at the first bad batch, later segments deleted. Indexes are rebuilt for scanned segments and for
any segment whose index is missing or fails its sanity check. Then the epoch cache is truncated to the
log end (rebuilt from batch headers if its file is corrupt or missing), producer state is loaded from
the latest snapshot and replayed, the high watermark is clamped into ``[log_start, log_end]``.

Flushing: ``flush()`` fsyncs what is above the recovery point and moves the recovery point to the log end.
Appends flush by themselves when ``flush.messages`` unflushed records or ``flush.ms`` since the last flush
are reached; the owner may call ``maybe_flush(now_ms)`` periodically (also flushes rolled segments).

Concurrency: single-threaded. One owner (the replica actor) calls a Log; nothing inside is thread-safe.
The cleaner works on a Log only when that owner calls ``compact``.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from bisect import bisect_right
from typing import NamedTuple

from storage import cleaner, log_validator
from storage.epoch_cache import LeaderEpochCache
from storage.errors import (
    CorruptMessageError, OffsetOutOfRangeError, OutOfOrderSequenceNumberError,
    RecordListTooLargeError, UnexpectedAppendOffsetError,
)
from storage.log_config import LogConfig
from storage.producer_state import ProducerStateManager, in_sequence
from storage.records import (
    CONTROL_MASK, LOG_OVERHEAD, TIMESTAMP_LOG_APPEND_TIME, RecordBatch, parse_header,
    set_base_offset, set_log_append_time, set_partition_leader_epoch, validate_batch,
)
from storage.segment import KafkaStorageError, LogSegment, parse_base_offset

log = logging.getLogger(__name__)

__all__ = ["LogConfig", "Log", "LogAppendInfo", "FetchDataInfo",
           "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "EARLIEST_LOCAL_TIMESTAMP"]

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP = -2, -1, -3, -4
RECOVERY_POINT_FILE = "recovery-point-checkpoint"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
EPOCH_FILE = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CHECKPOINT_INTERVAL_MS = 1000  # flushes triggered by flush.messages/flush.ms checkpoint at most this often


# ---------------------------------------------------------------------------------------------- results

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


def _read_checkpoint(path: str) -> int | None:
    try:
        with open(path, "r", encoding="ascii") as f:
            lines = f.read().split("\n")
        if len(lines) >= 2 and lines[0] == "0" and int(lines[1]) >= 0:
            return int(lines[1])
        raise ValueError(f"unexpected content {lines[:2]!r}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.warning("checkpoint %s is unreadable (%s); ignoring it", path, e)
        return None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_checkpoint(path: str, value: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"0\n{value}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


# ---------------------------------------------------------------------------------------------- log

class Log:
    """A partition's segmented log in ``dir``; opening it recovers it."""

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
        self._last_flush_ms = self._last_checkpoint_ms = now
        self.epoch_cache = LeaderEpochCache(os.path.join(self.dir, EPOCH_FILE))
        self.producer_state = ProducerStateManager(self.dir)
        self._load(now)

    # ------------------------------------------------------------------ state
    @property
    def log_start_offset(self) -> int:
        return self._lso

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

    def update_high_watermark(self, hw: int) -> int:
        """Set the high watermark (clamped into ``[log_start_offset, log_end_offset]``); returns it."""
        self._hw = min(max(hw, self._lso), self._leo)
        written = self._written.get(HIGH_WATERMARK_FILE)
        if written is not None and self._hw < written:
            # A lowered HW (truncation, a follower adopting its leader's) is checkpointed at once: a
            # crash must never bring back a HW above what this replica last knew.
            _write_checkpoint(os.path.join(self.dir, HIGH_WATERMARK_FILE), self._hw)
            self._written[HIGH_WATERMARK_FILE] = self._hw
        self.producer_state.on_high_watermark_updated(self._hw)
        return self._hw

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for_epoch(epoch, self._leo)

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.dir} is closed")

    # ------------------------------------------------------------------ loading and recovery
    def _new_segment(self, base: int, now_ms: int, suffix: str = "") -> LogSegment:
        c = self.config
        return LogSegment(self.dir, base, c.index_interval_bytes, c.segment_index_bytes, now_ms, suffix)

    def _load(self, now: int) -> None:
        d = self.dir
        clean = os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
        self._remove_temp_files_and_complete_swaps(now)
        names = os.listdir(d)
        bases = sorted({b for n in names if n.endswith(".log") and (b := parse_base_offset(n)) is not None})
        for n in names:  # index files whose segment is gone
            b = parse_base_offset(n)
            if b is not None and b not in bases and (n.endswith(".index") or n.endswith(".timeindex")):
                os.remove(os.path.join(d, n))
        lso = _read_checkpoint(os.path.join(d, LOG_START_OFFSET_FILE))
        rp = _read_checkpoint(os.path.join(d, RECOVERY_POINT_FILE)) or 0
        hw = _read_checkpoint(os.path.join(d, HIGH_WATERMARK_FILE)) or 0
        for b in bases:
            self._segments.append(self._new_segment(b, now))
            self._bases.append(b)
        if not self._segments:
            start = lso or 0
            self._segments.append(self._new_segment(start, now))
            self._bases.append(start)
        rebuild_epochs = self.epoch_cache.load_error is not None or (
            not os.path.exists(self.epoch_cache.path) and self._segments[-1].size + self._segments[0].size > 0)
        first_recovered = len(self._segments)
        if not clean:
            first_recovered = max(bisect_right(self._bases, rp) - 1, 0)
        for seg in self._segments[:first_recovered]:
            if not seg.indexes_exist():
                seg.rebuild_indexes()
        if first_recovered < len(self._segments):
            self._recover_segments(first_recovered, rebuild_epochs)
        for seg in self._segments[:-1]:
            seg.on_become_inactive()
        try:
            self._leo = self.active_segment.next_offset  # loads (and if need be rebuilds) its indexes
        except CorruptMessageError as e:  # damage after a clean shutdown: the tail is recovered anyway
            log.warning("log %s: active segment is damaged (%s); recovering it", self.dir, e)
            self.active_segment.recover(strict_offsets=self.config.cleanup_policy == "delete")
            self._leo = self.active_segment.next_offset
        self._lso = min(max(lso or 0, self._bases[0]), self._leo)
        self._hw = min(max(hw, self._lso), self._leo)
        self._rp = self._leo
        if rebuild_epochs:
            self._rebuild_epoch_cache()
        self.epoch_cache.truncate_from_end(self._leo)
        self.epoch_cache.truncate_from_start(self._lso)
        replay_from = self.producer_state.load(self._lso, self._leo, now)
        self._replay_producer_state(replay_from)
        self.producer_state.on_high_watermark_updated(self._hw)
        self._write_checkpoints(force=True)
        if clean:
            os.remove(os.path.join(d, CLEAN_SHUTDOWN_FILE))
            _fsync_dir(d)

    def _remove_temp_files_and_complete_swaps(self, now: int) -> None:
        """Drop ``.cleaned``/``.deleted``/checkpoint ``.tmp`` leftovers; complete each interrupted swap:
        a ``.log.swap`` (flushed before it got that name) replaces the segments whose base offsets lie in
        its offset range. A ``.swap`` index is dropped (the segment's indexes are rebuilt)."""
        swaps = []
        for n in os.listdir(self.dir):
            path = os.path.join(self.dir, n)
            if n.endswith((".cleaned", ".deleted")) or (n.endswith(".tmp") and "checkpoint" in n):
                os.remove(path)
            elif n.endswith(".log.swap") and parse_base_offset(n) is not None:
                swaps.append(parse_base_offset(n))
            elif n.endswith(".swap"):
                os.remove(path)
        for base in sorted(swaps):
            seg = self._new_segment(base, now, suffix=".swap")
            end = max(seg.next_offset, base + 1)
            log.warning("log %s: completing the interrupted swap of segment %d (up to %d)", self.dir, base, end)
            for n in os.listdir(self.dir):
                b = parse_base_offset(n)
                if b is not None and base <= b < end and n.endswith((".log", ".index", ".timeindex")):
                    os.remove(os.path.join(self.dir, n))
            seg.change_suffix("")
            seg.close()
            for idx in (seg.index_path, seg.time_index_path):
                if os.path.exists(idx):
                    os.remove(idx)
        if swaps:
            _fsync_dir(self.dir)

    def _recover_segments(self, first: int, rebuild_epochs: bool) -> None:
        strict = self.config.cleanup_policy == "delete"
        cache = self.epoch_cache
        latest, last = [cache.latest_epoch], [-1]

        def on_batch(_pos, h):
            if h[2] >= 0:
                last[0] = h[2]
                if not rebuild_epochs and h[2] > latest[0]:
                    cache.assign(h[2], h[0])
                    latest[0] = h[2]

        i = first
        while i < len(self._segments):
            seg = self._segments[i]
            if strict and i > first and seg.base_offset != self._segments[i - 1].next_offset:
                log.warning("log %s: segment %d does not continue the previous one (ends at %d); "
                            "deleting it and the rest", self.dir, seg.base_offset, self._segments[i - 1].next_offset)
                self._delete_tail(i)
                break
            truncated = seg.recover(strict_offsets=strict, on_batch=on_batch, min_epoch=last[0])
            seg.flush()
            if truncated:
                self._delete_tail(i + 1)
                break
            i += 1

    def _delete_tail(self, i: int) -> None:
        for seg in self._segments[i:]:
            log.warning("log %s: deleting segment %d after a corrupt batch", self.dir, seg.base_offset)
            seg.delete()
        del self._segments[i:], self._bases[i:]

    def _rebuild_epoch_cache(self) -> None:
        log.warning("log %s: rebuilding the leader epoch cache from batch headers", self.dir)
        self.epoch_cache.clear()
        latest = -1
        for seg in self._segments:
            for _, h in seg.iter_headers():
                if h[2] > latest:
                    self.epoch_cache.assign(h[2], h[0])
                    latest = h[2]

    def _replay_producer_state(self, start: int) -> None:
        ps = self.producer_state
        if start < self._leo:
            for seg in self._segments[max(bisect_right(self._bases, start) - 1, 0):]:
                found = seg.translate_offset(start)
                if found is None:
                    continue
                for pos, h in seg.iter_headers(found[0]):
                    if h[9] >= 0 and h[0] >= start:
                        data = seg.read_bytes(pos, LOG_OVERHEAD + h[1]) if h[5] & CONTROL_MASK else None
                        ps.update(h, -1, data, 0)
        ps.map_end_offset = self._leo

    # ------------------------------------------------------------------ checkpoints and flushing
    def _write_checkpoints(self, force: bool = False) -> None:
        for name, value in ((RECOVERY_POINT_FILE, self._rp), (HIGH_WATERMARK_FILE, self._hw),
                            (LOG_START_OFFSET_FILE, self._lso)):
            if force or self._written.get(name) != value:
                _write_checkpoint(os.path.join(self.dir, name), value)
                self._written[name] = value

    def flush(self, now_ms: int | None = None, checkpoint: bool = True) -> None:
        """fsync every segment above the recovery point, move the recovery point to the log end and
        (unless ``checkpoint`` is False) persist the recovery point, high watermark and log start."""
        self._check_open()
        now = _now(now_ms)
        if self._leo > self._rp or self._unflushed:
            for seg in self._segments[max(bisect_right(self._bases, self._rp) - 1, 0):]:
                seg.flush()
            self._rp = self._leo
        self._unflushed = 0
        self._last_flush_ms = now
        if checkpoint:
            self._write_checkpoints()
            self._last_checkpoint_ms = now

    def maybe_flush(self, now_ms: int) -> bool:
        """Apply the flush policy (``flush.messages``, ``flush.ms``, rolled-but-unflushed segments);
        returns whether it flushed. The owner may call this on a timer."""
        c = self.config
        if (self._unflushed >= c.flush_messages or (now_ms - self._last_flush_ms >= c.flush_ms and
                                                     self._leo > self._rp) or self._rp < self._bases[-1]):
            self.flush(now_ms, checkpoint=now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS)
            return True
        return False

    # ------------------------------------------------------------------ append
    def append_as_leader(self, batches: bytes, leader_epoch: int, now_ms: int,
                         origin: str = log_validator.CLIENT) -> LogAppendInfo:
        """Validate (storage/log_validator.py, Kafka's LogValidator: every record of every batch; one bad
        batch refuses the whole append), assign offsets (rewriting each batch's base offset in place) and
        the partition leader epoch, check producer sequences, and append. A duplicate batch writes nothing
        and returns its original offsets with ``duplicate=True``. ``origin``: ``"client"`` (producers) or
        ``"coordinator"`` (a coordinator's own writes, e.g. transaction markers)."""
        self._check_open()
        n = len(batches)
        if n == 0:
            return LogAppendInfo(-1, -1, -1, -1, self._lso, 0, 0, False)
        c = self.config
        if n > c.segment_bytes:
            raise RecordListTooLargeError(f"append of {n} bytes exceeds segment.bytes {c.segment_bytes}")
        buf = bytearray(batches)
        infos = log_validator.validate_leader_append(buf, c, now_ms, origin)
        records = sum(h[12] for _, _, h in infos)
        producers = any(h[9] >= 0 for _, _, h in infos)
        if producers:
            dup = self._check_producers(buf, infos)
            if dup is not None:
                return LogAppendInfo(dup[0], dup[1], -1, -1, self._lso, dup[1] - dup[0] + 1, 0, True)
        append_time = c.message_timestamp_type == "LogAppendTime"
        first = offset = self._leo
        seg_batches, max_ts = [], -1
        for pos, size, h in infos:
            set_base_offset(buf, pos, offset)
            set_partition_leader_epoch(buf, pos, leader_epoch)
            if append_time:
                set_log_append_time(buf, pos, now_ms)
            ts = now_ms if append_time else h[8]
            last = offset + h[6]
            seg_batches.append((pos, size, last, ts))
            if ts > max_ts:
                max_ts = ts
            offset = last + 1
        self._maybe_roll(n, max_ts, offset - 1, first, now_ms)
        if leader_epoch >= 0 and leader_epoch > self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(leader_epoch, first)
        self._segments[-1].append(buf, seg_batches)
        self._leo = offset
        ps = self.producer_state
        if producers:
            for pos, _, h in infos:
                if h[9] >= 0:
                    ps.update(parse_header(buf, pos), now_ms, buf, pos)
        ps.map_end_offset = offset
        self._after_append(records, now_ms)
        return LogAppendInfo(first, offset - 1, max_ts, now_ms if append_time else -1, self._lso, records, n, False)

    def _check_producers(self, buf, infos) -> tuple[int, int] | None:
        """Producer-state check of a leader append; several batches of one producer in one append must
        continue each other (producer_state checks each against the state before this append)."""
        seen = {}
        for pos, _, h in infos:
            pid = h[9]
            if pid < 0:
                continue
            prev = seen.get(pid)
            if prev is None:
                dup = self.producer_state.check(h, buf, pos)
                if dup is not None:
                    return dup
            elif h[10] != prev[10] or h[5] & CONTROL_MASK or not in_sequence(prev.last_sequence, h[11]):
                raise OutOfOrderSequenceNumberError(
                    f"batches of producer {pid} in one append do not continue each other: sequence "
                    f"{h[11]} epoch {h[10]} after {prev.last_sequence} epoch {prev[10]}")
            seen[pid] = h
        return None

    def append_as_follower(self, batches: bytes, now_ms: int | None = None) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and epochs: the first must start
        at the log end (a compacted topic may skip ahead), each must continue the previous one."""
        self._check_open()
        n = len(batches)
        if n == 0:
            return LogAppendInfo(-1, -1, -1, -1, self._lso, 0, 0, False)
        if n > self.config.segment_bytes:
            raise RecordListTooLargeError(f"append of {n} bytes exceeds segment.bytes {self.config.segment_bytes}")
        now = _now(now_ms)
        gaps_ok = self.config.compact
        expected = self._leo
        seg_batches, headers, pos, records, max_ts, first = [], [], 0, 0, -1, None
        while pos < n:
            h = validate_batch(batches, pos)
            base = h[0]
            if base != expected and not (gaps_ok and base > expected):
                raise UnexpectedAppendOffsetError(
                    f"follower append: batch at position {pos} starts at offset {base}, expected {expected} "
                    f"(log end offset {self._leo})")
            if first is None:
                first = base
            size, last = LOG_OVERHEAD + h[1], base + h[6]
            seg_batches.append((pos, size, last, h[8]))
            headers.append((pos, h))
            max_ts = max(max_ts, h[8])
            records += h[12]
            expected = last + 1
            pos += size
        self._maybe_roll(n, max_ts, expected - 1, first, now)
        cache, latest = self.epoch_cache, self.epoch_cache.latest_epoch
        for _, h in headers:
            if h[2] >= 0 and h[2] > latest:
                cache.assign(h[2], h[0])
                latest = h[2]
        self._segments[-1].append(batches, seg_batches)
        self._leo = expected
        ps = self.producer_state
        for p, h in headers:
            if h[9] >= 0:
                ps.update(h, -1, batches, p)
        ps.map_end_offset = expected
        self._after_append(records, now)
        return LogAppendInfo(first, expected - 1, max_ts, -1, self._lso, records, n, False)

    def _after_append(self, records: int, now_ms: int) -> None:
        self._unflushed += records
        c = self.config
        if self._unflushed >= c.flush_messages or now_ms - self._last_flush_ms >= c.flush_ms:
            self.flush(now_ms, checkpoint=now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS)

    def _maybe_roll(self, size: int, max_ts: int, max_offset: int, first_offset: int, now_ms: int) -> None:
        seg, c = self._segments[-1], self.config
        if seg.should_roll(size, max_ts, max_offset, now_ms, c.segment_bytes, c.segment_ms, c.segment_jitter_ms):
            self.roll(now_ms, first_offset)
        elif seg.size == 0 and not seg.can_convert_to_relative_offset(max_offset):
            self.roll(now_ms, first_offset)

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
        self.producer_state.map_end_offset = self._leo
        if new_base == self._leo:
            self.producer_state.take_snapshot(new_base)
        return seg

    # ------------------------------------------------------------------ read
    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(self, start_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Whole batches from the one holding ``start_offset``, stopping before the batch holding
        ``max_offset`` (exclusive, e.g. the high watermark) and within ``max_bytes`` (at least one batch
        when ``min_one_message``). ``OffsetOutOfRangeError`` outside ``[log_start, log_end]``."""
        self._check_open()
        leo = self._leo
        if start_offset < self._lso or start_offset > leo:
            raise OffsetOutOfRangeError(f"offset {start_offset} is outside [{self._lso}, {leo}] of {self.dir}")
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

    # ------------------------------------------------------------------ offsets by time and epoch
    def _epoch_for(self, offset: int) -> int:
        return self.epoch_cache.epoch_for_offset(offset)

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets: ``(offset, timestamp, leader_epoch)`` of the first record with a timestamp >=
        ``timestamp``; -2/-4 earliest (log start), -1 latest (log end), -3 the record with the largest
        timestamp. None when no record qualifies (or for other negative timestamps)."""
        self._check_open()
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self._lso, -1, self._epoch_for(self._lso)
        if timestamp == LATEST_TIMESTAMP:
            return self._leo, -1, self.epoch_cache.latest_epoch
        if timestamp == MAX_TIMESTAMP:
            if self._leo == self._lso:
                return None
            best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            return self._find_in_segment(best, best.max_timestamp_so_far, best.offset_of_max_timestamp, exact=True)
        if timestamp < 0:
            return None
        for seg in self._segments:
            if seg.max_timestamp_so_far >= timestamp and seg.next_offset > self._lso:
                found = self._find_in_segment(seg, timestamp, seg.time_index.lookup(timestamp - 1)[1])
                if found is not None:
                    return found
        return None

    def _find_in_segment(self, seg: LogSegment, ts: int, from_offset: int, exact: bool = False):
        lso = self._lso
        start = seg.offset_index.lookup(max(from_offset, lso))[1]
        for pos, h in seg.iter_headers(start):
            if h[8] < ts or h[0] + h[6] < lso:
                continue
            epoch = h[2] if h[2] >= 0 else -1
            if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
                return max(h[0], lso), h[8], epoch
            for r in RecordBatch(seg.read_bytes(pos, LOG_OVERHEAD + h[1]), 0, header=h):
                if r.offset >= lso and (r.timestamp == ts if exact else r.timestamp >= ts):
                    return r.offset, r.timestamp, epoch
        return None

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int, now_ms: int | None = None) -> bool:
        """Remove every batch at or above ``offset`` (a batch holding it goes whole); returns whether
        anything was removed. Below the first segment this is ``truncate_fully_and_start_at``."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return False
        if offset < self._bases[0]:
            self.truncate_fully_and_start_at(offset)
            return True
        i = bisect_right(self._bases, offset)
        for seg in self._segments[i:]:
            seg.delete()
        del self._segments[i:], self._bases[i:]
        self._segments[-1].truncate_to(offset)
        self._leo = self._segments[-1].next_offset
        self._lso = min(self._lso, self._leo)
        self._hw = min(self._hw, self._leo)
        self._rp = min(self._rp, self._leo)
        self.epoch_cache.truncate_from_end(self._leo)
        replay_from = self.producer_state.truncate(self._leo, self._lso, now_ms)
        self._replay_producer_state(replay_from)
        self._write_checkpoints()
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int | None = None) -> None:
        """Delete everything; the log restarts empty at ``offset`` (log start = end = high watermark)."""
        self._check_open()
        for seg in self._segments:
            seg.delete()
        self._segments, self._bases = [self._new_segment(offset, _now(now_ms))], [offset]
        self._leo = self._lso = self._hw = self._rp = offset
        self.epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._write_checkpoints()

    # ------------------------------------------------------------------ deletion and retention
    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high watermark,
        else OffsetOutOfRangeError), persist it, drop whole segments below it; returns the log start."""
        self._check_open()
        if offset > self._hw:
            raise OffsetOutOfRangeError(f"cannot move the log start offset of {self.dir} to {offset}: "
                                        f"above the high watermark {self._hw}")
        if offset > self._lso:
            self._lso = offset
            self.epoch_cache.truncate_from_start(offset)
            self._write_checkpoints()
            self._delete_segments(self._deletable(lambda seg, nxt: nxt is not None and nxt <= self._lso), None)
        return self._lso

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: with ``cleanup.policy`` delete, whole segments older than ``retention.ms`` (by their
        largest timestamp) and the oldest segments beyond ``retention.bytes`` (never the active one); in
        any case segments wholly below the log start offset. Only segments below the high watermark go.
        Returns the number of segments deleted."""
        self._check_open()
        c, deleted = self.config, 0
        if c.delete and c.retention_ms >= 0:
            deleted += self._delete_segments(self._deletable(
                lambda seg, nxt: now_ms - seg.largest_timestamp() > c.retention_ms), now_ms)
        if c.delete and c.retention_bytes >= 0:
            excess = [self.size_in_bytes - c.retention_bytes]

            def over(seg, nxt):
                if nxt is not None and excess[0] - seg.size >= 0:
                    excess[0] -= seg.size
                    return True
                return False
            deleted += self._delete_segments(self._deletable(over), now_ms)
        deleted += self._delete_segments(self._deletable(lambda seg, nxt: nxt is not None and nxt <= self._lso),
                                         now_ms)
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

    def _delete_segments(self, segs: list[LogSegment], now_ms: int | None) -> int:
        if not segs:
            return 0
        if segs[-1] is self._segments[-1]:
            self.roll(now_ms)  # never leave the log without an active segment
        for seg in segs:
            self._segments.pop(0)
            self._bases.pop(0)
            seg.delete()
        if self._bases[0] > self._lso:
            self._lso = self._bases[0]
            self.epoch_cache.truncate_from_start(self._lso)
        self._rp = max(self._rp, self._bases[0])
        self.producer_state.delete_snapshots_below(self._bases[0])
        self._write_checkpoints()
        return len(segs)

    # ------------------------------------------------------------------ compaction
    def replace_segments(self, new_segment: LogSegment, old_segments: list[LogSegment]) -> None:
        """Swap a cleaned segment (built with suffix ``.cleaned``, covering exactly the offsets of the
        contiguous ``old_segments``) into the log: flush it, rename it ``.swap`` (the commit point:
        recovery completes an interrupted swap), delete the old segments, drop the suffix."""
        self._check_open()
        if not old_segments or any(s not in self._segments for s in old_segments):
            raise ValueError("old_segments must be segments of this log")
        if new_segment.base_offset != old_segments[0].base_offset or old_segments[-1] is self._segments[-1]:
            raise ValueError("the cleaned segment must start where the old ones start, before the active one")
        new_segment.flush()
        new_segment.change_suffix(".swap")
        _fsync_dir(self.dir)
        i = self._segments.index(old_segments[0])
        for seg in old_segments:
            seg.delete()
        del self._segments[i:i + len(old_segments)], self._bases[i:i + len(old_segments)]
        new_segment.change_suffix("")
        _fsync_dir(self.dir)
        self._segments.insert(i, new_segment)
        self._bases.insert(i, new_segment.base_offset)

    def compact(self, now_ms: int) -> "cleaner.CleanerStats":
        """One compaction pass (storage/cleaner.py ``clean_log``); a no-op unless ``cleanup.policy`` has
        compact. Cleaned segments come back through ``replace_segments``."""
        self._check_open()
        return cleaner.clean_log(self, now_ms)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Flush, checkpoint, snapshot producer state and mark the shutdown clean."""
        if self._closed:
            return
        self.flush()
        self.producer_state.map_end_offset = self._leo
        self.producer_state.take_snapshot(self._leo)
        for seg in self._segments:
            seg.close()
        with open(os.path.join(self.dir, CLEAN_SHUTDOWN_FILE), "w") as f:
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.dir)
        self._closed = True

    def delete(self) -> None:
        """Close without flushing and remove the log's directory."""
        for seg in self._segments:
            seg.delete()
        self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"Log({self.dir!r}, start={self._lso}, end={self._leo}, hw={self._hw}, "
                f"segments={len(self._segments)})")
