"""The producer's one request per leader process (actors/channels/produce_channel.py's listener, protocol/produce_frames.py,
rafka/channel.py's ``produce_many``) over real loopback sockets, without Ray: a round's calls become one request
per process, each part reaches its replica and is answered in order, a connection's produces to a partition
append in the order they were sent, a partition the process does not serve answers NOT_LEADER_OR_FOLLOWER for
its part alone, a broken connection fails every part with a retriable error, and every bad peer or frame gets
its connection closed while the listener keeps serving the others.

The stand-ins: a "process" is an event loop thread with a registry of fake replicas and a listener; a replica's
handle has the ``process_key`` a HostedReplica has (what groups calls by process) and answers
``produce_endpoint.remote().future()`` with the listener's endpoint, as the Ray call does."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import socket
import threading
import time

import msgpack
import pytest

import protocol.channel_frames as channel_frames
import rafka.channel as channel
from actors.channels.produce_channel import ProduceListener
from actors.replication.call_order import CallOrder
from protocol.channel_frames import API_PRODUCE, API_PRODUCE_MULTI, U32, BadFrame, encode_request
from protocol.errors import NotLeaderOrFollowerError
from protocol.messages import ProduceRequest
from protocol.produce_frames import decode_multi, encode_multi

HOST = "127.0.0.1"
T = channel.ChannelTransport()


class FakePart:
    def __init__(self):
        self.order = CallOrder()
        self.appended: list[bytes] = []
        self.requests: list[ProduceRequest] = []
        self.hold: asyncio.Event | None = None  # set: appends wait for it (a slow acks=all replication)

    async def produce(self, req: ProduceRequest) -> dict:
        self.requests.append(req)
        await self.order.enter(req.order)
        try:
            for _ in range(random.randrange(4)):  # yield to the other parts a varying number of times
                await asyncio.sleep(0)
            self.appended.append(bytes(req.records))
        finally:
            self.order.leave(req.order)
        if self.hold is not None:
            await self.hold.wait()
        return {"error_code": 0, "error_message": None, "base_offset": len(self.appended) - 1, "records": b""}


class Process:
    def __init__(self, *partitions):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.parts = {tp: FakePart() for tp in partitions}
        self.listener = ProduceListener("fake process", self.parts)
        self.endpoint_calls = 0
        asyncio.run_coroutine_threadsafe(self.listener.start(HOST), self.loop).result(10)

    def handle(self, tp) -> Handle:
        return Handle(self)

    def close(self):
        self.loop.call_soon_threadsafe(self.listener.close)


class Handle:
    """What the Sender holds for a leader replica: ``process_key`` tells its process (as HostedReplica's)."""

    def __init__(self, proc: Process):
        self.host = proc
        self.process_key = id(proc)  # (a HostedReplica's is its host's actor id)

    @property
    def produce_endpoint(self):
        return self

    def remote(self):
        return self

    def future(self):
        self.host.endpoint_calls += 1
        f: concurrent.futures.Future = concurrent.futures.Future()
        f.set_result({"error_code": 0, "error_message": None, **self.host.listener.endpoint()})
        return f


@pytest.fixture
def procs():
    made: list[Process] = []
    yield lambda *tps: made.append(Process(*tps)) or made[-1]
    for p in made:
        p.close()


def items(proc, *tps, payload=b"x", acks=-1):
    return [(proc.handle(tp), tp[0], tp[1], ProduceRequest(payload + bytes([tp[1]]), acks=acks)) for tp in tps]


def test_a_round_is_one_request_per_process_and_each_part_is_answered_in_order(procs):
    a, b = procs(("t", 0), ("t", 1)), procs(("t", 2))
    calls = items(a, ("t", 0), ("t", 1)) + items(b, ("t", 2)) + items(a, ("u", 9))
    answers = [f.result(10) for f in T.produce_many(calls)]
    assert [x["error_code"] for x in answers] == [0, 0, 0, NotLeaderOrFollowerError.code]  # u-9: not here
    assert "not served by this process" in answers[3]["error_message"]
    assert a.parts[("t", 0)].appended == [b"x\x00"] and a.parts[("t", 1)].appended == [b"x\x01"]
    assert b.parts[("t", 2)].appended == [b"x\x02"]
    assert a.listener.stats["requests"] == 1 and a.listener.stats["parts"] == 3 and a.listener.stats["not_here"] == 1
    assert b.listener.stats["requests"] == 1
    assert a.endpoint_calls == 1 and b.endpoint_calls == 1  # one connection per process
    req = a.parts[("t", 0)].requests[0]
    assert (req.acks, req.origin, req.order[1]) == (-1, "client", 0)


def test_a_connections_produces_to_a_partition_append_in_the_order_sent(procs):
    a = procs(("t", 0), ("t", 1))
    futs = []
    for i in range(200):
        futs += T.produce_many(
            [(a.handle(None), "t", 0, ProduceRequest(b"%d" % i)), (a.handle(None), "t", 1, ProduceRequest(b"%d" % i))]
        )
    assert all(f.result(10)["error_code"] == 0 for f in futs)
    for tp in (("t", 0), ("t", 1)):
        assert a.parts[tp].appended == [b"%d" % i for i in range(200)]
        assert [r.order[1] for r in a.parts[tp].requests] == list(range(200))  # numbered per partition


def test_a_new_replica_of_a_partition_is_numbered_from_zero(procs):
    a = procs(("t", 0))
    assert [f.result(10)["error_code"] for f in T.produce_many(items(a, ("t", 0)) * 1)] == [0]
    a.parts[("t", 0)] = fresh = FakePart()  # the replica stopped and another took the partition here
    assert T.produce_many(items(a, ("t", 0)))[0].result(10)["error_code"] == 0
    assert fresh.requests[0].order[1] == 0 and fresh.appended == [b"x\x00"]


def test_a_lost_connection_fails_every_part_with_a_retriable_error(procs):
    a = procs(("t", 0), ("t", 1))
    assert T.produce_many(items(a, ("t", 0)))[0].result(10)["error_code"] == 0
    a.close()
    time.sleep(0.2)
    for f in T.produce_many(items(a, ("t", 0), ("t", 1))):
        with pytest.raises(NotLeaderOrFollowerError):
            f.result(10)


def test_frames_round_trip_and_bad_ones_are_refused():
    fields, bufs = encode_multi(
        [("t", 0, ProduceRequest(b"ab", acks=1, transactional_id="tx")), ("u", 3, ProduceRequest(b"c"))]
    )
    head, parts = decode_multi(msgpack.packb(fields), b"".join(bufs))
    assert head == {"acks": 1, "timeout_ms": 30000, "transactional_id": "tx"}
    assert parts == [("t", 0, -1, b"ab"), ("u", 3, -1, b"c")]
    bad = [
        ({**fields, "extra": 1}, b"abc"),
        ({**fields, "parts": []}, b""),
        ({**fields, "parts": [["t", 0, -1, 2], ["t", 0, -1, 1]]}, b"abc"),  # the same partition twice
        ({**fields, "parts": [["t", 0, -1, 5]]}, b"abc"),  # past the payload
        ({**fields, "parts": [["t", 0, -1, 1]]}, b"abc"),  # payload left over
        ({**fields, "parts": [["t", -1, -1, 3]]}, b"abc"),
        ({**fields, "acks": True}, b"abc"),
        ({**fields, "parts": [[0, 0, -1, 3]]}, b"abc"),
        ({**fields, "parts": [["t", 0, -1, 3, 1000]]}, b"abc"),  # a start without a token
        ({**fields, "parts": [["t", 0, -1, 3, 1000, b""]]}, b"abc"),  # an empty token
        ({**fields, "parts": [["t", 0, -1, 3, 1000, "tok"]]}, b"abc"),  # a token that is not bytes
        ({**fields, "parts": [["t", 0, -1, 3, "1000", b"tok"]]}, b"abc"),
    ]
    for f, payload in bad:
        with pytest.raises(BadFrame):
            decode_multi(msgpack.packb(f), payload)
    with pytest.raises(BadFrame):
        decode_multi(b"\xc1", b"")


def read_until_closed(s: socket.socket) -> bytes:
    got = b""
    try:
        while chunk := s.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass  # closed with our request unread: the kernel resets
    return got


def _connect(proc, token):
    s = socket.create_connection((HOST, proc.listener.port), timeout=10)
    hello = msgpack.packb({"token": token})
    s.sendall(U32.pack(len(hello)) + hello)
    return s


def test_bad_peers_are_closed_and_the_listener_goes_on(procs):
    a = procs(("t", 0))
    token = a.listener.token
    fields, bufs = encode_multi([("t", 0, ProduceRequest(b"ok"))])
    peers = [
        (b"\x00" * 16, encode_request(1, API_PRODUCE_MULTI, fields, bufs)),  # wrong token
        (token, encode_request(1, API_PRODUCE, {"acks": 1}, b"x")),  # a single produce: not served here
        (token, encode_request(1, API_PRODUCE_MULTI, {**fields, "parts": [["t", 0, -1, 9]]}, bufs)),
        (token, [b"\xff" * 13]),  # an oversize length
    ]
    for tok, frame in peers:
        s = _connect(a, tok)
        s.sendall(b"".join(frame))
        assert read_until_closed(s) == b""  # closed without an answer
    assert a.listener.stats["bad_frames"] == len(peers)
    assert a.parts[("t", 0)].appended == []  # no bad request reached the replica
    assert T.produce_many(items(a, ("t", 0)))[0].result(10)["error_code"] == 0  # the others go on


def test_each_part_is_answered_as_soon_as_it_is_done(procs):
    """A part whose replication is slow does not hold back the answer of another partition of the request."""
    a = procs(("t", 0), ("t", 1))
    hold = a.parts[("t", 1)].hold = asyncio.Event()
    fast, slow = T.produce_many(items(a, ("t", 0), ("t", 1)))
    assert fast.result(10)["error_code"] == 0
    time.sleep(0.2)
    assert not slow.done()
    a.loop.call_soon_threadsafe(hold.set)
    assert slow.result(10)["error_code"] == 0 and a.parts[("t", 1)].appended == [b"x\x01"]
    assert a.listener.stats["requests"] == 1  # one request, two answers


def test_warm_opens_the_process_connection_ahead_and_the_produces_use_it(procs):
    """``ChannelTransport.warm`` (the producer's, while its AddPartitionsToTxn is in flight): the connection to the
    leader's process listener is opened before any request, once per process, and the produces that follow go on
    it without a second endpoint lookup."""
    a = procs(("t", 0), ("t", 1))
    assert T.warm(a.handle(("t", 0))) is True and T.warm(a.handle(("t", 1))) is True
    deadline = time.monotonic() + 10
    while a.listener.stats["connections"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert a.listener.stats["connections"] == 1 and a.listener.stats["requests"] == 0
    answers = [f.result(10) for f in T.produce_many(items(a, ("t", 0), ("t", 1)))]
    assert [x["error_code"] for x in answers] == [0, 0]
    assert a.endpoint_calls == 1 and a.listener.stats["connections"] == 1 and a.listener.stats["requests"] == 1
    assert channel.RAY.warm(a.handle(("t", 0))) is False  # a Ray call opens nothing ahead


def test_a_parts_verification_token_reaches_its_replica_and_only_its_own():
    """A transactional producer's part carries its partition's token and the transaction's start
    (protocol/txn_tokens.py) to that partition's replica; a part without one arrives without."""
    tok = ProduceRequest(b"ab", acks=1, transactional_id="tx", txn_start_ms=1000, txn_token=b"T" * 16)
    fields, bufs = encode_multi([("t", 0, tok), ("u", 3, ProduceRequest(b"c", acks=1, transactional_id="tx"))])
    _head, parts = decode_multi(msgpack.packb(fields), b"".join(bufs))
    assert parts == [("t", 0, -1, b"ab", 1000, b"T" * 16), ("u", 3, -1, b"c")]
    assert channel_frames.produce_fields(tok)["txn_token"] == b"T" * 16  # (the single-partition frame's too)
    assert "txn_token" not in channel_frames.produce_fields(ProduceRequest(b"c"))
    d = channel_frames.decode_produce(msgpack.packb(channel_frames.produce_fields(tok)), b"ab", ("c", 0))
    assert (d.txn_start_ms, d.txn_token) == (1000, b"T" * 16)

    proc = Process(("t", 0), ("t", 1))
    try:
        reqs = [
            ProduceRequest(b"x", acks=1, transactional_id="tx", txn_start_ms=5, txn_token=b"A" * 16),
            ProduceRequest(b"y", acks=1, transactional_id="tx"),
        ]
        futs = T.produce_many([(proc.handle(("t", p)), "t", p, r) for p, r in enumerate(reqs)])
        assert [f.result(10)["error_code"] for f in futs] == [0, 0]
        got = [proc.parts[("t", p)].requests[0] for p in (0, 1)]
        assert [(r.txn_start_ms, r.txn_token) for r in got] == [(5, b"A" * 16), (-1, b"")]
    finally:
        proc.close()
