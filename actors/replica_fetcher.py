"""The follower's fetch loop for one partition (Kafka's ReplicaFetcherThread, one partition per loop).

Run by the replica actor as an asyncio task while it follows ``leader_id`` at ``leader_epoch``: it looks
the leader's replica actor up (through the leader's broker: protocol/replica_lookup.py), truncates by leader epoch (OffsetForLeaderEpoch, KIP-101/279) until the
log is a prefix of the leader's, then long-polls the leader's ``fetch`` with its LEO and applies each
answer through the :class:`~actors.partition.Partition` (append, HW, log start). The fetches go over a
TCP connection to the leader's replication listener (actors/replication_channel.py; its endpoint is asked
through Ray), not as Ray calls; a broken connection is handled like a dead leader actor. Retriable trouble
backs off (``replica.fetch.backoff.ms`` doubling to 1 s); a dead or missing leader is probed until the
next LeaderAndIsr bumps the partition's ``generation``, which ends the loop.

Concurrency: runs on the replica actor's event loop; after every ``await`` it re-checks the
partition's ``generation`` before touching the log.
"""

from __future__ import annotations

import asyncio
import logging

from ray.exceptions import RayActorError

from actors.partition import Partition
from actors.replication_channel import ConnectionLost, ReplicationConnection
from protocol import errors as E
from protocol.messages import FetchRequest, FetchResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from protocol.replica_lookup import replica_handle_async

log = logging.getLogger("actors.replica")


class _Retry(Exception):
    """A retriable condition inside the follower loop: back off and go around again."""


class ReplicaFetcher:
    """The follower side of one replica actor: ``run`` is the loop; ``fetches`` and ``error`` are what
    the actor's ``state()`` reports."""

    def __init__(self, cluster: str, partition: Partition):
        self.cluster, self.partition = cluster, partition
        self.fetches = 0
        self.connections = 0  # replication connections opened (one per leader, more after breaks)
        self.error: str | None = None

    def _name(self) -> str:
        p = self.partition
        return f"{p.topic}-{p.partition} b{p.broker_id}"

    async def _lookup(self, leader_id: int):
        """The leader's replica actor, through the broker that hosts it (protocol/replica_lookup.py)."""
        p = self.partition
        return await replica_handle_async(self.cluster, p.topic, p.partition, leader_id)

    def _truncate(self, offset: int, why: str) -> None:
        leo = self.partition.log.log_end_offset
        if self.partition.truncate_to(offset):
            log.info("%s: truncating %d -> %d (%s)", self._name(), leo, offset, why)

    async def _truncate_by_epoch(self, leader, gen: int, leader_epoch: int) -> None:
        """OffsetForLeaderEpoch until the log is a prefix of the leader's (KIP-101/279)."""
        p = self.partition
        for _ in range(1000):
            requested = p.log.latest_epoch
            if requested < 0:
                # no epoch information: everything above our HW is suspect
                self._truncate(p.log.high_watermark, "no leader epochs, truncate to HW")
                return
            req = OffsetForLeaderEpochRequest(requested, current_leader_epoch=leader_epoch)
            resp = OffsetForLeaderEpochResponse.from_dict(await leader.offset_for_leader_epoch.remote(req))
            if p.generation != gen:
                raise asyncio.CancelledError()
            if resp.error_code:
                raise _Retry(f"offset_for_leader_epoch: {E.for_code(resp.error_code).name}")
            offset, done = p.truncation_after_epoch(requested, resp.leader_epoch, resp.end_offset)
            self._truncate(
                offset,
                f"leader epoch {resp.leader_epoch} ends at {resp.end_offset}, our latest epoch {requested}",
            )
            if done:
                return
        raise _Retry("epoch truncation did not converge")

    async def _connect(self, leader, gen: int, timeout_s: float) -> ReplicationConnection:
        """A connection to the leader replica's replication listener (its endpoint asked through Ray)."""
        p = self.partition
        ep = await leader.replication_endpoint.remote()
        if p.generation != gen:
            raise asyncio.CancelledError()
        if ep.get("error_code"):
            raise _Retry(f"replication_endpoint: {E.for_code(ep['error_code']).name}: {ep.get('error_message')}")
        conn = await ReplicationConnection.open(ep, p.broker_id, timeout_s)
        self.connections += 1
        return conn

    async def run(self, gen: int, leader_id: int, leader_epoch: int, conf: dict) -> None:
        """The loop. Its connection is its own (``link``, not the fetcher's: a cancelled loop's cleanup may run
        after the next loop started) and is closed however the loop ends."""
        link: list[ReplicationConnection] = []  # the open connection, if any
        try:
            await self._run(gen, leader_id, leader_epoch, conf, link)
        finally:
            for conn in link:
                conn.close()

    async def _run(self, gen: int, leader_id: int, leader_epoch: int, conf: dict, link: list) -> None:
        p = self.partition
        leader = None
        truncated = False
        backoff = conf["replica.fetch.backoff.ms"] / 1000.0
        timeout_s = conf["replica.socket.timeout.ms"] / 1000.0
        delay = backoff
        while p.generation == gen:
            try:
                if leader is None:
                    leader = await self._lookup(leader_id)
                if not link:
                    link.append(await self._connect(leader, gen, timeout_s))
                if not truncated:
                    await self._truncate_by_epoch(leader, gen, leader_epoch)
                    truncated = True
                req = FetchRequest(
                    p.log.log_end_offset,
                    max_bytes=conf["replica.fetch.max.bytes"],
                    max_wait_ms=conf["replica.fetch.wait.max.ms"],
                    min_bytes=1,
                    replica_id=p.broker_id,
                    current_leader_epoch=leader_epoch,
                )
                resp = FetchResponse.from_dict(await link[0].fetch(req))
                if p.generation != gen:
                    return
                self.fetches += 1
                code = resp.error_code
                if code == 0:
                    p.append_as_follower(resp.records, resp.high_watermark, resp.log_start_offset)
                    self.error = None
                    delay = backoff
                    continue
                if code == E.OffsetOutOfRangeError.code:
                    self._out_of_range(resp)
                    continue
                raise _Retry(E.for_code(code).name + ": " + str(resp.error_message))
            except asyncio.CancelledError:
                return
            except (RayActorError, ConnectionLost, ValueError) as exc:
                # the leader's actor died, its connection broke, or it is not created (yet): close the
                # connection, look the leader up again after the backoff, until the next LeaderAndIsr
                leader = None
                while link:
                    link.pop().close()
                self.error = f"leader b{leader_id} unavailable: {type(exc).__name__}: {exc}"
            except E.UnexpectedAppendOffsetError as exc:
                truncated = False
                self.error = str(exc)
            except _Retry as exc:
                self.error = str(exc)
            except Exception as exc:
                log.exception("follower loop of %s", self._name())
                self.error = f"{type(exc).__name__}: {exc}"
            if p.generation != gen:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _out_of_range(self, resp: FetchResponse) -> None:
        p = self.partition
        leo = -1 if resp.log_end_offset is None else resp.log_end_offset
        cut = p.offset_out_of_range_truncation(leo, resp.log_start_offset)
        if cut is None:
            return
        offset, restart = cut
        if not restart:
            self._truncate(offset, "fetch offset past the leader's LEO")
        else:
            log.info(
                "%s: leader log starts at %d past our LEO %d: restarting the log there",
                self._name(),
                offset,
                p.log.log_end_offset,
            )
            p.restart_log_at(offset)
