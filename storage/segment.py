"""One log segment: Kafka's LogSegment, a ``.log`` of whole RecordBatch v2 batches (``os.pwrite`` appends,
``os.pread`` reads, ``flush`` fsyncs) with its ``.index``, ``.timeindex`` and ``.txnindex``, named by base
offset (20 digits; ``.cleaned`` / ``.swap`` suffixes while the cleaner replaces it). Called by the owning Log
(or the cleaner building a ``.cleaned`` one); parses only batch headers. Details: docs/internals.md (storage/).
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Callable, Iterator

from protocol.errors import CorruptMessageError, KafkaStorageError
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from storage.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    parse_header,
    validate_batch,
)
from storage.txn_index import TxnIndex, txn_index_file_name

log = logging.getLogger(__name__)

__all__ = ["LogSegment", "log_file_name", "index_file_name", "time_index_file_name", "parse_base_offset"]

LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX = ".log", ".index", ".timeindex"
MAX_RELATIVE_OFFSET = 0x7FFFFFFF
_HEADER_CHUNK = 64 * 1024  # bytes read at once while walking batch headers
_RECOVER_CHUNK = 4 * 1024 * 1024  # bytes read at once while validating a whole segment
_LENGTH = struct.Struct(">qi")  # base offset, length


def log_file_name(base_offset: int, suffix: str = "") -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}{suffix}"


def index_file_name(base_offset: int, suffix: str = "") -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}{suffix}"


def time_index_file_name(base_offset: int, suffix: str = "") -> str:
    return f"{base_offset:020d}{TIME_INDEX_SUFFIX}{suffix}"


def parse_base_offset(file_name: str) -> int | None:
    """The base offset of a ``<20 digits>.<ext>[suffix]`` file name, None for other names."""
    stem = file_name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


class LogSegment:
    """A segment of the log starting at ``base_offset`` in ``dir`` (created if the files do not exist)."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        index_interval_bytes: int = 4096,
        max_index_size: int = 10 * 1024 * 1024,
        created_ms: int = 0,
        suffix: str = "",
    ):
        self.dir = dir
        self.base_offset = base_offset
        self.suffix = suffix
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.created_ms = created_ms
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TxnIndex | None = None
        self._bytes_since_last_index_entry = 0
        self._max_ts: int | None = None  # None: not known yet (from the time index on demand)
        self._offset_of_max_ts = base_offset
        self._next_offset: int | None = base_offset if self._size == 0 else None
        self._rolling_ts: int | None = None  # max timestamp of the first batch (segment.ms), lazily
        self._closed = False
        self._rebuilt = False  # indexes rebuilt once already: a second inconsistency is the log's fault
        if self._size == 0:  # a new (or emptied) segment: its (empty) index files exist from the start
            self.offset_index.create()  # loads both indexes
            self.time_index.create()
            self._txn_index = TxnIndex(self.txn_index_path, base_offset, create=True)

    # ------------------------------------------------------------------ names and sizes
    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, log_file_name(self.base_offset, self.suffix))

    @property
    def index_path(self) -> str:
        return os.path.join(self.dir, index_file_name(self.base_offset, self.suffix))

    @property
    def time_index_path(self) -> str:
        return os.path.join(self.dir, time_index_file_name(self.base_offset, self.suffix))

    @property
    def txn_index_path(self) -> str:
        return os.path.join(self.dir, txn_index_file_name(self.base_offset, self.suffix))

    @property
    def txn_index(self) -> TxnIndex:
        if self._txn_index is None:
            self._txn_index = TxnIndex(self.txn_index_path, self.base_offset)
        return self._txn_index

    @property
    def size(self) -> int:
        """Bytes of batches in the ``.log`` file."""
        return self._size

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path!r}, size={self._size})"

    def indexes_exist(self) -> bool:
        return os.path.exists(self.index_path) and os.path.exists(self.time_index_path)

    # ------------------------------------------------------------------ indexes
    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._load_indexes()
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def _load_indexes(self) -> None:
        oi = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
        ti = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        self._offset_index, self._time_index = oi, ti
        try:
            if self._size == 0 and (oi.entries or ti.entries):
                raise CorruptIndexError(f"{oi.path}: entries for an empty segment")
            oi.sanity_check(self._size)
            if oi.entries:  # the last entry must point at a batch whose last offset it names
                off, pos = oi.entry(oi.entries - 1)
                h = self._header_at(pos)
                if h is None or h.base_offset + h.last_offset_delta != off:
                    raise CorruptIndexError(f"{oi.path}: last entry ({off}, {pos}) does not match the log")
            if not oi.entries and oi.max_entries and ti.max_entries and self._size > self.index_interval_bytes:
                for p, _h in self.iter_headers(0):  # a batch this far in must have been indexed
                    if p > self.index_interval_bytes:
                        raise CorruptIndexError(f"{oi.path}: empty, but the log has a batch at {p}")
            ti.sanity_check(None if self._next_offset is None else self._next_offset)
            if oi.entries and not ti.entries:
                h = self._header_at(oi.entry(oi.entries - 1)[1])
                if h is not None and h.max_timestamp >= 0:
                    raise CorruptIndexError(f"{ti.path}: empty, but indexed batches have timestamps")
            if ti.entries and ti.last_entry()[1] > oi.last_offset and self._size:
                last = self._last_header(oi.lookup(ti.last_entry()[1])[1])
                if last is None or ti.last_entry()[1] > last.base_offset + last.last_offset_delta:
                    raise CorruptIndexError(f"{ti.path}: last entry beyond the end of the log")
        except (CorruptIndexError, CorruptMessageError) as e:
            log.warning("segment %s: index is corrupt (%s); rebuilding it from the log", self.log_path, e)
            self.rebuild_indexes()
            return
        self._reset_bytes_since_index()

    def _reset_bytes_since_index(self) -> None:
        """Bytes from the last indexed batch (or the start) to the end: the same value as if the segment
        had been appended to without interruption, so the next entry lands where it always would."""
        oi = self._offset_index
        assert oi is not None
        self._bytes_since_last_index_entry = self._size - (oi.entry(oi.entries - 1)[1] if oi.entries else 0)

    def rebuild_indexes(self) -> int:
        """Rebuild both indexes by scanning (and validating) the log, which is left as it is: indexes
        cover the valid prefix, a corrupt batch later surfaces as CorruptMessageError to its reader
        (only Log recovery truncates). Offsets need only increase (a cleaned segment has gaps).
        Returns the number of bytes past the valid prefix."""
        self._rebuilt = True
        return self.recover(strict_offsets=False, truncate=False)

    # ------------------------------------------------------------------ low-level reads
    def read_bytes(self, position: int, size: int) -> bytes:
        """``size`` bytes of the ``.log`` at ``position`` (fewer at the end of the file)."""
        return os.pread(self._fd, size, position)

    def _header_at(self, pos: int) -> BatchHeader | None:
        if pos + BATCH_OVERHEAD > self._size:
            return None
        return parse_header(os.pread(self._fd, BATCH_OVERHEAD, pos))

    def iter_headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``start_position`` (a batch boundary) to
        ``end_position``; reads headers only (no CRC). CorruptMessageError on a torn batch."""
        end = self._size if end_position is None else min(end_position, self._size)
        fd, pos = self._fd, start_position
        buf, buf_start, last_size = b"", pos, 0
        first_read = min(_HEADER_CHUNK, self.index_interval_bytes + 4096)  # usually the whole walk
        while pos < end:
            off = pos - buf_start
            if off + BATCH_OVERHEAD > len(buf):
                want = BATCH_OVERHEAD if last_size >= _HEADER_CHUNK else (_HEADER_CHUNK if buf else first_read)
                buf, buf_start, off = os.pread(fd, min(want, max(end - pos, BATCH_OVERHEAD)), pos), pos, 0
            h = parse_header(buf, off)
            last_size = h.size_in_bytes
            if pos + last_size > self._size:
                raise CorruptMessageError(
                    f"segment {self.log_path}: batch at {pos} of {last_size} bytes "
                    f"runs past the end of the file ({self._size})"
                )
            yield pos, h
            pos += last_size

    def _last_header(self, start_position: int) -> BatchHeader | None:
        last = None
        for _, h in self.iter_headers(start_position):
            last = h
        return last

    def iter_batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """``(position, header, batch_bytes)`` of each batch from ``start_position`` (for replay and the
        cleaner); batches are read in large chunks, each yielded as its own ``bytes``."""
        pos, size = start_position, self._size
        while pos < size:
            chunk = os.pread(self._fd, min(_RECOVER_CHUNK, size - pos), pos)
            off = 0
            while off + BATCH_OVERHEAD <= len(chunk):
                h = parse_header(chunk, off)
                n = h.size_in_bytes
                if off + n > len(chunk):
                    break
                yield pos + off, h, chunk[off : off + n]
                off += n
            if off == 0:  # a batch larger than the chunk
                h = parse_header(chunk, 0)
                data = os.pread(self._fd, h.size_in_bytes, pos)
                if len(data) < h.size_in_bytes:
                    raise CorruptMessageError(f"segment {self.log_path}: batch at {pos} is truncated")
                yield pos, h, data
                off = len(data)
            pos += off

    # ------------------------------------------------------------------ offsets and timestamps
    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (the base offset when empty)."""
        if self._next_offset is None:
            last = self._last_header(self.offset_index.lookup(1 << 62)[1])
            self._next_offset = self.base_offset if last is None else last.base_offset + last.last_offset_delta + 1
        return self._next_offset

    def _ensure_max_ts(self) -> None:
        if self._max_ts is None:
            ti = self.time_index  # loading it may rebuild the indexes, which computes the maximum
            if self._max_ts is None:
                self._max_ts, self._offset_of_max_ts = ti.last_entry()

    @property
    def max_timestamp_so_far(self) -> int:
        """Largest batch max timestamp appended (-1 when none)."""
        self._ensure_max_ts()
        assert self._max_ts is not None
        return self._max_ts

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the batch holding ``max_timestamp_so_far``."""
        self._ensure_max_ts()
        return self._offset_of_max_ts

    def largest_timestamp(self) -> int:
        """Kafka's ``largestTimestamp``: the max timestamp, or the file's mtime when no batch has one."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    def translate_offset(self, offset: int, start_position: int = 0) -> tuple[int, BatchHeader] | None:
        """``(position, header)`` of the first batch whose last offset is >= ``offset``, or None.

        The batch at the index entry used must carry the entry's offset: an index entry that does not
        (a corrupt index that passed the sanity check) makes the segment rebuild its indexes, once."""
        for attempt in (0, 1):
            entry_offset, entry_pos = self.offset_index.lookup(offset)
            pos = max(entry_pos, start_position)
            try:
                for p, h in self.iter_headers(pos):
                    if p == entry_pos and entry_pos and h.last_offset != entry_offset:
                        raise CorruptIndexError(
                            f"{self.index_path}: entry ({entry_offset}, {entry_pos}) "
                            f"names a batch ending at {h.last_offset}"
                        )
                    if h.last_offset >= offset:
                        return p, h
                return None
            except (CorruptIndexError, CorruptMessageError) as e:
                if attempt or entry_pos == 0 or self._rebuilt:
                    raise CorruptMessageError(f"segment {self.log_path}: {e}") from None
                log.warning("segment %s: %s; rebuilding the indexes", self.log_path, e)
                self.rebuild_indexes()
        return None

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp (-1 when empty): what segment.ms and max.compaction.lag.ms age by."""
        if self._rolling_ts is None:
            h = self._header_at(0)
            self._rolling_ts = -1 if h is None else h.max_timestamp
        return self._rolling_ts

    # ------------------------------------------------------------------ append
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def should_roll(
        self,
        messages_size: int,
        max_timestamp: int,
        max_offset: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
        jitter_ms: int = 0,
    ) -> bool:
        """Kafka's ``shouldRoll``: full by bytes, old by ``segment.ms`` (measured from the first batch's
        timestamp, or the creation time without one), an index full, or an offset not relative-able."""
        if self._size == 0:
            return False
        if self._size > segment_bytes - messages_size:
            return True
        first_ts = self.first_batch_timestamp()
        waited = max_timestamp - first_ts if first_ts >= 0 else now_ms - self.created_ms
        if waited > segment_ms - jitter_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return not self.can_convert_to_relative_offset(max_offset)

    def append(self, buf, batches: list[tuple[int, int, int, int]]) -> None:
        """Write ``buf`` (whole batches, offsets assigned) at the end of the log. ``batches`` describes
        each batch in ``buf``: ``(position_in_buf, size, last_offset, max_timestamp)``, in order."""
        if not batches:
            return
        last_offset = batches[-1][2]
        if not self.can_convert_to_relative_offset(last_offset):
            msg = f"offset {last_offset} is not relative to base offset {self.base_offset}"
            raise KafkaStorageError(f"segment {self.log_path}: {msg}")
        physical = self._size
        view, n, written = memoryview(buf), len(buf), 0
        try:
            while written < n:
                written += os.pwrite(self._fd, view[written:], physical + written)
        except OSError as e:
            if written:  # keep the file a whole number of batches
                os.ftruncate(self._fd, physical)
            raise KafkaStorageError(f"segment {self.log_path}: write failed: {e}") from e
        finally:
            view.release()
        if self._size == 0:
            self._rolling_ts = batches[0][3]
        self._size = physical + n
        self._index_batches(physical, batches)
        self._next_offset = last_offset + 1

    def _index_batches(self, physical: int, batches) -> None:
        oi, ti = self.offset_index, self.time_index
        self._ensure_max_ts()
        assert self._max_ts is not None
        max_ts, max_ts_off = self._max_ts, self._offset_of_max_ts
        since, interval = self._bytes_since_last_index_entry, self.index_interval_bytes
        for pos, size, last, ts in batches:
            if ts > max_ts:
                max_ts, max_ts_off = ts, last
            if since > interval and not oi.is_full and not ti.is_full:
                oi.append(last, physical + pos)
                ti.maybe_append(max_ts, max_ts_off)
                since = 0
            since += size
        self._max_ts, self._offset_of_max_ts = max_ts, max_ts_off
        self._bytes_since_last_index_entry = since

    # ------------------------------------------------------------------ read
    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> tuple[bytes, int, int] | None:
        """Whole batches from the one holding ``start_offset``: ``(data, first_offset, next_offset)``;
        stops before ``max_position`` and within ``max_size`` bytes (the first batch alone may exceed
        it when ``min_one_message``). None when no batch here ends at or after ``start_offset``;
        ``(b"", start_offset, start_offset)`` when the limits leave nothing to return."""
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        pos, first = found
        limit = self._size if max_position is None else min(max_position, self._size)
        first_size = first.size_in_bytes
        if pos >= limit or pos + first_size > limit:
            return b"", start_offset, start_offset
        if first_size > max_size:
            if not min_one_message:
                return b"", start_offset, start_offset
            return os.pread(self._fd, first_size, pos), first.base_offset, first.next_offset
        end_limit = min(limit, pos + max_size)
        # Walk batch headers from the last indexed batch boundary before the end: bounded work. When
        # the walk starts past the first batch, every batch before its start fits.
        walk_from = max(pos, self.offset_index.lookup_position(end_limit - 1))
        end, next_offset = pos, first.base_offset
        for p, h in self.iter_headers(walk_from, end_limit):
            n = h.size_in_bytes
            if p + n > end_limit:
                end, next_offset = p, h.base_offset
                break
            end, next_offset = p + n, h.next_offset
        data = os.pread(self._fd, end - pos, pos)
        return data, first.base_offset, next_offset

    # ------------------------------------------------------------------ recovery and truncation
    def recover(
        self,
        strict_offsets: bool = False,
        on_batch: Callable[[int, BatchHeader], None] | None = None,
        min_epoch: int = -1,
        truncate: bool = True,
    ) -> int:
        """Validate every batch (length, magic, CRC, offsets increasing, inside the segment -- with
        ``strict_offsets`` each batch must start exactly where the previous ended -- and partition
        leader epochs never decreasing, starting from ``min_epoch``), rebuild both indexes from scratch,
        truncate the log at the first invalid batch (unless ``truncate`` is False). Returns the number
        of bytes past the valid prefix. ``on_batch(position, header)`` is called for each valid batch."""
        # their buffered entries must not reach the rebuilt files later (the two are loaded together)
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.close()
            self._time_index.close()
        oi = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
        ti = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        oi.truncate()
        ti.truncate()
        self._offset_index, self._time_index = oi, ti
        self._max_ts, self._offset_of_max_ts, self._bytes_since_last_index_entry = -1, self.base_offset, 0
        size, fd = self._size, self._fd
        pos, expected, prev_epoch = 0, self.base_offset, min_epoch
        buf, buf_start = b"", 0
        while pos < size:
            off = pos - buf_start
            if off + LOG_OVERHEAD > len(buf):
                buf, buf_start, off = os.pread(fd, min(_RECOVER_CHUNK, size - pos), pos), pos, 0
                if len(buf) < LOG_OVERHEAD:
                    break
            base, length = _LENGTH.unpack_from(buf, off)
            n = LOG_OVERHEAD + length
            if length < MIN_BATCH_LENGTH or pos + n > size:
                break
            if off + n > len(buf):
                buf, buf_start, off = os.pread(fd, max(_RECOVER_CHUNK, n), pos), pos, 0
            try:
                h = validate_batch(buf, off)
            except CorruptMessageError as e:
                log.warning("segment %s: %s", self.log_path, e)
                break
            last = base + h.last_offset_delta
            epoch = h.partition_leader_epoch
            if (
                base < expected
                or (strict_offsets and base != expected)
                or last - self.base_offset > MAX_RELATIVE_OFFSET
                or (epoch < prev_epoch and prev_epoch >= 0)
            ):
                args = (self.log_path, pos, base, last, expected, epoch, prev_epoch)
                log.warning("segment %s: batch at %d has offsets %d..%d (from %d) or epoch %d after %d", *args)
                break
            if on_batch is not None:
                on_batch(pos, h)
            self._index_batches(pos, ((0, n, last, h.max_timestamp),))
            expected, prev_epoch = last + 1, max(prev_epoch, epoch)
            pos += n
        truncated = size - pos
        if truncated and truncate:
            log.warning("segment %s: truncating %d invalid bytes at position %d", self.log_path, truncated, pos)
            os.ftruncate(fd, pos)
            self._size = pos
        self._next_offset = expected if pos == self._size else None
        self._rolling_ts = None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (a batch holding ``offset`` goes
        whole); returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        pos = found[0]
        removed = self._size - pos
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        os.ftruncate(self._fd, pos)
        self._size = pos
        self._reset_bytes_since_index()
        self._rolling_ts = None
        # recompute the end and the max timestamp from the last remaining time index entry on
        ts, ts_off = self.time_index.last_entry()
        start = self.offset_index.lookup(ts_off)[1] if self.time_index.entries else 0
        last = None
        for _, h in self.iter_headers(start):
            if h.max_timestamp > ts:
                ts, ts_off = h.max_timestamp, h.last_offset
            last = h
        if last is None and start > 0:
            last = self._last_header(self.offset_index.lookup(1 << 62)[1])
        self._max_ts, self._offset_of_max_ts = ts, ts_off
        end = None if last is None else last.base_offset + last.last_offset_delta + 1
        self._next_offset = self.base_offset if pos == 0 else end
        return removed

    # ------------------------------------------------------------------ lifecycle
    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (its last entry then names the segment's
        largest timestamp after a reopen) and push index bytes to the OS."""
        self._ensure_max_ts()
        assert self._max_ts is not None
        if self._max_ts >= 0:
            self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts, skip_full_check=True)
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.flush(fsync=False)
            self._time_index.flush(fsync=False)

    def flush(self) -> None:
        """fsync the log and the indexes."""
        os.fsync(self._fd)
        if self._txn_index is not None:
            self._txn_index.flush()
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.flush()
            self._time_index.flush()

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the four files from the current suffix to ``new_suffix`` (log file last)."""
        old_log = self.log_path
        self.txn_index.rename(os.path.join(self.dir, txn_index_file_name(self.base_offset, new_suffix)))
        for idx, name_of in ((self._offset_index, index_file_name), (self._time_index, time_index_file_name)):
            new_path = os.path.join(self.dir, name_of(self.base_offset, new_suffix))
            if idx is not None:
                idx.rename(new_path)
            else:
                old = os.path.join(self.dir, name_of(self.base_offset, self.suffix))
                if os.path.exists(old):
                    os.replace(old, new_path)
        self.suffix = new_suffix
        os.replace(old_log, self.log_path)

    def close(self) -> None:
        if self._closed:
            return
        if self._offset_index is not None and self._time_index is not None:
            self.on_become_inactive()
            self._offset_index.close()
            self._time_index.close()
        if self._txn_index is not None:
            self._txn_index.close()
        os.close(self._fd)
        self._closed = True

    def abandon(self) -> None:
        """Close the files without writing anything (no index entry, no flush): the segment's directory has
        failed; what reached the disk is recovered on the next open."""
        if self._closed:
            return
        for idx in (self._offset_index, self._time_index):
            if idx is not None:
                try:
                    idx.close()
                except (OSError, ValueError):
                    pass
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._closed = True

    def delete(self) -> None:
        """Close and remove the four files."""
        if not self._closed:
            if self._offset_index is not None and self._time_index is not None:
                self._offset_index.close()
                self._time_index.close()
            os.close(self._fd)
            self._closed = True
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
