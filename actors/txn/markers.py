"""The transaction coordinator's marker writer (Kafka's TransactionMarkerChannelManager): WriteTxnMarkers to
the leader replica of every partition of a transaction on its internal channel, retried until each took its
marker, and the KIP-890 verification pushes. Called by actors/txn/state_manager.py and
actors/txn_coordinator.py; calls replica actors (actors/channels/). Its rules: docs/internals.md ("Transactions").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from actors.channels.data_channel import loop_channel
from actors.channels.replica_lookup import broker_handle_async, replica_handle_async
from actors.metadata.kv import GcsKV
from actors.txn.shard import MarkerJob
from protocol import errors as E
from protocol.channel_frames import API_TXN_MARKERS, API_TXN_VERIFIED, marker_fields, verified_fields
from protocol.kv import read_cluster, read_topics
from protocol.txn_messages import TxnVerifiedRequest, WriteTxnMarkersRequest

log = logging.getLogger("rafka.txn_coordinator")
ABANDON = {E.TransactionCoordinatorFencedError.code, E.InvalidProducerEpochError.code}
MAX_BACKOFF_S = 1.0
MARKER_TIMEOUT_S = 35.0  # the replica answers REQUEST_TIMED_OUT itself after its 30 s acks=all wait


def _partition_state(md: dict, topic: str, p: int) -> dict | None:
    parts = (md["topics"].get(topic) or {}).get("partitions", {})
    return parts.get(p, parts.get(str(p)))


def partition_leader(md: dict, topic: str, p: int) -> int | None:
    """The leader id of ``topic-p`` in a metadata view (-1: none now), None when the partition is gone."""
    state = _partition_state(md, topic, p)
    return None if state is None else int(state.get("leader", -1))


class TxnMarkerChannel:
    MAX_CACHED_HANDLES = 4096

    def __init__(self, cluster: str, broker_id: int, kv: GcsKV):
        self.cluster, self.broker_id, self.kv = cluster, broker_id, kv
        self.stats = {
            "markers_written": 0,
            "marker_retries": 0,
            "markers_abandoned": 0,
            "metadata_reads": 0,
            "verified_pushes": 0,
            "verified_pushes_taken": 0,
        }
        self._md: dict | None = None
        self._handles: dict[tuple[str, int, int], object] = {}
        self._brokers: dict[int, object] = {}  # broker id -> its actor handle (replica lookups go through it)

    async def _metadata(self, refresh: bool) -> dict:
        if refresh or self._md is None:
            self.stats["metadata_reads"] += 1
            self._md = await asyncio.to_thread(read_cluster, self.kv)
        return self._md

    def _unknown_topics(self, partitions) -> set[str]:
        md = self._md
        return {t for t, p in partitions if md is None or _partition_state(md, t, p) is None}

    async def _read_topics(self, names: set[str]) -> None:
        """Topics missing from the cached view read alone (one KV read each, not the whole cluster's metadata)
        and added to it: a transaction's first partitions of a new topic."""
        if self._md is None:  # nothing cached yet: the whole view, which has these topics too
            await self._metadata(False)
            return
        if names:
            self.stats["metadata_reads"] += 1
            fresh = await asyncio.to_thread(read_topics, self.kv, names)
            assert self._md is not None
            self._md = {**self._md, "topics": {**self._md["topics"], **fresh}}

    async def _handle(self, topic: str, p: int, leader: int):
        key = (topic, p, leader)
        h = self._handles.get(key)
        if h is None:
            broker = self._brokers.get(leader)
            if broker is None:
                broker = self._brokers[leader] = await broker_handle_async(self.cluster, leader)
            try:
                h = await replica_handle_async(self.cluster, topic, p, leader, broker=broker)
            except ValueError:
                self._brokers.pop(leader, None)  # a replaced broker is looked up again
                raise
            if len(self._handles) >= self.MAX_CACHED_HANDLES:
                self._handles.clear()
            self._handles[key] = h
        return h

    async def _leader_handle(self, topic: str, p: int, leader: int):
        """The leader replica's handle (cached), or None when there is no leader now or it is not found."""
        if leader < 0:
            return None
        try:
            return await self._handle(topic, p, leader)
        except ValueError:
            return None

    async def _leader_handles(self, md: dict, partitions) -> None:
        """Look up the uncached leader handles of ``partitions`` all at once (each is a broker call) and open
        their internal connections (each replica has its own): the loops after this find them cached and do not
        yield per partition."""
        todo = []
        for topic, p in partitions:
            leader = partition_leader(md, topic, p)
            if leader is not None and leader >= 0 and (topic, p, leader) not in self._handles:
                todo.append(self._leader_handle(topic, p, leader))
        if todo:
            io = loop_channel(internal=True)
            for h in await asyncio.gather(*todo):
                if h is not None:
                    io.open(h)

    def cached(self, partitions) -> bool:
        """Whether the metadata and leader handles of ``partitions`` are all cached (:meth:`prefetch` has nothing
        to do)."""
        md = self._md
        if md is None:
            return not partitions
        for topic, p in partitions:
            leader = partition_leader(md, topic, p)
            if leader is None or (leader >= 0 and (topic, p, leader) not in self._handles):
                return False
        return True

    async def prefetch(self, partitions) -> None:
        """Make the metadata and leader handles of ``partitions`` cached and open the internal connections to the
        leaders (best effort): the coordinator runs it beside an AddPartitionsToTxn's append, so the verification
        pushes that follow the append do not wait for these lookups and connects (a transaction's first
        partitions of a new topic; each replica has a connection of its own)."""
        try:
            missing = self._unknown_topics(partitions)
            if missing:
                await self._read_topics(missing)
            await self._leader_handles(await self._metadata(False), partitions)
        except Exception as e:  # noqa: BLE001 - a lookup that failed is done again by whoever needs it
            log.debug("b%d: prefetch of %s: %s", self.broker_id, partitions, e)

    async def write(self, job: MarkerJob, current: Callable[[], bool]) -> bool:
        """True once every partition took ``job``'s marker; False if abandoned or ``current()`` turned False."""
        req = WriteTxnMarkersRequest(
            job.producer_id, job.producer_epoch, job.commit, job.coordinator_epoch, job.transactional_id, job.start_ms
        )
        remaining, delay, refresh = set(job.partitions), 0.02, False
        while remaining:
            if not current():
                return False
            md = await self._metadata(refresh)
            await self._leader_handles(md, remaining)
            calls: dict[tuple[str, int], tuple[int, asyncio.Future]] = {}
            io = loop_channel(internal=True)  # markers travel on the replicas' internal channel
            for topic, p in sorted(remaining):
                leader = partition_leader(md, topic, p)
                if leader is None and not refresh:
                    continue  # not in the cached view: a new topic, or deleted; the refreshed view decides
                if leader is None:  # deleted: nothing left to mark (Kafka drops such markers)
                    remaining.discard((topic, p))
                    continue
                h = await self._leader_handle(topic, p, leader)
                if h is None:
                    continue
                calls[(topic, p)] = (
                    leader,
                    io.submit_here(h, API_TXN_MARKERS, marker_fields(req), b"", MARKER_TIMEOUT_S),
                )
            for tp, (leader, fut) in calls.items():
                try:
                    ans = await fut
                except E.KafkaError:  # the replica died, or its connection broke or timed out: look it up again
                    self._handles.pop((tp[0], tp[1], leader), None)
                    continue
                code = ans["error_code"]
                if code in (0, E.UnknownTopicOrPartitionError.code):
                    remaining.discard(tp)
                    self.stats["markers_written"] += 1
                elif code in ABANDON:
                    self.stats["markers_abandoned"] += 1
                    log.warning(
                        "b%d: markers of %r abandoned at %s: %s",
                        self.broker_id,
                        job.transactional_id,
                        tp,
                        ans.get("error_message"),
                    )
                    return False
            if remaining:
                if refresh:  # a fresh view did not do it either: back off before the next round
                    self.stats["marker_retries"] += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, MAX_BACKOFF_S)
                refresh = True
        return True

    async def push_verified(
        self, transactional_id: str, producer_id: int, producer_epoch: int, start_ms: int, partitions, timeout_s: float
    ) -> list[asyncio.Future]:
        """The KIP-890 verification state of a transaction that now durably includes ``partitions``, pushed to
        each one's leader (TxnVerifiedRequest, at the leader epoch of the cached metadata). With the metadata
        and the handles cached this does not yield, so the pushes are on their connections before the caller
        answers the producer, whose first produce there then finds its transaction verified (what is not cached
        yet, a new topic's metadata and leaders, is looked up first: :meth:`prefetch`). Best effort and never retried: a leader that
        moved, refused or had not taken it yet lets that produce ask the coordinator as before. The pushes'
        futures: :meth:`count_taken` waits for them."""
        if not self.cached(partitions):  # (cached after the coordinator's prefetch: no yield)
            await self.prefetch(partitions)
        md = await self._metadata(False)
        io = loop_channel(internal=True)
        calls = []
        for topic, p in partitions:
            state = _partition_state(md, topic, p)
            h = None if state is None else await self._leader_handle(topic, p, int(state.get("leader", -1)))
            if h is None:
                continue
            epoch = int(state.get("leader_epoch", -1))  # type: ignore[union-attr]
            req = TxnVerifiedRequest(producer_id, producer_epoch, start_ms, epoch, transactional_id)
            calls.append(io.submit_here(h, API_TXN_VERIFIED, verified_fields(req), b"", timeout_s))
        return calls

    async def count_taken(self, calls: list[asyncio.Future]) -> int:
        """How many of :meth:`push_verified`'s pushes their leaders took (the rest are counted as refused)."""
        taken = 0
        for fut in calls:
            try:
                ans = await fut
            except E.KafkaError:  # a dead replica, a broken connection, the timeout: that produce asks instead
                continue
            taken += bool(ans.get("taken"))
        self.stats["verified_pushes"] += len(calls)
        self.stats["verified_pushes_taken"] += taken
        return taken
