"""An exactly-once consume-transform-produce loop (Kafka's transactional copier, KIP-98 + KIP-447).

One consumer in a group (``read_committed``, no auto commit) reads ``src``; each poll's records are
transformed and written to ``dst`` (same key, same partition number, so per-key order carries over) in
one transaction together with the group's next offsets (``send_offsets_to_transaction``). Output and
progress commit or abort together, so a failure at any point is recovered by aborting (or, when the
producer cannot abort any more, by a new producer instance with the same transactional id, which fences
the old one and ends what it left) and rewinding the consumer to the group's committed offsets: every
input record ends up in ``dst``'s committed data exactly once.

``poison_every=k`` aborts every k-th transaction on purpose (its records are written, then aborted, and
processed again in the next one): read_committed consumers must never see them.

Only the calling thread uses a ``Copier``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import rafka
from protocol.errors import KafkaError
from rafka.structs import TopicPartition


@dataclass
class CopyStats:
    copied: int = 0  # input records whose output committed
    committed_txns: int = 0
    poisoned_txns: int = 0  # aborted on purpose
    poisoned_records: int = 0
    failed_txns: int = 0  # aborted (or fenced by a new instance) after an error
    failed_records: int = 0  # written in a failed transaction (visible to read_uncommitted only, if written)
    new_producers: int = 0  # producer instances created after the first (recoveries by fencing)
    errors: list[str] = field(default_factory=list)  # first few error names, for the report
    elapsed_s: float = 0.0


class Copier:
    def __init__(
        self,
        cluster: Any,
        src: str,
        dst: str,
        group: str,
        transactional_id: str,
        transform: Callable[[bytes], bytes],
        batch: int = 500,
        poison_every: int = 0,
        txn_timeout_s: float = 30.0,
    ):
        self.cluster, self.src, self.dst, self.group = cluster, src, dst, group
        self.transactional_id, self.transform = transactional_id, transform
        self.batch, self.poison_every, self.txn_timeout_s = batch, poison_every, txn_timeout_s
        self.stats = CopyStats()
        self._attempts = 0
        self.consumer = rafka.Consumer(
            cluster,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=batch,
            fetch_max_wait_ms=100,
        )
        self.consumer.subscribe([src])
        self.producer = self._new_producer()

    def _new_producer(self):
        deadline = time.monotonic() + 120
        while True:
            p = rafka.Producer(self.cluster, transactional_id=self.transactional_id, linger_ms=5)
            try:
                p.init_transactions(timeout=60)
                return p
            except KafkaError as e:  # the coordinator moving (a broker died): a fresh instance tries again
                self._note(e)
                p.close(timeout=2)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _note(self, err: BaseException) -> None:
        if len(self.stats.errors) < 8:
            self.stats.errors.append(type(err).__name__)

    def _rewind(self) -> None:
        """Positions back to the group's committed offsets (the start when nothing is committed)."""
        c = self.consumer
        deadline = time.monotonic() + 120
        for tp in sorted(c.assignment()):
            while True:
                try:
                    om = c.committed(tp)
                    break
                except KafkaError as e:  # the group coordinator moving
                    self._note(e)
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            if om is None:
                c.seek_to_beginning(tp)
            else:
                c.seek(tp, om.offset)

    def _recover(self, written: int) -> None:
        """After a failed transaction: abort it, or replace the producer when it can no longer abort."""
        self.stats.failed_txns += 1
        self.stats.failed_records += written
        try:
            self.producer.abort_transaction(timeout=self.txn_timeout_s)
        except (KafkaError, TimeoutError) as e:
            self._note(e)
            self.producer.close(timeout=2)
            self.producer = self._new_producer()  # fences the old epoch; ends its open transaction
            self.stats.new_producers += 1
        self._rewind()

    def step(self, poll_ms: int = 200) -> int:
        """One poll and its transaction; returns the input records committed by it (0 when idle, aborted
        or failed)."""
        try:
            recs = self.consumer.poll(timeout_ms=poll_ms)
        except KafkaError as e:  # the group coordinator moving: poll again
            self._note(e)
            time.sleep(0.1)
            return 0
        if not recs:
            return 0
        p, n = self.producer, sum(len(rs) for rs in recs.values())
        self._attempts += 1
        written = 0
        try:
            p.begin_transaction()
            for tp, rs in recs.items():
                for r in rs:
                    p.send(self.dst, key=r.key, value=self.transform(r.value), partition=tp.partition)
                    written += 1
            offsets = {tp: rafka.OffsetAndMetadata(rs[-1].offset + 1) for tp, rs in recs.items()}
            p.send_offsets_to_transaction(offsets, self.consumer.group_metadata(), timeout=self.txn_timeout_s)
            if self.poison_every and self._attempts % self.poison_every == 0:
                p.flush(timeout=self.txn_timeout_s)  # really written, then aborted
                p.abort_transaction(timeout=self.txn_timeout_s)
                self.stats.poisoned_txns += 1
                self.stats.poisoned_records += written
                self._rewind()
                return 0
            p.commit_transaction(timeout=self.txn_timeout_s)
        except (KafkaError, TimeoutError) as e:
            self._note(e)
            self._recover(written)
            return 0
        self.stats.committed_txns += 1
        self.stats.copied += n
        return n

    def run(self, total: int, timeout_s: float, on_commit: Callable[[CopyStats], None] | None = None) -> CopyStats:
        """Copy until ``total`` input records committed (or ``timeout_s`` passed)."""
        t0 = time.monotonic()
        while self.stats.copied < total and time.monotonic() - t0 < timeout_s:
            if self.step() and on_commit is not None:
                on_commit(self.stats)
        self.stats.elapsed_s = time.monotonic() - t0
        return self.stats

    def close(self) -> None:
        self.producer.close(timeout=5)
        self.consumer.close()


def read_all(cluster: Any, topic: str, partitions: int, isolation: str, expected: int, timeout_s: float = 60.0):
    """Every record of ``topic`` (``{partition: [(key, value), ...]}`` in offset order) read with
    ``isolation``: until at least ``expected`` records or each partition's end offset is reached, then one
    more empty poll so a duplicate or leaked record would show."""
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level=isolation)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    ends = c.end_offsets(tps)  # the LSO for read_committed
    out: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (
        sum(map(len, out.values())) < expected or any(c.position(tp) < ends[tp] for tp in tps)
    ):
        for tp, rs in c.poll(timeout_ms=200).items():
            out[tp.partition].extend((r.key, r.value) for r in rs)
    for tp, rs in c.poll(timeout_ms=300).items():
        out[tp.partition].extend((r.key, r.value) for r in rs)
    c.close()
    return out
