"""The transaction coordinator's client channel (actors/channels/coordinator_channel.py's listener, the coordinator
requests of rafka/channel.py's transport, protocol/coordinator_frames.py's frames) over real loopback sockets,
without Ray: typed requests reach the handler as they were sent (tuples and all) and answers come back as the
handler returned them, concurrent requests are answered by correlation id, a handler's failure is that
request's error, a lost connection fails the call with a retriable Kafka error, and every bad peer (no or
wrong token, another api, an unknown method or field, garbage) is closed unanswered while the listener serves
the others.

The coordinator actor's handle is the one stand-in: ``client_endpoint.remote().future()`` answers the
listener's endpoint as the Ray call does (tests/client/test_transactions.py runs it on a real cluster)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import struct
import threading
import time
import types

import msgpack
import pytest
from support import read_until_closed

import rafka.channel as channel
from actors.channels.coordinator_channel import CoordinatorListener
from protocol.channel_frames import API_COORDINATOR, REQUEST_HEAD, BadFrame
from protocol.coordinator_frames import CHANNEL_METHODS, decode_coordinator_request, encode_coordinator_request
from protocol.errors import NotLeaderOrFollowerError
from protocol.txn_messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

HOST = "127.0.0.1"


class FakeCoordinator:
    """Handlers like TxnCoordinatorActor's on their own event loop (a thread, as the actor's)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.requests: list = []
        self.gate: asyncio.Event | None = None
        self.endpoint_calls = 0
        self.listener = CoordinatorListener(lambda method: getattr(self, method), "tc b1")
        self.client_endpoint = types.SimpleNamespace(remote=self._endpoint_call)  # the Ray handle's surface
        asyncio.run_coroutine_threadsafe(self.listener.start(HOST), self.loop).result(10)

    async def add_partitions_to_txn(self, req):
        self.requests.append(req)
        if self.gate is not None:
            await self.gate.wait()
        return {"error_code": 0, "error_message": None, "results": [(t, p, 0) for t, p in req.partitions]}

    async def end_txn(self, req):
        self.requests.append(req)
        if req.producer_epoch < 0:
            raise RuntimeError("a handler bug")
        return {"error_code": 0, "error_message": None}

    async def init_producer_id(self, req):
        self.requests.append(req)
        return {"error_code": 0, "error_message": None, "producer_id": 9, "producer_epoch": 1}

    def _endpoint_call(self):
        """``client_endpoint.remote()``: a call whose ``future()`` answers the listener's endpoint, as Ray's."""
        self.endpoint_calls += 1
        answer: concurrent.futures.Future = concurrent.futures.Future()
        answer.set_result({"error_code": 0, "error_message": None, **self.listener.endpoint()})
        return types.SimpleNamespace(future=lambda: answer)

    def close(self):
        self.loop.call_soon_threadsafe(self.listener.close)


@pytest.fixture
def coordinator():
    c = FakeCoordinator()
    yield c
    c.close()


T = channel.ChannelTransport()


def test_typed_requests_and_their_answers_round_trip_whole(coordinator):
    add = AddPartitionsToTxnRequest("tx-1", 7, 2, (("a", 0), ("b", 3)))
    ans = T.get(T.call(coordinator, "add_partitions_to_txn", add), 10)
    assert ans == {"error_code": 0, "error_message": None, "results": [["a", 0, 0], ["b", 3, 0]]}
    assert coordinator.requests[-1] == add  # the partitions are tuples again, as over Ray
    init = InitProducerIdRequest("tx-1", 60000)
    assert T.get(T.call(coordinator, "init_producer_id", init), 10)["producer_id"] == 9
    assert coordinator.requests[-1] == init
    assert coordinator.endpoint_calls == 1 and coordinator.listener.stats["connections"] == 1
    assert coordinator.listener.stats["requests"] == 2


def test_concurrent_requests_are_answered_by_correlation_id(coordinator):
    coordinator.gate = asyncio.Event()
    slow = T.call(coordinator, "add_partitions_to_txn", AddPartitionsToTxnRequest("tx-1", 7, 2, (("a", 0),)))
    fast = T.call(coordinator, "end_txn", EndTxnRequest("tx-2", 8, 0, True))
    assert T.get(fast, 10) == {"error_code": 0, "error_message": None}
    assert not slow.done()  # a parked AddPartitionsToTxn does not hold the connection
    coordinator.loop.call_soon_threadsafe(coordinator.gate.set)
    assert T.get(slow, 10)["results"] == [["a", 0, 0]]


