"""Real Kafka clients against the brokers' Kafka wire listeners (serve/kafka_wire) on one 3-broker cluster
(tests/e2e/conftest.py's shared cluster, listeners on ephemeral ports): kafka-python and confluent-kafka (librdkafka) produce keyed records with
acks=all (confluent idempotent) to a replicated topic and read them back by partition assignment (no
groups yet); ListOffsets (earliest, latest, by timestamp); kcat lists metadata and consumes. Each client's
records are checked exactly: every record once, in order per partition, one key -> one partition."""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections import defaultdict

import pytest

N = 300
PARTITIONS = 3


@pytest.fixture
def topic(e2e_admin):
    """A replicated topic (RF 3, min.insync.replicas 2) for the clients' acks=all produce."""
    admin = e2e_admin
    name = "wire-" + uuid.uuid4().hex[:6]
    admin.create_topic(name, PARTITIONS, 3, {"min.insync.replicas": "2"})
    yield name
    admin.delete_topics([name])


@pytest.fixture
def plain_topic(e2e_topic):
    """The same partitions without replicas (RF 1: 3 replica processes, not 9), where replication is not
    what the test is about (kcat's metadata and consume, bad frames, acks=0)."""
    return e2e_topic(PARTITIONS, 1)


def records(tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % 17}".encode(), f"{tag}-{i}".encode()) for i in range(N)]


def check(got: dict[int, list[tuple[bytes, bytes, int]]], sent: list[tuple[bytes, bytes]]) -> None:
    """Every sent record exactly once; offsets dense from 0 per partition; one key, one partition; the
    order of one key's values kept."""
    flat = [(k, v) for recs in got.values() for k, v, _ in recs]
    assert sorted(flat) == sorted(sent)
    for recs in got.values():
        assert [o for _, _, o in recs] == list(range(len(recs)))
    where = defaultdict(set)
    for p, recs in got.items():
        for k, _, _ in recs:
            where[k].add(p)
    assert all(len(ps) == 1 for ps in where.values())
    for key in where:
        (p,) = where[key]
        assert [v for k, v, _ in got[p] if k == key] == [v for k, v in sent if k == key]


def test_bootstrap_servers_lists_every_broker(bootstrap):
    servers = bootstrap.split(",")
    assert len(servers) == 3 and len(set(servers)) == 3
    assert all(s.startswith("127.0.0.1:") and int(s.rsplit(":", 1)[1]) > 0 for s in servers)


def test_kafka_python_produce_acks_all_and_consume_by_assignment(bootstrap, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    sent = records("kp")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    futures = [producer.send(topic, key=k, value=v) for k, v in sent]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert {m.topic for m in metas} == {topic}

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    assert consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
    ends = consumer.end_offsets(tps)
    assert sum(ends.values()) == N
    got: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < N and time.monotonic() < deadline:
        for tp, msgs in consumer.poll(timeout_ms=1000).items():
            got[tp.partition] += [(m.key, m.value, m.offset) for m in msgs]
    # ListOffsets by timestamp: the first record at or after a time; none after the last one
    first_ts = min(m.timestamp for m in metas)
    by_time = consumer.offsets_for_times({tp: first_ts for tp in tps})
    assert all(v is None or v.offset == 0 for v in by_time.values())
    later = consumer.offsets_for_times({tp: int(time.time() * 1000) + 3_600_000 for tp in tps})
    assert all(v is None for v in later.values())
    consumer.close()
    check(got, sent)
    assert {p: len(v) for p, v in got.items()} == {tp.partition: n for tp, n in ends.items() if n}


def test_confluent_idempotent_produce_and_consume_by_assignment(bootstrap, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    sent = records("ck")
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    for k, v in sent:
        producer.produce(topic, key=k, value=v, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0
    assert errors == []

    consumer = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False, "group.id": "unused"})
    lows_highs = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(PARTITIONS)]
    assert all(lo == 0 for lo, _ in lows_highs) and sum(hi for _, hi in lows_highs) == N
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: dict[int, list] = defaultdict(list)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in got.values()) < N and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got[msg.partition()].append((msg.key(), msg.value(), msg.offset()))
    consumer.close()
    check(got, sent)


def test_kcat_metadata_and_consume(bootstrap, plain_topic):
    topic = plain_topic
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (.ci/run installs the Debian package)"
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(10):
        producer.send(topic, key=b"k", value=f"kc-{i}".encode())
    producer.flush(30)
    producer.close()
    meta = subprocess.run([kcat, "-b", bootstrap, "-L", "-t", topic], capture_output=True, text=True, timeout=60)
    assert meta.returncode == 0, meta.stderr
    assert "3 brokers" in meta.stdout and f'topic "{topic}" with {PARTITIONS} partitions' in meta.stdout
    out = subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k=%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [f"k=kc-{i}" for i in range(10)]


def _recv(sock, cls):
    from serve.kafka_wire import codec

    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "connection closed"
        head += chunk
    size = struct.unpack(">i", head)[0]
    buf = b""
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return codec.decode_response(buf, cls)[1]


