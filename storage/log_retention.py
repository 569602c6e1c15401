"""DeleteRecords and retention for ``storage.log.Log`` (a mixin: ``Log`` inherits these methods): data goes from
the start of the log only, in whole segments, in a crash-safe order (docs/internals.md, storage/).
Single-threaded, like Log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from protocol.errors import OffsetOutOfRangeError
from storage.segment import LogSegment

if TYPE_CHECKING:
    from storage.epoch_cache import LeaderEpochCache
    from storage.log_config import LogConfig
    from storage.producer_state import ProducerStateManager

log = logging.getLogger("storage.log")


class LogRetention:
    """The deleting half of Log; see the module docstring."""

    if TYPE_CHECKING:  # what the mixin uses of Log (declared for the type checker only)
        dir: str
        config: LogConfig
        epoch_cache: LeaderEpochCache
        producer_state: ProducerStateManager
        _segments: list[LogSegment]
        _bases: list[int]
        _log_start_offset: int
        _leo: int
        _hw: int
        _rp: int

        def _check_open(self) -> None: ...
        def _write_checkpoints(self) -> None: ...
        def _abort_cleaning(self) -> None: ...
        @property
        def size_in_bytes(self) -> int: ...
        def roll(self, now_ms: int | None = None, new_base: int | None = None) -> LogSegment: ...

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
