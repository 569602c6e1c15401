"""The follower fetch connection (actors/channels/replication_channel.py) over real loopback sockets, without Ray: a
session fetch of several partitions comes back whole, per partition and in order, records passed through as
bytes; the long-poll waits for data on any partition or a poke; a broker that is not a replica never moves a
partition's follower state; and every bad peer (no hello, a wrong token, a forged replica id, garbage, an
oversize frame, a truncated frame, a second fetch before the answer) gets its connection closed while the
server keeps serving the others."""

from __future__ import annotations

import asyncio
import struct

import msgpack
import pytest
from support import read_until_closed

from actors.channels.replication_channel import ConnectionLost, ReplicationConnection, ReplicationServer
from protocol import errors as E
from protocol.channel_frames import BadFrame
from protocol.messages import FetchRequest
from protocol.replication_frames import (
    MAX_REQUEST_BYTES,
    decode_answers,
    decode_frame,
    encode_answers,
    encode_poke,
    encode_session_fetch,
)

HOST = "127.0.0.1"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


class FakeOp:
    """A parked fetch: resolves the session's ``wake`` when its partition gets data (``FakePartition.append``);
    ``cancel`` ends it without waking anyone."""

    def __init__(self, wake):
        self.wake, self.cancelled, self.done = wake, False, False

    def complete(self):
        self.done = True
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)

    def cancel(self):
        self.cancelled = True


class FakePartition:
    """A leader replica as the server sees it: its records are ``data[offset:]`` (one byte per offset)."""

    def __init__(self, replicas=(1, 2, 3), data: bytes = b""):
        self.replicas, self.data = replicas, data
        self.seen: list[FetchRequest] = []
        self.tracked: list[bool] = []  # per fetch_now: did it move the follower's state
        self.ops: list[FakeOp] = []

    def replica_ids(self):
        return self.replicas

    def fetch_now(self, req: FetchRequest, track: bool = True) -> dict:
        self.seen.append(req)
        self.tracked.append(track)
        return {
            "error_code": 0,
            "error_message": None,
            "high_watermark": len(self.data),
            "log_start_offset": 0,
            "records": self.data[req.fetch_offset : req.fetch_offset + req.max_bytes],
            "aborted_transactions": [(7, 3)],
        }

    def park(self, req: FetchRequest, wake=None) -> FakeOp:
        op = FakeOp(wake)
        self.ops.append(op)
        return op

    def append(self, more: bytes) -> None:
        self.data += more
        for op in self.ops:
            if not op.cancelled and not op.done:
                op.complete()


async def start(**parts: FakePartition) -> ReplicationServer:
    server = ReplicationServer("b1")
    for name, fp in parts.items():
        server.register(name, 0, fp)
    await server.start(HOST)
    return server


def fetch_frame(*entries, replica_id: int = 2, max_wait_ms: int = 0, max_bytes: int = 1 << 20) -> bytes:
    """A session fetch of ``(topic, offset)`` entries (partition 0, leader epoch 4, 1 MiB each)."""
    parts = [[t, 0, off, 4, 1 << 20] for t, off in entries]
    return encode_session_fetch(replica_id, max_wait_ms, 1, max_bytes, parts)


