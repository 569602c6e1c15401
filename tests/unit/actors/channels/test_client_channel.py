"""The clients' data channel (actors/channels/client_channel.py's listener, rafka/channel.py's transport) over real
loopback sockets, without Ray: requests and answers round-trip whole, a connection's produces reach the
replica in the order they were sent while its long-polls overlap them, a broken or silent replica fails the
requests with Kafka's retriable errors, and every bad peer (no or wrong token, garbage, an unknown api or
field, a follower's replica id, an oversize frame) gets its connection closed, its request never reaching
the replica, while the listener keeps serving the others.

The replica actor's handle is the one stand-in: an object whose ``client_endpoint.remote().future()`` answers
the listener's endpoint as the Ray call does (tests/cluster/test_client_channel_cluster.py runs it all on a
real cluster)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import socket
import struct
import threading
import time

import msgpack
import pytest
from support import read_until_closed

import actors.channels.data_channel as data_channel
import protocol.channel_frames as channel_frames
import rafka.channel as channel
from actors.channels.client_channel import ClientListener
from actors.replication.call_order import CallOrder
from protocol.channel_frames import REQUEST_HEAD, BadFrame, decode_fetch, decode_produce, encode_request
from protocol.errors import NotLeaderOrFollowerError, RequestTimedOutError
from protocol.messages import FetchRequest, ProduceRequest
from protocol.txn_messages import TxnVerifiedRequest, WriteTxnMarkersRequest

HOST = "127.0.0.1"


class FakeReplica:
    """Handlers like ReplicaActor.produce/fetch on their own event loop (a thread, as the actor's)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.order = CallOrder()
        self.appended: list[bytes] = []
        self.requests: list = []
        self.hang = False
        self.endpoint_answer: dict | None = None
        self.endpoint_calls = 0
        self.listener = ClientListener(self.produce, self.fetch, "t-0 b1", self.write_txn_markers, self.txn_verified)
        self.do(self.listener.start(HOST))

    def do(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def produce(self, req: ProduceRequest) -> dict:
        self.requests.append(req)
        await self.order.enter(req.order)
        try:
            for _ in range(random.randrange(4)):  # appends that yield to other calls a varying number of times
                await asyncio.sleep(0)
            self.appended.append(bytes(req.records))
        finally:
            self.order.leave(req.order)
        if self.hang:
            await asyncio.sleep(3600)
        return {"error_code": 0, "error_message": None, "base_offset": len(self.appended) - 1, "log_append_time": -1}

    async def write_txn_markers(self, req: WriteTxnMarkersRequest) -> dict:
        self.requests.append(req)
        return {"error_code": 0, "error_message": None}

    async def txn_verified(self, req: TxnVerifiedRequest) -> dict:
        self.requests.append(req)
        return {"error_code": 0, "error_message": None, "taken": True}

    async def fetch(self, req: FetchRequest) -> dict:
        self.requests.append(req)
        if req.max_wait_ms:
            await asyncio.sleep(req.max_wait_ms / 1000)
        return {
            "error_code": 0,
            "error_message": None,
            "high_watermark": req.fetch_offset + 1,
            "records": bytes([req.fetch_offset % 251]) * req.fetch_offset,
            "aborted_transactions": [(7, 3), (8, 5)],
        }

    # the Ray handle's surface the channel uses: handle.client_endpoint.remote().future() (or internal_endpoint)
    @property
    def client_endpoint(self):
        self.internal = False
        return self

    @property
    def internal_endpoint(self):
        self.internal = True
        return self

    def remote(self):
        return self

    def future(self):
        self.endpoint_calls += 1
        f: concurrent.futures.Future = concurrent.futures.Future()
        ep = self.listener.endpoint(self.internal)
        f.set_result(self.endpoint_answer or {"error_code": 0, "error_message": None, **ep})
        return f

    def close(self):
        self.loop.call_soon_threadsafe(self.listener.close)


@pytest.fixture
def replica():
    r = FakeReplica()
    yield r
    r.close()


T = channel.ChannelTransport()


def produce(replica, payload: bytes, **kw):
    return T.call(replica, "produce", ProduceRequest(payload, **kw))


def test_produce_and_fetch_round_trip_and_records_pass_through(replica):
    big = bytes(range(256)) * 1200  # 300 KB: over Ray's inline limit, one frame here
    ans = T.get(produce(replica, big, acks=1, timeout_ms=1234, current_leader_epoch=3, transactional_id="tx"), 10)
    assert ans["error_code"] == 0 and ans["base_offset"] == 0 and ans["records"] == b""
    got = replica.requests[-1]
    assert (got.acks, got.timeout_ms, got.current_leader_epoch, got.transactional_id) == (1, 1234, 3, "tx")
    assert got.origin == "client" and got.order[1] == 0 and bytes(got.records) == big
    f = T.call(
        replica, "fetch", FetchRequest(70000, max_bytes=9, min_bytes=2, current_leader_epoch=3, isolation_level=1)
    )
    ans = T.get(f, 10)
    assert ans["records"] == bytes([70000 % 251]) * 70000 and ans["high_watermark"] == 70001
    assert ans["aborted_transactions"] == ((7, 3), (8, 5))  # as the replica's dict carries them
    got = replica.requests[-1]
    assert (got.fetch_offset, got.max_bytes, got.min_bytes, got.isolation_level, got.replica_id) == (70000, 9, 2, 1, -1)
    assert got.min_one_message is True
    T.get(T.call(replica, "fetch", FetchRequest(5, max_bytes=0, min_one_message=False)), 10)
    assert replica.requests[-1].min_one_message is False  # the wire Fetch's reads past fetch.max.bytes
    assert replica.endpoint_calls == 1  # one connection for both
    assert replica.listener.stats["connections"] == 1


def test_pipelined_produces_append_in_sent_order_while_a_long_poll_waits(replica):
    poll = T.call(replica, "fetch", FetchRequest(5, max_wait_ms=1500))
    calls = [produce(replica, i.to_bytes(4, "big")) for i in range(300)]
    done, _ = T.wait(calls, num_returns=len(calls), timeout=20)
    assert len(done) == 300 and not poll.done()  # the long-poll did not hold the connection's produces
    assert replica.appended == [i.to_bytes(4, "big") for i in range(300)]
    assert [c.result()["base_offset"] for c in calls] == list(range(300))
    assert T.get(poll, 10)["high_watermark"] == 6


def test_wait_returns_the_first_ready_and_respects_the_timeout(replica):
    slow = T.call(replica, "fetch", FetchRequest(1, max_wait_ms=800))
    fast = T.call(replica, "fetch", FetchRequest(2))
    ready, rest = T.wait([slow, fast], num_returns=1, timeout=5)
    assert ready == [fast] and rest == [slow]
    t0 = time.monotonic()
    ready, rest = T.wait([slow], num_returns=1, timeout=0.1)
    assert ready == [] and rest == [slow] and time.monotonic() - t0 < 0.7
    assert T.wait([slow], num_returns=1, timeout=5)[0] == [slow]


def test_a_closed_listener_fails_pending_requests_as_not_leader_then_the_next_call_reconnects(replica):
    replica.hang = True
    pending = produce(replica, b"x")
    time.sleep(0.3)
    old = replica.listener
    replica.loop.call_soon_threadsafe(old.close)
    with pytest.raises(NotLeaderOrFollowerError):
        T.get(pending, 10)
    replica.hang = False
    replica.listener = ClientListener(replica.produce, replica.fetch, "t-0 b1 again")
    replica.do(replica.listener.start(HOST))
    assert T.get(produce(replica, b"y"), 10)["error_code"] == 0
    assert replica.endpoint_calls == 2  # asked for the endpoint again


def test_an_endpoint_refusal_answers_its_kafka_error(replica):
    replica.endpoint_answer = {"error_code": NotLeaderOrFollowerError.code, "error_message": "stopped"}
    with pytest.raises(NotLeaderOrFollowerError, match="stopped"):
        T.get(produce(replica, b"x"), 10)
    assert replica.requests == []


def test_a_silent_replica_times_out_and_the_connection_is_closed(replica, monkeypatch):
    monkeypatch.setattr(data_channel, "PRODUCE_SLACK_S", 0.3)
    replica.hang = True
    t0 = time.monotonic()
    with pytest.raises(RequestTimedOutError):
        T.get(produce(replica, b"x", timeout_ms=100), 10)
    assert time.monotonic() - t0 < 5
    deadline = time.monotonic() + 5
    while replica.listener.stats["open"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert replica.listener.stats["open"] == 0


# ---- bad peers -----------------------------------------------------------------------------------------
def frame(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


def request(api: int, fields, payload: bytes = b"", corr: int = 1) -> bytes:
    meta = fields if isinstance(fields, bytes) else msgpack.packb(fields)
    return REQUEST_HEAD.pack(9 + len(meta) + len(payload), corr, api, len(meta)) + meta + payload


def raw_peer(replica, *frames: bytes) -> bytes:
    async def go():
        reader, writer = await asyncio.open_connection(HOST, replica.listener.port)
        for f in frames:
            writer.write(f)
        await writer.drain()
        data = await read_until_closed(reader)
        writer.close()
        return data

    return asyncio.run(go())


@pytest.mark.parametrize(
    "case",
    [
        "wrong token",
        "hello not msgpack",
        "hello without token",
        "hello posing as a follower",
        "unknown api",
        "unknown field",
        "follower replica id",
        "string offset",
        "bool acks",
        "fetch with payload",
        "oversize frame",
        "meta longer than frame",
        "origin coordinator",
        "markers on a client connection",
        "internal origin not a known one",
        "markers with a string epoch",
        "verification push on a client connection",
        "verification push without a leader epoch",
    ],
)
def test_bad_peers_are_closed_unanswered_and_the_listener_goes_on(replica, case):
    good = frame({"token": replica.listener.token})
    frames = {
        "wrong token": [frame({"token": b"x" * 16}), request(0, {"acks": 1}, b"rec")],
        "hello not msgpack": [frame(b"\xc1\xc1"), request(0, {"acks": 1}, b"rec")],
        "hello without token": [frame({"replica_id": 2}), request(0, {"acks": 1}, b"rec")],
        "hello posing as a follower": [
            frame({"token": replica.listener.token, "replica_id": 2}),
            request(1, {"fetch_offset": 0}),
        ],
        "unknown api": [good, request(7, {"acks": 1}, b"rec")],
        "unknown field": [good, request(0, {"acks": 1, "records": b"x"}, b"rec")],
        "follower replica id": [good, request(1, {"fetch_offset": 0, "replica_id": 2})],
        "string offset": [good, request(1, {"fetch_offset": "0"})],
        "bool acks": [good, request(0, {"acks": True}, b"rec")],
        "fetch with payload": [good, request(1, {"fetch_offset": 0}, b"junk")],
        "oversize frame": [good, REQUEST_HEAD.pack(200 * 1024 * 1024, 1, 0, 2)],
        "meta longer than frame": [good, REQUEST_HEAD.pack(12, 1, 0, 50) + b"\x80" * 3],
        "origin coordinator": [good, request(0, {"acks": 1, "origin": "coordinator"}, b"rec")],
        "markers on a client connection": [
            good,
            request(2, {"producer_id": 1, "producer_epoch": 0, "committed": True, "coordinator_epoch": 0}),
        ],
        "internal origin not a known one": [
            frame({"token": replica.listener.internal_token}),
            request(0, {"acks": 1, "origin": "controller"}, b"rec"),
        ],
        "markers with a string epoch": [
            frame({"token": replica.listener.internal_token}),
            request(2, {"producer_id": 1, "producer_epoch": "0", "committed": True, "coordinator_epoch": 0}),
        ],
        "verification push on a client connection": [
            good,
            request(3, {"producer_id": 1, "producer_epoch": 0, "txn_start_ms": 5, "leader_epoch": 0}),
        ],
        "verification push without a leader epoch": [
            frame({"token": replica.listener.internal_token}),
            request(3, {"producer_id": 1, "producer_epoch": 0, "txn_start_ms": 5}),
        ],
    }[case]
    assert raw_peer(replica, *frames) == b""
    assert replica.requests == []
    assert replica.listener.stats["bad_frames"] == 1
    assert T.get(produce(replica, b"ok"), 10)["error_code"] == 0  # a good client is served after each


def test_a_peer_without_hello_does_not_block_others(replica):
    silent = socket.create_connection((HOST, replica.listener.port))
    silent.sendall(b"\x00\x00")  # half a length
    assert T.get(T.call(replica, "fetch", FetchRequest(3)), 10)["high_watermark"] == 4
    silent.close()


def test_frame_codecs_refuse_what_is_not_a_client_request():
    order = ("tcp0", 0)
    assert decode_produce(msgpack.packb({"acks": -1}), b"r", order).origin == "client"
    with pytest.raises(BadFrame):
        decode_produce(msgpack.packb({"acks": 1, "order": ["x", 1]}), b"r", order)
    with pytest.raises(BadFrame):
        decode_produce(msgpack.packb({"transactional_id": 5}), b"r", order)
    with pytest.raises(BadFrame):
        decode_fetch(msgpack.packb({"max_bytes": 5}))  # no fetch_offset
    with pytest.raises(BadFrame):
        decode_fetch(msgpack.packb([1, 2]))
    with pytest.raises(BadFrame):
        decode_fetch(msgpack.packb({"fetch_offset": 1 << 63}))
    parts = encode_request(9, 1, {"fetch_offset": 4})
    length, corr, api, meta_len = REQUEST_HEAD.unpack(parts[0])
    assert (corr, api, length) == (9, 1, 9 + meta_len) and decode_fetch(parts[1]).fetch_offset == 4


def test_the_internal_endpoint_may_append_as_a_coordinator_and_write_markers(replica):
    io = data_channel.ChannelIO(internal=True)
    req = ProduceRequest(b"state", acks=-1, current_leader_epoch=2, origin="coordinator")
    ans = io.submit(replica, channel_frames.API_PRODUCE, channel_frames.internal_produce_fields(req), req.records, 10)
    assert ans.result(10)["error_code"] == 0
    assert replica.requests[-1].origin == "coordinator" and replica.requests[-1].current_leader_epoch == 2
    m = WriteTxnMarkersRequest(77, 3, False, 9, "tx-1")
    assert io.submit(replica, channel_frames.API_TXN_MARKERS, channel_frames.marker_fields(m), b"", 10).result(10) == {
        "error_code": 0,
        "error_message": None,
        "records": b"",
    }
    assert replica.requests[-1] == m
    v = TxnVerifiedRequest(77, 3, 1700000000123, 4, "tx-1")
    ans = io.submit(replica, channel_frames.API_TXN_VERIFIED, channel_frames.verified_fields(v), b"", 10).result(10)
    assert ans["taken"] is True and replica.requests[-1] == v
    assert replica.listener.stats["internal"] == 1 and replica.listener.stats["markers"] == 1
    assert replica.listener.stats["verified_pushes"] == 1
    # the client transport never carries an origin: a coordinator's request sent that way appends as a client
    assert T.get(T.call(replica, "produce", req), 10)["error_code"] == 0
    assert replica.requests[-1].origin == "client"
    assert replica.listener.stats["connections"] == 2 and replica.listener.stats["bad_frames"] == 0


def test_sync_io_returns_once_the_io_thread_ran_what_was_submitted_before():
    """``sync_io`` (what ``add_partitions_now`` waits on while ``send_batch`` holds the GIL in C): True once the
    channel's I/O thread ran everything submitted before it, False when the thread is stuck past the timeout;
    from the I/O thread itself it does not wait."""
    io = data_channel.channel_io()
    ran: list[str] = []
    io.loop.call_soon_threadsafe(ran.append, "submitted")
    assert T.sync_io(5.0) and ran == ["submitted"]
    gate = threading.Event()
    io.loop.call_soon_threadsafe(gate.wait, 5.0)  # the I/O thread busy
    t0 = time.monotonic()
    assert not T.sync_io(0.1) and time.monotonic() - t0 < 2
    gate.set()
    assert T.sync_io(5.0)
    inside = concurrent.futures.Future()
    io.loop.call_soon_threadsafe(lambda: inside.set_result(io.sync(5.0)))
    assert inside.result(5) is True
    assert channel.RAY.sync_io(0.0) is True  # Ray's calls are on their way at once
