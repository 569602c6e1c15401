"""The listener's network side under hostile or heavy use, without Ray (real localhost sockets, the
in-memory FakeBackend of test_wire_listener.py): ``connections.max.idle.ms`` (a client that connects and
never sends, or stalls inside a frame, is closed by its Processor; a slow but steady sender is not), a
thousand connections at once (all answered, the connection count back to 0 after they close), and the
log line of a request whose api key or version is not served."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import struct
import time

import pytest
from kio.schema.api_versions.v3 import ApiVersionsResponse
from test_wire_listener import Client, FakeBackend, api_versions_req, listening

from serve.kafka_wire import codec
from serve.kafka_wire.config import DEFAULT_CONNECTIONS_MAX_IDLE_MS, listener_config
from serve.kafka_wire.network import Acceptor, Processor

IDLE_MS = 400


class Listener:
    """A running listener (test_wire_listener's ``listening`` harness) over a FakeBackend."""

    def __init__(self, port: int, acceptor: Acceptor, run, loop):
        self.port, self.acceptor, self.run, self.loop = port, acceptor, run, loop

    def connections(self) -> int:
        async def count():
            return self.acceptor.connections

        return self.run(count())

    def wait_connections(self, n: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (got := self.connections()) != n and time.monotonic() < deadline:
            time.sleep(0.02)
        return got


@contextlib.contextmanager
def listener(connections_max_idle_ms: int):
    with listening(FakeBackend(), connections_max_idle_ms=connections_max_idle_ms) as (port, acc, run, loop):
        yield Listener(port, acc, run, loop)


@pytest.fixture
def idle_listener():
    with listener(IDLE_MS) as lst:
        yield lst


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the peer closed ``sock`` (EOF or reset), or None if it is still open after ``timeout``."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    try:
        data = sock.recv(1)
    except TimeoutError:
        return None
    except ConnectionResetError:
        data = b""
    assert data == b"", f"unexpected bytes {data!r}"
    return time.monotonic() - t0


def test_connections_max_idle_ms_config():
    assert listener_config({}, 0).connections_max_idle_ms == DEFAULT_CONNECTIONS_MAX_IDLE_MS == 600000
    assert listener_config({"connections.max.idle.ms": "1500"}, 0).connections_max_idle_ms == 1500
    with pytest.raises(ValueError, match="connections.max.idle.ms"):
        listener_config({"connections.max.idle.ms": 0}, 0)
    # negative: never expire (Kafka's Selector builds no IdleExpiryManager then)
    proc = Processor(None, None, None, 1 << 20, "c", connections_max_idle_ms=-1)
    assert proc.idle_s is None
    assert Processor(None, None, None, 1 << 20, "c").idle_s == 600.0


def test_a_client_that_never_sends_is_closed_after_the_idle_time(idle_listener, caplog):
    caplog.set_level(logging.INFO, logger="rafka.kafka_wire")
    silent = socket.create_connection(("127.0.0.1", idle_listener.port), timeout=10)
    assert idle_listener.wait_connections(1, 5) == 1
    took = closed_within(silent, 5)
    assert took is not None, "a silent connection outlived connections.max.idle.ms"
    assert IDLE_MS / 1000 * 0.8 <= took < IDLE_MS / 1000 + 4  # generous above: the machine may be loaded
    assert idle_listener.wait_connections(0, 5) == 0
    assert any("connections.max.idle.ms 400" in r.getMessage() for r in caplog.records)
    # the listener goes on: a new connection is served
    c = Client(idle_listener.port)
    c.send(codec.encode_request(1, api_versions_req()))
    assert c.recv(ApiVersionsResponse)[0] == 1


def test_a_client_stalled_inside_a_frame_is_closed(idle_listener):
    frame = codec.encode_request(1, api_versions_req())
    stalled = socket.create_connection(("127.0.0.1", idle_listener.port), timeout=10)
    stalled.sendall(frame[:7])  # the size prefix and part of the header, then nothing
    assert closed_within(stalled, 5) is not None
    assert idle_listener.wait_connections(0, 5) == 0


STEADY_IDLE_MS = 1500  # a wider limit here: the gaps between bytes must stay well inside it on a loaded machine


def test_active_and_slow_but_steady_connections_stay_open():
    """Idle means no bytes in or out for the whole limit, not a deadline per request: a client asking every
    ~IDLE/4 ms, and one trickling a frame a byte at a time over ~2.5x the limit, are served and kept."""
    with listener(STEADY_IDLE_MS) as lst:
        _steady(lst)


def _steady(idle_listener: Listener) -> None:
    idle_s = STEADY_IDLE_MS / 1000
    busy = Client(idle_listener.port)
    slow = socket.create_connection(("127.0.0.1", idle_listener.port), timeout=10)
    frame = codec.encode_request(7, api_versions_req())
    step = 2.5 * idle_s / len(frame)
    t0 = time.monotonic()
    cid = 100
    for i, byte in enumerate(frame):
        slow.sendall(bytes([byte]))
        if i % max(1, int((idle_s / 4) / step)) == 0:  # every ~IDLE/4
            cid += 1
            busy.send(codec.encode_request(cid, api_versions_req()))
            assert busy.recv(ApiVersionsResponse)[0] == cid
        time.sleep(step)
    assert time.monotonic() - t0 > 2 * idle_s
    head = b""
    while len(head) < 4:
        head += slow.recv(4 - len(head))
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        body += slow.recv(size - len(body))
    assert codec.decode_response(body, ApiVersionsResponse)[0] == 7
    assert idle_listener.connections() == 2
    # both go quiet: both are closed
    assert closed_within(busy.sock, 10) is not None and closed_within(slow, 10) is not None
    assert idle_listener.wait_connections(0, 5) == 0


N_CONNECTIONS = 1000


def test_a_thousand_connections_at_once_are_all_answered_then_counted_down_to_zero():
    need = 2 * N_CONNECTIONS + 256  # both ends of every connection live in this process
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    try:
        with listener(DEFAULT_CONNECTIONS_MAX_IDLE_MS) as lst:
            frame = codec.encode_request(0, api_versions_req())

            async def one(i: int):
                reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
                writer.write(codec.encode_request(i, api_versions_req()))
                await writer.drain()
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                cid, resp = codec.decode_response(await reader.readexactly(size), ApiVersionsResponse)
                return writer, cid, resp.error_code

            async def storm():
                return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(N_CONNECTIONS))), 60)

            t0 = time.monotonic()
            results = asyncio.run(_with_open(storm, lst))
            took = time.monotonic() - t0
            assert sorted(cid for _, cid, _ in results[0]) == list(range(N_CONNECTIONS))
            assert {code for _, _, code in results[0]} == {0}
            assert results[1] == N_CONNECTIONS  # all open at once, each with its Processor
            assert took < 60
            assert lst.wait_connections(0, 20) == 0
            # and the listener still serves
            c = Client(lst.port)
            c.send(frame)
            assert c.recv(ApiVersionsResponse)[0] == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _with_open(storm, lst: Listener):
    """Run the storm, count the listener's connections while all are open, then close every client."""
    results = await storm()
    deadline = time.monotonic() + 20
    while (open_now := await asyncio.wrap_future(_count(lst))) < N_CONNECTIONS and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for writer, _, _ in results:
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w, _, _ in results), return_exceptions=True)
    return results, open_now


