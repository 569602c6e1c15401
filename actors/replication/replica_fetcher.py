"""The follower's loop for one partition (Kafka's ReplicaFetcherThread's per-partition state), run by the replica
shell while it follows: look the leader up (actors/channels/replica_lookup.py), ask its replication endpoint,
truncate by leader epoch (KIP-101/279), then join the fetch session to the leader's process (fetch_session.py).
Trouble backs off and joins again until a LeaderAndIsr bumps the partition's ``generation``."""

from __future__ import annotations

import asyncio
import logging

from ray.exceptions import RayActorError

from actors.channels.replica_lookup import replica_handle_async
from actors.channels.replication_channel import ConnectionLost
from actors.replication.fetch_session import FetchSession, SessionMember, session_for
from actors.replication.partition import Partition
from actors.replication.partition_state import LeaderHwChange
from actors.replication.replica_manager import replica_manager_of
from protocol import errors as E
from protocol.messages import FetchResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

log = logging.getLogger("actors.replica")


class _Retry(Exception):
    """A retriable condition inside the follower loop: back off and go around again."""


class ReplicaFetcher:
    """The follower side of one replica actor: ``run`` is the loop; ``fetches`` and ``error`` are what
    the actor's ``state()`` reports."""

    def __init__(self, cluster: str, partition: Partition):
        self.cluster, self.partition = cluster, partition
        self.fetches = 0
        self.connections = 0  # fetch sessions joined (one per leader, more after trouble)
        self.error: str | None = None
        self.session: FetchSession | None = None  # the session it is a member of now

    def _name(self) -> str:
        p = self.partition
        return f"{p.topic}-{p.partition} b{p.broker_id}"

    async def _lookup(self, leader_id: int):
        """The leader's replica actor, through the broker that hosts it (actors/channels/replica_lookup.py)."""
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

    async def _endpoint(self, leader, gen: int) -> dict:
        """The leader's replication endpoint (its process's server), asked through Ray."""
        ep = await leader.replication_endpoint.remote()
        if self.partition.generation != gen:
            raise asyncio.CancelledError()
        if ep.get("error_code"):
            raise _Retry(f"replication_endpoint: {E.for_code(ep['error_code']).name}: {ep.get('error_message')}")
        return ep

    def apply(self, answer: dict) -> None:
        """One answer of the session's fetch for this partition (actors/replication/fetch_session.py): append it, or raise
        what the loop must handle (the session then drops this partition and the loop backs off)."""
        resp = FetchResponse.from_dict(answer)
        self.fetches += 1
        code = resp.error_code
        if code == 0:
            p = self.partition
            if p.append_as_follower(resp.records, resp.high_watermark, resp.log_start_offset):
                # KIP-392: consumers long-polling this follower read up to its HW, which just rose
                replica_manager_of(p.broker_id).complete_delayed_requests(p, LeaderHwChange.INCREASED)
            self.error = None
        elif code == E.OffsetOutOfRangeError.code:
            self._out_of_range(resp)
        else:
            raise _Retry(E.for_code(code).name + ": " + str(resp.error_message))

    async def run(self, gen: int, leader_id: int, leader_epoch: int, conf: dict) -> None:
        """The loop: look the leader up, truncate, then follow through the session to the leader's process
        until the session drops this partition (an error, a broken connection: back off, go around) or the
        next LeaderAndIsr cancels the loop."""
        p = self.partition
        leader = None
        endpoint: dict | None = None
        truncated = False
        backoff = conf["replica.fetch.backoff.ms"] / 1000.0
        delay = backoff
        while p.generation == gen:
            member = None
            try:
                if leader is None:
                    leader = await self._lookup(leader_id)
                if endpoint is None:
                    endpoint = await self._endpoint(leader, gen)
                if not truncated:
                    await self._truncate_by_epoch(leader, gen, leader_epoch)
                    truncated = True
                member = SessionMember(self, gen, leader_epoch, conf)
                session = session_for(endpoint, p.broker_id)
                session.join(member)
                self.session = session
                self.connections += 1
                try:
                    await member.done  # only ever fails: with what ended the membership
                finally:
                    self.session = None
                    session.leave(member)
            except asyncio.CancelledError:
                return
            except (RayActorError, ConnectionLost, ValueError) as exc:
                # the leader's actor died, its connection broke, or it is not created (yet): look the leader up
                # again after the backoff, until the next LeaderAndIsr
                leader = endpoint = None
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
            if member is not None and member.applied:
                delay = backoff  # it fetched: this trouble is new
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
