"""The Kafka wire listener without Ray: Acceptor/Processor/KafkaApis on a real localhost socket, in front
of an in-memory Backend. Framing, ordering, ApiVersions, Metadata, Produce (acks=0 silent), Fetch
(long-poll, empty bytes), ListOffsets, and bad input that must close one connection only."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import struct
import uuid

import pytest
from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3 import ApiVersionsRequest, ApiVersionsResponse
from kio.schema.fetch.v16 import request as fetch16
from kio.schema.fetch.v16 import response as fetch16r
from kio.schema.list_offsets.v7 import request as lo7
from kio.schema.list_offsets.v7 import response as lo7r
from kio.schema.metadata.v12 import request as md12
from kio.schema.metadata.v12 import response as md12r
from kio.schema.produce.v9 import request as pr9
from kio.schema.produce.v9 import response as pr9r

from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis
from serve.kafka_wire.config import advertised, listener_config, parse_endpoint
from serve.kafka_wire.network import Acceptor
from serve.kafka_wire.topic_ids import topic_id_str, topic_uuid

TID = topic_id_str(uuid.UUID("12345678-1234-5678-1234-567812345678"))


class FakeBackend:
    """One topic ``t`` with 2 partitions led here; a partition is a list of opaque 'batches'."""

    broker_id = 0
    cluster_id = "unit"
    auto_create_topics_enable = False  # auto-creation is tested in test_wire_admin.py

    def __init__(self):
        self.logs = {("t", 0): [], ("t", 1): []}
        self.appended = asyncio.Event()
        self.produced: list = []
        self.reads: list = []  # (partition, max_bytes, min_one_message) of every fetch read

    async def metadata(self, fresh=False):
        parts = {p: {"leader": 0, "leader_epoch": 4, "replicas": [0, 1], "isr": [0, 1]} for p in (0, 1)}
        return {
            "brokers": [{"id": 0, "alive": True, "epoch": 1}, {"id": 1, "alive": False, "epoch": 1}],
            "topics": {"t": {"name": "t", "topic_id": TID, "partitions": parts}},
        }

    async def endpoints(self, brokers):
        return {0: ("127.0.0.1", 19092, None), 1: ("127.0.0.1", 19093, None)}

    async def produce(self, topic, partition, req):
        if (topic, partition) not in self.logs:
            return {"error_code": 3, "error_message": "unknown"}
        log = self.logs[(topic, partition)]
        log.append(req.records)
        self.produced.append((topic, partition, req.acks))
        self.appended.set()
        return {"error_code": 0, "base_offset": len(log) - 1, "log_append_time": -1, "log_start_offset": 0}

    async def fetch(self, topic, partition, req):
        log = self.logs[(topic, partition)]
        if req.fetch_offset >= len(log) and req.max_wait_ms > 0:
            self.appended.clear()
            try:
                await asyncio.wait_for(self.appended.wait(), req.max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        out: list[bytes] = []  # whole batches within max_bytes; the first even over it with min_one_message
        for batch in log[req.fetch_offset :]:
            if sum(map(len, out)) + len(batch) > req.max_bytes and (out or not req.min_one_message):
                break
            out.append(batch)
        self.reads.append((partition, req.max_bytes, req.min_one_message))
        return {"error_code": 0, "high_watermark": len(log), "log_start_offset": 0, "records": b"".join(out)}

    async def list_offsets(self, topic, partition, req):
        n = len(self.logs[(topic, partition)])
        return {"error_code": 0, "offset": 0 if req.timestamp == -2 else n, "timestamp": -1, "leader_epoch": 4}

    async def offset_for_leader_epoch(self, topic, partition, req):
        return {"error_code": 0, "leader_epoch": req.leader_epoch, "end_offset": 7}

    async def init_producer_id(self):
        return {"error_code": 0, "producer_id": 42, "producer_epoch": 0}

    async def find_coordinator(self, key, key_type):
        if key == "leaderless":
            return {"error_code": 15, "error_message": "__consumer_offsets-1 has no leader"}
        return {"error_code": 0, "broker_id": 0 if key_type == 0 else 1, "partition": 0}


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, frame: bytes):
        self.sock.sendall(frame)

    def recv(self, cls):
        head = self._exact(4)
        (size,) = struct.unpack(">i", head)
        return codec.decode_response(self._exact(size), cls)

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


@contextlib.contextmanager
def listening(backend, **acceptor_kw):
    """A listener over ``backend`` on its own event-loop thread: yields ``(port, acceptor, run, loop)``,
    where ``run(coro)`` runs a coroutine on that loop; stops the listener and the loop afterwards."""
    import threading

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    async def make():
        acc = Acceptor(KafkaApis(backend), "127.0.0.1", 0, **{"max_request_bytes": 1 << 20, **acceptor_kw})
        _, port = await acc.start()
        return acc, port

    acc, port = run(make())
    try:
        yield port, acc, run, loop
    finally:

        async def stop():
            acc.stop()
            await asyncio.sleep(0.05)  # the cancelled Processors close their transports

        run(stop())
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


@pytest.fixture
def server():
    """(port, backend, run, acceptor): a listener over a FakeBackend (see ``listening``)."""
    backend = FakeBackend()
    with listening(backend) as (port, acc, run, _loop):
        yield port, backend, run, acc


def api_versions_req():
    return ApiVersionsRequest(client_software_name="unit", client_software_version="1")


def produce_req(acks, batches=(b"batch-0",), partition=0):
    pdata = tuple(pr9.PartitionProduceData(index=partition, records=b) for b in batches)
    return pr9.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(pr9.TopicProduceData(name="t", partition_data=pdata),),
    )


def fetch_req(offset, max_wait_ms=0, partition=0, max_bytes=1 << 20, partitions=None):
    parts = tuple(
        fetch16.FetchPartition(
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p in (partitions or (partition,))
    )
    return fetch16.FetchRequest(
        cluster_id=None,
        replica_state=fetch16.ReplicaState(replica_id=-1, replica_epoch=-1),
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(fetch16.FetchTopic(topic_id=topic_uuid(TID), partitions=parts),),
        forgotten_topics_data=(),
        rack_id="",
    )


def test_config_parsing():
    assert parse_endpoint("PLAINTEXT://10.0.0.1:9093") == ("10.0.0.1", 9093)
    assert parse_endpoint(":0") == ("0.0.0.0", 0)
    cfg = listener_config({}, 2)
    assert (cfg.host, cfg.port) == ("127.0.0.1", 9094)
    cfg = listener_config({"listeners": "127.0.0.1:0", "advertised.listeners": "PLAINTEXT://h:1"}, 0)
    assert (cfg.port, cfg.advertised_host, cfg.advertised_port) == (0, "h", 1)
    assert not listener_config({"listeners": "none"}, 0).enabled
    with pytest.raises(ValueError):
        parse_endpoint("nohostport")


def test_a_wildcard_listener_advertises_the_nodes_address_and_shared_ports_never_collide():
    every = {"listeners": "PLAINTEXT://:9092"}
    first, second = listener_config(every, 0, node_index=0), listener_config(every, 5, node_index=1)
    assert (first.host, first.port, second.port) == ("0.0.0.0", 9092, 9093)  # the second broker of the node
    assert advertised(first, 9092, "10.1.2.3") == ("10.1.2.3", 9092)  # the node's IP, never loopback
    assert advertised(first, 9092, None) == ("127.0.0.1", 9092)  # only when the node's address is unknown
    loop = listener_config({"listeners": "127.0.0.1:0"}, 1, node_index=1)
    assert loop.port == 0 and advertised(loop, 40001, "10.1.2.3") == ("127.0.0.1", 40001)  # ephemeral stays 0
    # a broker's own lines: its listener and advertised address as given, never shifted
    own = {**every, "broker.1.listeners": "0.0.0.0:7000", "broker.1.advertised.listeners": "PLAINTEXT://k1:9092"}
    cfg = listener_config(own, 1, node_index=3)
    assert (cfg.port, cfg.advertised_host, cfg.advertised_port) == (7000, "k1", 9092)
    assert advertised(cfg, 7000, "10.1.2.3") == ("k1", 9092)
    # a shared advertised port is shifted as the shared listener port is; a wildcard advertised host is the node's
    shared_adv = listener_config({**every, "advertised.listeners": "PLAINTEXT://:19092"}, 2, node_index=1)
    assert advertised(shared_adv, 9093, "10.1.2.4") == ("10.1.2.4", 19093)


def test_topic_id_round_trip():
    u = uuid.uuid4()
    assert topic_uuid(topic_id_str(u)) == u


def test_api_versions_advertises_exactly_what_is_served(server):
    port, _, _, _ = server
    c = Client(port)
    c.send(codec.encode_request(1, api_versions_req()))
    cid, resp = c.recv(ApiVersionsResponse)
    assert cid == 1 and resp.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == versions.advertised()


def test_unknown_api_versions_version_gets_v0_error_35_and_stays_open(server):
    port, _, _, _ = server
    c = Client(port)
    # an ApiVersions v9 header (flexible, header v2) with a body nobody can parse
    payload = struct.pack(">hhih", 18, 9, 5, 1) + b"x" + b"\x00" + b"\x07garbage"
    c.send(struct.pack(">i", len(payload)) + payload)
    cid, resp = c.recv(ApiVersionsResponseV0)
    assert cid == 5 and resp.error_code == 35
    assert {k.api_key for k in resp.api_keys} == set(versions.SUPPORTED)
    c.send(codec.encode_request(6, api_versions_req()))
    assert c.recv(ApiVersionsResponse)[0] == 6


def test_metadata_brokers_topic_ids_epochs(server):
    port, _, _, _ = server
    c = Client(port)
    c.send(
        codec.encode_request(
            2,
            md12.MetadataRequest(
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
        )
    )
    _, resp = c.recv(md12r.MetadataResponse)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, "127.0.0.1", 19092)]  # broker 1 is down
    (t,) = resp.topics
    assert t.name == "t" and t.topic_id == uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert [(p.partition_index, p.leader_id, p.leader_epoch, p.offline_replicas) for p in t.partitions] == [
        (0, 0, 4, (1,)),
        (1, 0, 4, (1,)),
    ]
    asked = (md12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="nope"),)
    c.send(
        codec.encode_request(
            3,
            md12.MetadataRequest(
                topics=asked, allow_auto_topic_creation=False, include_topic_authorized_operations=False
            ),
        )
    )
    _, resp = c.recv(md12r.MetadataResponse)
    assert resp.topics[0].error_code == 3


def test_acks0_has_no_answer_and_answers_stay_in_order(server):
    port, backend, _, _ = server
    c = Client(port)
    # pipelined: acks=0, acks=1, then a fetch; only two answers come, in request order
    c.send(
        codec.encode_request(10, produce_req(0, (b"a",)))
        + codec.encode_request(11, produce_req(1, (b"b",)))
        + codec.encode_request(12, fetch_req(0))
    )
    cid, pr = c.recv(pr9r.ProduceResponse)
    assert cid == 11 and pr.responses[0].partition_responses[0].base_offset == 1
    cid, fr = c.recv(fetch16r.FetchResponse)
    assert cid == 12 and fr.session_id == 0
    assert fr.responses[0].partitions[0].records == b"ab"
    assert backend.produced == [("t", 0, 0), ("t", 0, 1)]


def test_fetch_empty_records_are_bytes_and_long_poll_wakes(server):
    port, _, _, _ = server
    c = Client(port)
    c.send(codec.encode_request(1, fetch_req(0, max_wait_ms=50, partition=1)))
    _, fr = c.recv(fetch16r.FetchResponse)
    assert fr.responses[0].partitions[0].records == b""  # never null
    waiter = Client(port)
    waiter.send(codec.encode_request(2, fetch_req(0, max_wait_ms=8000, partition=1)))
    c.send(codec.encode_request(3, produce_req(1, (b"late",), partition=1)))
    c.recv(pr9r.ProduceResponse)
    _, fr = waiter.recv(fetch16r.FetchResponse)  # well before the 8 s wait ends
    assert fr.responses[0].partitions[0].records == b"late"


def test_fetch_max_bytes_caps_the_response_and_each_read_the_first_batch_goes_whole(server):
    port, backend, _, _ = server
    backend.logs[("t", 0)][:] = [b"a" * 300, b"b" * 300]
    backend.logs[("t", 1)][:] = [b"c" * 300]
    c = Client(port)
    c.send(codec.encode_request(1, fetch_req(0, max_bytes=400, partitions=(0, 1))))
    _, fr = c.recv(fetch16r.FetchResponse)
    got = {p.partition_index: (p.records, p.high_watermark) for p in fr.responses[0].partitions}
    assert got == {0: (b"a" * 300, 2), 1: (b"", 1)}  # 300 + 300 > 400; partition 1: offsets only
    assert backend.reads == [(0, 400, True), (1, 100, False)]  # each read within what the response had left
    backend.reads.clear()
    c.send(codec.encode_request(2, fetch_req(0, max_bytes=800, partitions=(1, 0))))
    _, fr = c.recv(fetch16r.FetchResponse)
    got = {p.partition_index: p.records for p in fr.responses[0].partitions}
    assert got == {1: b"c" * 300, 0: b"a" * 300}  # in request order: 300, then 300 of the 500 left
    assert backend.reads == [(1, 800, True), (0, 500, False)]
    backend.reads.clear()
    c.send(codec.encode_request(3, fetch_req(0, max_bytes=100, partitions=(0, 1))))
    _, fr = c.recv(fetch16r.FetchResponse)
    got = {p.partition_index: p.records for p in fr.responses[0].partitions}
    assert got == {0: b"a" * 300, 1: b""}  # KIP-74: the first batch goes even over the limit, nothing after it
    assert backend.reads == [(0, 100, True), (1, 0, False)]
    backend.reads.clear()
    c.send(codec.encode_request(4, fetch_req(0, max_bytes=2 << 20, partitions=(0, 1))))
    _, fr = c.recv(fetch16r.FetchResponse)
    assert [len(p.records) for p in fr.responses[0].partitions] == [600, 300]
    assert sorted(backend.reads) == [(0, 1 << 20, True), (1, 1 << 20, True)]  # one parallel wave: all fit


def test_fetch_max_bytes_bounds_what_the_replicas_read_for_many_partitions(server):
    """A consumer of many partitions with a small fetch.max.bytes (kafkajs: 10 MiB over 1 MiB partitions): the
    partitions past the budget are asked for their offsets only, not read for max.partition.fetch.bytes each and
    dropped."""
    port, backend, _, _ = server
    backend.logs[("t", 0)][:] = [b"x" * 1000] * 50
    backend.logs[("t", 1)][:] = [b"y" * 1000] * 50
    c = Client(port)
    c.send(codec.encode_request(1, fetch_req(0, max_bytes=4500, partitions=(0, 1))))
    _, fr = c.recv(fetch16r.FetchResponse)
    assert [len(p.records) for p in fr.responses[0].partitions] == [4000, 0]
    assert [p.high_watermark for p in fr.responses[0].partitions] == [50, 50]
    assert backend.reads == [(0, 4500, True), (1, 500, False)]


def test_list_offsets_earliest_latest(server):
    port, _, _, _ = server
    c = Client(port)
    c.send(codec.encode_request(1, produce_req(1, (b"x", b"y"))))
    c.recv(pr9r.ProduceResponse)
    parts = tuple(lo7.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts) for ts in (-2, -1))
    req = lo7.ListOffsetsRequest(
        replica_id=-1, isolation_level=0, topics=(lo7.ListOffsetsTopic(name="t", partitions=parts),)
    )
    c.send(codec.encode_request(2, req))
    _, resp = c.recv(lo7r.ListOffsetsResponse)
    assert [p.offset for p in resp.topics[0].partitions] == [0, 2]


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", 2**31 - 1),  # size beyond socket.request.max.bytes
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 8) + struct.pack(">hhi", 999, 0, 1),  # unknown api key
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1),  # unserved Metadata version
        struct.pack(">i", 6) + b"\x00\x03\x00\x0c\x00\x00",  # truncated header
    ],
)
def test_bad_frames_close_only_their_connection(server, frame):
    port, _, _, acc = server
    good = Client(port)
    bad = Client(port)
    bad.send(frame)
    assert bad.closed()
    good.send(codec.encode_request(1, api_versions_req()))
    assert good.recv(ApiVersionsResponse)[0] == 1


def test_truncated_body_closes_the_connection_bytes_after_a_request_are_ignored(server):
    port, _, _, _ = server
    full = codec.encode_request(1, produce_req(1))
    short = struct.pack(">i", len(full) - 6) + full[4:-2]  # the size matches, the body is cut
    c = Client(port)
    c.send(short)
    assert c.closed()
    # Kafka parses the body and ignores what follows (librdkafka's all-topics Metadata v12 has 3 such bytes)
    extra = struct.pack(">i", len(full) - 4 + 3) + full[4:] + b"\x00\x00\x00"
    c = Client(port)
    c.send(extra)
    cid, resp = c.recv(pr9r.ProduceResponse)
    assert cid == 1 and resp.responses[0].partition_responses[0].error_code == 0
    c.send(codec.encode_request(2, api_versions_req()))
    assert c.recv(ApiVersionsResponse)[0] == 2


def test_init_producer_id_for_idempotent_producers(server):
    from kio.schema.init_producer_id.v4 import request as ip4
    from kio.schema.init_producer_id.v4 import response as ip4r

    port, _, _, _ = server
    c = Client(port)
    req = ip4.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1
    )
    c.send(codec.encode_request(1, req))
    got_cid, resp = c.recv(ip4r.InitProducerIdResponse)
    assert got_cid == 1
    assert (resp.error_code, resp.producer_id) == (0, 42)  # transactional ids: tests/unit/test_wire_txn.py


def test_find_coordinator_one_key_and_batched(server):
    from kio.schema.find_coordinator.v2 import request as fc2
    from kio.schema.find_coordinator.v2 import response as fc2r
    from kio.schema.find_coordinator.v6 import request as fc6
    from kio.schema.find_coordinator.v6 import response as fc6r

    port, _, _, _ = server
    c = Client(port)
    c.send(codec.encode_request(1, fc2.FindCoordinatorRequest(key="g", key_type=0)))
    _, r = c.recv(fc2r.FindCoordinatorResponse)
    assert (r.error_code, r.node_id, r.host, r.port) == (0, 0, "127.0.0.1", 19092)
    c.send(codec.encode_request(2, fc6.FindCoordinatorRequest(key_type=1, coordinator_keys=("tx", "leaderless"))))
    _, r = c.recv(fc6r.FindCoordinatorResponse)
    got = [(x.key, x.error_code, x.node_id, x.port) for x in r.coordinators]
    assert got == [("tx", 0, 1, 19093), ("leaderless", 15, -1, -1)]
    assert r.coordinators[1].error_message == "__consumer_offsets-1 has no leader"
