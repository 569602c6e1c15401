"""The batch side of ``rafka.producer.producer.Producer``: ``send_batch``'s placement and append
(``place_and_append``), and the serializers both ``send`` and ``send_batch`` use."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from protocol.errors import InvalidTimestampError
from rafka.producer.accumulator import now_ms
from rafka.producer.producer_batch import RecordFutures
from storage.log_config import LogConfig
from storage.records import NO_TIMESTAMP

INT64_MAX = 2**63 - 1


def to_bytes(data: Any, what: str, serializer: Callable | None) -> bytes | None:
    if serializer is not None and data is not None:
        data = serializer(data)
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode("utf-8")
    raise TypeError(
        f"{what} of type {type(data).__name__} needs a {what}_serializer (bytes and str are sent as they are)"
    )


def _headers(headers) -> tuple:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for k, v in items:
        if not isinstance(k, str):
            raise TypeError(f"header keys must be str, not {type(k).__name__}")
        out.append((k, to_bytes(v, "header value", None)))
    return tuple(out)


APPEND_CHUNK = 2048  # records appended per round over the partitions, between GIL hand-overs

try:
    from storage._crecords import place_plain as _place_plain
except ImportError:  # no compiled extension: the Python loop places every record
    _place_plain = None


_DONE = object()  # the end of a records iterable


def _fast_state(tm, by_part: dict) -> tuple[list, bytes]:
    """``place_plain``'s view of the topic: the run list of each partition id (None until the loop body
    opens it, so the first record to a partition goes through Python) and the mask of known partition ids."""
    ids = tm.partition_ids
    size = ids[-1] + 1 if ids else 0
    valid = bytearray(size)
    for q in ids:
        valid[q] = 1
    lists: list = [None] * size
    for q, run in by_part.items():
        if type(q) is int and 0 <= q < size:
            lists[q] = run
    return lists, bytes(valid)


def place_and_append(self, topic: str, records: Iterable, partition: int | None, tm, start: float) -> RecordFutures:
    """``Producer.send_batch``'s work once the topic's metadata ``tm`` is known: serialize and place every
    record (explicit partition, user partitioner, murmur2 of the key, the sticky partition moving on each
    ``batch_size``), tell the transaction of new partitions early, then append each partition's run
    (``RecordAccumulator.append_many``). Nothing is queued before every record is placed, so a bad one fails
    the call with nothing queued. Each partition's run goes into bulk batches (``bulk_bytes``) or, when those
    would be no larger than ``batch_size``, in rounds of ``APPEND_CHUNK`` records over the partitions; a GIL
    hand-over follows each append, so full batches are sent while the call still appends the rest (a
    transaction's first records no longer wait for the whole call). Returns the futures in the records'
    order (``RecordFutures``)."""
    cfg = self.config
    default_ts = now_ms()
    by_part: dict[int, list] = {}
    runs: dict[int, list[tuple]] = {}  # each partition's (batch, first index, count), in order
    where: list[int] = []  # each record's partition, in order
    sticky: int | None = None
    sticky_bytes = 0
    batch_size = cfg.batch_size
    plain = cfg.key_serializer is None and cfg.value_serializer is None
    limit = self._plain_limit  # key + value bytes a record may have (send's fast path takes the same)
    items: list = []
    last_p = None
    txn_state = self._txn.state if self._txn is not None else None
    # a list or tuple of records: the compiled loop (storage._crecords.place_plain) places the plain ones, and
    # each record it leaves (the first to a partition, a sticky move, anything to convert or check) goes through
    # the loop body below; any other iterable is read record by record as it yields them (a generator may
    # wait on what the call does meanwhile, such as the transaction's partitions being added)
    recs = records if type(records) in (list, tuple) else None
    it = iter(records) if recs is None else None
    total = -1 if recs is None else len(recs)
    fast = _place_plain if plain and recs is not None else None
    fast_tm, lists, valid = None, [], b""
    default_partitioner = self._user_partitioner is None
    i = 0
    while True:
        if it is not None:
            r = next(it, _DONE)
            if r is _DONE:
                break
        else:
            if fast is not None:
                if tm is not fast_tm:  # first, or the metadata was refreshed by a placement below
                    fast_tm, lists, valid = tm, *_fast_state(tm, by_part)
                i, sticky_bytes = fast(
                    recs, i, partition, lists, valid, len(tm.partition_ids), limit, default_ts, sticky,
                    sticky_bytes, batch_size, default_partitioner, where,
                )  # fmt: skip
            if i >= total:
                break
            r = recs[i]  # type: ignore[index]
            i += 1
        n = len(r)
        kb, vb = r[0], r[1]
        hdrs = r[3] if n > 3 else None
        if (
            plain
            and not hdrs
            and (kb is None or type(kb) is bytes)
            and (vb is None or type(vb) is bytes)
            and (size := (len(kb) if kb else 0) + (len(vb) if vb else 0)) <= limit
        ):
            hdrs = ()  # the common case, inline: bytes in, nothing to convert or check
        else:
            kb, vb, hdrs = self._serialize(kb, vb, hdrs)
            size = (len(kb) if kb else 0) + (len(vb) if vb else 0)
        p = partition if partition is not None else (r[2] if n > 2 else None)
        if p is None and kb is None and self._user_partitioner is None:  # keyless: the call's sticky partition
            if sticky is None:
                sticky = self._default_partitioner.sticky.partition(topic, tm.partition_ids, tm.available)
            elif sticky_bytes + size > batch_size and sticky_bytes:
                sticky = self._default_partitioner.on_new_batch(topic, tm.partition_ids, tm.available, sticky)
                sticky_bytes = 0
            sticky_bytes += size + 10
            p = sticky
        elif p is None or p not in tm.partitions:
            tm, p = self._place(topic, tm, kb, p)
        if p != last_p:
            items = by_part.get(p)
            if items is None:
                items = by_part[p] = []
                if fast is not None and type(p) is int and 0 <= p < len(lists):
                    lists[p] = items
                # Kafka's producer adds a partition at the first send to it: the AddPartitionsToTxn goes
                # out while this loop runs, so it overlaps the coordinator's wait for the previous
                # transaction's markers: from this thread as soon as every partition of the topic has a
                # record (no other can join), else from the Sender once it gets the GIL (with the
                # partitions seen by then), at the latest from this thread once every record is placed
                # (below). Should a later record fail the call, the partition is in the transaction with
                # nothing written, which its marker ends like any other.
                if txn_state is not None and txn_state.maybe_add(tm.tps[p]):
                    if len(by_part) == len(tm.partition_ids):
                        self.sender.add_partitions_now()
                    else:
                        self.sender.wakeup()
            last_p = p
        ts = default_ts if n < 5 or r[4] is None else int(r[4])
        if not NO_TIMESTAMP <= ts <= INT64_MAX:  # here, not at the append: a bad record must fail the whole call
            raise InvalidTimestampError(f"invalid record timestamp {ts}: negative or past 64 bits")
        where.append(p)
        items.append((ts, kb, vb, hdrs))
    if txn_state is not None and txn_state.pending:
        self.sender.add_partitions_now()  # unless the Sender did: one request, every partition of the call
    # bulk batches (one per partition of the call, up to bulk_bytes), else rounds of APPEND_CHUNK records
    bulk = bulk_bytes(self, tm)
    step = max(map(len, by_part.values()), default=1) if bulk else max(1, APPEND_CHUNK // max(1, len(by_part)))
    for lo in range(0, max(map(len, by_part.values()), default=0), step):
        for p, run in by_part.items():
            if lo < len(run):
                left_ms = cfg.max_block_ms - (time.monotonic() - start) * 1000
                chunk = run if lo == 0 and step >= len(run) else run[lo : lo + step]  # (bulk: the whole run)
                got, opened = self.accumulator.append_many(tm.tps[p], chunk, max(0.0, left_ms), bulk)
                runs.setdefault(p, []).extend(got)
                if p == sticky and opened:
                    self._default_partitioner.on_new_batch(topic, tm.partition_ids, tm.available, p)
                # let the Sender's thread (full batches to send) and the channel's I/O thread (an answer to read,
                # such as the AddPartitionsToTxn the batches wait for) take the GIL now, not after the 5 ms
                # switch interval
                self.sender.wakeup()
                time.sleep(0)
    return RecordFutures(runs, where)


BULK_BATCH_BYTES = 1 << 20  # send_batch's batches hold up to this much (and the topic's max.message.bytes)


def bulk_bytes(producer, tm) -> int:
    """The size of ``send_batch``'s batches, or 0 for ``batch.size`` ones: up to the topic's
    ``max.message.bytes`` (its override from the metadata, else Kafka's default 1,048,588), ``max.request.size``,
    ``buffer.memory`` and ``BULK_BATCH_BYTES``, when that is more than ``batch.size``. Why: ``batch.size``
    bounds what the producer gathers from a stream of sends while it lingers; a ``send_batch`` call hands over
    its records at once, so there is nothing to wait for, and each batch costs the three replicas ~270 us of
    CPU whatever its size (docs/internals.md): 16 KB batches held send_batch near 500k records/s."""
    try:
        limit = int((tm.configs or {}).get("max.message.bytes", LogConfig.max_message_bytes))
    except (TypeError, ValueError):
        limit = LogConfig.max_message_bytes
    size = min(limit, producer._max_record_size, BULK_BATCH_BYTES)
    return size if size > producer.config.batch_size else 0
