"""Kafka's SocketServer on asyncio: the Acceptor, a Processor per connection, the RequestChannel.

Acceptor: an ``asyncio`` server bound to the listener's host:port (port 0: an ephemeral one, read back
from the socket); each accepted connection gets a Processor task. ``stop()`` closes the server and every
connection.

Processor (one per connection): reads ``size:int32`` then ``size`` bytes; a negative size or one above
``socket.request.max.bytes`` closes the connection with a log line (Kafka's InvalidReceiveException),
before anything that large is read. Each complete frame goes through the RequestChannel to KafkaApis;
answers (if any: acks=0 produce has none) are written in request order by the connection's writer task.
A request is handled only once every earlier one on the connection is answered, and is answered before the
next frame is read (Kafka mutes a channel the same way), with one exception: a run of non-transactional
Produce requests whose partitions' batches travel inline (handlers/produce.py ``pipelinable``) is
pipelined, up to MAX_PIPELINED unanswered: each is submitted as it is read, and their replication waits
overlap. Their writes are submitted in request order on the broker's TCP connection to each replica's client
listener (actors/channels/data_channel.py), and the replica appends one connection's writes in the order they came
(actors/replication/call_order.py), as Kafka's broker does. Without pipelining a connection carries
one Produce per replica round trip: librdkafka's paced produce measured p50 0.8 s (acks=all) and 2-3 s
(acks=1, unbounded in-flight requests queued in the socket) on a 2-core machine. Other connections are
separate tasks and go on. A request that cannot be served (unknown key or version, malformed body) closes
only its connection, after the answers to the requests before it. EOF mid-frame (a truncated request)
closes quietly.

Idle connections (``connections.max.idle.ms``, Kafka's default 10 min): Kafka's Selector closes a channel
with no bytes in or out for that long. Here the Processor bounds every wait for request bytes (between
frames and inside one) and every wait for the client to take an answer (``drain``): when it wakes, a
connection whose last received byte (stamped by the stream reader as data arrives) and last answer are
both older than the limit is closed with a log line; a connection still receiving a large frame, or
whose request is being handled (a long-polling Fetch), is not idle. A negative value disables the check.

RequestChannel: the hand-off between the network side and KafkaApis. On asyncio a Processor awaits the
handler directly; the channel keeps the request count and in-flight gauge per listener and is where the
handler is invoked, so a later milestone can put a bounded handler pool (``num.io.threads``) behind it
without touching the Processor.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable

from protocol.streams import STREAM_LIMIT
from serve.kafka_wire.codec import SIZE, RequestError
from serve.kafka_wire.config import DEFAULT_CONNECTIONS_MAX_IDLE_MS

log = logging.getLogger("rafka.kafka_wire")

# unanswered pipelined Produce requests per connection before the Processor stops reading (TCP pushes back)
MAX_PIPELINED = 16

# the peer address of the connection whose request is being handled (set in its Processor's task)
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("kafka_client_host", default="")


class IdleConnection(Exception):
    """No bytes in or out for longer than ``connections.max.idle.ms``."""


class _StampedReader(asyncio.StreamReader):
    """A StreamReader that records when bytes last arrived (the Processor's idle check reads it)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last_data = time.monotonic()

    def feed_data(self, data) -> None:
        self.last_data = time.monotonic()
        super().feed_data(data)


class RequestChannel:
    """Requests from the Processors to KafkaApis, with counters (requests, failures, in flight)."""

    def __init__(self, apis):
        self.apis = apis
        self.requests = 0
        self.failed = 0
        self.in_flight = 0

    def prepare(self, payload: bytes) -> tuple[Awaitable[bytes | None], bool]:
        """KafkaApis.prepare with the channel's counters: ``(answer, concurrent)``."""
        self.requests += 1
        try:
            answer, concurrent = self.apis.prepare(payload)
        except RequestError:
            self.failed += 1
            raise
        self.in_flight += 1
        return self._counted(answer), concurrent

    async def _counted(self, answer: Awaitable[bytes | None]) -> bytes | None:
        try:
            return await answer
        except RequestError:
            self.failed += 1
            raise
        finally:
            self.in_flight -= 1


class Processor:
    """One connection: frames in, answers out in request order (see the module docstring)."""

    def __init__(
        self,
        channel: RequestChannel,
        reader,
        writer,
        max_request_bytes: int,
        conn_id: str,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
    ):
        self.channel, self.reader, self.writer = channel, reader, writer
        self.max_request_bytes = max_request_bytes
        self.conn_id = conn_id
        self.max_idle_ms = connections_max_idle_ms
        self.idle_s = connections_max_idle_ms / 1000 if connections_max_idle_ms > 0 else None
        self.last_write = time.monotonic()
        self.unanswered = 0  # requests read and not yet answered (being handled)

    def idle_for(self) -> float:
        """Seconds since the last byte in or answer out (0 while a request is being handled)."""
        if self.unanswered:
            return 0.0
        return time.monotonic() - max(getattr(self.reader, "last_data", self.last_write), self.last_write)

    async def _bounded(self, wait) -> object:
        """Await ``wait()`` (a fresh awaitable per call) until it completes, or raise IdleConnection once
        the connection has been idle past connections.max.idle.ms. A readexactly cut by the timeout
        consumes nothing (it only takes bytes once all are buffered), so it is simply asked again."""
        if self.idle_s is None:
            return await wait()
        while True:
            left = self.idle_s - self.idle_for()
            if left <= 0:
                raise IdleConnection(
                    f"idle for {self.idle_for() * 1000:.0f} ms (connections.max.idle.ms {self.max_idle_ms})"
                )
            try:
                async with asyncio.timeout(left):
                    return await wait()
            except TimeoutError:
                continue

    async def read_frame(self) -> bytes | None:
        """The next request payload; None at a clean EOF between frames."""
        try:
            head = await self._bounded(lambda: self.reader.readexactly(SIZE.size))
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise RequestError(f"connection closed inside a size prefix ({len(e.partial)} bytes)") from None
            return None
        (size,) = SIZE.unpack(head)
        if size < 0 or size > self.max_request_bytes:
            raise RequestError(f"size prefix {size} outside 0..socket.request.max.bytes ({self.max_request_bytes})")
        try:
            return await self._bounded(lambda: self.reader.readexactly(size))
        except asyncio.IncompleteReadError as e:
            raise RequestError(f"connection closed after {len(e.partial)} of a {size}-byte request") from None

    async def run(self) -> None:
        answers: asyncio.Queue = asyncio.Queue(maxsize=MAX_PIPELINED)
        reader = asyncio.create_task(self._read_requests(answers))
        writer = asyncio.create_task(self._write_answers(answers))
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_EXCEPTION)
            for task in (writer, reader):  # the writer's error first: it is about an earlier request
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await writer
        except IdleConnection as e:
            log.info("kafka listener: closing connection %s: %s", self.conn_id, e)
        except RequestError as e:
            log.warning("kafka listener: closing connection %s: %s", self.conn_id, e)
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            log.info("kafka listener: connection %s lost: %s", self.conn_id, e)
        except asyncio.CancelledError:
            raise
        except Exception:  # a handler bug must not take the listener down: this connection only
            log.exception("kafka listener: closing connection %s after an unexpected error", self.conn_id)
        finally:
            for task in (reader, writer):
                task.cancel()
            while not answers.empty():  # answers nobody will write: their writes went out, stop waiting
                fut = answers.get_nowait()
                if fut is not None:
                    fut.cancel()
            self.writer.close()

    async def _read_requests(self, answers: asyncio.Queue) -> None:
        """Frames in order. A pipelinable Produce is submitted at once and its answer queued (up to
        MAX_PIPELINED unanswered); any other request waits until every earlier one is answered and is
        answered before the next frame is read (Kafka's one-request-at-a-time order)."""
        while True:
            payload = await self.read_frame()
            if payload is None:
                await answers.put(None)
                return
            try:
                answer, concurrent = self.channel.prepare(payload)
            except RequestError:
                await answers.join()  # answer what came before, then close
                raise
            if concurrent:
                self.unanswered += 1
                await answers.put(asyncio.ensure_future(answer))
                continue
            try:
                await answers.join()
            except BaseException:
                answer.close()  # type: ignore[attr-defined]  # a coroutine never started
                raise
            self.unanswered += 1
            await answers.put(asyncio.ensure_future(answer))
            await answers.join()

    async def _write_answers(self, answers: asyncio.Queue) -> None:
        while True:
            fut = await answers.get()
            try:
                if fut is None:
                    return
                answer = await fut
                self.unanswered -= 1
                if answer is not None:
                    self.writer.write(answer)
                    self.last_write = time.monotonic()
                    await self._bounded(self.writer.drain)
                    self.last_write = time.monotonic()
            finally:
                answers.task_done()


