"""The follower fetch path over plain TCP (Kafka's replication listener), not Ray calls: a leader process's
:class:`ReplicationServer` (a TokenListener; every leader replica in the process registers in it) answers each
follower broker's session fetch of all its partitions; :class:`ReplicationConnection` is the follower's side
and raises :class:`ConnectionLost` on trouble. Frames: protocol/replication_frames.py; why TCP and the rules:
docs/internals.md, "Replication: module notes"."""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Collection
from typing import Any, Protocol

import msgpack

from actors.channels.listener import TokenListener, serving
from actors.server.replication_quota import LEADER_RATE, LEADER_REPLICAS, ReplicationQuotaManager, throttled_replicas
from protocol import errors as E
from protocol.channel_frames import U32, BadFrame
from protocol.messages import FetchRequest, FetchResponse
from protocol.replication_frames import (  # the session's frames (protocol/replication_frames.py)
    MAX_REQUEST_BYTES,
    POKE,
    SESSION_ANSWER_HEAD,
    decode_answers,
    decode_frame,
    encode_answers,
    encode_poke,
    frame,
)
from protocol.streams import STREAM_LIMIT

log = logging.getLogger("actors.replica")


class ConnectionLost(Exception):
    """The replication connection to the leader broke, timed out or was refused."""


class ServedPartition(Protocol):
    """What the server needs of a leader replica (``Replica`` in actors/replica.py). A served partition with
    ``replica_conf`` (its replica settings: the throttle's rate and list) and ``partition`` (its ISR, broker id and
    partition number) can be throttled (``ReplicationServer.leader_quota``)."""

    def replica_ids(self) -> Collection[int]: ...

    def fetch_now(self, req: FetchRequest, track: bool = True) -> dict:
        """The follower fetch without its wait: the follower's fetch state moves (``track``), then the read."""
        ...

    def park(self, req: FetchRequest, wake: asyncio.Future | None = None) -> Any:
        """A wait watched in the replica's purgatory that resolves ``wake`` when data comes (``cancel()``
        ends it); no timer of its own: the session's wait bounds it."""
        ...