def _count(lst: Listener):
    async def count():
        return lst.acceptor.connections

    return asyncio.run_coroutine_threadsafe(count(), lst.loop)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (struct.pack(">hhih", 3, 99, 1, -1), "api key 3 (Metadata) version 99 is not served: served versions 0..13"),
        (struct.pack(">hhih", 0, 2, 1, -1), "api key 0 (Produce) version 2 is not served: served versions 3..11"),
        (struct.pack(">hhih", 999, 0, 1, -1), "api key 999 (unknown) version 0 is not served: this api key is not"),
        (struct.pack(">hhih", 68, 0, 1, -1), "api key 68 (ConsumerGroupHeartbeat) version 0 is not served: this api"),
    ],
    ids=["metadata-v99", "produce-v2", "unknown-key-999", "unserved-key-68"],
)
def test_unserved_key_or_version_closes_with_a_log_line_naming_key_version_and_range(
    idle_listener, caplog, header, expected
):
    caplog.set_level(logging.INFO, logger="rafka.kafka_wire")
    bad = socket.create_connection(("127.0.0.1", idle_listener.port), timeout=10)
    bad.sendall(struct.pack(">i", len(header)) + header)
    assert closed_within(bad, 5) is not None
    deadline = time.monotonic() + 5
    while not any(expected in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
        time.sleep(0.02)
    lines = [r for r in caplog.records if expected in r.getMessage()]
    assert lines and lines[0].levelno == logging.WARNING and "closing connection" in lines[0].getMessage()
