"""KIP-392 on the leader (Kafka's ReplicaManager.findPreferredReadReplica): which replica a consumer's fetch should go
to, from the leader's follower bookkeeping, the brokers' racks and the broker's replica selector
(actors/server/replica_selector.py). ``preferred_read_replica`` is pure; ``BrokerRacks`` is the replica process's
cache of the racks, read from its broker's metadata (one Ray call, at most every ``RACKS_MAX_AGE_S``);
``ReadReplicas`` is what the replica shell asks before it reads, and counts the consumer reads a follower served."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from actors.replication.partition_state import FOLLOWER, LEADER
from actors.server.replica_selector import (
    ClientMetadata,
    LeaderSelector,
    PartitionView,
    ReplicaSelector,
    ReplicaView,
    selector_for,
)
from protocol.clock import now_ms
from protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from actors.replication.partition import Partition

log = logging.getLogger("actors.replica")

RACKS_MAX_AGE_S = 30.0  # a broker's rack changes only when it registers again: re-read this often at most
RACKS_TIMEOUT_S = 5.0
MISSING_RETRY_S = 1.0  # a broker the cache lacks (new, or its first read failed): asked again this often at most


def preferred_read_replica(
    partition: "Partition",
    selector: ReplicaSelector,
    client: ClientMetadata,
    fetch_offset: int,
    racks: dict[int, str | None],
    now_ms: int,
) -> int | None:
    """The broker a consumer fetching ``fetch_offset`` should read from instead of this leader, or None (read
    here). Kafka's rules: only ISR followers whose LEO has reached the fetch offset are candidates (a lagging
    follower would keep the consumer behind); the leader is one with its own LEO; a selected replica must be a
    live broker (in ``racks``, the live brokers' racks); the leader selected means None."""
    ls = partition.leader_state
    if partition.role != LEADER or ls is None:
        return None
    me = partition.broker_id
    leader = ReplicaView(me, racks.get(me), partition.log.log_end_offset, 0)
    views = [leader]
    for b in partition.isr:
        if b == me or b not in racks:
            continue
        f = ls.followers.get(b)
        if f is None or f.log_end_offset < fetch_offset:
            continue
        views.append(ReplicaView(b, racks[b], f.log_end_offset, max(0, now_ms - f.last_caught_up_time_ms)))
    chosen = selector.select(client, PartitionView(tuple(views), leader))
    if chosen is None or chosen.broker_id == me:
        return None
    return chosen.broker_id


def racks_of(metadata: dict) -> dict[int, str | None]:
    """The live brokers' ``broker.rack`` from a broker's metadata answer (``brokers``: id, rack, alive)."""
    return {int(b["id"]): b.get("rack") for b in metadata.get("brokers", ()) if b.get("alive", True)}


class BrokerRacks:
    """The live brokers' racks as this process's broker knows them: ``get()`` answers from the cache, and reads
    the broker's metadata again (once at a time) when it is older than ``RACKS_MAX_AGE_S`` or lacks a broker
    the caller names. A broker that does not answer leaves the old racks (none at first: every fetch then reads
    from the leader)."""

    def __init__(self, cluster: str, broker_id: int, max_age_s: float = RACKS_MAX_AGE_S):
        self.cluster, self.broker_id, self.max_age_s = cluster, int(broker_id), max_age_s
        self.racks: dict[int, str | None] = {}
        self.read_at = float("-inf")
        self.reads = 0
        self._reading: asyncio.Future | None = None

    def fresh(self, brokers=()) -> bool:
        return time.monotonic() - self.read_at < self.max_age_s and all(b in self.racks for b in brokers)

    async def get(self, brokers=()) -> dict[int, str | None]:
        age = time.monotonic() - self.read_at
        if age < self.max_age_s and (age < MISSING_RETRY_S or all(b in self.racks for b in brokers)):
            return self.racks
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read())
        await asyncio.shield(self._reading)
        return self.racks

    async def _read(self) -> None:
        from ray.exceptions import RayError

        from actors.channels.replica_lookup import broker_handle_async

        self.read_at = time.monotonic()
        try:
            broker = await broker_handle_async(self.cluster, self.broker_id)
            md = await asyncio.wait_for(broker.metadata.remote(), RACKS_TIMEOUT_S)
            self.racks = racks_of(md)
            self.reads += 1
        except (ValueError, RayError, asyncio.TimeoutError) as exc:
            log.info("broker %s: no broker racks for the replica selector: %s", self.broker_id, exc)


_racks: dict[tuple[str, int], BrokerRacks] = {}


def broker_racks(cluster: str, broker_id: int) -> BrokerRacks:
    """This process's ``BrokerRacks`` of broker ``broker_id`` (a ReplicaHost's replicas share it)."""
    key = (cluster, int(broker_id))
    racks = _racks.get(key)
    if racks is None:
        racks = _racks[key] = BrokerRacks(cluster, broker_id)
    return racks


class ReadReplicas:
    """One replica's KIP-392 side, called by the replica shell on each consumer fetch: ``redirect`` before the read
    (the answer naming the preferred read replica, or None: read here), ``served`` after it. Counters:
    ``redirects`` (answers naming another replica), ``follower_fetches`` / ``follower_bytes`` (consumer fetches
    this replica answered as a follower, and their record bytes)."""

    def __init__(self, partition: "Partition", racks: BrokerRacks):
        self.partition, self.racks = partition, racks
        self.redirects = self.follower_fetches = self.follower_bytes = 0
        self.last_redirect: int | None = None

    async def redirect(self, req: FetchRequest, selector_class: str | None) -> dict | None:
        p = self.partition
        if req.is_follower or req.client_rack is None or p.role != LEADER or len(p.isr) < 2:
            return None
        selector = selector_for(selector_class)
        if selector is None or isinstance(selector, LeaderSelector):
            return None
        if p.check_leader(req.current_leader_epoch) is not None:
            return None  # the read answers the fencing error
        lg = p.log
        if not lg.log_start_offset <= req.fetch_offset <= lg.log_end_offset:
            return None  # the read answers OFFSET_OUT_OF_RANGE
        racks = self.racks.racks if self.racks.fresh(p.isr) else await self.racks.get(p.isr)
        if p.role != LEADER:
            return None  # moved while the racks were read: the read answers
        chosen = preferred_read_replica(p, selector, ClientMetadata(req.client_rack), req.fetch_offset, racks, now_ms())
        if chosen is None:
            return None
        self.redirects += 1
        self.last_redirect = chosen
        snap = lg.fetch_offset_snapshot()
        # Kafka skips the read: no records, the leader's offsets, the replica to go to
        return FetchResponse(
            high_watermark=snap.high_watermark,
            log_start_offset=snap.log_start_offset,
            last_stable_offset=snap.last_stable_offset,
            next_offset=req.fetch_offset,
            preferred_read_replica=chosen,
        ).to_dict()

    def served(self, req: FetchRequest, answer: dict) -> None:
        if self.partition.role == FOLLOWER and not req.is_follower and not answer.get("error_code"):
            self.follower_fetches += 1
            self.follower_bytes += len(answer.get("records") or b"")

    def describe(self) -> dict:
        return {
            "redirects": self.redirects,
            "last_redirect": self.last_redirect,
            "follower_fetches": self.follower_fetches,
            "follower_bytes": self.follower_bytes,
            "rack_reads": self.racks.reads,
        }