class Acceptor:
    """The listener's server socket; ``start()`` binds it and returns the bound (host, port)."""

    def __init__(
        self,
        apis,
        host: str,
        port: int,
        max_request_bytes: int,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
    ):
        self.channel = RequestChannel(apis)
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.server: asyncio.base_events.Server | None = None
        self.processors: set[asyncio.Task] = set()
        self._next = 0

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:  # asyncio.start_server's, with a _StampedReader
            return asyncio.StreamReaderProtocol(_StampedReader(limit=STREAM_LIMIT, loop=loop), self._accept, loop=loop)

        self.server = await loop.create_server(protocol, self.host, self.port, reuse_address=True)
        sock = self.server.sockets[0].getsockname()
        self.port = sock[1]
        return self.host, self.port

    async def _accept(self, reader, writer) -> None:
        self._next += 1
        peer = writer.get_extra_info("peername")
        CLIENT_HOST.set(str(peer[0]) if isinstance(peer, tuple) and peer else "")
        proc = Processor(
            self.channel, reader, writer, self.max_request_bytes, f"{self._next}:{peer}", self.connections_max_idle_ms
        )
        task = asyncio.current_task()
        if task is not None:
            self.processors.add(task)
        try:
            await proc.run()
        finally:
            if task is not None:
                self.processors.discard(task)

    def stop(self) -> None:
        """Close the server socket and every connection (synchronous: safe from a shutdown path)."""
        if self.server is not None:
            self.server.close()
            for task in list(self.processors):
                task.cancel()
            self.server = None

    @property
    def connections(self) -> int:
        return len(self.processors)
