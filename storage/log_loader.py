"""Opening a partition directory: Kafka's LogLoader. ``load_log`` turns whatever a crash left into a correct
log (contiguous segments, valid batches, agreeing indexes, epoch cache and producer state) and tells ``Log``
where it starts and ends. Called by ``Log.__init__`` only. The order of its writes: docs/internals.md (storage/).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Callable, NamedTuple

from protocol.errors import CorruptMessageError
from storage.checkpoint import TMP_SUFFIX, fsync_dir, read_offset_checkpoint, take_marker
from storage.epoch_cache import LeaderEpochCache
from storage.log_config import LogConfig
from storage.producer_state import ProducerStateManager
from storage.records import CONTROL_MASK
from storage.segment import LogSegment, log_file_name, parse_base_offset
from storage.txn_index import AbortedTxn, txn_index_file_name

log = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-checkpoint"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
EPOCH_FILE = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


class LoadedLog(NamedTuple):
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    checkpoints: dict[str, int]  # offset checkpoint file -> the valid value it holds


def load_log(
    d: str,
    config: LogConfig,
    epoch_cache: LeaderEpochCache,
    producer_state: ProducerStateManager,
    new_segment: Callable[..., LogSegment],
    now: int,
) -> LoadedLog:
    """Recover the directory ``d`` (see the module docstring for the order of writes)."""
    clean = _take_clean_shutdown_marker(d)
    _remove_temp_files_and_complete_swaps(d, new_segment, now)
    names = sorted(os.listdir(d))
    bases = sorted({b for n in names if n.endswith(".log") and (b := parse_base_offset(n)) is not None})
    for n in names:  # index files whose segment is gone
        b = parse_base_offset(n)
        if b is not None and b not in bases and n.endswith((".index", ".timeindex", ".txnindex")):
            os.remove(os.path.join(d, n))
    stored = {
        name: v
        for name in (LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, HIGH_WATERMARK_FILE)
        if (v := read_offset_checkpoint(os.path.join(d, name))) is not None
    }
    log_start = stored.get(LOG_START_OFFSET_FILE)
    rp, hw = stored.get(RECOVERY_POINT_FILE, 0), stored.get(HIGH_WATERMARK_FILE, 0)
    segments = [new_segment(b, now) for b in bases] or [new_segment(log_start or 0, now)]
    rebuild_epochs = epoch_cache.load_error is not None or (
        epoch_cache.path is not None
        and not os.path.exists(epoch_cache.path)
        and segments[-1].size + segments[0].size > 0
    )
    strict = config.cleanup_policy == "delete"
    first = len(segments) if clean else max(bisect_right(bases, rp) - 1, 0)
    for seg in segments[:first]:
        if not seg.indexes_exist():
            seg.rebuild_indexes()
    first = _check_continuity(d, segments, first, strict)
    epochs = LeaderEpochCache(None)
    if not rebuild_epochs:
        epochs.replace(epoch_cache.entries())
    if first < len(segments):
        _recover_segments(d, segments, first, strict, None if rebuild_epochs else epochs)
    for seg in segments[:-1]:
        seg.on_become_inactive()
    active = segments[-1]
    try:
        leo = active.next_offset  # loads (and if need be rebuilds) its indexes
    except CorruptMessageError as e:  # damage after a clean shutdown: the tail is recovered anyway
        log.warning("log %s: active segment is damaged (%s); recovering it", d, e)
        active.recover(strict_offsets=strict)
        active.flush()
        leo = active.next_offset
    log_start = min(max(log_start or 0, segments[0].base_offset), leo)
    hw = min(max(hw, log_start), leo)
    if rebuild_epochs:
        log.warning("log %s: rebuilding the leader epoch cache from batch headers", d)
        epochs.replace(header_epochs(segments))
    epochs.truncate_from_end(leo)
    epochs.truncate_from_start(log_start)
    if rebuild_epochs or epochs.entries() != epoch_cache.entries():
        epoch_cache.replace(epochs.entries())
    rebuild_from = segments[first].base_offset if first < len(segments) else leo
    for seg in segments:
        idx = seg.txn_index
        last = idx.last_offset  # loads it: a torn or damaged file is cut to its valid prefix
        if idx.damaged or (last is not None and last >= seg.next_offset):
            log.warning("log %s: aborted transaction index of segment %d is damaged; rebuilding", d, seg.base_offset)
            rebuild_from = min(rebuild_from, seg.base_offset)
    replay_from = producer_state.load(log_start, leo, now, upto=rebuild_from)
    replay_producer_state(segments, [s.base_offset for s in segments], producer_state, replay_from, leo)
    producer_state.on_high_watermark_updated(hw)
    return LoadedLog(segments, log_start, leo, hw, stored)


def _take_clean_shutdown_marker(d: str) -> bool:
    """Whether the last close was clean; the marker is removed (durably) before any repair."""
    return take_marker(os.path.join(d, CLEAN_SHUTDOWN_FILE))


def _remove_temp_files_and_complete_swaps(d: str, new_segment, now: int) -> None:
    """Drop ``.cleaned``/``.deleted``/checkpoint ``.tmp`` leftovers; complete each interrupted swap: a
    ``.log.swap`` (flushed before it got that name) replaces the segments whose base offsets lie in its
    offset range. A ``.swap`` index is dropped (the segment's indexes are rebuilt)."""
    names = sorted(os.listdir(d))
    swaps = [b for n in names if n.endswith(".log.swap") and (b := parse_base_offset(n)) is not None]
    for n in names:
        path = os.path.join(d, n)
        if n.endswith((".cleaned", ".deleted", ".txnindex" + TMP_SUFFIX)) or (
            n.endswith(TMP_SUFFIX) and "checkpoint" in n
        ):
            os.remove(path)
        elif n.endswith(".swap") and not n.endswith(".log.swap"):
            if not (n.endswith(".txnindex.swap") and parse_base_offset(n) in swaps):
                os.remove(path)
    for base in sorted(swaps):
        seg = new_segment(base, now, suffix=".swap")
        end = max(seg.next_offset, base + 1)
        seg.close()
        log.warning("log %s: completing the interrupted swap of segment %d (up to %d)", d, base, end)
        for path in (seg.index_path, seg.time_index_path):  # its indexes are rebuilt once it is in place
            if os.path.exists(path):
                os.remove(path)
        txn_swap = os.path.join(d, txn_index_file_name(base, ".swap"))
        # without a .txnindex.swap, the swap's own .txnindex is in place already (the old one went first)
        own_txn = txn_index_file_name(base) if not os.path.exists(txn_swap) else None
        for n in sorted(os.listdir(d), reverse=True):  # the segments it replaces, highest first
            b = parse_base_offset(n)
            if b is not None and base <= b < end and n.endswith((".log", ".index", ".timeindex", ".txnindex")):
                if n != own_txn:
                    os.remove(os.path.join(d, n))
        if os.path.exists(txn_swap):
            os.replace(txn_swap, os.path.join(d, txn_index_file_name(base)))
        os.replace(seg.log_path, os.path.join(d, log_file_name(base)))  # the swap's last step
    if swaps:
        fsync_dir(d)


def _delete_from(d: str, segments: list[LogSegment], i: int, why: str) -> None:
    """Delete ``segments[i:]``, highest base offset first: a crash leaves a shorter prefix, never a hole."""
    for seg in reversed(segments[i:]):
        log.warning("log %s: deleting segment %d (%s)", d, seg.base_offset, why)
        seg.delete()
    del segments[i:]


def _continues(prev_end: int, base: int, strict: bool) -> bool:
    return base == prev_end if strict else base >= prev_end


def _check_continuity(d: str, segments: list[LogSegment], first: int, strict: bool) -> int:
    """Check that each segment below ``first`` (the first one recovery scans) continues the previous one,
    and that segment ``first`` continues the last of them; delete everything from a hole on. Returns the
    index of the first segment to scan (lowered to a trusted segment whose last batch is unreadable)."""
    for i in range(1, min(first + 1, len(segments))):
        prev = segments[i - 1]
        try:
            end = prev.next_offset
        except CorruptMessageError as e:
            log.warning(
                "log %s: segment %d is damaged below the recovery point (%s); scanning it", d, prev.base_offset, e
            )
            return i - 1
        if not _continues(end, segments[i].base_offset, strict):
            _delete_from(
                d,
                segments,
                i,
                f"it does not continue segment {prev.base_offset}, which ends at {end}: "
                f"the rest of an interrupted truncation",
            )
            return min(first, len(segments))
    return first


def _recover_segments(
    d: str, segments: list[LogSegment], first: int, strict: bool, epochs: LeaderEpochCache | None
) -> None:
    """Validate segments ``first..``; truncate at the first bad batch; epochs met go into ``epochs``."""
    latest, last = [epochs.latest_epoch if epochs is not None else -1], [-1]

    def on_batch(_pos, h):
        if h.partition_leader_epoch >= 0:
            last[0] = h.partition_leader_epoch
            if epochs is not None and h.partition_leader_epoch > latest[0]:
                epochs.assign(h.partition_leader_epoch, h.base_offset)
                latest[0] = h.partition_leader_epoch

    i = first
    while i < len(segments):
        seg = segments[i]
        if i > first and not _continues(segments[i - 1].next_offset, seg.base_offset, strict):
            _delete_from(
                d,
                segments,
                i,
                f"it does not continue segment {segments[i - 1].base_offset}, which "
                f"ends at {segments[i - 1].next_offset}",
            )
            break
        truncated = seg.recover(strict_offsets=strict, on_batch=on_batch, min_epoch=last[0])
        seg.flush()
        if truncated:
            _delete_from(d, segments, i + 1, "after a corrupt batch")
            break
        i += 1


def header_epochs(segments: list[LogSegment]) -> list[tuple[int, int]]:
    """The leader epoch entries the batch headers imply: each epoch from its first batch."""
    entries: list[tuple[int, int]] = []
    for seg in segments:
        for _, h in seg.iter_headers():
            if h.partition_leader_epoch >= 0 and (not entries or h.partition_leader_epoch > entries[-1][0]):
                entries.append((h.partition_leader_epoch, h.base_offset))
    return entries


def replay_producer_state(
    segments: list[LogSegment], bases: list[int], ps: ProducerStateManager, start: int, end: int
) -> None:
    """Feed every producer batch in ``[start, end)`` to the producer state (after ``load``/``truncate``).
    The aborted transaction indexes of the segments from the one holding ``start`` are rebuilt: entries
    below ``start`` kept, the rest from the markers met; an index that differs (or is damaged) is
    rewritten once, atomically."""
    touched = segments[max(bisect_right(bases, start) - 1, 0) :]
    aborted: dict[int, list[AbortedTxn]] = {}
    for seg in touched if start < end else ():
        found = seg.translate_offset(start)
        if found is None:
            continue
        for pos, h in seg.iter_headers(found[0]):
            if h.producer_id >= 0 and h.base_offset >= start:
                data = seg.read_bytes(pos, h.size_in_bytes) if h.attributes & CONTROL_MASK else None
                t = aborted_txn_of_update(ps, h, -1, data, 0)
                if t is not None:
                    aborted.setdefault(seg.base_offset, []).append(t)
    for seg in touched:
        idx = seg.txn_index
        old = idx.entries()
        new = [t for t in old if t.last_offset < start] + aborted.get(seg.base_offset, [])
        if idx.damaged or new != old:
            idx.replace(new)
    ps.map_end_offset = end


def aborted_txn_of_update(ps: ProducerStateManager, h, now_ms: int, buf, pos: int) -> AbortedTxn | None:
    """``ps.update`` for an appended batch (live or replayed); the transaction it aborted, if any, with the
    LSO at its abort, for the txn index (Kafka's ``UnifiedLog`` append / ``LogSegment.recover``)."""
    completed = ps.update(h, now_ms, buf, pos)
    if completed is None or not completed.is_aborted:
        return None
    lso = ps.last_stable_offset_of(completed)
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)


def update_producer_state(ps: ProducerStateManager, seg: LogSegment, h, now_ms: int, buf, pos: int) -> None:
    """``aborted_txn_of_update`` for a live append to ``seg``: an aborted transaction goes into its index."""
    t = aborted_txn_of_update(ps, h, now_ms, buf, pos)
    if t is not None:
        seg.txn_index.append(t)