async def raw_peer(server: ReplicationServer, *frames: bytes) -> bytes:
    """Send raw bytes, then read until the server closes the connection (what it answered, if anything)."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    for f in frames:
        writer.write(f)
    await writer.drain()
    data = await read_until_closed(reader)
    writer.close()
    return data


def frame(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


def hello(server: ReplicationServer, replica_id: int = 2, token: bytes | None = None) -> bytes:
    return frame({"token": server.token if token is None else token, "replica_id": replica_id})


def test_a_session_fetch_answers_every_partition_in_order_with_the_records_as_sent():
    async def go():
        a, b = FakePartition(data=bytes(range(200)) * 1500), FakePartition(data=b"xyz")
        server = await start(a=a, b=b)
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        first = await conn.fetch(fetch_frame(("a", 0), ("b", 1), ("gone", 0)), 0)
        second = await conn.fetch(fetch_frame(("b", 3), ("a", 299_990)), 0)
        conn.close()
        server.close()
        return a, b, server, first, second

    a, b, server, first, second = run(go())
    assert [x["records"] for x in first[:2]] == [bytes(range(200)) * 1500, b"yz"]
    assert first[2]["error_code"] == E.NotLeaderOrFollowerError.code and first[2]["records"] == b""
    assert "gone-0 is not led" in first[2]["error_message"]
    assert first[0]["aborted_transactions"] == [[7, 3]] and first[1]["high_watermark"] == 3
    assert second[0]["records"] == b"" and isinstance(second[0]["records"], bytes)
    assert second[1]["records"] == bytes(range(190, 200))
    assert a.seen[0] == FetchRequest(0, 1 << 20, 0, 1, 2, 4)  # every field travels
    assert server.stats["connections"] == 1 and server.stats["fetches"] == 2 and server.stats["bad_frames"] == 0
    assert server.stats["partition_fetches"] == 5


def test_answers_codec_splits_the_records_back_and_refuses_lengths_that_do_not_add_up():
    answers = [
        {"error_code": 0, "records": b"ab"},
        {"error_code": 3, "records": b""},
        {"error_code": 0, "records": b"c"},
    ]
    head, meta, *recs = encode_answers(answers)
    assert decode_answers(meta, b"".join(recs)) == answers
    assert struct.unpack(">II", head) == (len(meta), 3)
    for bad_records in (b"abcd", b"ab"):
        with pytest.raises(ValueError):
            decode_answers(meta, bad_records)


def test_frame_codec_refuses_anything_but_a_session_fetch_or_a_poke():
    f = fetch_frame(("t", 12), replica_id=3, max_wait_ms=500)
    assert decode_frame(f[4:])["partitions"] == [["t", 0, 12, 4, 1 << 20]]
    assert decode_frame(encode_poke()[4:]) == {"poke": True}
    good = {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 5, "partitions": [["t", 0, 1, 2, 3]]}
    for bad in (
        b"\xc1",  # not msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({**good, "evil": 2}),
        msgpack.packb({k: v for k, v in good.items() if k != "max_bytes"}),
        msgpack.packb({**good, "replica_id": "1"}),
        msgpack.packb({**good, "max_wait_ms": True}),
        msgpack.packb({**good, "min_bytes": 1 << 63}),
        msgpack.packb({**good, "partitions": []}),
        msgpack.packb({**good, "partitions": [["t", 0, 1, 2]]}),
        msgpack.packb({**good, "partitions": [[5, 0, 1, 2, 3]]}),
        msgpack.packb({**good, "partitions": [["t", 0, "1", 2, 3]]}),
        msgpack.packb({"poke": False}),
    ):
        with pytest.raises(BadFrame):
            decode_frame(bad)


def test_a_broker_that_is_not_a_replica_is_refused_per_partition_and_moves_nothing():
    async def go():
        a, b = FakePartition(replicas=(1, 9), data=b"aaa"), FakePartition(data=b"bbb")
        server = await start(a=a, b=b)
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        got = await conn.fetch(fetch_frame(("a", 0), ("b", 0)), 0)
        conn.close()
        server.close()
        return a, b, got

    a, b, got = run(go())
    assert (
        got[0]["error_code"] == E.NotLeaderOrFollowerError.code
        and "broker 2 is not a replica" in got[0]["error_message"]
    )
    assert a.seen == []  # its fetch state never moved
    assert got[1]["records"] == b"bbb" and len(b.seen) == 1


@pytest.mark.parametrize(
    "name, frames",
    [
        ("wrong token", lambda s: [hello(s, token=b"x" * 16), fetch_frame(("a", 0))]),
        ("negative broker id", lambda s: [hello(s, replica_id=-1), fetch_frame(("a", 0), replica_id=-1)]),
        ("forged replica id", lambda s: [hello(s, 2), fetch_frame(("a", 0), replica_id=3)]),
        ("hello not msgpack", lambda s: [frame(b"\xc1\xc1")]),
        ("hello without token", lambda s: [frame({"replica_id": 2})]),
        ("garbage request", lambda s: [hello(s), frame(b"\x93\x01\x02\x03")]),
        ("oversize frame", lambda s: [hello(s), struct.pack(">I", MAX_REQUEST_BYTES + 1) + b"x" * 100]),
        (
            "a second fetch before the answer",
            lambda s: [hello(s), fetch_frame(("a", 9), max_wait_ms=5000), fetch_frame(("a", 9), max_wait_ms=5000)],
        ),
    ],
)
def test_a_bad_peer_is_closed_without_an_answer_and_the_server_serves_on(name, frames):
    async def go():
        a = FakePartition(data=b"abcdefgh")
        server = await start(a=a)
        got = await raw_peer(server, *frames(server))
        seen_before = list(a.seen)
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        after = await conn.fetch(fetch_frame(("a", 4)), 0)
        conn.close()
        server.close()
        return seen_before, server, got, after

    seen_before, server, got, after = run(go())
    assert got == b"", f"{name}: the server answered a bad peer"
    assert all(r.fetch_offset == 9 for r in seen_before), f"{name}: a bad peer's request reached the replica"
    assert server.stats["bad_frames"] == 1
    assert after[0]["records"] == b"efgh"


def test_a_truncated_frame_and_a_silent_peer_do_not_block_others():
    async def go():
        a = FakePartition(data=b"0123456789")
        server = await start(a=a)
        r1, w1 = await asyncio.open_connection(server.host, server.port)  # connects, never says hello
        r2, w2 = await asyncio.open_connection(server.host, server.port)
        w2.write(hello(server) + fetch_frame(("a", 9))[:7])  # half a request, then hangs
        conn = await ReplicationConnection.open(server.endpoint(), 3, timeout_s=5)
        answer = await conn.fetch(fetch_frame(("a", 6), replica_id=3), 0)
        w2.close()
        w1.close()
        conn.close()
        server.close()
        return a, answer

    a, answer = run(go())
    assert answer[0]["records"] == b"6789"
    assert [r.fetch_offset for r in a.seen] == [6]


def test_the_long_poll_waits_for_data_on_any_partition_or_a_poke_then_reads_them_all():
    async def go():
        a, b = FakePartition(data=b"aa"), FakePartition(data=b"bb")
        server = await start(a=a, b=b)
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        loop = asyncio.get_running_loop()
        out = {}
        t0 = loop.time()
        out["timeout"] = await conn.fetch(fetch_frame(("a", 2), ("b", 2), max_wait_ms=200), 200)
        out["timeout_s"] = loop.time() - t0
        pending = asyncio.ensure_future(conn.fetch(fetch_frame(("a", 2), ("b", 2), max_wait_ms=10_000), 10_000))
        await asyncio.sleep(0.1)
        t0 = loop.time()
        b.append(b"B")
        out["data"] = await pending
        out["data_s"] = loop.time() - t0
        pending = asyncio.ensure_future(conn.fetch(fetch_frame(("a", 2), ("b", 3), max_wait_ms=10_000), 10_000))
        await asyncio.sleep(0.1)
        t0 = loop.time()
        conn.poke()
        out["poked"] = await pending
        out["poked_s"] = loop.time() - t0
        out["ops_cancelled"] = all(op.cancelled or op.done for op in a.ops + b.ops)
        out["tracked"] = (list(a.tracked), list(b.tracked))
        server.close()
        with pytest.raises(ConnectionLost):  # the leader's server went away (its process died)
            await conn.fetch(fetch_frame(("a", 2)), 0)
        with pytest.raises(ConnectionLost):
            await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        return out, server

    out, server = run(go())
    assert [x["records"] for x in out["timeout"]] == [b"", b""] and 0.15 <= out["timeout_s"] < 5
    assert [x["records"] for x in out["data"]] == [b"", b"B"] and out["data_s"] < 5
    assert [x["records"] for x in out["poked"]] == [b"", b""] and out["poked_s"] < 5
    assert out["ops_cancelled"] and server.stats["pokes"] == 1
    # each parked fetch read every partition twice: as it came (the follower's fetch state moves) and after
    # the wait (the same request: nothing moves again)
    assert out["tracked"] == ([True, False] * 3, [True, False] * 3)


def test_the_answer_holds_at_most_max_bytes_in_all_but_always_the_first_partition():
    async def go():
        a, b, c = FakePartition(data=b"a" * 600), FakePartition(data=b"b" * 300), FakePartition(data=b"c" * 100)
        server = await start(a=a, b=b, c=c)
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=5)
        got = await conn.fetch(fetch_frame(("a", 0), ("b", 0), ("c", 0), max_bytes=500), 0)
        conn.close()
        server.close()
        return got

    got = run(go())
    assert [len(x["records"]) for x in got] == [600, 0, 0]


def test_a_leader_that_never_answers_times_out():
    async def go():
        server = await start(a=FakePartition())
        server.fetch_session = _hang  # type: ignore[method-assign]
        conn = await ReplicationConnection.open(server.endpoint(), 2, timeout_s=0.3)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(ConnectionLost):
            await conn.fetch(fetch_frame(("a", 0), max_wait_ms=100), 100)
        waited = loop.time() - t0
        server.close()
        return waited

    async def _hang(msg, poke):
        await asyncio.sleep(3600)

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
                await conn.fetch(fetch_frame(("a", 1)), 0)
        finally:
            server.close()

    run(go())
