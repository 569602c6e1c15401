"""Sparse per-segment indexes: Kafka's OffsetIndex (``.index``) and TimeIndex (``.timeindex``), append-only
files mirrored in memory; a lookup gives a lower-bound position. Called by the owning segment only. Storage
choices and corruption handling: docs/internals.md (storage/). Big-endian, fixed-size entries, no header::

    OffsetIndexFile => [RelativeOffset Int32 (of a batch's LAST offset, increasing), Position Int32 (increasing)]
    TimeIndexFile   => [Timestamp Int64 (running max, increasing), RelativeOffset Int32 (non-decreasing)]
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from typing import BinaryIO

__all__ = ["AbstractIndex", "OffsetIndex", "TimeIndex", "CorruptIndexError", "OFFSET_ENTRY", "TIME_ENTRY"]

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_BIG_ENDIAN_HOST = sys.byteorder == "big"
_MAX_REL = 0x7FFFFFFF
_BLOCK = 4096
_BLOCK_STRUCT = struct.Struct(">" + "qi" * _BLOCK)


class CorruptIndexError(Exception):
    """An index file does not follow its grammar or contradicts its segment (internal; triggers a rebuild)."""


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def _split(raw: bytes, first: str, second: str, entry_size: int) -> tuple[array, array]:
    """De-interleave big-endian fixed entries of two fields into two native arrays."""
    n = len(raw) // entry_size
    if first == "q":  # (int64, int32) entries: unpack in blocks of entries with one struct call each
        a, b = array("q"), array("i")
        for start in range(0, n, _BLOCK):
            k = min(_BLOCK, n - start)
            st = _BLOCK_STRUCT if k == _BLOCK else struct.Struct(">" + "qi" * k)
            vals = st.unpack_from(raw, start * entry_size)
            a.extend(vals[0::2])
            b.extend(vals[1::2])
        return a, b
    both = array("i", raw[: n * entry_size])
    if not _BIG_ENDIAN_HOST:
        both.byteswap()
    return both[0::2], both[1::2]


class _IndexFile:
    """The append-only file behind an index: buffered appends, truncation, fsync, rename, delete."""

    __slots__ = ("path", "_f")

    def __init__(self, path: str):
        self.path = path
        self._f: BinaryIO | None = None

    def _writer(self):
        if self._f is None:
            self._f = open(self.path, "ab", buffering=8192)
        return self._f

    def create(self) -> None:
        self._writer()

    def write(self, data: bytes) -> None:
        self._writer().write(data)

    def truncate(self, size: int) -> None:
        f = self._writer()
        f.flush()
        os.ftruncate(f.fileno(), size)

    def flush(self, fsync: bool = True) -> None:
        if self._f is not None:
            self._f.flush()
            if fsync:
                os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def rename(self, new_path: str) -> None:
        self.flush(fsync=False)
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


class AbstractIndex:
    """What both indexes share (Kafka's ``AbstractIndex``): fixed-size two-field entries held as two
    native arrays (``_keys``, searched by ``bisect``, and ``_values``), the append-only file behind them,
    the entry cap, truncation by offset and the whole-entries check. A subclass names its entry struct
    and field types, which array holds the relative offsets (``_REL_IS_KEY``), and its lookups, appends
    and ordering rules."""

    __slots__ = ("base_offset", "max_entries", "_file", "_torn", "_keys", "_values", "_rel_offsets")

    ENTRY: struct.Struct
    entry_size: int  # ENTRY.size
    _KEY_TYPE: str  # array typecode of the first field
    _REL_IS_KEY: bool  # the relative offsets are the first field (offset index) or the second (time index)

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.base_offset = base_offset
        self.max_entries = max(max_index_size, 0) // self.entry_size
        self._file = _IndexFile(path)
        raw = _read_file(path)
        self._torn = len(raw) % self.entry_size
        self._keys, self._values = _split(raw, self._KEY_TYPE, "i", self.entry_size)
        self._rel_offsets = self._keys if self._REL_IS_KEY else self._values

    # ------------------------------------------------------------------ reads
    @property
    def path(self) -> str:
        return self._file.path

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self._keys) * self.entry_size

    # ------------------------------------------------------------------ writes
    def _append_entry(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._file.write(self.ENTRY.pack(key, value))

    def _truncate_entries(self, n: int) -> None:
        """Keep the first ``n`` entries."""
        if n < len(self._keys):
            del self._keys[n:], self._values[n:]
            self._file.truncate(n * self.entry_size)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset`` (entries' offsets never decrease)."""
        base = self.base_offset
        self._truncate_entries(bisect_right(self._rel_offsets, offset - base - 1) if offset > base else 0)

    def truncate(self) -> None:
        """Remove every entry."""
        del self._keys[:], self._values[:]
        self._torn = 0
        self._file.truncate(0)

    def _check_whole_entries(self) -> None:
        if self._torn:
            raise CorruptIndexError(f"{self.path}: size is not a multiple of {self.entry_size}")

    # ------------------------------------------------------------------ file
    def create(self) -> None:
        self._file.create()

    def flush(self, fsync: bool = True) -> None:
        self._file.flush(fsync)

    def close(self) -> None:
        self._file.close()

    def rename(self, new_path: str) -> None:
        self._file.rename(new_path)

    def delete(self) -> None:
        self._file.delete()


class OffsetIndex(AbstractIndex):
    """Maps (last) offsets of some batches to their byte positions in the segment's log.
    Entries: ``_keys`` relative offsets, ``_values`` positions."""

    __slots__ = ()

    ENTRY = OFFSET_ENTRY
    entry_size = OFFSET_ENTRY.size
    _KEY_TYPE = "i"
    _REL_IS_KEY = True

    @property
    def last_offset(self) -> int:
        """Absolute offset of the last entry (the base offset when empty)."""
        return self.base_offset + self._keys[-1] if self._keys else self.base_offset

    def entry(self, i: int) -> tuple[int, int]:
        return self.base_offset + self._keys[i], self._values[i]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the largest entry with offset <= target, else ``(base, 0)``."""
        rel = target_offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        i = bisect_right(self._keys, min(rel, _MAX_REL)) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def lookup_position(self, position: int) -> int:
        """The largest indexed position <= ``position`` (0 when none): always a batch boundary."""
        i = bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._keys and rel <= self._keys[-1]:
            raise ValueError(f"offset index {self.path}: offset {offset} not above last entry {self.last_offset}")
        if rel < 0 or rel > _MAX_REL:
            raise ValueError(f"offset index {self.path}: offset {offset} not relative to base {self.base_offset}")
        if len(self._keys) >= self.max_entries:
            raise ValueError(f"offset index {self.path} is full ({self.max_entries} entries)")
        self._append_entry(rel, position)

    def sanity_check(self, log_size: int) -> None:
        """Raise ``CorruptIndexError`` unless the file is whole entries, offsets strictly increase and
        positions increase and lie inside a log of ``log_size`` bytes."""
        self._check_whole_entries()
        rel, pos = self._keys, self._values
        if not rel:
            return
        if rel[0] < 0 or pos[0] < 0 or pos[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: entry outside the segment (log size {log_size})")
        if len(rel) > 1 and not (_strictly_increasing(rel) and _strictly_increasing(pos)):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")


class TimeIndex(AbstractIndex):
    """Maps the running maximum timestamp of a segment to the offset where it was reached.
    Entries: ``_keys`` timestamps, ``_values`` relative offsets."""

    __slots__ = ()

    ENTRY = TIME_ENTRY
    entry_size = TIME_ENTRY.size
    _KEY_TYPE = "q"
    _REL_IS_KEY = False

    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, ``(-1, base_offset)`` when empty."""
        if not self._keys:
            return -1, self.base_offset
        return self._keys[-1], self.base_offset + self._values[-1]

    def entry(self, i: int) -> tuple[int, int]:
        return self._keys[i], self.base_offset + self._values[i]

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= target, else ``(-1, base)``."""
        i = bisect_right(self._keys, target_timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._keys[i], self.base_offset + self._values[i]

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append ``(timestamp, offset)`` if ``timestamp`` is above the last entry's; returns whether it did.
        ``skip_full_check`` lets a segment that is becoming inactive record its final maximum."""
        if self._keys and timestamp <= self._keys[-1]:
            return False
        if timestamp < 0:
            return False
        rel = offset - self.base_offset
        if rel < 0 or rel > _MAX_REL or (self._values and rel < self._values[-1]):
            raise ValueError(f"time index {self.path}: offset {offset} out of order (base {self.base_offset})")
        if not skip_full_check and len(self._keys) >= self.max_entries:
            raise ValueError(f"time index {self.path} is full ({self.max_entries} entries)")
        self._append_entry(timestamp, rel)
        return True

    def sanity_check(self, next_offset: int | None = None) -> None:
        """Raise ``CorruptIndexError`` unless whole entries, strictly increasing timestamps, non-decreasing
        offsets, all inside ``[base_offset, next_offset)`` when that is known."""
        self._check_whole_entries()
        ts, rel = self._keys, self._values
        if not ts:
            return
        if rel[0] < 0 or ts[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative first entry")
        if next_offset is not None and self.base_offset + rel[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"{self.path}: last entry offset beyond the segment's end {next_offset}")
        if len(ts) > 1 and not (_strictly_increasing(ts) and _non_decreasing(rel)):
            raise CorruptIndexError(f"{self.path}: entries are out of order")


def _strictly_increasing(a: array) -> bool:
    # C-speed: a sorted copy equal to the original, and no two equal neighbours (a set is as long)
    return a.tolist() == sorted(a) and len(set(a)) == len(a)


def _non_decreasing(a: array) -> bool:
    return a.tolist() == sorted(a)