def test_bad_input_closes_one_connection_and_the_broker_goes_on(e2e_cluster, bootstrap, plain_topic):
    """Raw sockets at a real broker: an oversize size prefix, an unknown API key, a truncated body and
    garbage each close their own connection; an open healthy connection and the broker process carry on,
    acks=0 produce gets no answer, and OffsetForLeaderEpoch v2 answers the leader epoch's end offset."""
    topic = plain_topic
    import ray
    from kafka import KafkaProducer
    from kio.schema.api_versions.v3 import ApiVersionsRequest, ApiVersionsResponse
    from kio.schema.offset_for_leader_epoch.v2 import request as ofle2
    from kio.schema.offset_for_leader_epoch.v2 import response as ofle2r

    from serve.kafka_wire import codec

    host, port = bootstrap.split(",")[0].split(":")
    pids = [i["pid"] for i in ray.get([e2e_cluster.server.brokers[b].incarnation.remote() for b in range(3)])]
    healthy = socket.create_connection((host, int(port)), timeout=30)
    api_versions = codec.encode_request(1, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    bad_frames = [
        struct.pack(">i", 2**31 - 1) + b"x" * 100,
        struct.pack(">i", 8) + struct.pack(">hhi", 9999, 0, 1),
        api_versions[:4] + api_versions[4:-3],  # the size says more than what comes: then EOF
        struct.pack(">i", 12) + b"\xff" * 12,
    ]
    for frame in bad_frames:
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)
            try:
                assert s.recv(1) == b""  # closed by the broker, nothing answered
            except ConnectionResetError:  # closed with our unread bytes still queued: a reset
                pass
    healthy.sendall(api_versions)
    assert _recv(healthy, ApiVersionsResponse).error_code == 0

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=0, enable_idempotence=False)
    for i in range(20):
        producer.send(topic, key=b"z", value=str(i).encode(), partition=0)
    producer.flush(30)
    producer.close()
    md = ray.get(e2e_cluster.server.brokers[0].metadata.remote())
    part0 = md["topics"][topic]["partitions"][0]
    inc = ray.get(e2e_cluster.server.brokers[part0["leader"]].incarnation.remote())
    leader_port = inc["listener"][1]
    req = ofle2.OffsetForLeaderEpochRequest(
        topics=(
            ofle2.OffsetForLeaderTopic(
                topic=topic,
                partitions=(
                    ofle2.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=part0["leader_epoch"], leader_epoch=part0["leader_epoch"]
                    ),
                ),
            ),
        )
    )
    deadline = time.monotonic() + 30
    with socket.create_connection(("127.0.0.1", leader_port), timeout=30) as s:
        while True:
            s.sendall(codec.encode_request(7, req))
            (p,) = _recv(s, ofle2r.OffsetForLeaderEpochResponse).topics[0].partitions
            if p.end_offset >= 20 or time.monotonic() > deadline:
                break
            time.sleep(0.2)  # acks=0: the last records may still be on their way
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, part0["leader_epoch"], 20)
    assert [i["pid"] for i in ray.get([e2e_cluster.server.brokers[b].incarnation.remote() for b in range(3)])] == pids
    healthy.close()


def test_confluent_pipelined_producers_keep_their_order(bootstrap, topic, plain_topic):
    """librdkafka keeps up to 5 (idempotent) or 1,000,000 (not) Produce requests in flight per connection,
    and the listener pipelines them; Ray may run the replica calls out of order (actors/replication/call_order.py).
    Paced producers (many small requests) must get no error and every partition must hold each producer's
    records in the order sent. Before the listener numbered its calls, the idempotent producer died within
    seconds on OUT_OF_ORDER_SEQUENCE_NUMBER (fatal in librdkafka)."""
    import threading

    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    per_partition, rate = 600, 600  # records per partition; records/s per producer

    def produce(name: str, conf: dict, out: dict) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, **conf})
        errors: list = []
        t0 = time.perf_counter()
        for i in range(per_partition * PARTITIONS):
            p.produce(
                name,
                value=f"{i // PARTITIONS}".encode(),
                partition=i % PARTITIONS,
                on_delivery=lambda err, _m: errors.append(err) if err else None,
            )
            p.poll(0)
            delay = t0 + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        out["left"] = p.flush(60)
        out["errors"] = errors

    runs = {
        topic: {"acks": "all", "enable.idempotence": True},
        plain_topic: {"acks": 1, "enable.idempotence": False},
    }
    outs: dict = {name: {} for name in runs}
    threads = [threading.Thread(target=produce, args=(n, c, outs[n])) for n, c in runs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for name in runs:
        assert outs[name] == {"left": 0, "errors": []}, (name, outs[name])

    c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False, "group.id": "unused"})
    for name in runs:
        got: dict[int, list[int]] = defaultdict(list)
        c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < per_partition * PARTITIONS and time.monotonic() < deadline:
            for msg in c.consume(num_messages=1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(int(msg.value()))
        for p in range(PARTITIONS):
            assert got[p] == list(range(per_partition)), (name, p, [x for x in got[p][:50]])
    c.close()
