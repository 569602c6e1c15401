"""Leader epoch cache: Kafka's LeaderEpochFileCache (KIP-101, KIP-279), epoch -> first offset, and its
checkpoint file (rewritten atomically on every change). Called by the owning Log only; not thread-safe.
Corruption and write order: docs/internals.md (storage/). ``leader-epoch-checkpoint``, ASCII::

    file  := "0" NL count NL entry{count}
    entry := epoch SP start_offset NL        (decimal, both >= 0 and strictly increasing)
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right

from storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_VERSION = 0
CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"


class CorruptCheckpointError(ValueError):
    """The checkpoint file exists but does not follow the grammar (internal; logged, never sent)."""


def parse_checkpoint(text: str) -> list[tuple[int, int]]:
    """Parse the checkpoint text; raises ``CorruptCheckpointError`` on anything off-grammar."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError("missing version or count line")
    try:
        version = int(lines[0])
        count = int(lines[1])
    except ValueError as e:
        raise CorruptCheckpointError(f"bad header: {e}") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"unsupported version {version}")
    if count < 0 or count != len(lines) - 2:
        raise CorruptCheckpointError(f"count {count} but {len(lines) - 2} entry lines")
    entries: list[tuple[int, int]] = []
    for line in lines[2:]:
        parts = line.split(" ")
        if len(parts) != 2:
            raise CorruptCheckpointError(f"malformed entry line {line!r}")
        try:
            epoch, offset = int(parts[0]), int(parts[1])
        except ValueError:
            raise CorruptCheckpointError(f"malformed entry line {line!r}") from None
        if epoch < 0 or offset < 0:
            raise CorruptCheckpointError(f"negative entry {line!r}")
        if entries and (epoch <= entries[-1][0] or offset <= entries[-1][1]):
            raise CorruptCheckpointError(f"non-monotonic entry {line!r} after {entries[-1]}")
        entries.append((epoch, offset))
    return entries


def format_checkpoint(entries: list[tuple[int, int]]) -> str:
    body = "".join(f"{e} {o}\n" for e, o in entries)
    return f"{CHECKPOINT_VERSION}\n{len(entries)}\n{body}"


class LeaderEpochCache:
    """Ordered ``(epoch, start_offset)`` entries, persisted to ``checkpoint_path`` (None: memory only)."""

    def __init__(self, checkpoint_path: str | None):
        self.path = checkpoint_path
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        self.load_error: str | None = None
        if checkpoint_path is not None:
            self._load()

    # ---------------------------------------------------------------- persistence
    def _load(self) -> None:
        assert self.path is not None
        try:
            with open(self.path, "r", encoding="ascii") as f:
                text = f.read()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as e:
            self._reject(f"unreadable: {e}")
            return
        try:
            entries = parse_checkpoint(text)
        except CorruptCheckpointError as e:
            self._reject(str(e))
            return
        self._epochs = [e for e, _ in entries]
        self._offsets = [o for _, o in entries]

    def _reject(self, why: str) -> None:
        self.load_error = why
        log.warning(
            "leader epoch checkpoint %s is corrupt (%s); starting with an empty cache, "
            "the log rebuilds it from its batches",
            self.path,
            why,
        )

    def flush(self) -> None:
        """Write the checkpoint atomically (no-op for a memory-only cache)."""
        if self.path is not None:
            write_atomically(self.path, format_checkpoint(self.entries()).encode("ascii"))

    # ---------------------------------------------------------------- reads
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[-1], self._offsets[-1]) if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._offsets[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which ``offset`` was written (largest entry with start <= offset), -1 if none."""
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch, KIP-279 (Kafka's ``endOffsetFor``), returns ``(epoch, end_offset)``:

        - requested == -1, or greater than every known epoch, or the cache is empty -> ``(-1, -1)``;
        - requested == latest epoch -> ``(latest, log_end_offset)``;
        - requested below the first known epoch -> ``(requested, start offset of the first epoch)``
          (Kafka: the data before it is gone; the follower truncates there);
        - otherwise ``(largest epoch <= requested, start offset of the smallest epoch > requested)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        hi = bisect_right(self._epochs, requested_epoch)  # index of the first epoch > requested
        if hi == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[hi - 1], self._offsets[hi]

    # ---------------------------------------------------------------- mutations
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        Kafka's rule: nothing to do when ``epoch`` is the latest epoch and ``start_offset`` is not below its
        start (the common case: every batch of the current epoch). Otherwise entries that would break
        monotonicity -- epoch >= ``epoch`` or start >= ``start_offset`` -- are removed from the end and
        the new entry is appended. Negative arguments raise ``ValueError``.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return False
        removed = []
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            removed.append((self._epochs.pop(), self._offsets.pop()))
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            log.warning(
                "%s: new epoch entry (%d, %d) removed conflicting entries %s",
                self.path,
                epoch,
                start_offset,
                removed[::-1],
            )
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self.flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset is >= ``end_offset`` (the log was truncated to it)."""
        if end_offset < 0 or not self._offsets or self._offsets[-1] < end_offset:
            return
        i = bisect_left(self._offsets, end_offset)
        del self._epochs[i:], self._offsets[i:]
        self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: drop entries that start at or before it, keeping the
        last of them re-anchored at ``start_offset`` (its epoch still covers the new first offset)."""
        if start_offset < 0 or not self._offsets or self._offsets[0] > start_offset:
            return
        i = bisect_right(self._offsets, start_offset)  # entries [0, i) start <= start_offset
        keep_epoch = self._epochs[i - 1]
        del self._epochs[:i], self._offsets[:i]
        self._epochs.insert(0, keep_epoch)
        self._offsets.insert(0, start_offset)
        self.flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self.flush()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Install ``entries`` (strictly increasing in both fields) with one checkpoint write: how a cache
        rebuilt or repaired in memory (a memory-only ``LeaderEpochCache(None)``) is made durable. Building
        it on the file entry by entry would leave a valid but partial checkpoint at a crash."""
        for (e0, o0), (e1, o1) in zip(entries, entries[1:]):
            if e1 <= e0 or o1 <= o0:
                raise ValueError(f"epoch entries not increasing: ({e0}, {o0}) then ({e1}, {o1})")
        if any(e < 0 or o < 0 for e, o in entries):
            raise ValueError(f"negative epoch entry in {entries}")
        self._epochs = [e for e, _ in entries]
        self._offsets = [o for _, o in entries]
        self.load_error = None
        self.flush()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path!r}, {self.entries()})"
