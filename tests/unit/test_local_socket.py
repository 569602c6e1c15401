"""Same-node connections over Unix sockets (protocol/local_socket.py, actors/replication_channel.py
``TokenListener``), without Ray, over real sockets: a peer on the listener's node connects through the
listener's Unix socket with the same token handshake and frames, a bad peer there is closed like one over TCP,
a peer elsewhere (another node key) or one that cannot reach the socket uses TCP, ``RAFKA_UNIX_SOCKETS=0``
serves TCP only, a closed listener removes its socket, and the sockets of dead processes are reaped."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest
from support import read_until_closed
from test_client_channel import FakeReplica, T, frame, produce, request
from test_replication_channel import FakeLeader, req
from test_replication_channel import start as start_replication

from actors.replication_channel import ReplicationConnection
from protocol import local_socket
from protocol.messages import ProduceRequest


@pytest.fixture
def sockets(tmp_path, monkeypatch):
    d = tmp_path / "s"
    monkeypatch.setenv("RAFKA_SOCKET_DIR", str(d))
    return d


def test_a_client_on_the_node_uses_the_unix_socket_and_a_bad_peer_there_is_closed(sockets):
    r = FakeReplica()
    try:
        ep = r.listener.endpoint()
        assert ep["node"] == local_socket.node_key() and os.path.dirname(ep["uds"]) == str(sockets)
        assert T.get(produce(r, b"rec"), 10)["error_code"] == 0
        assert r.listener.stats["unix_connections"] == 1 and r.listener.stats["connections"] == 1

        async def wrong_token() -> bytes:
            reader, writer = await asyncio.open_unix_connection(ep["uds"])
            writer.write(frame({"token": b"x" * 16}) + request(0, {"acks": 1}, b"evil"))
            await writer.drain()
            data = await read_until_closed(reader)
            writer.close()
            return data

        assert asyncio.run(wrong_token()) == b""
        assert r.listener.stats["bad_frames"] == 1 and r.listener.stats["unix_connections"] == 2
        assert [bytes(q.records) for q in r.requests] == [b"rec"]  # the bad peer's request never arrived
        assert T.get(produce(r, b"ok"), 10)["error_code"] == 0
    finally:
        path = r.listener.unix_path
        r.close()
    for _ in range(100):
        if not os.path.exists(path):
            break
        time.sleep(0.02)
    assert not os.path.exists(path)  # close() removed its socket


@pytest.mark.parametrize("where", ["another node", "unreachable socket"])
def test_a_peer_that_cannot_use_the_socket_connects_over_tcp(sockets, where):
    r = FakeReplica()
    try:
        ep = {"error_code": 0, "error_message": None, **r.listener.endpoint()}
        if where == "another node":
            ep["node"] = "elsewhere/boot"
        else:
            ep["uds"] = str(sockets / "gone.sock")
        r.endpoint_answer = ep
        io = type(T)()  # a fresh transport: a connection of its own
        assert io.get(io.call(r, "produce", ProduceRequest(b"rec", acks=1)), 10)["error_code"] == 0
        assert r.listener.stats["connections"] == 1 and r.listener.stats.get("unix_connections", 0) == 0
    finally:
        r.close()


def test_unix_sockets_can_be_turned_off(sockets, monkeypatch):
    monkeypatch.setenv("RAFKA_UNIX_SOCKETS", "0")
    r = FakeReplica()
    try:
        assert "uds" not in r.listener.endpoint() and r.listener.unix_path is None
        assert T.get(produce(r, b"rec"), 10)["error_code"] == 0
        assert r.listener.stats.get("unix_connections", 0) == 0
    finally:
        r.close()


def test_a_follower_on_the_node_fetches_over_the_unix_socket(sockets):
    async def go():
        leader = FakeLeader()
        lst = await start_replication(leader)
        conn = await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=5)
        answers = [(await conn.fetch(req(n)))["high_watermark"] for n in (3, 300_000)]
        conn.close()
        lst.close()
        return lst, answers

    lst, answers = asyncio.run(asyncio.wait_for(go(), 30))
    assert answers == [3, 300_000]
    assert lst.stats["unix_connections"] == 1 and lst.stats["connections"] == 1 and lst.stats["fetches"] == 2


def test_stale_sockets_of_dead_processes_are_reaped_and_live_ones_kept(sockets):
    d = local_socket.socket_dir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited: no process has this pid now (pids are not reused this fast)
    names = [f"{dead_pid}-aa.sock", f"{os.getpid()}-bb.sock", "notes.txt", "x-cc.sock"]
    for n in names:
        open(os.path.join(d, n), "w").close()
    assert local_socket.reap_stale() == 1
    assert sorted(os.listdir(d)) == sorted(names[1:])


def test_socket_paths_node_key_and_fallback_to_tcp(sockets, monkeypatch):
    p = local_socket.socket_path("abc")
    assert p is not None and p.endswith(f"{os.getpid()}-abc.sock") and os.path.dirname(p) == str(sockets)
    assert local_socket.node_key() == local_socket.node_key() and socket.gethostname() in local_socket.node_key()
    assert local_socket.local_path({"uds": p, "node": "other"}) is None
    assert local_socket.local_path({"uds": p, "node": local_socket.node_key()}) == p
    monkeypatch.setenv("RAFKA_SOCKET_DIR", "/tmp/" + "d" * 120)
    assert local_socket.socket_path("abc") is None  # over sun_path's limit: TCP only

    async def connect_tcp_fallback() -> bool:
        srv = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        ep = {"host": "127.0.0.1", "port": port, "uds": str(sockets / "none.sock"), "node": local_socket.node_key()}
        _reader, writer = await local_socket.open_stream(ep, 5)
        unix = local_socket.is_unix(writer)
        writer.close()
        srv.close()
        return unix

    assert asyncio.run(connect_tcp_fallback()) is False
