"""The Processor pipelines a connection's non-transactional Produce requests (serve/kafka_wire/network.py,
handlers/produce.py ``pipelinable``), without Ray: real localhost sockets over an in-memory backend whose
writes to partition 0 can be held. A held write keeps its request unanswered; what the backend saw and the
order of the answers show which requests ran beside it and which waited (Kafka's one-at-a-time order)."""

from __future__ import annotations

import asyncio
import threading
import time

from kio.schema.metadata.v12 import request as md12
from kio.schema.metadata.v12 import response as md12r
from kio.schema.produce.v9 import response as pr9r
from test_wire_listener import Client, FakeBackend, listening, produce_req

from serve.kafka_wire import codec
from serve.kafka_wire.handlers.produce import PIPELINE_MAX_PARTITION_BYTES


class HeldBackend(FakeBackend):
    """FakeBackend whose writes of a batch starting with ``hold`` wait until ``release`` is set (the write is
    recorded first, as a leader appends before its acks=all wait)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.writes: list[bytes] = []

    async def produce(self, topic, partition, req):
        self.writes.append(bytes(req.records))
        answer = await super().produce(topic, partition, req)
        if bytes(req.records).startswith(b"hold"):
            while not self.release.is_set():
                await asyncio.sleep(0.005)
        return answer


def wait_for(pred, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def txn_produce_req(acks, batches, partition=0):
    req = produce_req(acks, batches, partition)
    return type(req)(transactional_id="tx", acks=req.acks, timeout=req.timeout, topic_data=req.topic_data)


def test_produce_requests_are_pipelined_and_answered_in_order():
    backend = HeldBackend()
    with listening(backend) as (port, _acc, _run, _loop):
        c = Client(port)
        c.send(
            codec.encode_request(1, produce_req(1, (b"hold-a",)))
            + codec.encode_request(2, produce_req(1, (b"b",), partition=1))
            + codec.encode_request(3, produce_req(1, (b"c",)))
        )
        # the later requests were written while the first is still unanswered, in request order
        assert wait_for(lambda: backend.writes == [b"hold-a", b"b", b"c"]), backend.writes
        c.sock.settimeout(0.3)
        try:
            got = c.sock.recv(1)
        except TimeoutError:
            got = None
        assert got is None, "an answer overtook the held first request"
        c.sock.settimeout(10)
        backend.release.set()
        answers = [c.recv(pr9r.ProduceResponse) for _ in range(3)]
        assert [cid for cid, _ in answers] == [1, 2, 3]
        offsets = [r.responses[0].partition_responses[0].base_offset for _, r in answers]
        assert offsets == [0, 0, 1]  # partition 0 took hold-a then c; partition 1 took b


def test_other_requests_wait_for_earlier_answers():
    """A Metadata request after an unanswered Produce is handled only once the Produce is answered, and a
    Produce after it only once the Metadata is (nothing is pipelined across a non-Produce request)."""
    backend = HeldBackend()
    with listening(backend) as (port, _acc, _run, _loop):
        c = Client(port)
        c.send(
            codec.encode_request(1, produce_req(1, (b"hold-a",)))
            + codec.encode_request(
                2,
                md12.MetadataRequest(
                    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
                ),
            )
            + codec.encode_request(3, produce_req(1, (b"c",)))
        )
        assert wait_for(lambda: backend.writes == [b"hold-a"])
        time.sleep(0.3)
        assert backend.writes == [b"hold-a"], "a request after a Metadata ran before it was answered"
        backend.release.set()
        assert c.recv(pr9r.ProduceResponse)[0] == 1
        assert c.recv(md12r.MetadataResponse)[0] == 2
        assert c.recv(pr9r.ProduceResponse)[0] == 3
        assert backend.writes == [b"hold-a", b"c"]


def test_transactional_and_large_produce_are_not_pipelined():
    for first, second in (
        (txn_produce_req(1, (b"hold-a",)), produce_req(1, (b"b",))),
        (produce_req(1, (b"hold-a" + b"x" * PIPELINE_MAX_PARTITION_BYTES,)), produce_req(1, (b"b",))),
        (produce_req(1, (b"hold-a",)), txn_produce_req(1, (b"b",))),
    ):
        backend = HeldBackend()
        with listening(backend) as (port, _acc, _run, _loop):
            c = Client(port)
            c.send(codec.encode_request(1, first) + codec.encode_request(2, second))
            assert wait_for(lambda b=backend: len(b.writes) == 1)
            time.sleep(0.3)
            assert len(backend.writes) == 1, "the second request ran beside one that must run alone"
            backend.release.set()
            assert [c.recv(pr9r.ProduceResponse)[0] for _ in range(2)] == [1, 2]
            assert len(backend.writes) == 2


def test_a_malformed_request_closes_the_connection_after_the_earlier_answers():
    backend = HeldBackend()
    with listening(backend) as (port, _acc, _run, _loop):
        c = Client(port)
        good = codec.encode_request(1, produce_req(1, (b"hold-a",)))
        bad = codec.encode_request(2, produce_req(1, (b"b",)))
        bad = bad[:-3]  # the body cut short, the size prefix fixed to match: a malformed Produce
        bad = len(bad[4:]).to_bytes(4, "big") + bad[4:]
        c.send(good + bad)
        assert wait_for(lambda: backend.writes == [b"hold-a"])
        backend.release.set()
        assert c.recv(pr9r.ProduceResponse)[0] == 1
        assert c.closed()
        assert backend.writes == [b"hold-a"]
