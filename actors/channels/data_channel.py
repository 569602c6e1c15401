"""The client side of the client data channel (threads and sockets): :class:`ChannelIO`, the connections from the
Python clients (rafka/channel.py's transport), the broker's Kafka listener and its coordinators to the replicas'
client listeners (client_channel.py), on an I/O thread's asyncio loop. Frames: protocol/channel_frames.py."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from typing import Any

import msgpack

from protocol.channel_frames import ANSWER_HEAD, U32, encode_request
from protocol.errors import KafkaError, NotLeaderOrFollowerError, RequestTimedOutError, for_code
from protocol.streams import STREAM_LIMIT

# ---- the client side: one connection per replica actor on an asyncio loop ----------------------------
CONNECTIONS_MAX_IDLE_S = 540.0  # connections.max.idle.ms
REQUEST_TIMEOUT_S = 30.0  # request.timeout.ms: added to a fetch's max_wait_ms and to the endpoint query
PRODUCE_SLACK_S = 5.0  # a produce's leader answers REQUEST_TIMED_OUT itself at timeout_ms


def _actor_key(handle: Any) -> Any:
    key = getattr(handle, "channel_key", None)  # a replica in a ReplicaHost (actors/replica_host.py)
    if key is not None:
        return key
    aid = getattr(handle, "_actor_id", None)
    return aid.binary() if aid is not None else id(handle)


def process_key(handle: Any) -> Any:
    """What tells one replica process from another (a ReplicaHost's replicas share it: actors/replica_host.py)."""
    key = getattr(handle, "process_key", None)
    if key is not None:
        return key
    aid = getattr(handle, "_actor_id", None)
    return aid.binary() if aid is not None else id(handle)


class _Connection:
    """One connection to one replica's client listener; lives on the I/O loop only."""

    def __init__(self, io: ChannelIO, key: Any, handle: Any, method: str | None = None):
        self.io, self.key, self.handle = io, key, handle
        self.method = method or io.endpoint_method  # the Ray method that answers the endpoint
        self.pending: dict[int, tuple[concurrent.futures.Future, asyncio.TimerHandle]] = {}
        self.next_corr = 0  # a multi-partition request takes one id per part
        self.writer: asyncio.StreamWriter | None = None
        self.queue: list[tuple[int, list]] | None = []  # frames waiting for the connection to open
        self.closed = False
        self.last_used = time.monotonic()

    async def open(self) -> None:
        try:
            ref = getattr(self.handle, self.method).remote()
            ep = await asyncio.wait_for(asyncio.wrap_future(ref.future()), REQUEST_TIMEOUT_S)
            if ep.get("error_code"):
                raise for_code(ep["error_code"])(ep.get("error_message") or None)
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(ep["host"], ep["port"], limit=STREAM_LIMIT), REQUEST_TIMEOUT_S
            )
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

    def send(self, fields: dict, api: int, payload: Any, timeout_s: float, fut: Any) -> None:
        """``fut``: the request's future, or a list of one per part of a multi-partition request, whose answers
        come under consecutive correlation ids (protocol/produce_frames.py)."""
        futs = fut if isinstance(fut, list) else [fut]
        if self.closed:
            for f in futs:
                _fail(f, NotLeaderOrFollowerError("connection to the leader replica closed"))
            return
        corr, self.next_corr = self.next_corr, (self.next_corr + len(futs)) & 0xFFFFFFFF
        for i, f in enumerate(futs):
            c = (corr + i) & 0xFFFFFFFF
            self.pending[c] = (f, self.io.loop.call_later(timeout_s, self._expired, c, timeout_s))
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
    """One connection per replica actor on an asyncio loop: the process's I/O thread's (``ChannelIO()``, for
    the threaded clients), or a running loop's own (``ChannelIO(loop)``, for a server actor such as the
    broker's Kafka listener: ``submit_here`` from that loop, no thread hop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None, internal: bool = False):
        self.conns: dict[Any, _Connection] = {}
        # internal: the replicas' internal endpoint (a broker's coordinators: coordinator appends, markers)
        self.endpoint_method = "internal_endpoint" if internal else "client_endpoint"
        self.thread: threading.Thread | None = None  # the I/O thread (None: the caller's running loop)
        if loop is not None:
            self.loop = loop
            self.loop.call_later(CONNECTIONS_MAX_IDLE_S / 4, self._reap)
            return
        self.loop = asyncio.new_event_loop()
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
        self, handle: Any, api: int, fields: dict, payload: Any, timeout_s: float, route: tuple | None = None, parts=0
    ) -> Any:
        """The answer's future. ``route``: ``(connection key, endpoint method)`` for a connection other than the
        replica's own (a leader process's produce listener); ``parts`` > 0: a multi-partition request answered
        per part, a list of that many futures (protocol/produce_frames.py)."""
        fut: Any = [concurrent.futures.Future() for _ in range(parts)] if parts else concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self._submit, handle, api, fields, payload, timeout_s, fut, route)
        return fut

    def sync(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until the I/O thread has run what was submitted before (each request is then
        written to its connection, or queued behind its connect); False if it did not in time. The caller's
        thread lets go of the GIL meanwhile, so the I/O thread writes now rather than after the 5 ms switch
        interval of a caller busy in C code (``send_batch``'s placement). From the loop's own thread: True."""
        if self.thread is None or threading.current_thread() is self.thread:
            return True
        ran = threading.Event()
        self.loop.call_soon_threadsafe(ran.set)
        return ran.wait(timeout_s)

    def submit_here(self, handle: Any, api: int, fields: dict, payload: bytes, timeout_s: float) -> asyncio.Future:
        """``submit`` from the loop's own thread: an asyncio future of the answer."""
        fut = self.loop.create_future()
        self._submit(handle, api, fields, payload, timeout_s, fut)
        return fut

    def open(self, handle: Any, route: tuple | None = None) -> None:
        """Open the connection a ``submit`` with these arguments would use, if there is none (no request)."""
        self.loop.call_soon_threadsafe(self._connection, handle, route)

    def _connection(self, handle: Any, route: tuple | None) -> _Connection:
        key, method = route if route is not None else (_actor_key(handle), None)
        conn = self.conns.get(key)
        if conn is None:
            conn = self.conns[key] = _Connection(self, key, handle, method)
            self.loop.create_task(conn.open())
        return conn

    def _submit(self, handle, api, fields, payload, timeout_s, fut, route=None) -> None:
        conn = self._connection(handle, route)
        try:
            conn.send(fields, api, payload, timeout_s, fut)
        except Exception as exc:  # noqa: BLE001 - e.g. a field msgpack cannot carry: that request fails alone
            for f in fut if isinstance(fut, list) else [fut]:
                _fail(f, exc)


_io: ChannelIO | None = None
_io_pid = 0
_io_lock = threading.Lock()


def channel_io() -> ChannelIO:
    global _io, _io_pid
    with _io_lock:
        if _io is None or _io_pid != os.getpid():
            _io, _io_pid = ChannelIO(), os.getpid()
        return _io


_loop_ios: dict[tuple[asyncio.AbstractEventLoop, bool], ChannelIO] = {}


def loop_channel(internal: bool = False) -> ChannelIO:
    """The running loop's own ChannelIO (made on first use); ``internal``: on the replicas' internal endpoint."""
    loop = asyncio.get_running_loop()
    io = _loop_ios.get((loop, internal))
    if io is None:
        io = _loop_ios[(loop, internal)] = ChannelIO(loop, internal)
    return io


def produce_timeout_s(req: Any) -> float:
    return req.timeout_ms / 1000 + PRODUCE_SLACK_S


def fetch_timeout_s(req: Any) -> float:
    return req.max_wait_ms / 1000 + REQUEST_TIMEOUT_S
