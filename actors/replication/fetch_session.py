"""Follower fetch sessions (Kafka's ReplicaFetcherManager, one fetcher per source broker): one connection and one
long-poll from a follower process to a leader process for every partition the first follows in the second. A
ReplicaFetcher joins the :class:`FetchSession` of its leader's endpoint as a :class:`SessionMember`; the session
sends one request for all its members and hands each answer to its member's ``apply``. Runs on the process's one
event loop; it calls the replication connection (actors/channels/replication_channel.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any

from actors.channels.replication_channel import ConnectionLost, ReplicationConnection
from actors.server.replication_quota import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    ReplicationQuotaManager,
    throttled_replicas,
)
from protocol.replication_frames import encode_session_fetch

log = logging.getLogger("actors.replica")

# the largest session answer (Kafka's replica.fetch.response.max.bytes default); each partition's own share is
# replica.fetch.max.bytes
RESPONSE_MAX_BYTES = 10 * 1024 * 1024


class SessionMember:
    """One follower partition in a session: its fetcher (``partition``, ``apply(answer)``), the generation and
    leader epoch it fetches under, its replica config, and ``done``, failed with what ended its membership."""

    __slots__ = ("fetcher", "gen", "leader_epoch", "conf", "done", "applied", "key", "in_sync")

    def __init__(self, fetcher: Any, gen: int, leader_epoch: int, conf: dict):
        self.fetcher, self.gen, self.leader_epoch, self.conf = fetcher, gen, leader_epoch, conf
        p = fetcher.partition
        self.key = (p.topic, p.partition)
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self.applied = 0  # answers applied (a member that fetched is not backing off from scratch)
        self.in_sync = False  # its last answer brought it to the leader's high watermark (Kafka's isReplicaInSync)

    def entry(self) -> list:
        p = self.fetcher.partition
        return [p.topic, p.partition, p.log.log_end_offset, self.leader_epoch, self.conf["replica.fetch.max.bytes"]]

    def current(self) -> bool:
        return self.fetcher.partition.generation == self.gen

    def throttled(self, quota: ReplicationQuotaManager) -> bool:
        """Kafka's shouldFollowerThrottle, less the quota: not caught up, a follower rate set, and the topic's
        ``follower.replication.throttled.replicas`` names this broker's replica."""
        if self.in_sync:
            return False
        quota.configure(self.conf, FOLLOWER_RATE)
        p = self.fetcher.partition
        return quota.limited and throttled_replicas(self.conf.get(FOLLOWER_REPLICAS)).includes(p.partition, p.broker_id)

    def fail(self, exc: BaseException) -> None:
        if not self.done.done():
            self.done.set_exception(exc)


