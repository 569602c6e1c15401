"""The follower fetch connection (actors/replication_channel.py) over real loopback sockets, without Ray: the
answers come back whole and in order, records are passed through as bytes, and every bad peer (no hello, a
wrong token, a broker that is not a replica, a forged replica id, garbage, an oversize frame, a truncated frame)
gets its connection closed while the listener keeps serving the others."""

from __future__ import annotations

import asyncio
import struct

import msgpack
import pytest
from support import read_until_closed

from actors.replication_channel import (
    MAX_REQUEST_BYTES,
    BadFrame,
    ConnectionLost,
    ReplicationConnection,
    ReplicationListener,
    decode_request,
    encode_request,
)
from protocol.messages import FetchRequest

HOST = "127.0.0.1"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class FakeLeader:
    """A handler like ReplicaActor.fetch: answers each request's offset with that many bytes of records."""

    def __init__(self):
        self.seen: list[FetchRequest] = []

    async def fetch(self, req: FetchRequest) -> dict:
        self.seen.append(req)
        if req.max_wait_ms:
            await asyncio.sleep(req.max_wait_ms / 1000)
        return {
            "error_code": 0,
            "error_message": None,
            "high_watermark": req.fetch_offset,
            "log_start_offset": 0,
            "records": bytes([req.fetch_offset % 251]) * req.fetch_offset,
            "aborted_transactions": [(7, 3)],
        }


async def start(leader: FakeLeader, replicas=(1, 2, 3)) -> ReplicationListener:
    lst = ReplicationListener(leader.fetch, lambda: replicas, "t-0 b1")
    await lst.start(HOST)
    return lst


def req(offset: int, replica_id: int = 2, **kw) -> FetchRequest:
    return FetchRequest(offset, replica_id=replica_id, current_leader_epoch=4, **kw)


async def raw_peer(lst: ReplicationListener, *frames: bytes) -> bytes:
    """Send raw bytes, then read until the listener closes the connection (what it answered, if anything)."""
    reader, writer = await asyncio.open_connection(lst.host, lst.port)
    for f in frames:
        writer.write(f)
    await writer.drain()
    data = await read_until_closed(reader)
    writer.close()
    return data


def frame(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


def hello(lst: ReplicationListener, replica_id: int = 2, token: bytes | None = None) -> bytes:
    return frame({"token": lst.token if token is None else token, "replica_id": replica_id})


def test_fetches_round_trip_in_order_with_the_records_as_sent():
    async def go():
        leader = FakeLeader()
        lst = await start(leader)
        conn = await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=5)
        answers = [await conn.fetch(req(n)) for n in (0, 1, 300_000, 5)]
        conn.close()
        lst.close()
        return leader, lst, answers

    leader, lst, answers = run(go())
    assert [a["high_watermark"] for a in answers] == [0, 1, 300_000, 5]
    assert answers[2]["records"] == bytes([300_000 % 251]) * 300_000
    assert answers[0]["records"] == b"" and isinstance(answers[0]["records"], bytes)
    assert answers[1]["aborted_transactions"] == [[7, 3]]
    assert [r.fetch_offset for r in leader.seen] == [0, 1, 300_000, 5]
    assert leader.seen[0] == req(0)  # every field travels
    assert lst.stats["connections"] == 1 and lst.stats["fetches"] == 4 and lst.stats["bad_frames"] == 0


def test_request_codec_refuses_anything_but_a_fetch_request():
    r = FetchRequest(12, 1000, 500, 1, 3, 9, 1)
    assert decode_request(encode_request(r)[4:]) == r
    for bad in (
        b"\xc1",  # not msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({"max_bytes": 5}),  # no offset
        msgpack.packb({"fetch_offset": 1, "evil": 2}),
        msgpack.packb({"fetch_offset": "1"}),
        msgpack.packb({"fetch_offset": True}),
        msgpack.packb({"fetch_offset": 1 << 63}),
    ):
        with pytest.raises(BadFrame):
            decode_request(bad)


