"""Compaction for ``storage.log.Log`` (a mixin, like log_retention.py): ``begin_clean`` / ``end_clean`` on the
Log's owner thread around a pass's ``build`` on any thread, or ``compact`` for the three in a row; every
operation that removes or rewrites segments aborts a pass first. Calls storage/cleaner.py. The abort and swap
protocols: docs/internals.md (storage/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage import cleaner
from storage.checkpoint import fsync_dir
from storage.cleaner import CleanerStats, CleaningAborted, CleanPass
from storage.log_config import LogConfig
from storage.segment import LogSegment
from storage.txn_index import carry_aborted

__all__ = ["LogCleaning", "CleaningAborted"]


def _dirty_enough(p: CleanPass, dirty_from: int, now_ms: int, config: LogConfig) -> bool:
    """Nothing past ``dirty_from`` has no dirty bytes and no first dirty record: never enough."""
    clean = sum(s.size for s in p.cleanable if s.next_offset <= dirty_from)
    dirty_segments = [s for s in p.cleanable if s.next_offset > dirty_from]
    dirty = sum(s.size for s in dirty_segments)
    if clean + dirty and dirty / (clean + dirty) > config.min_cleanable_dirty_ratio:
        return True
    first = dirty_segments[0].first_batch_timestamp() if dirty_segments else -1
    return 0 <= first < now_ms - config.max_compaction_lag_ms


class LogCleaning:
    """The compacting part of Log; see the module docstring."""

    _cleaning: CleanPass | None = None  # the pass between begin_clean and end_clean

    if TYPE_CHECKING:  # what the mixin uses of Log (declared for the type checker only)
        dir: str
        config: LogConfig
        _segments: list[LogSegment]
        _bases: list[int]

        def _check_open(self) -> None: ...

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
