"""The clients' data plane: produce and fetch over TCP to each leader replica's client listener.

A Ray actor call costs ~1.4 ms of CPU and several ms of delay on a busy 2-core machine; a request on an
open TCP connection costs tens of microseconds. So :class:`ChannelTransport` (the Producer's and Consumer's
default transport, rafka/transport.py's seam) sends the two hot calls, ``produce`` and ``fetch`` on a
replica actor, over a connection to that replica's listener (actors/client_channel.py), and everything
else (lookups, list offsets, coordinators, admin) as Ray calls, exactly as :class:`RayTransport` does.

One I/O thread per process runs an asyncio loop with one connection per replica actor, shared by every
client in the process (Kafka's NetworkClient keeps one connection per broker). The first request to a
replica asks it for its endpoint with a Ray call (host, port, token: only what can call the actor can
connect), opens the connection and says hello; requests are pipelined with correlation ids, and answers
resolve ``concurrent.futures.Future`` objects the Sender and Fetcher wait on like Ray's.

Failures are Kafka's: a refused endpoint query answers its error code; a connection that breaks (the
replica's process died, it was stopped, a reset) fails every request on it with NOT_LEADER_OR_FOLLOWER,
which is retriable and makes the clients look the leader up again, as a dead actor does over Ray; a request
with no answer within its timeout (``timeout_ms`` + slack for produce, ``max_wait_ms`` +
``request.timeout.ms`` for fetch) fails with REQUEST_TIMED_OUT and closes the connection (its state is
unknown, as Kafka's NetworkClient does). Connections idle for ``connections.max.idle.ms`` (9 minutes) close.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import os
import threading
import time
from typing import Any

import msgpack

from protocol.data_channel import ANSWER_HEAD, API_FETCH, API_PRODUCE, U32, encode_request
from protocol.errors import KafkaError, NotLeaderOrFollowerError, RequestTimedOutError, for_code
from rafka.transport import RAY, RayTransport

log = logging.getLogger("rafka.channel")

CONNECTIONS_MAX_IDLE_S = 540.0  # connections.max.idle.ms
REQUEST_TIMEOUT_S = 30.0  # request.timeout.ms: added to a fetch's max_wait_ms and to the endpoint query
PRODUCE_SLACK_S = 5.0  # a produce's leader answers REQUEST_TIMED_OUT itself at timeout_ms
_PRODUCE_KEYS = ("acks", "timeout_ms", "current_leader_epoch", "transactional_id")
_FETCH_KEYS = ("fetch_offset", "max_bytes", "max_wait_ms", "min_bytes", "current_leader_epoch", "isolation_level")


def _actor_key(handle: Any) -> Any:
    aid = getattr(handle, "_actor_id", None)
    return aid.binary() if aid is not None else id(handle)


class _Connection:
    """One connection to one replica's client listener; lives on the I/O loop only."""

    def __init__(self, io: ChannelIO, key: Any, handle: Any):
        self.io, self.key, self.handle = io, key, handle
        self.pending: dict[int, tuple[concurrent.futures.Future, asyncio.TimerHandle]] = {}
        self.corr = itertools.count()
        self.writer: asyncio.StreamWriter | None = None
        self.queue: list[tuple[int, list]] | None = []  # frames waiting for the connection to open
        self.closed = False
        self.last_used = time.monotonic()

    async def open(self) -> None:
        try:
            ref = self.handle.client_endpoint.remote()
            ep = await asyncio.wait_for(asyncio.wrap_future(ref.future()), REQUEST_TIMEOUT_S)
            if ep.get("error_code"):
                raise for_code(ep["error_code"])(ep.get("error_message") or None)
            reader, writer = await asyncio.wait_for(asyncio.open_connection(ep["host"], ep["port"]), REQUEST_TIMEOUT_S)
        except KafkaError as exc:
            self.close(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a dead actor, a refused connect, a timeout: look it up again
            self.close(NotLeaderOrFollowerError(f"no connection to the leader replica: {type(exc).__name__} {exc}"))
            return
        if self.closed:
            writer.close()
            return
        hello = msgpack.packb({"token": ep["token"]})
        writer.write(U32.pack(len(hello)) + hello)
        self.writer = writer
        for _corr, parts in self.queue or ():
            writer.writelines(parts)
        self.queue = None
        self.io.loop.create_task(self._read(reader))

    def send(self, fields: dict, api: int, payload: bytes, timeout_s: float, fut: concurrent.futures.Future) -> None:
        if self.closed:
            fut.set_exception(NotLeaderOrFollowerError("connection to the leader replica closed"))
            return
        corr = next(self.corr) & 0xFFFFFFFF
        timer = self.io.loop.call_later(timeout_s, self._expired, corr, timeout_s)
        self.pending[corr] = (fut, timer)
        self.last_used = time.monotonic()
        parts = encode_request(corr, api, fields, payload)
        if self.queue is not None:
            self.queue.append((corr, parts))
        else:
            assert self.writer is not None
            self.writer.writelines(parts)

    def _expired(self, corr: int, timeout_s: float) -> None:
        entry = self.pending.pop(corr, None)
        if entry is not None:
            _fail(entry[0], RequestTimedOutError(f"no answer from the leader replica in {timeout_s:.1f} s"))
            self.close(NotLeaderOrFollowerError("connection closed after a request timed out"))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                corr, meta_len, rec_len = ANSWER_HEAD.unpack(await reader.readexactly(ANSWER_HEAD.size))
                meta = await reader.readexactly(meta_len)
                records = await reader.readexactly(rec_len) if rec_len else b""
                entry = self.pending.pop(corr, None)
                if entry is None:
                    continue  # timed out meanwhile
                fut, timer = entry
                timer.cancel()
                self.last_used = time.monotonic()
                try:
                    answer = msgpack.unpackb(meta, raw=False)
                    answer["records"] = records
                    aborted = answer.get("aborted_transactions")
                    if aborted is not None:
                        answer["aborted_transactions"] = tuple(tuple(a) for a in aborted)
                except Exception as exc:  # noqa: BLE001 - out of step with the server: start afresh
                    _fail(fut, NotLeaderOrFollowerError(f"malformed answer from the leader replica: {exc}"))
                    raise
                if not fut.done():
                    fut.set_result(answer)
        except asyncio.CancelledError:
            self.close(NotLeaderOrFollowerError("client channel shut down"))
            raise
        except Exception as exc:  # noqa: BLE001 - EOF, reset, malformed: every pending request is retried
            self.close(NotLeaderOrFollowerError(f"connection to the leader replica lost: {type(exc).__name__}"))

    def close(self, err: BaseException) -> None:
        if self.closed:
            return
        self.closed = True
        if self.io.conns.get(self.key) is self:
            del self.io.conns[self.key]
        if self.writer is not None:
            self.writer.close()
        for fut, timer in self.pending.values():
            timer.cancel()
            _fail(fut, err)
        self.pending.clear()
        self.queue = None  # the queued requests' futures were in pending: failed above


def _fail(fut: concurrent.futures.Future, err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)


class ChannelIO:
    """The process's I/O thread: an asyncio loop holding one connection per replica actor."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.conns: dict[Any, _Connection] = {}
        self.thread = threading.Thread(target=self._run, name="rafka-channel-io", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_later(CONNECTIONS_MAX_IDLE_S / 4, self._reap)
        self.loop.run_forever()

    def _reap(self) -> None:
        now = time.monotonic()
        for conn in list(self.conns.values()):
            if not conn.pending and now - conn.last_used > CONNECTIONS_MAX_IDLE_S:
                conn.close(NotLeaderOrFollowerError("idle connection closed"))
        self.loop.call_later(CONNECTIONS_MAX_IDLE_S / 4, self._reap)

    def submit(
        self, handle: Any, api: int, fields: dict, payload: bytes, timeout_s: float
    ) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self._submit, handle, api, fields, payload, timeout_s, fut)
        return fut

    def _submit(self, handle, api, fields, payload, timeout_s, fut) -> None:
        key = _actor_key(handle)
        conn = self.conns.get(key)
        if conn is None:
            conn = self.conns[key] = _Connection(self, key, handle)
            self.loop.create_task(conn.open())
        try:
            conn.send(fields, api, payload, timeout_s, fut)
        except Exception as exc:  # noqa: BLE001 - e.g. a field msgpack cannot carry: that request fails alone
            _fail(fut, exc)

    def connections(self) -> int:
        return len(self.conns)


_io: ChannelIO | None = None
_io_pid = 0
_io_lock = threading.Lock()


def channel_io() -> ChannelIO:
    global _io, _io_pid
    with _io_lock:
        if _io is None or _io_pid != os.getpid():
            _io, _io_pid = ChannelIO(), os.getpid()
        return _io


class ChannelTransport(RayTransport):
    """:class:`RayTransport`, but ``produce``/``fetch`` on a replica actor travel on the client channel.
    Calls are then ``concurrent.futures.Future`` objects; ``wait``/``get`` accept both kinds."""

    __slots__ = ()
    inline_calls_only = False  # a produce of max.request.size is one frame on the connection

    def call(self, endpoint: Any, method: str, *args: Any, **kw: Any) -> Any:
        if not kw and len(args) == 1:
            req = args[0]
            if method == "produce":
                f = {k: getattr(req, k) for k in _PRODUCE_KEYS}
                return channel_io().submit(
                    endpoint, API_PRODUCE, f, req.records, req.timeout_ms / 1000 + PRODUCE_SLACK_S
                )
            if method == "fetch" and getattr(req, "replica_id", 0) < 0:
                f = {k: getattr(req, k) for k in _FETCH_KEYS}
                return channel_io().submit(endpoint, API_FETCH, f, b"", req.max_wait_ms / 1000 + REQUEST_TIMEOUT_S)
        return super().call(endpoint, method, *args, **kw)

    def future(self, call: Any) -> Any:
        return call if isinstance(call, concurrent.futures.Future) else call.future()

    def wait(self, calls: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        if not any(isinstance(c, concurrent.futures.Future) for c in calls):
            return super().wait(calls, num_returns, timeout)
        futs = {id(c): self.future(c) for c in calls}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            done = [c for c in calls if futs[id(c)].done()]
            if len(done) >= num_returns:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            concurrent.futures.wait(
                [f for f in futs.values() if not f.done()], timeout=left, return_when=concurrent.futures.FIRST_COMPLETED
            )
        ready = done[:num_returns]
        taken = {id(c) for c in ready}
        return ready, [c for c in calls if id(c) not in taken]

    def get(self, call: Any, timeout: float | None = None) -> Any:
        if isinstance(call, concurrent.futures.Future):
            try:
                return call.result(timeout)
            except concurrent.futures.TimeoutError:
                raise RequestTimedOutError(f"no answer in {timeout} s") from None
        return super().get(call, timeout)


CHANNEL = ChannelTransport()


def data_transport(config: Any) -> RayTransport:
    """The transport of a client's produce/fetch calls: its ``data_channel`` config (tcp or ray)."""
    return CHANNEL if getattr(config, "data_channel", "tcp") == "tcp" else RAY


__all__ = ["ChannelTransport", "CHANNEL", "RAY", "data_transport"]