def test_a_handler_failure_is_that_requests_error_and_the_connection_goes_on(coordinator):
    ans = T.get(T.call(coordinator, "end_txn", EndTxnRequest("tx-1", 7, -1, True)), 10)
    assert ans["error_code"] == -1 and "a handler bug" in ans["error_message"]
    assert T.get(T.call(coordinator, "end_txn", EndTxnRequest("tx-1", 7, 0, True)), 10)["error_code"] == 0
    assert coordinator.listener.stats["failed"] == 1 and coordinator.listener.stats["connections"] == 1


def test_a_lost_connection_fails_the_call_with_a_retriable_error_and_the_next_call_reconnects(coordinator):
    coordinator.gate = asyncio.Event()
    pending = T.call(coordinator, "add_partitions_to_txn", AddPartitionsToTxnRequest("tx-1", 7, 2, (("a", 0),)))
    old = coordinator.listener
    deadline = time.monotonic() + 10
    while not coordinator.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    coordinator.loop.call_soon_threadsafe(old.close)
    with pytest.raises(NotLeaderOrFollowerError):
        T.get(pending, 10)
    coordinator.listener = CoordinatorListener(lambda method: getattr(coordinator, method), "tc b1 again")
    asyncio.run_coroutine_threadsafe(coordinator.listener.start(HOST), coordinator.loop).result(10)
    assert T.get(T.call(coordinator, "end_txn", EndTxnRequest("tx-1", 7, 0, True)), 10)["error_code"] == 0
    assert coordinator.endpoint_calls == 2


def test_the_frames_carry_exactly_the_allowed_requests():
    for req in (
        InitProducerIdRequest("t", 1000, 5, 1),
        AddPartitionsToTxnRequest("t", 5, 1, (("x", 1),), verify_only=True),
        AddOffsetsToTxnRequest("t", 5, 1, "g"),
        EndTxnRequest("t", 5, 1, False),
    ):
        assert decode_coordinator_request(msgpack.packb(encode_coordinator_request(req)), CHANNEL_METHODS) == (
            req.METHOD,
            req,
        )
    bad = [
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({"method": "end_txn"}),
        msgpack.packb({"method": "describe_transactions", "request": {}}),  # admin stays on Ray
        msgpack.packb({"method": "end_txn", "request": {"transactional_id": "t", "junk": 1}}),
        msgpack.packb({"method": 3, "request": {}}),
        msgpack.packb({"method": "end_txn", "request": [1]}),
    ]
    for meta in bad:
        with pytest.raises(BadFrame):
            decode_coordinator_request(meta, CHANNEL_METHODS)


# ---- bad peers -----------------------------------------------------------------------------------------
def frame(obj) -> bytes:
    body = obj if isinstance(obj, bytes) else msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


def request(api: int, fields, corr: int = 1) -> bytes:
    meta = fields if isinstance(fields, bytes) else msgpack.packb(fields)
    return REQUEST_HEAD.pack(9 + len(meta), corr, api, len(meta)) + meta


END = encode_coordinator_request(EndTxnRequest("tx-1", 7, 0, True))


@pytest.mark.parametrize(
    "case",
    [
        "wrong token",
        "hello not msgpack",
        "a produce api",
        "unknown method",
        "unknown field",
        "payload after the fields",
    ],
)
def test_bad_peers_are_closed_unanswered_and_the_listener_goes_on(coordinator, case):
    good = frame({"token": coordinator.listener.token})
    frames = {
        "wrong token": [frame({"token": b"x" * 16}), request(API_COORDINATOR, END)],
        "hello not msgpack": [frame(b"\xc1\xc1"), request(API_COORDINATOR, END)],
        "a produce api": [good, request(0, END)],
        "unknown method": [good, request(API_COORDINATOR, {"method": "write_txn_markers", "request": {}})],
        "unknown field": [good, request(API_COORDINATOR, {"method": "end_txn", "request": {"origin": "x"}})],
        "payload after the fields": [good, REQUEST_HEAD.pack(9 + 50, 1, API_COORDINATOR, 40) + b"\x80" * 50],
    }[case]

    async def go():
        reader, writer = await asyncio.open_connection(HOST, coordinator.listener.port)
        for f in frames:
            writer.write(f)
        await writer.drain()
        data = await read_until_closed(reader)
        writer.close()
        return data

    assert asyncio.run(go()) == b""
    assert coordinator.requests == []
    assert coordinator.listener.stats["bad_frames"] == 1
    assert T.get(T.call(coordinator, "end_txn", EndTxnRequest("tx-1", 7, 0, True)), 10)["error_code"] == 0
