"""The follower fetch path over a plain TCP connection (Kafka's replication listener), not over Ray calls.

Why: a Ray actor call costs ~1.4 ms of CPU across the processes it touches on this machine (measured:
1,200-1,300 calls/s saturate 2 cores), and one acks=all round needs one follower fetch per follower.
With Ray calls the follower's request took 6.4 ms to reach a leader and the answer 3.9 ms to come back
at 200 records/s (acks=all wait 14-19 ms). Kafka replicates over its own TCP connections; so does this:
Ray stays the control plane (actors, names, LeaderAndIsr, OffsetForLeaderEpoch, lookups) and the
follower's long-polled ``fetch`` travels on a connection from the follower to its leader replica.

Leader side, :class:`ReplicationListener`: an asyncio server on the Ray node's IP, an ephemeral port,
started on the first ``ReplicaActor.replication_endpoint()`` call (the follower asks through Ray, so it
only reaches a leader it could already call). The endpoint carries a random token: the connection's first
frame must present it, with the follower's broker id, or the connection is closed with a log line (a
stranger on the network must not pose as a follower: a follower's fetch offset moves the high watermark).
Then each frame is one ``FetchRequest`` answered by the replica's own ``fetch`` (same checks, same
purgatory), one at a time per connection, in order.

Frames (big-endian): a request is ``u32 length`` + a msgpack map of FetchRequest's fields; the hello is
the same with ``{"token": bytes, "replica_id": int}``. An answer is ``u32 meta length, u32 records
length`` + the msgpack map of the FetchResponse fields but ``records`` + the records' bytes (never
re-packed). A frame over ``MAX_REQUEST_BYTES`` (requests) or a malformed map closes the connection; the
leader and its other connections go on.

Follower side, :class:`ReplicationConnection`: opened by the ReplicaFetcher per leader; any socket error,
EOF or ``replica.socket.timeout.ms`` without an answer raises :class:`ConnectionLost`, which the fetcher
treats like a dead leader actor (look it up again, back off). Cancellation (a new LeaderAndIsr) closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import msgpack

from protocol.data_channel import BadFrame  # one class for both listeners' bad frames (``serving``)
from protocol.messages import FetchRequest

log = logging.getLogger("actors.replica")

MAX_REQUEST_BYTES = 64 * 1024  # a FetchRequest or hello is < 200 bytes
_U32 = struct.Struct(">I")
_ANSWER = struct.Struct(">II")
_INT_FIELDS = (
    "fetch_offset",
    "max_bytes",
    "max_wait_ms",
    "min_bytes",
    "replica_id",
    "current_leader_epoch",
    "isolation_level",
)


class ConnectionLost(Exception):
    """The replication connection to the leader broke, timed out or was refused."""


def encode_request(req: FetchRequest) -> bytes:
    body = msgpack.packb({f: getattr(req, f) for f in _INT_FIELDS})
    return _U32.pack(len(body)) + body


def decode_request(body: bytes) -> FetchRequest:
    """A FetchRequest from a request frame's body; BadFrame unless it is a map of the known int fields."""
    try:
        d = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - any msgpack failure is a bad frame
        raise BadFrame(f"not msgpack: {type(exc).__name__}") from None
    if not isinstance(d, dict) or set(d) - set(_INT_FIELDS) or "fetch_offset" not in d:
        raise BadFrame("not a FetchRequest map")
    for k, v in d.items():
        if type(v) is not int or not -(1 << 63) <= v < (1 << 63):
            raise BadFrame(f"{k} must be an int64")
    return FetchRequest(**d)


def encode_answer(answer: dict) -> list:
    """The frame parts of a fetch answer (records are written as they are, not copied into msgpack)."""
    records = answer.get("records") or b""
    meta = msgpack.packb({k: v for k, v in answer.items() if k != "records"})
    return [_ANSWER.pack(len(meta), len(records)), meta, records]


@contextlib.contextmanager
def serving(conns: set, writer: asyncio.StreamWriter, stats: dict, name: str, what: str) -> Iterator[None]:
    """One accepted connection's life: a peer that goes away ends it quietly, a bad frame or a missing hello
    closes it with a log line and a count in ``stats``, anything else is logged; the listener and its other
    connections go on. Used by this module's listener and the client listener (actors/client_channel.py)."""
    peer = writer.get_extra_info("peername")
    conns.add(writer)
    try:
        yield
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the peer went away (or we are closing)
    except (BadFrame, asyncio.TimeoutError) as exc:
        stats["bad_frames" if isinstance(exc, BadFrame) else "refused"] += 1
        log.warning("%s: %s connection from %s closed: %s", name, what, peer, exc or "no hello in 10 s")
    except Exception:  # noqa: BLE001 - never let one connection take the replica down
        log.exception("%s: %s connection from %s failed", name, what, peer)
    finally:
        conns.discard(writer)
        writer.close()


