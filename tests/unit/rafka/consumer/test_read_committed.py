"""The read_committed abort filter (rafka/consumer/read_committed.py) over real record batches."""

from __future__ import annotations

from rafka.consumer.read_committed import AbortedTransactionFilter
from storage.control import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from storage.records import RecordBatchBuilder, iter_batch_headers


def _data(base: int, pid: int, n: int, txn: bool = True) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=txn)
    for i in range(n):
        b.append(1000, None, f"{pid}-{base + i}".encode())
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")  # the offsets the leader assigned
    return bytes(raw)


def _marker(base: int, pid: int, kind: int) -> bytes:
    return build_control_batch(kind, pid, 0, 1, 1000, base_offset=base)


def _kept(raw: bytes, aborted) -> list[tuple[int, int]]:
    f = AbortedTransactionFilter(aborted)
    return [(h.producer_id, h.base_offset) for pos, h in iter_batch_headers(raw) if f.keep(h, raw, pos)]


def test_aborted_data_and_all_markers_are_dropped():
    # pid 1 commits [0,2) at 4; pid 2 aborts [2,4) and [5,6) at 6; pid 3 non-transactional at 7
    raw = b"".join(
        [
            _data(0, 1, 2),
            _data(2, 2, 2),
            _marker(4, 1, CONTROL_COMMIT),
            _data(5, 2, 1),
            _marker(6, 2, CONTROL_ABORT),
            _data(7, 3, 1, txn=False),
            _data(8, 2, 1),  # pid 2's next transaction (not aborted)
        ]
    )
    assert _kept(raw, [(2, 2)]) == [(1, 0), (3, 7), (2, 8)]
    # read_uncommitted (no aborted list): only the markers go
    assert _kept(raw, []) == [(1, 0), (2, 2), (2, 5), (3, 7), (2, 8)]


def test_a_later_aborted_transaction_of_the_same_producer_starts_at_its_first_offset():
    raw = b"".join([_data(0, 5, 1), _marker(1, 5, CONTROL_COMMIT), _data(2, 5, 1), _marker(3, 5, CONTROL_ABORT)])
    assert _kept(raw, [(5, 2)]) == [(5, 0)]
    assert _kept(raw, [(5, 0)]) == []  # an entry from the first offset covers both, as Kafka reads it