class Poke:
    """A connection's poke (a partition joined the session: answer the held fetch now). ``arm`` gives the
    future the held fetch waits on, done already if a poke came since the fetch arrived (``clear``)."""

    __slots__ = ("poked", "fut")

    def __init__(self) -> None:
        self.poked = False
        self.fut: asyncio.Future | None = None

    def set(self) -> None:
        self.poked = True
        fut = self.fut
        if fut is not None and not fut.done():
            fut.set_result(None)

    def clear(self) -> None:
        self.poked, self.fut = False, None

    def arm(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        fut = self.fut = loop.create_future()
        if self.poked:
            fut.set_result(None)
        return fut


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class ReplicationServer(TokenListener):
    """The leader side of one process (a ReplicaHost's slots, or one ReplicaActor): every leader replica in it
    registers under its topic and partition, and each follower broker's session fetches all of its partitions
    led here in one request (Kafka's fetch session between two brokers' replica managers)."""

    def __init__(self, name: str):
        super().__init__(name, self._serve)
        self.partitions: dict[tuple[str, int], ServedPartition] = {}
        self.stats = {
            "connections": 0,
            "refused": 0,
            "bad_frames": 0,
            "fetches": 0,
            "partition_fetches": 0,
            "pokes": 0,
            "throttled_bytes": 0,  # records sent to throttled replicas (leader.replication.throttled.replicas)
            "throttled_holds": 0,  # throttled partitions left out of an answer: the leader's quota was exceeded
        }
        # Kafka's leader-side ReplicationQuotaManager, over every partition led in this process
        self.leader_quota = ReplicationQuotaManager()

    def register(self, topic: str, partition: int, served: ServedPartition) -> None:
        self.partitions[(topic, partition)] = served

    def unregister(self, topic: str, partition: int, served: ServedPartition) -> None:
        if self.partitions.get((topic, partition)) is served:
            del self.partitions[(topic, partition)]

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes:
        (n,) = U32.unpack(await reader.readexactly(4))
        if n > MAX_REQUEST_BYTES:
            raise BadFrame(f"frame of {n} bytes is over {MAX_REQUEST_BYTES}")
        return await reader.readexactly(n)

    async def _hello(self, reader: asyncio.StreamReader) -> int:
        body = await self._read_frame(reader)
        try:
            d = msgpack.unpackb(body, raw=False)
        except Exception:  # noqa: BLE001 - any msgpack failure is a bad frame
            raise BadFrame("hello is not msgpack") from None
        if not isinstance(d, dict) or not isinstance(d.get("token"), bytes) or type(d.get("replica_id")) is not int:
            raise BadFrame("hello needs token and replica_id")
        if not hmac.compare_digest(d["token"], self.token):
            raise BadFrame("wrong token")
        if d["replica_id"] < 0:
            raise BadFrame(f"replica_id {d['replica_id']} is not a broker id")
        return d["replica_id"]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Frames are read while a fetch is held, so a poke can end its wait; one fetch at a time per
        connection (a second one before the answer is a bad frame), answered in order."""
        task: asyncio.Task | None = None
        with serving(self._conns, writer, self.stats, self.name, "replication"):
            replica_id = await asyncio.wait_for(self._hello(reader), 10)
            self.stats["connections"] += 1
            poke = Poke()
            try:
                while True:
                    msg = decode_frame(await self._read_frame(reader))
                    if msg is POKE:
                        self.stats["pokes"] += 1
                        poke.set()
                        continue
                    if msg["replica_id"] != replica_id:
                        raise BadFrame(f"fetch as replica {msg['replica_id']} on broker {replica_id}'s connection")
                    if task is not None and not task.done():
                        raise BadFrame("a fetch before the answer to the last one")
                    poke.clear()
                    task = asyncio.ensure_future(self._answer(msg, writer, poke))
            finally:
                if task is not None:
                    task.cancel()

    async def _answer(self, msg: dict, writer: asyncio.StreamWriter, poke: Poke) -> None:
        try:
            answers = await self.fetch_session(msg, poke)
            self.stats["fetches"] += 1
            self.stats["partition_fetches"] += len(answers)
            writer.writelines(encode_answers(answers))
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            writer.close()
        except Exception:  # noqa: BLE001 - close this connection (the follower reconnects); the server goes on
            log.exception("%s: a session fetch failed", self.name)
            writer.close()

    def _fetch_one(self, replica_id: int, entry: list, req: FetchRequest, track: bool = True) -> dict:
        topic, partition = entry[0], entry[1]
        served = self.partitions.get((topic, partition))
        if served is None:
            return FetchResponse.error(E.NotLeaderOrFollowerError(f"{topic}-{partition} is not led in {self.name}"))
        if replica_id not in served.replica_ids():
            return FetchResponse.error(
                E.NotLeaderOrFollowerError(f"broker {replica_id} is not a replica of {topic}-{partition}")
            )
        return served.fetch_now(req, track)

    def _leader_throttled(self, replica_id: int, entry: list) -> bool:
        """Kafka's shouldLeaderThrottle, less the quota: a follower out of the ISR fetching a partition whose
        ``leader.replication.throttled.replicas`` names this broker's replica, with a leader rate set."""
        served = self.partitions.get((entry[0], entry[1]))
        conf = getattr(served, "replica_conf", None)
        p = getattr(served, "partition", None)
        if conf is None or p is None:
            return False
        self.leader_quota.configure(conf, LEADER_RATE)
        if not self.leader_quota.limited or replica_id in p.isr:
            return False
        return throttled_replicas(conf.get(LEADER_REPLICAS)).includes(p.partition, p.broker_id)

    def _hold_throttled(self, answers: list[dict], throttled: list[bool]) -> list[bool]:
        """Over the leader's quota, the throttled partitions' records stay out of this answer (their follower
        state moved all the same, as Kafka's readFromLocalLog answers them empty). Which partitions are held."""
        if not any(throttled) or not self.leader_quota.is_quota_exceeded(time.monotonic()):
            return [False] * len(answers)
        for a, t in zip(answers, throttled):
            if t and a.get("records"):
                a["records"] = b""
                self.stats["throttled_holds"] += 1
        return throttled

    async def fetch_session(self, msg: dict, poke: Poke) -> list[dict]:
        """Every partition's answer, in request order. When none has records or an error, the fetch waits up to
        ``max_wait_ms`` for data on any of them (or a poke) and reads them all again (Kafka's DelayedFetch
        over a fetch session's partitions). The answer holds at most ``max_bytes`` of records in all (at least
        the first partition's), the rest comes with the next fetch. Throttled replicas' partitions are left out
        while the leader's quota is exceeded (not waited on either: their data is there), and their bytes counted."""
        rid, parts = msg["replica_id"], msg["partitions"]
        # one request per partition (offset, max bytes, leader epoch) for the read, the wait and the read again
        reqs = [FetchRequest(e[2], e[4], 0, 1, rid, e[3]) for e in parts]
        throttled = [self._leader_throttled(rid, e) for e in parts]
        answers = [self._fetch_one(rid, e, r) for e, r in zip(parts, reqs)]
        held = self._hold_throttled(answers, throttled)
        if msg["max_wait_ms"] > 0 and not any(a["error_code"] or a["records"] for a in answers):
            # one future for the whole wait: a partition's data or a poke resolves it, one timer bounds it (no
            # task, timer or callback per partition per round)
            loop = asyncio.get_running_loop()
            wake = poke.arm(loop)
            ops = []
            for e, r, h in zip(parts, reqs, held):
                served = self.partitions.get((e[0], e[1]))
                if served is not None and not h:
                    ops.append(served.park(r, wake))
            timer = loop.call_later(msg["max_wait_ms"] / 1000, _wake, wake)
            try:
                await wake
            finally:
                timer.cancel()
                for op in ops:
                    op.cancel()
            answers = [self._fetch_one(rid, e, r, False) for e, r in zip(parts, reqs)]  # follower state: above
            self._hold_throttled(answers, throttled)
        total = throttled_bytes = 0
        for a, t in zip(answers, throttled):
            n = len(a.get("records") or b"")
            if total and total + n > msg["max_bytes"]:
                a["records"] = b""  # over the response's limit: it comes with the next fetch
                continue
            total += n
            throttled_bytes += n if t else 0
        if throttled_bytes:
            self.leader_quota.record(throttled_bytes, time.monotonic())
            self.stats["throttled_bytes"] += throttled_bytes
        return answers


class ReplicationConnection:
    """A follower broker's session connection to one leader process's :class:`ReplicationServer`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float):
        self.reader, self.writer, self.timeout_s = reader, writer, timeout_s

    @classmethod
    async def open(cls, endpoint: dict, replica_id: int, timeout_s: float) -> ReplicationConnection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(endpoint["host"], endpoint["port"], limit=STREAM_LIMIT), timeout_s
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionLost(f"connect to {endpoint['host']}:{endpoint['port']}: {exc or 'timed out'}") from None
        writer.write(frame({"token": endpoint["token"], "replica_id": replica_id}))
        return cls(reader, writer, timeout_s)

    async def fetch(self, frame: bytes, max_wait_ms: int) -> list[dict]:
        """One session fetch (``encode_session_fetch``), answered per partition in order; ConnectionLost if the
        leader is gone, silent past ``replica.socket.timeout.ms`` beyond the wait, or out of step."""
        try:
            self.writer.write(frame)
            loop, reader = asyncio.get_running_loop(), self.reader
            # one deadline moved along (no task per read, as asyncio.wait_for makes): the answer's head within the
            # wait plus the socket timeout, then its meta and its records within the socket timeout each
            async with asyncio.timeout(self.timeout_s + max_wait_ms / 1000) as deadline:
                meta_len, rec_len = SESSION_ANSWER_HEAD.unpack(await reader.readexactly(SESSION_ANSWER_HEAD.size))
                deadline.reschedule(loop.time() + self.timeout_s)
                meta = await reader.readexactly(meta_len)
                if rec_len:
                    deadline.reschedule(loop.time() + self.timeout_s)
                records = await reader.readexactly(rec_len) if rec_len else b""
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            self.close()
            raise ConnectionLost(f"replication connection lost: {type(exc).__name__} {exc}") from None
        try:
            return decode_answers(meta, records)
        except Exception as exc:  # noqa: BLE001 - out of step with the leader: start a new connection
            self.close()
            raise ConnectionLost(f"malformed answer from the leader: {type(exc).__name__}") from None

    def poke(self) -> None:
        """Ask the leader to answer the fetch it holds now (a partition joined the session)."""
        if not self.writer.is_closing():
            self.writer.write(encode_poke())

    def close(self) -> None:
        self.writer.close()


_servers: dict[str, ReplicationServer] = {}


def replication_server(name: str) -> ReplicationServer:
    """This process's server (one per broker's process: a ReplicaHost's slots or one ReplicaActor share it)."""
    server = _servers.get(name)
    if server is None:
        server = _servers[name] = ReplicationServer(name)
    return server