class TokenListener:
    """An asyncio server on an ephemeral port whose connections present a token (handed out through Ray);
    the replication and client listeners build on it. ``serve`` handles one accepted connection."""

    def __init__(self, name: str, serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]):
        self.name, self._handle_connection = name, serve
        self.token = secrets.token_bytes(16)
        self.server: asyncio.AbstractServer | None = None
        self.host, self.port = "", 0
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self, host: str) -> dict:
        if self.server is None:
            self.server = await asyncio.start_server(self._handle_connection, host, 0)
            self.host, self.port = host, self.server.sockets[0].getsockname()[1]
        return self.endpoint()

    def endpoint(self) -> dict:
        return {"host": self.host, "port": self.port, "token": self.token}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        for w in list(self._conns):
            w.close()
        self._conns.clear()


class ReplicationListener(TokenListener):
    """The leader replica's server. ``handler`` is the replica's ``fetch`` (a FetchRequest -> answer dict);
    ``replicas`` says which broker ids may fetch (the partition's assignment, read at each hello)."""

    def __init__(
        self,
        handler: Callable[[FetchRequest], Awaitable[dict]],
        replicas: Callable[[], Any],
        name: str,
    ):
        super().__init__(name, self._serve)
        self.handler, self.replicas = handler, replicas
        self.stats = {"connections": 0, "refused": 0, "bad_frames": 0, "fetches": 0}

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes:
        (n,) = _U32.unpack(await reader.readexactly(4))
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
        if d["replica_id"] not in set(self.replicas()):
            raise BadFrame(f"broker {d['replica_id']} is not a replica of {self.name}")
        return d["replica_id"]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with serving(self._conns, writer, self.stats, self.name, "replication"):
            replica_id = await asyncio.wait_for(self._hello(reader), 10)
            self.stats["connections"] += 1
            while True:
                req = decode_request(await self._read_frame(reader))
                if req.replica_id != replica_id:
                    raise BadFrame(f"fetch as replica {req.replica_id} on broker {replica_id}'s connection")
                answer = await self.handler(req)
                self.stats["fetches"] += 1
                writer.writelines(encode_answer(answer))
                await writer.drain()


class ReplicationConnection:
    """The follower's connection to one leader replica's :class:`ReplicationListener`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float):
        self.reader, self.writer, self.timeout_s = reader, writer, timeout_s

    @classmethod
    async def open(cls, endpoint: dict, replica_id: int, timeout_s: float) -> ReplicationConnection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(endpoint["host"], endpoint["port"]), timeout_s
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise ConnectionLost(f"connect to {endpoint['host']}:{endpoint['port']}: {exc or 'timed out'}") from None
        hello = msgpack.packb({"token": endpoint["token"], "replica_id": replica_id})
        writer.write(_U32.pack(len(hello)) + hello)
        return cls(reader, writer, timeout_s)

    async def fetch(self, req: FetchRequest) -> dict:
        """One FetchRequest, answered as the replica's ``fetch`` dict; ConnectionLost if the leader is gone."""
        try:
            self.writer.write(encode_request(req))
            head = await asyncio.wait_for(
                self.reader.readexactly(_ANSWER.size), self.timeout_s + req.max_wait_ms / 1000
            )
            meta_len, rec_len = _ANSWER.unpack(head)
            meta = await asyncio.wait_for(self.reader.readexactly(meta_len), self.timeout_s)
            records = await asyncio.wait_for(self.reader.readexactly(rec_len), self.timeout_s) if rec_len else b""
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            self.close()
            raise ConnectionLost(f"replication connection lost: {type(exc).__name__} {exc}") from None
        try:
            answer = msgpack.unpackb(meta, raw=False)
            answer["records"] = records
        except Exception as exc:  # noqa: BLE001 - out of step with the leader: start a new connection
            self.close()
            raise ConnectionLost(f"malformed answer from the leader: {type(exc).__name__}") from None
        return answer

    def close(self) -> None:
        self.writer.close()
