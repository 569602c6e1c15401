"""What a ``read_committed`` consumer hands out of a fetch (Kafka's ``CompletedFetch`` abort filter).

A read_committed fetch returns data up to the last stable offset plus the aborted transactions that
overlap it: ``(producer_id, first_offset)`` pairs from the leader's aborted transaction index. Walking the
batches in offset order, a transaction becomes "aborted" for its producer once a batch at or past its
first offset is reached; a transactional batch of an aborted producer is dropped; that producer's ABORT
marker ends it. Control batches (the markers) are never handed out, in either isolation level.

Pure; one consumer thread uses one filter per fetch.
"""

from __future__ import annotations

import heapq

from storage.batch_header import BatchHeader
from storage.control import CONTROL_ABORT, parse_control_record
from storage.records import RecordBatch

__all__ = ["AbortedTransactionFilter"]


class AbortedTransactionFilter:
    """Feed each batch header in offset order; ``keep`` says whether its records are handed out."""

    __slots__ = ("_pending", "_aborted")

    def __init__(self, aborted_transactions) -> None:
        # (first_offset, producer_id), smallest first offset first
        self._pending = [(int(first), int(pid)) for pid, first in aborted_transactions or ()]
        heapq.heapify(self._pending)
        self._aborted: set[int] = set()

    def keep(self, h: BatchHeader, raw: bytes, pos: int) -> bool:
        if h.producer_id >= 0:
            while self._pending and self._pending[0][0] <= h.last_offset:
                self._aborted.add(heapq.heappop(self._pending)[1])
            if h.is_control:
                if h.producer_id in self._aborted and _is_abort(raw, pos, h):
                    self._aborted.discard(h.producer_id)
                return False
            if h.is_transactional and h.producer_id in self._aborted:
                return False
        return not h.is_control


def _is_abort(raw: bytes, pos: int, h: BatchHeader) -> bool:
    records = RecordBatch(raw, pos, header=h).records()  # decode_records skips control batches
    return bool(records) and parse_control_record(records[0])[0] == CONTROL_ABORT
