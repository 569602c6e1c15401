"""Aborted transaction index: Kafka's TransactionIndex (``.txnindex``), one file per segment, for read_committed
fetches. Called by the owning segment only. Loading and repair: docs/internals.md (storage/). Big-endian,
fixed 34-byte entries in marker order::

    AbortedTxn => Version Int16 (0), ProducerId Int64, FirstOffset Int64, LastOffset Int64 (its ABORT
                  marker, in this segment; increasing), LastStableOffset Int64 (the LSO at the marker)
"""

from __future__ import annotations

import os
import struct
from typing import Iterable, NamedTuple

from storage.checkpoint import write_atomically

__all__ = ["AbortedTxn", "TxnIndex", "ABORTED_TXN", "txn_index_file_name", "collect_aborted", "carry_aborted"]

ABORTED_TXN = struct.Struct(">hqqqq")  # version, producer id, first offset, last offset, last stable offset
VERSION = 0
TXN_INDEX_SUFFIX = ".txnindex"


def txn_index_file_name(base_offset: int, suffix: str = "") -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}{suffix}"


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(VERSION, *self)


class TxnIndex:
    """The aborted transactions whose markers lie in the segment starting at ``start_offset``."""

    def __init__(self, path: str, start_offset: int, create: bool = False):
        self.path = path
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._dirty = False
        self._damaged = False
        if create:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
            self._entries = []

    def _valid(self, t: AbortedTxn, prev: AbortedTxn | None) -> bool:
        return (
            t.producer_id >= 0
            and 0 <= t.first_offset <= t.last_offset
            and t.last_offset >= self.start_offset
            and (prev is None or t.last_offset > prev.last_offset)
            and 0 <= t.last_stable_offset <= t.last_offset + 1
        )

    def _load(self) -> list[AbortedTxn]:
        if self._entries is not None:
            return self._entries
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:  # every segment creates its (empty) file: a missing one was lost
            raw, self._damaged = b"", True
            self._entries = []
            return self._entries
        out: list[AbortedTxn] = []
        n = ABORTED_TXN.size
        for pos in range(0, len(raw) - n + 1, n):
            version, *fields = ABORTED_TXN.unpack_from(raw, pos)
            t = AbortedTxn(*fields)
            if version != VERSION or not self._valid(t, out[-1] if out else None):
                break
            out.append(t)
        self._damaged = len(out) * n != len(raw)
        self._entries = out
        return out

    # ------------------------------------------------------------------ queries
    @property
    def damaged(self) -> bool:
        """The file was missing, torn or held an invalid entry when loaded (and was not rewritten since)."""
        self._load()
        return self._damaged

    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    @property
    def last_offset(self) -> int | None:
        e = self._load()
        return e[-1].last_offset if e else None

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's ``collectAbortedTxns``: entries with ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset``, and whether the search is complete (an entry's LSO reached the upper bound:
        no later entry can overlap the range)."""
        out = []
        for t in self._load():
            if t.last_offset >= fetch_offset and t.first_offset < upper_bound_offset:
                out.append(t)
            if t.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False

    # ------------------------------------------------------------------ mutation
    def append(self, t: AbortedTxn) -> None:
        entries = self._load()
        prev = entries[-1] if entries else None
        if not self._valid(t, prev):
            raise ValueError(f"{self.path}: {t} cannot follow {prev} (segment base {self.start_offset})")
        if self._damaged:
            self.replace(entries + [t])
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, t.encode(), len(entries) * ABORTED_TXN.size)
        finally:
            os.close(fd)
        entries.append(t)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        entries = self._load()
        keep = sum(1 for t in entries if t.last_offset < offset)
        if keep < len(entries) or self._damaged:
            del entries[keep:]
            if os.path.exists(self.path):
                os.truncate(self.path, keep * ABORTED_TXN.size)
            self._dirty, self._damaged = True, False

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the whole index atomically (tmp + fsync + rename + directory fsync)."""
        prev = None
        for t in entries:
            if not self._valid(t, prev):
                raise ValueError(f"{self.path}: {t} cannot follow {prev} (segment base {self.start_offset})")
            prev = t
        write_atomically(self.path, b"".join(t.encode() for t in entries))
        self._entries, self._dirty, self._damaged = list(entries), False, False

    def reset(self) -> None:
        self.truncate_to(-1)

    def flush(self) -> None:
        if self._dirty and os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, new_path)
        self.path = new_path

    def close(self) -> None:
        self.flush()

    def delete(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        self._entries, self._dirty = [], False


def collect_aborted(indexes: Iterable[TxnIndex], start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """Across the indexes of consecutive segments (from the one holding ``start_offset``): Kafka's
    ``LocalLog.collectAbortedTransactions``."""
    out: list[AbortedTxn] = []
    for idx in indexes:
        found, complete = idx.collect(start_offset, upper_bound_offset)
        out.extend(found)
        if complete:
            break
    return out


def carry_aborted(new: TxnIndex, olds: Iterable[TxnIndex], kept_markers: Iterable[int]) -> None:
    """Compaction: the cleaned segment keeps the entries of the segments it replaces whose ABORT marker it
    still holds (a marker the cleaner removed leaves nothing of its transaction to filter)."""
    kept = set(kept_markers)
    for old in olds:
        for t in old.entries():
            if t.last_offset in kept:
                new.append(t)