@pytest.mark.parametrize(
    "name, frames",
    [
        ("wrong token", lambda lst: [hello(lst, token=b"x" * 16), frame(encode_request(req(3))[4:])]),
        ("not a replica", lambda lst: [hello(lst, replica_id=9), frame(encode_request(req(3, 9))[4:])]),
        ("forged replica id", lambda lst: [hello(lst, 2), encode_request(req(3, replica_id=3))]),
        ("hello not msgpack", lambda lst: [frame(b"\xc1\xc1")]),
        ("hello without token", lambda lst: [frame({"replica_id": 2})]),
        ("garbage request", lambda lst: [hello(lst), frame(b"\x93\x01\x02\x03")]),
        ("oversize frame", lambda lst: [hello(lst), struct.pack(">I", MAX_REQUEST_BYTES + 1) + b"x" * 100]),
    ],
)
def test_a_bad_peer_is_closed_without_an_answer_and_the_listener_serves_on(name, frames):
    async def go():
        leader = FakeLeader()
        lst = await start(leader)
        got = await raw_peer(lst, *frames(lst))
        conn = await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=5)
        after = await conn.fetch(req(4))
        conn.close()
        lst.close()
        return leader, lst, got, after

    leader, lst, got, after = run(go())
    assert got == b"", f"{name}: the listener answered a bad peer"
    assert [r.fetch_offset for r in leader.seen] == [4], f"{name}: a bad peer's request reached the replica"
    assert lst.stats["bad_frames"] == 1
    assert after["records"] == bytes([4]) * 4


def test_a_truncated_frame_and_a_silent_peer_do_not_block_others():
    async def go():
        leader = FakeLeader()
        lst = await start(leader)
        r1, w1 = await asyncio.open_connection(lst.host, lst.port)  # connects, never says hello
        r2, w2 = await asyncio.open_connection(lst.host, lst.port)
        w2.write(hello(lst) + encode_request(req(9))[:7])  # half a request, then hangs
        conn = await ReplicationConnection.open(lst.endpoint(), 3, timeout_s=5)
        answer = await conn.fetch(req(6, replica_id=3))
        w2.close()
        w1.close()
        conn.close()
        lst.close()
        return leader, answer

    leader, answer = run(go())
    assert answer["high_watermark"] == 6
    assert [r.fetch_offset for r in leader.seen] == [6]


def test_long_poll_answers_and_a_dead_leader_is_connection_lost():
    async def go():
        leader = FakeLeader()
        lst = await start(leader)
        conn = await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=5)
        polled = await conn.fetch(req(2, max_wait_ms=200))
        lst.close()  # the leader's listener goes away (its process died / it stopped)
        with pytest.raises(ConnectionLost):
            await conn.fetch(req(3))
        with pytest.raises(ConnectionLost):
            await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=5)
        return polled

    assert run(go())["high_watermark"] == 2


def test_a_leader_that_never_answers_times_out():
    async def go():
        async def hang(_req):
            await asyncio.sleep(3600)

        lst = ReplicationListener(hang, lambda: (2,), "t-0 b1")
        await lst.start(HOST)
        conn = await ReplicationConnection.open(lst.endpoint(), 2, timeout_s=0.3)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ConnectionLost):
            await conn.fetch(req(1, max_wait_ms=100))
        waited = loop.time() - t0
        lst.close()
        return waited

    assert 0.35 <= run(go()) < 5


def test_a_malformed_answer_is_connection_lost_not_a_crash():
    async def go():
        async def serve(reader, writer):
            await reader.read(100)
            writer.write(struct.pack(">II", 2, 0) + b"\xc1\xc1")  # meta that is not msgpack
            await writer.drain()

        server = await asyncio.start_server(serve, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        conn = await ReplicationConnection.open({"host": HOST, "port": port, "token": b"t" * 16}, 2, timeout_s=5)
        try:
            with pytest.raises(ConnectionLost, match="malformed answer"):
                await conn.fetch(req(1))
        finally:
            server.close()

    run(go())
