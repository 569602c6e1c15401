"""``Consumer``: Kafka's consumer API with manual partition assignment.

    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition("clicks", 0), TopicPartition("clicks", 1)])
    for tp, records in c.poll(timeout_ms=1000).items(): ...
    for record in c: ...                       # iteration (stops after consumer_timeout_ms idle, if set)

Positions: ``seek``, ``seek_to_beginning``/``seek_to_end`` (lazy, resolved at the next ``poll`` or
``position`` like Kafka), ``auto_offset_reset`` earliest/latest/none for partitions without a valid
position (``OffsetOutOfRangeError``/``NoOffsetForPartitionError`` with none). Offsets:
``beginning_offsets``, ``end_offsets`` (the high watermark), ``offsets_for_times``. Flow:
``pause``/``resume``. Consumer groups (``group_id=``): ``subscribe(topics | pattern=, listener=)``,
``commit``/``commit_async``/``committed``, auto commit; the membership logic is in ``rafka/consumer/consumer_coordinator.py``.

Not thread-safe (one thread per consumer, as in Kafka).
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from protocol.errors import IllegalStateError
from rafka.channel import data_transport
from rafka.client_utils import resolve_cluster
from rafka.config import ConsumerConfig
from rafka.consumer.fetcher import EARLIEST, LATEST, Fetcher
from rafka.consumer.subscription import SubscriptionState
from rafka.metadata import ClusterMetadata
from rafka.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

if TYPE_CHECKING:
    from rafka.consumer.consumer_coordinator import ConsumerCoordinator

__all__ = ["Consumer"]

_ids = itertools.count(1)


def _tps(partitions: Iterable) -> list[TopicPartition]:
    return [TopicPartition(*tp) for tp in partitions]


class Consumer:
    def __init__(self, cluster: Any = None, **config: Any):
        self.config = ConsumerConfig(**config)
        self.cluster_name = resolve_cluster(cluster)
        self.client_id = self.config.client_id or f"consumer-{next(_ids)}"
        self.metadata = ClusterMetadata(self.cluster_name, self.config.metadata_max_age_ms)
        self._iter_buffer: list[ConsumerRecord] = []
        self._iter_pos = 0
        # Kafka's SubscriptionState: the fetcher and the group coordinator share it; records handed to the
        # iterator but not yet consumed count for commits, and a new assignment drops that buffer
        self.subscriptions = SubscriptionState()
        self.subscriptions.pending = lambda: self._iter_buffer[self._iter_pos :]
        self.subscriptions.on_assignment_change(self._clear_iter_buffer)
        self._fetcher = Fetcher(
            self.metadata, self.config, subscriptions=self.subscriptions, transport=data_transport(self.config)
        )
        self._closed = False
        self._group: ConsumerCoordinator | None = None
        self._async_commits = None  # one worker thread: async commits complete in the order they were made
        if self.config.group_id is not None:
            self._group = self._new_coordinator()
        self._subscribed = False

    def _new_coordinator(self) -> "ConsumerCoordinator":
        from rafka.consumer.consumer_coordinator import ConsumerCoordinator

        return ConsumerCoordinator(
            self.subscriptions, self.metadata, self.config, self.cluster_name, self.client_id, self.config.group_id
        )

    def _clear_iter_buffer(self, _assignment=None) -> None:
        self._iter_buffer, self._iter_pos = [], 0

    # -- assignment --------------------------------------------------------------------------------
    def assign(self, partitions: Iterable) -> None:
        """Take exactly these partitions (replacing the previous assignment)."""
        self._check_open()
        if self._subscribed:
            raise IllegalStateError("assign() after subscribe(): unsubscribe first")
        tps = _tps(partitions)
        for tp in tps:
            tm = self.metadata.topic(tp.topic)
            if tm is not None and tp.partition not in tm.partitions:
                raise ValueError(f"partition {tp.partition} does not exist in topic {tp.topic!r}")
        self.subscriptions.assign(tps)

    def assignment(self) -> set[TopicPartition]:
        return self.subscriptions.assigned_partitions()

    def subscribe(self, topics: Iterable[str] = (), pattern=None, listener=None) -> None:
        """Join the group (``group_id``) for these topics, or every topic matching ``pattern`` (a regex,
        matched against whole names, re-evaluated every ``metadata_max_age_ms``). ``listener`` gets
        ``on_partitions_revoked/assigned/lost`` (``rafka.consumer.consumer_coordinator.ConsumerRebalanceListener``). The group is
        joined by the next ``poll``."""
        self._check_open()
        if self._group is None:
            raise IllegalStateError("subscribe() needs a group_id")
        if isinstance(topics, str):
            topics = [topics]
        if not topics and pattern is None:
            raise ValueError("subscribe() needs topics or a pattern")
        if self.assignment() and not self._subscribed:
            raise IllegalStateError("subscribe() after assign(): unsubscribe first")
        self._subscribed = True
        self._group.subscribe(topics, pattern, listener)

    def subscription(self) -> set[str]:
        return self._group.subscription() if self._subscribed else set()

    def unsubscribe(self) -> None:
        if self._subscribed:
            assert self._group is not None
            self._group.close()  # commit (auto commit), revoke, leave
            self._group = self._new_coordinator()
            self._subscribed = False
        self.subscriptions.unsubscribe()

    # -- group offsets -----------------------------------------------------------------------------
    def _need_group(self):
        self._check_open()
        if self._group is None:
            raise IllegalStateError("this consumer has no group_id")
        return self._group

    def commit(self, offsets: dict | None = None) -> None:
        """Commit ``offsets`` (``{tp: offset | OffsetAndMetadata}``, the next offsets to read), or every
        assigned partition's current position; blocks until the coordinator stored them."""
        g = self._need_group()
        g.commit(
            {TopicPartition(*tp): o for tp, o in offsets.items()}
            if offsets is not None
            else self.subscriptions.all_consumed()
        )

    def commit_async(self, offsets: dict | None = None, callback=None):
        """Commit without blocking; ``callback(offsets, exception_or_None)`` when done. Returns a
        ``concurrent.futures.Future``. Async commits run one at a time on one thread per consumer, in the
        order they were made (as Kafka's do), so an older commit never lands after a newer one; ``close()``
        waits for the pending ones."""
        g = self._need_group()
        offs = (
            {TopicPartition(*tp): o for tp, o in offsets.items()}
            if offsets is not None
            else self.subscriptions.all_consumed()
        )
        if self._async_commits is None:
            from concurrent.futures import ThreadPoolExecutor

            self._async_commits = ThreadPoolExecutor(1, thread_name_prefix="rafka-commit-async")

        def run():
            err = None
            try:
                g.commit(offs)
            except Exception as e:  # noqa: BLE001 - handed to the callback, as Kafka does
                err = e
            if callback is not None:
                callback(offs, err)
            if err is not None:
                raise err

        return self._async_commits.submit(run)

    def committed(self, partition, timeout_ms: int | None = None) -> OffsetAndMetadata | None:
        """The group's committed offset for the partition (None if there is none)."""
        tp = TopicPartition(*partition)
        return self._need_group().committed([tp]).get(tp)

    def group_metadata(self) -> dict:
        """``{group_id, generation_id, member_id, group_instance_id}`` (Kafka's groupMetadata())."""
        return self._need_group().group_metadata()

    # -- positions ---------------------------------------------------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise ValueError(f"seek offset must be >= 0, got {offset}")
        self._fetcher.state(TopicPartition(*partition)).seek(offset)
        self._drop_iter_buffer(partition)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._lazy_reset(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._lazy_reset(partitions, LATEST)

    def _lazy_reset(self, partitions, target: int) -> None:
        tps = _tps(partitions) or list(self._fetcher.states)
        for tp in tps:
            st = self._fetcher.state(tp)
            st.seek(0)
            st.position = st.fetch_position = None
            st.reset = target
            self._drop_iter_buffer(tp)

    def _drop_iter_buffer(self, tp) -> None:
        tp = TopicPartition(*tp)
        rest = self._iter_buffer[self._iter_pos :]
        self._iter_buffer = [r for r in rest if (r.topic, r.partition) != tp]
        self._iter_pos = 0

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record this consumer will return for the partition."""
        st = self._fetcher.state(TopicPartition(*partition))
        if st.position is None or st.reset is not None:
            self._fetcher.resolve_positions(self._timeout(timeout_ms))
        pending = [r for r in self._iter_buffer[self._iter_pos :] if (r.topic, r.partition) == st.tp]
        return pending[0].offset if pending else st.position

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark seen in the last fetch reply (None before any)."""
        hw = self._fetcher.state(TopicPartition(*partition)).high_watermark
        return None if hw < 0 else hw

    # -- offsets lookups ---------------------------------------------------------------------------
    def beginning_offsets(self, partitions: Iterable, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        t = self._timeout(timeout_ms)
        return {tp: self._fetcher.list_offset(tp, EARLIEST, t)[0] for tp in _tps(partitions)}

    def end_offsets(self, partitions: Iterable, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        t = self._timeout(timeout_ms)
        return {tp: self._fetcher.list_offset(tp, LATEST, t)[0] for tp in _tps(partitions)}

    def offsets_for_times(
        self, timestamps: dict, timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the earliest offset whose timestamp is >= the given one (None if there is none)."""
        t = self._timeout(timeout_ms)
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp for {tp} must be >= 0, got {ts}")
            off, found_ts, epoch = self._fetcher.list_offset(TopicPartition(*tp), int(ts), t)
            out[TopicPartition(*tp)] = None if off < 0 else OffsetAndTimestamp(off, found_ts, epoch)
        return out

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        tm = self.metadata.topic(topic)
        return None if tm is None else set(tm.partitions)

    def topics(self) -> set[str]:
        return set(self.metadata.list_topics())

    # -- flow control ------------------------------------------------------------------------------
    def pause(self, *partitions: TopicPartition) -> None:
        for tp in _tps(partitions):
            self._fetcher.state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in _tps(partitions):
            self._fetcher.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._fetcher.states.items() if st.paused}

    def ensure_assignment(self, timeout_ms: int) -> bool:
        """Advance the group membership of a ``subscribe``d consumer (JoinGroup, SyncGroup, seeking the new
        partitions to their committed offsets) for up to ``timeout_ms``, without fetching; True once the
        member holds its assignment (at once for ``assign``ed consumers). ``poll`` does the same on its way:
        this lets a caller wait for the assignment apart from waiting for records (the REST gateway's
        consumer instances join as soon as they subscribe)."""
        self._check_open()
        if not self._subscribed:
            return True
        assert self._group is not None
        self._group.ensure_active_group(time.monotonic() + max(0, timeout_ms) / 1000.0)
        return not self._group.rebalancing()

    # -- polling -----------------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from assigned, unpaused partitions, grouped by partition; waits up to ``timeout_ms``
        for some to arrive. Sends the next fetches before returning (they run while you process)."""
        self._check_open()
        if self._iter_pos < len(self._iter_buffer):
            raise IllegalStateError("poll() while iterating: finish the iteration's records first")
        limit = max_records or self.config.max_poll_records
        f = self._fetcher
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        while True:
            if self._subscribed:
                self._group.on_poll(deadline if not f.states else time.monotonic())
            f.resolve_positions(self.config.default_api_timeout_ms)
            if f.has_buffered():
                out = f.drain(limit)
                f.send_fetches()
                if out:
                    return out
                continue
            f.send_fetches()
            left = deadline - time.monotonic()
            if left <= 0:
                f.wait(0)
                if not f.has_buffered():
                    return {}
                continue
            f.wait(min(left, 0.05) if self._subscribed else left)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self

    def __next__(self) -> ConsumerRecord:
        idle_limit = self.config.consumer_timeout_ms
        start = time.monotonic()
        while self._iter_pos >= len(self._iter_buffer):
            self._iter_buffer, self._iter_pos = [], 0
            wait = 1000 if idle_limit is None else max(0, idle_limit - int((time.monotonic() - start) * 1000))
            got = self.poll(timeout_ms=wait)
            for recs in got.values():
                self._iter_buffer.extend(recs)
            if not self._iter_buffer and idle_limit is not None and (time.monotonic() - start) * 1000 >= idle_limit:
                raise StopIteration
        rec = self._iter_buffer[self._iter_pos]
        self._iter_pos += 1
        return rec

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Commit (with auto commit) and leave the group, then stop."""
        if self._closed:
            return
        if self._async_commits is not None:
            self._async_commits.shutdown(wait=True)  # pending async commits complete before leaving
        if self._subscribed:
            self._group.close()
        self._closed = True
        self._fetcher.assign([])

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer is closed")

    def _timeout(self, timeout_ms: int | None) -> float:
        return float(self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms)