class FetchSession:
    """One follower broker's fetches from one leader process, for all of the partitions it follows there."""

    def __init__(self, registry: dict, key: tuple, endpoint: dict, broker_id: int):
        self.registry, self.key, self.endpoint, self.broker_id = registry, key, endpoint, broker_id
        self.members: dict[tuple[str, int], SessionMember] = {}
        self.conn: ReplicationConnection | None = None
        self.in_flight = False
        self.fetches = 0
        self.task: asyncio.Task | None = None
        self.quota = follower_quota()  # the process's, shared by its sessions (Kafka's per-broker follower quota)
        self.throttled_holds = 0  # fetches that left throttled members out: the follower quota was exceeded

    def describe(self) -> dict:
        """For ``state()``: the leader process's endpoint, this end's local port (one per connection), members."""
        sock = None if self.conn is None else self.conn.writer.get_extra_info("sockname")
        return {
            "leader": f"{self.endpoint['host']}:{self.endpoint['port']}",
            "local_port": None if not sock else sock[1],
            "partitions": len(self.members),
            "fetches": self.fetches,
            "throttled_holds": self.throttled_holds,
        }

    def _unthrottled(self, batch: list[SessionMember]) -> tuple[list[SessionMember], set[int]]:
        """The members to fetch for now (every one, less the throttled ones while the follower quota is
        exceeded) and the ids of the throttled members among them (their bytes count against the quota)."""
        throttled = {id(m) for m in batch if m.throttled(self.quota)}
        if throttled and self.quota.is_quota_exceeded(time.monotonic()):
            self.throttled_holds += 1
            return [m for m in batch if id(m) not in throttled], set()
        return batch, throttled

    def join(self, member: SessionMember) -> None:
        old = self.members.get(member.key)
        if old is not None and old is not member:
            old.done.cancel()  # its partition's next membership replaces it (the old loop is being cancelled)
        self.members[member.key] = member
        if self.task is None:
            self.task = asyncio.ensure_future(self._run(member.conf))
        elif self.in_flight and self.conn is not None:
            self.conn.poke()

    def leave(self, member: SessionMember) -> None:
        if self.members.get(member.key) is member:
            del self.members[member.key]
        if not self.members:
            self._end()

    def _end(self) -> None:
        if self.registry.get(self.key) is self:
            del self.registry[self.key]
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        if self.conn is not None:
            self.conn.close()

    def _fail_all(self, exc: BaseException) -> None:
        members, self.members = list(self.members.values()), {}
        for m in members:
            m.fail(exc)

    async def _run(self, conf: dict) -> None:
        try:
            self.conn = await ReplicationConnection.open(
                self.endpoint, self.broker_id, conf["replica.socket.timeout.ms"] / 1000.0
            )
            while self.members:
                batch, throttled = self._unthrottled(list(self.members.values()))
                if not batch:  # every member is throttled and over the quota: back off (Kafka's fetchBackOffMs)
                    await asyncio.sleep(conf.get("replica.fetch.backoff.ms", 50) / 1000.0)
                    continue
                wait_ms = batch[0].conf["replica.fetch.wait.max.ms"]
                frame = encode_session_fetch(self.broker_id, wait_ms, 1, RESPONSE_MAX_BYTES, [m.entry() for m in batch])
                self.in_flight = True
                try:
                    answers = await self.conn.fetch(frame, wait_ms)
                finally:
                    self.in_flight = False
                if len(answers) != len(batch):
                    raise ConnectionLost(f"{len(answers)} answers to a fetch of {len(batch)} partitions")
                self.fetches += 1
                moved = 0
                for m, answer in zip(batch, answers):
                    if id(m) in throttled:
                        moved += len(answer.get("records") or b"")
                    if self.members.get(m.key) is not m or not m.current():
                        continue  # it left, or its partition moved on, while the fetch was out
                    try:
                        m.fetcher.apply(answer)
                        m.applied += 1
                        hw = answer.get("high_watermark")
                        m.in_sync = hw is not None and hw >= 0 and m.fetcher.partition.log.log_end_offset >= hw
                    except Exception as exc:  # noqa: BLE001 - this member's trouble, handled by its fetcher
                        del self.members[m.key]
                        m.fail(exc)
                self._record(moved)
        except asyncio.CancelledError:
            pass
        except ConnectionLost as exc:
            self._fail_all(exc)
        except Exception as exc:  # noqa: BLE001 - every member backs off and joins again
            log.exception("fetch session to %s:%s", self.endpoint.get("host"), self.endpoint.get("port"))
            self._fail_all(ConnectionLost(f"fetch session failed: {type(exc).__name__}: {exc}"))
        finally:
            self._end()

    def _record(self, nbytes: int) -> None:
        if nbytes:
            self.quota.record(nbytes, time.monotonic())


_registries: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {key: FetchSession}
_quotas: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its follower quota


def follower_quota() -> ReplicationQuotaManager:
    """This event loop's (this process's) follower-side quota: ``follower.replication.throttled.rate`` over
    every session's throttled members."""
    loop = asyncio.get_running_loop()
    quota = _quotas.get(loop)
    if quota is None:
        quota = _quotas[loop] = ReplicationQuotaManager()
    return quota


def session_for(endpoint: dict, broker_id: int) -> FetchSession:
    """The running session of this event loop to ``endpoint`` for ``broker_id``'s followers, or a new one."""
    registry = _registries.setdefault(asyncio.get_running_loop(), {})
    key = (endpoint["host"], endpoint["port"], endpoint["token"], broker_id)
    session = registry.get(key)
    if session is None:
        session = registry[key] = FetchSession(registry, key, endpoint, broker_id)
    return session


def sessions() -> list[FetchSession]:
    """This event loop's sessions (introspection and tests)."""
    return list(_registries.get(asyncio.get_running_loop(), {}).values())
