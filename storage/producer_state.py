"""Idempotent and transactional producer state of one partition: Kafka's ProducerStateManager (sequence and
epoch checks, open transactions, the last stable offset, snapshots). Called only by the owning Log (leader
append: ``check`` then ``update``; follower append and replay: ``update``); not thread-safe. The rules and
the use by the Log: docs/internals.md (storage/). Snapshot ``<offset:020d>.snapshot``, big-endian::

    snapshot := version:int16 (=1) crc:uint32 (CRC-32C of what follows) count:int32 entry{count}
    entry    := producer_id:int64 producer_epoch:int16 coordinator_epoch:int32 last_timestamp:int64
                txn_first_offset:int64 (-1: none) batch_count:int8 batch{batch_count}
    batch    := first_seq:int32 last_seq:int32 first_offset:int64 last_offset:int64 timestamp:int64
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections import deque
from typing import NamedTuple

from crc32c import crc32c

from protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from storage.checkpoint import TMP_SUFFIX, write_atomically
from storage.control import parse_control_record
from storage.records import (
    CONTROL_ABORT,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    RecordBatch,
)

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (1 day)
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")

SNAP_HEADER = struct.Struct(">hIi")  # version, crc, count
SNAP_ENTRY = struct.Struct(">qhiqqb")  # pid, epoch, coordinator epoch, last ts, txn first offset, n
SNAP_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp
_CRC_FROM = 6  # bytes after version (2) + crc (4)


class CorruptSnapshotError(ValueError):
    """A producer snapshot failed its checks (internal; logged and the file discarded)."""


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker at ``last_offset`` (the marker's offset), for the txn index."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    __slots__ = (
        "producer_id",
        "producer_epoch",
        "batches",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "seq_unknown",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = -1,
        current_txn_first_offset: int | None = None,
        batches=(),
        max_batches: int = 5,
    ):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=max_batches)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        # Known from a marker only (its data here went to retention/DeleteRecords, or it never wrote
        # here): the epoch fences, but there is no sequence to follow on from until its next data batch.
        self.seq_unknown = False

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()  # sequences restart with a new epoch
            self.producer_epoch = epoch
            self.seq_unknown = False

    def __eq__(self, other) -> bool:
        return isinstance(other, ProducerStateEntry) and self._key() == other._key()

    def _key(self):
        return (
            self.producer_id,
            self.producer_epoch,
            list(self.batches),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            self.seq_unknown,
        )

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(pid={self.producer_id}, epoch={self.producer_epoch}, "
            f"batches={list(self.batches)}, coordinator_epoch={self.coordinator_epoch}, "
            f"last_ts={self.last_timestamp}, txn_first_offset={self.current_txn_first_offset}, "
            f"seq_unknown={self.seq_unknown})"
        )


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _control_of(header: BatchHeader, buf, pos: int) -> tuple[int, int] | None:
    """(control_type, coordinator_epoch) of a control batch; None for an empty (cleaned) one."""
    if header.records_count == 0:
        return None
    if buf is None:
        raise ValueError("a control batch needs its bytes (buf, pos) to read the marker")
    records = RecordBatch(buf, pos, header=header).records()
    if not records:
        raise InvalidRecordError(f"control batch at offset {header.base_offset} has no record")
    return parse_control_record(records[0])


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries) -> bytes:
    parts = []
    n = 0
    for e in entries:
        txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        parts.append(
            SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, txn, len(e.batches))
        )
        parts.extend(SNAP_BATCH.pack(*b) for b in e.batches)
        n += 1
    body = struct.pack(">i", n) + b"".join(parts)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes, max_batches: int = 5) -> list[ProducerStateEntry]:
    if len(data) < SNAP_HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the header")
    version, crc, count = SNAP_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unsupported snapshot version {version}")
    if crc32c(memoryview(data)[_CRC_FROM:]) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    if count < 0:
        raise CorruptSnapshotError(f"negative entry count {count}")
    pos = SNAP_HEADER.size
    out = []
    try:
        for _ in range(count):
            pid, epoch, coord, ts, txn, nb = SNAP_ENTRY.unpack_from(data, pos)
            pos += SNAP_ENTRY.size
            if nb < 0:
                raise CorruptSnapshotError(f"negative batch count for producer {pid}")
            batches = []
            for _ in range(nb):
                batches.append(BatchMetadata(*SNAP_BATCH.unpack_from(data, pos)))
                pos += SNAP_BATCH.size
            out.append(
                ProducerStateEntry(pid, epoch, coord, ts, None if txn < 0 else txn, batches[-max_batches:], max_batches)
            )
    except struct.error:
        raise CorruptSnapshotError("truncated entry") from None
    if pos != len(data):
        raise CorruptSnapshotError(f"{len(data) - pos} trailing bytes")
    return out


class ProducerStateManager:
    """Producer id -> ProducerStateEntry for one partition log in ``log_dir``."""

    def __init__(
        self,
        log_dir: str,
        max_batches_per_producer: int = 5,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ):
        if max_batches_per_producer < 1:
            raise ValueError("max_batches_per_producer must be >= 1")
        self.log_dir = log_dir
        self.max_batches = max_batches_per_producer
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self._unreplicated: dict[int, CompletedTxn] = {}  # marker offset -> closed, not yet under the HW
        self.map_end_offset = 0  # state reflects every batch below this offset

    # ------------------------------------------------------------------ queries
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """``{producer_id: first_offset}`` of open transactions, by first offset."""
        open_ = [
            (e.current_txn_first_offset, pid)
            for pid, e in self.producers.items()
            if e.current_txn_first_offset is not None
        ]
        return {pid: first for first, pid in sorted(open_)}

    @property
    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open or not-yet-replicated transaction, None when all is stable."""
        firsts = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset is not None]
        firsts.extend(t.first_offset for t in self._unreplicated.values())
        return min(firsts) if firsts else None

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO when ``completed``'s marker was appended (its entry already closed), for the txn index:
        Kafka's ``lastStableOffset(completedTxn)`` -- the first offset of the earliest other open
        transaction, else one past the marker."""
        pid = completed.producer_id
        firsts = [
            e.current_txn_first_offset
            for p, e in self.producers.items()
            if p != pid and e.current_txn_first_offset is not None
        ]
        return min(firsts) if firsts else completed.last_offset + 1

    def last_stable_offset(self, high_watermark: int) -> int:
        fuo = self.first_unstable_offset
        return high_watermark if fuo is None else min(fuo, high_watermark)

    # ------------------------------------------------------------------ append path
    def check(self, header: BatchHeader, buf=None, pos: int = 0, sequences: bool = True) -> tuple[int, int] | None:
        """Validate a leader append of ``header``'s batch against the state (see module docstring);
        ``sequences`` False (a coordinator's write) checks the epoch and transaction state only."""
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            return None
        epoch = header.producer_epoch
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {pid} at offset {header.base_offset} is smaller than the last "
                f"seen epoch {entry.producer_epoch}"
            )
        if header.is_control:
            control = _control_of(header, buf, pos) if buf is not None else None
            if control is not None and control[1] < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"coordinator epoch {control[1]} of marker for producer {pid} is older than "
                    f"{entry.coordinator_epoch}"
                )
            return None
        if sequences:
            dup = self._check_sequence(entry, header)
            if dup is not None:
                return dup
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"non-transactional write from producer {pid} while its transaction from offset "
                f"{entry.current_txn_first_offset} is open"
            )
        return None

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> tuple[int, int] | None:
        """A duplicate's ``(first_offset, last_offset)``, None for the next batch; raises otherwise."""
        pid, epoch = header.producer_id, header.producer_epoch
        first_seq, last_seq = header.base_sequence, header.last_sequence
        dup = entry.find_duplicate(epoch, first_seq, last_seq)
        if dup is not None:
            return dup.first_offset, dup.last_offset
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"invalid sequence {first_seq} for the new epoch {epoch} of producer {pid} "
                    f"(current epoch {entry.producer_epoch}): a new epoch starts at 0"
                )
        elif not entry.seq_unknown and not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence for producer {pid}: {first_seq} (incoming), {entry.last_seq} "
                f"(current end sequence), epoch {epoch}"
            )
        return None

    def update(self, header: BatchHeader, append_time_ms: int, buf=None, pos: int = 0) -> CompletedTxn | None:
        """Apply an appended batch (offsets assigned). Control batches need ``buf``/``pos`` for their
        marker. ``append_time_ms`` < 0 means "use the batch's max timestamp". Returns the transaction a
        marker closed (None for data batches, non-idempotent batches and empty markers)."""
        if header.next_offset > self.map_end_offset:
            self.map_end_offset = header.next_offset
        pid = header.producer_id
        if pid < 0:
            return None
        ts = append_time_ms if append_time_ms >= 0 else header.max_timestamp
        entry = self.producers.get(pid)
        if header.is_control:
            control = _control_of(header, buf, pos)
            if control is None:  # an empty marker batch: the cleaner removed its transaction
                return None
            created = entry is None
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid, max_batches=self.max_batches)
            control_type, coordinator_epoch = control
            completed = None
            if entry.current_txn_first_offset is not None:
                completed = CompletedTxn(
                    pid, entry.current_txn_first_offset, header.base_offset, control_type == CONTROL_ABORT
                )
                self._unreplicated[header.base_offset] = completed
            entry._set_epoch(header.producer_epoch)
            entry.seq_unknown = entry.seq_unknown or created
            entry.coordinator_epoch = coordinator_epoch
            entry.current_txn_first_offset = None
            entry.last_timestamp = ts
            return completed
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid, max_batches=self.max_batches)
        entry._set_epoch(header.producer_epoch)
        entry.seq_unknown = False
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset, header.max_timestamp
            )
        )
        entry.last_timestamp = ts
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
        return None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Closed transactions whose marker is below the high watermark become stable."""
        for marker in [m for m in self._unreplicated if m < high_watermark]:
            del self._unreplicated[marker]

    @staticmethod
    def _retained(e: ProducerStateEntry, log_start_offset: int) -> bool:
        """Kafka's ``isProducerRetained``: a data batch at or above the log start (or an open transaction,
        which bounds the LSO and must stay until its marker)."""
        return e.current_txn_first_offset is not None or (
            bool(e.batches) and e.batches[-1].last_offset >= log_start_offset
        )

    def evict_unretained(self, log_start_offset: int) -> list[int]:
        """The log start moved (retention, DeleteRecords): forget producers not retained (Kafka's
        ``onLogStartOffsetIncremented``). Their data is gone, so they are unknown again and may go on at any
        sequence, exactly as after a reopen (``load`` applies the same rule to snapshot entries, and a
        marker replayed for an unknown producer leaves its sequence unknown)."""
        gone = [pid for pid, e in self.producers.items() if not self._retained(e, log_start_offset)]
        for pid in gone:
            del self.producers[pid]
        return gone

    def remove_expired_producers(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``producer_id_expiration_ms`` with no open transaction."""
        expired = [pid for pid, e in self.producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        return expired

    def _is_expired(self, e: ProducerStateEntry, now_ms: int) -> bool:
        return e.current_txn_first_offset is None and now_ms - e.last_timestamp >= self.producer_id_expiration_ms

    # ------------------------------------------------------------------ snapshots
    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.log_dir):
            m = _SNAPSHOT_RE.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    @property
    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.log_dir, snapshot_file_name(offset))

    def take_snapshot(self, offset: int | None = None) -> str:
        """Write the state (which must cover exactly the batches below ``offset``, default
        ``map_end_offset``) to ``<offset:020d>.snapshot`` atomically; returns the path."""
        if offset is None:
            offset = self.map_end_offset
        if offset != self.map_end_offset:
            log.warning(
                "%s: producer snapshot at %d but the state covers batches below %d",
                self.log_dir,
                offset,
                self.map_end_offset,
            )
        data = encode_snapshot(self.producers[pid] for pid in sorted(self.producers))
        path = self._snapshot_path(offset)
        write_atomically(path, data)
        return path

    def read_snapshot(self, offset: int) -> list[ProducerStateEntry]:
        with open(self._snapshot_path(offset), "rb") as f:
            return decode_snapshot(f.read(), self.max_batches)

    def _delete_snapshot(self, offset: int) -> None:
        try:
            os.remove(self._snapshot_path(offset))
        except FileNotFoundError:
            pass  # already gone: deleting is idempotent

    def _remove_tmp_files(self) -> None:
        for name in os.listdir(self.log_dir):
            if name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
                os.remove(os.path.join(self.log_dir, name))

    def delete_snapshots_below(self, offset: int) -> None:
        for o in self.snapshot_offsets():
            if o < offset:
                self._delete_snapshot(o)

    def _reset(self, offset: int) -> None:
        self.producers.clear()
        self._unreplicated.clear()
        self.map_end_offset = offset

    def load(
        self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None, upto: int | None = None
    ) -> int:
        """Rebuild the state from the latest valid snapshot at or below ``log_end_offset``; returns the
        offset from which the Log must replay its batches through ``update`` up to its end. Snapshots
        above the end are deleted (they describe truncated data), corrupt ones are logged and deleted.
        With ``now_ms``, expired producers are dropped. No usable snapshot: empty state, replay from
        ``log_start_offset``. ``upto``: use no snapshot above it (the log loader replays from there to
        rebuild the aborted transaction indexes of the segments it recovers)."""
        self._remove_tmp_files()
        for o in self.snapshot_offsets():
            if o > log_end_offset:
                self._delete_snapshot(o)
        for o in reversed(self.snapshot_offsets()):
            if upto is not None and o > upto:
                continue
            try:
                entries = self.read_snapshot(o)
            except (CorruptSnapshotError, OSError) as e:
                log.warning(
                    "%s: producer snapshot %s is unusable (%s); deleting it", self.log_dir, snapshot_file_name(o), e
                )
                self._delete_snapshot(o)
                continue
            self._reset(max(o, log_start_offset))
            for entry in entries:
                if (now_ms is None or not self._is_expired(entry, now_ms)) and self._retained(entry, log_start_offset):
                    self.producers[entry.producer_id] = entry
            return self.map_end_offset
        self._reset(log_start_offset)
        return log_start_offset

    def truncate(self, offset: int, log_start_offset: int = 0, now_ms: int | None = None) -> int:
        """The log was truncated to ``offset``: snapshots above it go (one exactly at ``offset`` still
        describes the remaining log and stays); if the state covered batches at or above ``offset`` it is
        reloaded. Returns the offset from which the Log replays up to ``offset`` (``offset`` itself when
        nothing is to replay)."""
        for o in self.snapshot_offsets():
            if o > offset:
                self._delete_snapshot(o)
        if self.map_end_offset <= offset:
            return offset
        return self.load(log_start_offset, offset, now_ms)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The whole log was replaced by an empty one starting at ``offset``."""
        for o in self.snapshot_offsets():
            self._delete_snapshot(o)
        self._reset(offset)
