"""Transactions over the Kafka wire (serve/kafka_wire/handlers/txn.py) with real clients on the shared 3-broker
cluster (tests/e2e/conftest.py): confluent-kafka (librdkafka) and kafka-python transactional producers commit
and abort multi-partition, multi-topic transactions (with offsets of a group in one of them:
AddOffsetsToTxn + TxnOffsetCommit, checked through rafka's Admin); read_committed consumers see exactly the
committed records, read_uncommitted ones the aborted records too; a second producer with the same
transactional.id fences the first (zombie fencing), and offsets sent with a group member's metadata from
before a rebalance are refused (KIP-447, ILLEGAL_GENERATION); a wire producer's and rafka's Python producer's
transactions on one topic are each read correctly by the other client. Raw kio requests check what the
clients do not show: NOT_COORDINATOR from a broker that is not the id's coordinator, a transactional Produce
to a partition never added to the transaction (INVALID_TXN_STATE, KIP-890 verification by the leader), and
DescribeTransactions / ListTransactions. Consumers read by assignment: groups over the wire are not used."""

from __future__ import annotations

import datetime
import socket
import struct
import time
import uuid

import pytest
from support import confluent_read, rafka_read

import rafka

INVALID_TXN_STATE, NOT_COORDINATOR = 48, 16
RETRY_CODES = {14, 15, 51}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ck_producer(bootstrap: str, tid: str, **conf):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def test_confluent_commit_abort_offsets_and_isolation(bootstrap, e2e_topic, e2e_admin):
    from confluent_kafka import Consumer, TopicPartition

    a, b = e2e_topic(2, 3), e2e_topic(1, 3)
    group = uid("wire-txn-g")
    p = ck_producer(bootstrap, uid("ck-tx"))
    committed, aborted = [], []

    p.begin_transaction()
    for i in range(10):
        v = f"c1-{i}".encode()
        p.produce(a, value=v, partition=i % 2)
        committed.append(v)
    for i in range(5):
        v = f"c1b-{i}".encode()
        p.produce(b, value=v, partition=0)
        committed.append(v)
    meta_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    p.send_offsets_to_transaction(
        [TopicPartition(a, 0, 7), TopicPartition(b, 0, 3)], meta_consumer.consumer_group_metadata(), 30
    )
    meta_consumer.close()
    p.commit_transaction(60)

    p.begin_transaction()
    for i in range(6):
        v = f"x-{i}".encode()
        p.produce(a if i % 2 else b, value=v, partition=0)
        aborted.append(v)
    assert p.flush(30) == 0  # the aborted records reach the log before the abort
    p.abort_transaction(60)

    p.begin_transaction()
    for i in range(4):
        v = f"c2-{i}".encode()
        p.produce(a, value=v, partition=i % 2)
        committed.append(v)
    p.commit_transaction(60)

    tps = [(a, 0), (a, 1), (b, 0)]
    got = confluent_read(bootstrap, tps, "read_committed", len(committed))
    assert sorted(got) == sorted(committed)
    got = confluent_read(bootstrap, tps, "read_uncommitted", len(committed) + len(aborted))
    assert sorted(got) == sorted(committed + aborted)
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(a, 0): 7, (b, 0): 3}


def test_kafka_python_transactions_read_by_both_clients(bootstrap, e2e_cluster, e2e_topic, e2e_admin):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    t = e2e_topic(2, 3)
    group = uid("kp-txn-g")
    before = coordinator_stats(e2e_cluster)
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=uid("kp-tx"), linger_ms=5)
    p.init_transactions()
    committed, aborted = [], []
    p.begin_transaction()
    for i in range(8):
        v = f"kp-c-{i}".encode()
        p.send(t, value=v, partition=i % 2)
        committed.append(v)
    p.send_offsets_to_transaction({TopicPartition(t, 1): _kp_offset(5)}, group)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(4):
        v = f"kp-x-{i}".encode()
        p.send(t, value=v, partition=i % 2)
        aborted.append(v)
    p.flush(30)
    p.abort_transaction()
    p.close()
    # a Kafka client's AddPartitionsToTxn asks for no verification token (rafka's producer does): the coordinator
    # pushes its KIP-890 state to the two partitions' leaders for each transaction instead
    after = coordinator_stats(e2e_cluster)
    assert after["verification_tokens"] == before["verification_tokens"]
    assert after["verified_pushes_taken"] - before["verified_pushes_taken"] == 2 * 2

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    c.assign([TopicPartition(t, 0), TopicPartition(t, 1)])
    c.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(got) < len(committed):
        for msgs in c.poll(timeout_ms=500).values():
            got.extend(m.value for m in msgs)
    for msgs in c.poll(timeout_ms=1500).values():
        got.extend(m.value for m in msgs)
    c.close()
    assert sorted(got) == sorted(committed)
    assert sorted(rafka_read(e2e_cluster, [(t, 0), (t, 1)], len(committed))) == sorted(committed)
    assert sorted(confluent_read(bootstrap, [(t, 0), (t, 1)], "read_uncommitted", 12)) == sorted(committed + aborted)
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(t, 1): 5}


def coordinator_stats(cluster) -> dict:
    """The transaction coordinators' counters, summed over the brokers that have one."""
    import ray

    from protocol.names import RAY_NAMESPACE, txn_coordinator_name

    out = {"verification_tokens": 0, "verified_pushes_taken": 0}
    for b in cluster.broker_ids():
        try:
            h = ray.get_actor(txn_coordinator_name(cluster.name, b), namespace=RAY_NAMESPACE)
        except ValueError:  # (a broker's coordinator starts with its first __transaction_state partition)
            continue
        stats = ray.get(h.describe.remote(), timeout=30)["stats"]
        for k in out:
            out[k] += stats[k]
    return out


def _kp_offset(offset: int):
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:  # older kafka-python: (offset, metadata)
        return OffsetAndMetadata(offset, "")


def test_zombie_producer_is_fenced(bootstrap, e2e_topic):
    from confluent_kafka import KafkaError, KafkaException

    t = e2e_topic(1, 3)
    tid = uid("zombie")
    first = ck_producer(bootstrap, tid)
    first.begin_transaction()
    for i in range(3):
        first.produce(t, value=f"zombie-{i}".encode(), partition=0)
    assert first.flush(30) == 0
    second = ck_producer(bootstrap, tid)  # bumps the epoch: the first's open transaction is aborted
    second.begin_transaction()
    for i in range(3):
        second.produce(t, value=f"live-{i}".encode(), partition=0)
    second.commit_transaction(60)
    with pytest.raises(KafkaException) as exc:
        first.commit_transaction(30)
    err = exc.value.args[0]
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    assert err.fatal(), err
    assert sorted(confluent_read(bootstrap, [(t, 0)], "read_committed", 3)) == [f"live-{i}".encode() for i in range(3)]
    assert len(confluent_read(bootstrap, [(t, 0)], "read_uncommitted", 6)) == 6


def test_zombie_that_sends_again_is_told_it_is_fenced(bootstrap, e2e_topic):
    """The fenced first instance writes again to a partition of its (aborted) transaction: the leader's
    KIP-890 verification hears PRODUCER_FENCED from the coordinator and answers INVALID_PRODUCER_EPOCH, as
    Kafka's AddPartitionsToTxnManager does, which librdkafka turns into the fatal _FENCED (before: an
    abortable INVALID_TXN_STATE, so the application went on with a zombie)."""
    from confluent_kafka import KafkaError, KafkaException

    t = e2e_topic(1, 3)
    tid = uid("zombie-again")
    first = ck_producer(bootstrap, tid)
    first.begin_transaction()
    first.produce(t, value=b"zombie-0", partition=0)
    assert first.flush(30) == 0
    second = ck_producer(bootstrap, tid)  # fences the first, aborts its transaction
    first.produce(t, value=b"zombie-1", partition=0)
    try:  # confluent-kafka raises librdkafka's fatal error from the flush that meets it
        first.flush(30)
    except KafkaException as e:
        err = e.args[0]
        assert err.fatal() and err.code() == KafkaError._FENCED, err
        assert "old epoch" in err.str(), err  # the leader's INVALID_PRODUCER_EPOCH, not INVALID_TXN_STATE
    with pytest.raises(KafkaException) as exc:
        first.commit_transaction(30)
    err = exc.value.args[0]
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    assert "fenced" in err.str().lower(), err
    second.begin_transaction()
    second.produce(t, value=b"live", partition=0)
    second.commit_transaction(60)
    assert confluent_read(bootstrap, [(t, 0)], "read_committed", 1) == [b"live"]


def test_wire_and_python_producers_share_a_topic(bootstrap, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 3)
    committed, aborted = [], []
    wire = ck_producer(bootstrap, uid("ck-mixed"))
    py = rafka.Producer(e2e_cluster, transactional_id=uid("py-mixed"), linger_ms=1)
    py.init_transactions()
    for round_ in range(2):
        commit = round_ == 0
        wire.begin_transaction()
        py.begin_transaction()
        for i in range(6):
            wv, pv = f"wire-{round_}-{i}".encode(), f"py-{round_}-{i}".encode()
            wire.produce(t, value=wv, partition=i % 2)
            py.send(t, value=pv, partition=i % 2)
            (committed if commit else aborted).extend([wv, pv])
        assert wire.flush(30) == 0
        py.flush(30)
        if commit:
            wire.commit_transaction(60)
            py.commit_transaction()
        else:
            py.abort_transaction()
            wire.abort_transaction(60)
    py.close()
    tps = [(t, 0), (t, 1)]
    assert sorted(rafka_read(e2e_cluster, tps, len(committed))) == sorted(committed)
    assert sorted(confluent_read(bootstrap, tps, "read_committed", len(committed))) == sorted(committed)
    assert sorted(confluent_read(bootstrap, tps, "read_uncommitted", 24)) == sorted(committed + aborted)


# ---------------------------------------------------------------------------- raw kio requests
class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.cid = 0

    def ask(self, request, response_cls):
        from serve.kafka_wire import codec

        self.cid += 1
        self.sock.sendall(codec.encode_request(self.cid, request))
        head = self._exact(4)
        got_cid, resp = codec.decode_response(self._exact(struct.unpack(">i", head)[0]), response_cls)
        assert got_cid == self.cid
        return resp

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def close(self):
        self.sock.close()


def retry(fn, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while True:
        r = fn()
        code = getattr(r, "error_code", 0)
        if code not in RETRY_CODES or time.monotonic() > deadline:
            assert code not in RETRY_CODES, f"{what}: still {code}"
            return r
        time.sleep(0.2)


def test_raw_coordinator_routing_verification_and_describe(bootstrap, e2e_cluster, e2e_topic):
    import ray
    from kio.schema.add_partitions_to_txn.v3 import request as ap3
    from kio.schema.add_partitions_to_txn.v3 import response as ap3r
    from kio.schema.describe_transactions.v0 import request as dt0
    from kio.schema.describe_transactions.v0 import response as dt0r
    from kio.schema.end_txn.v3 import request as et3
    from kio.schema.end_txn.v3 import response as et3r
    from kio.schema.find_coordinator.v2 import request as fc2
    from kio.schema.find_coordinator.v2 import response as fc2r
    from kio.schema.init_producer_id.v3 import request as ip3
    from kio.schema.init_producer_id.v3 import response as ip3r
    from kio.schema.init_producer_id.v4 import request as ip4
    from kio.schema.init_producer_id.v4 import response as ip4r
    from kio.schema.list_transactions.v0 import request as lt0
    from kio.schema.list_transactions.v0 import response as lt0r
    from kio.schema.produce.v9 import request as pr9
    from kio.schema.produce.v9 import response as pr9r

    from storage.records import RecordBatchBuilder

    t = e2e_topic(1, 3)
    tid = uid("raw-tx")
    ports = [int(s.rsplit(":", 1)[1]) for s in bootstrap.split(",")]
    boot = Conn(ports[0])
    fc = retry(lambda: boot.ask(fc2.FindCoordinatorRequest(key=tid, key_type=1), fc2r.FindCoordinatorResponse), "find")
    assert fc.error_code == 0 and fc.port in ports
    boot.close()

    init = ip4.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1
    )
    other = Conn(next(p for p in ports if p != fc.port))
    r = other.ask(init, ip4r.InitProducerIdResponse)
    assert (r.error_code, r.producer_id) == (NOT_COORDINATOR, -1)
    other.close()

    coord = Conn(fc.port)
    for bad_ms in (0, 2**31 - 1):  # transaction.timeout.ms must be in (0, transaction.max.timeout.ms]
        bad = ip4.InitProducerIdRequest(
            transactional_id=tid,
            transaction_timeout=datetime.timedelta(milliseconds=bad_ms),
            producer_id=-1,
            producer_epoch=-1,
        )
        r = retry(lambda: coord.ask(bad, ip4r.InitProducerIdResponse), "init with a bad timeout")
        assert (r.error_code, r.producer_id) == (50, -1)  # INVALID_TRANSACTION_TIMEOUT
    r = retry(lambda: coord.ask(init, ip4r.InitProducerIdResponse), "init")
    assert r.error_code == 0 and r.producer_id >= 0
    pid, epoch = r.producer_id, r.producer_epoch

    md = ray.get(e2e_cluster.server.brokers[0].metadata.remote())
    leader = md["topics"][t]["partitions"][0]["leader"]
    leader_port = ray.get(e2e_cluster.server.brokers[leader].incarnation.remote())["listener"][1]
    data = Conn(leader_port)

    def produce(seq: int):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        assert b.append(int(time.time() * 1000), None, b"raw")
        req = pr9.ProduceRequest(
            transactional_id=tid,
            acks=-1,
            timeout=datetime.timedelta(seconds=10),
            topic_data=(
                pr9.TopicProduceData(name=t, partition_data=(pr9.PartitionProduceData(index=0, records=b.build()),)),
            ),
        )
        (part,) = data.ask(req, pr9r.ProduceResponse).responses[0].partition_responses
        return part

    part = produce(0)  # never added to the transaction: the leader's KIP-890 verification refuses it
    assert part.error_code == INVALID_TXN_STATE, part

    add = ap3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=(ap3.AddPartitionsToTxnTopic(name=t, partitions=(0,)),),
    )
    r = coord.ask(add, ap3r.AddPartitionsToTxnResponse)
    assert [
        (x.name, y.partition_index, y.partition_error_code)
        for x in r.results_by_topic_v3_and_below
        for y in x.results_by_partition
    ] == [(t, 0, 0)]
    part = produce(0)
    assert (part.error_code, part.base_offset) == (0, 0)

    r = coord.ask(dt0.DescribeTransactionsRequest(transactional_ids=(tid,)), dt0r.DescribeTransactionsResponse)
    (s,) = r.transaction_states
    assert (s.error_code, s.transaction_state, s.producer_id, s.producer_epoch) == (0, "Ongoing", pid, epoch)
    assert [(x.topic, x.partitions) for x in s.topics] == [(t, (0,))]
    r = coord.ask(
        lt0.ListTransactionsRequest(state_filters=("Ongoing",), producer_id_filters=(pid,)),
        lt0r.ListTransactionsResponse,
    )
    assert (r.error_code, [(x.transactional_id, x.transaction_state) for x in r.transaction_states]) == (
        0,
        [(tid, "Ongoing")],
    )

    end = et3.EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False)
    assert coord.ask(end, et3r.EndTxnResponse).error_code == 0
    stale = et3.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch - 1 if epoch else 5, committed=True
    )
    assert retry(lambda: coord.ask(stale, et3r.EndTxnResponse), "stale end").error_code == 90  # PRODUCER_FENCED (v3)

    # KIP-360: the current instance recovers with its id one epoch up; the old epoch is then fenced (v3: 47)
    def init_with(mod, resp_mod, e):
        req = mod.InitProducerIdRequest(
            transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60), producer_id=pid, producer_epoch=e
        )
        return retry(lambda: coord.ask(req, resp_mod.InitProducerIdResponse), "init with id")

    r = init_with(ip4, ip4r, epoch)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, epoch + 1)
    assert init_with(ip4, ip4r, epoch).error_code == 90  # PRODUCER_FENCED
    assert init_with(ip3, ip3r, epoch).error_code == 47  # INVALID_PRODUCER_EPOCH before KIP-588
    coord.close()
    data.close()
    assert confluent_read(bootstrap, [(t, 0)], "read_committed", 0, settle_s=1.0) == []
    assert confluent_read(bootstrap, [(t, 0)], "read_uncommitted", 1) == [b"raw"]


def test_offsets_of_a_stale_generation_are_refused_kip_447(bootstrap, e2e_topic, e2e_admin):
    """KIP-447's zombie fencing by the group: a transaction's offsets sent with the group metadata of a member
    from before a rebalance (librdkafka's TxnOffsetCommit carries its member id and generation) are refused
    with ILLEGAL_GENERATION, an abortable error; nothing is committed for the group. The same offsets with
    the member's metadata after the rebalance commit."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    t = e2e_topic(2, 1)
    group = uid("kip447-g")

    def member() -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        c.subscribe([t])
        return c

    def settle(members: list, until) -> None:
        deadline = time.monotonic() + 60
        while not until() and time.monotonic() < deadline:
            for c in members:
                c.poll(0.1)
        assert until(), [c.assignment() for c in members]

    a = member()
    settle([a], lambda: len(a.assignment()) == 2)
    stale = a.consumer_group_metadata()
    b = member()  # joins: a rebalance, a new generation
    settle([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
    p = ck_producer(bootstrap, uid("kip447-tx"))
    try:
        p.begin_transaction()
        p.produce(t, value=b"kip447-x", partition=0)
        with pytest.raises(KafkaException) as refused:
            p.send_offsets_to_transaction([TopicPartition(t, 0, 1)], stale, 30)
        err = refused.value.args[0]
        assert err.code() == KafkaError.ILLEGAL_GENERATION and err.txn_requires_abort(), err
        p.abort_transaction(30)
        assert not e2e_admin.list_consumer_group_offsets(group)

        owner = a if a.assignment()[0].partition == 0 else b
        p.begin_transaction()
        p.produce(t, value=b"kip447-c", partition=0)
        p.send_offsets_to_transaction([TopicPartition(t, 0, 1)], owner.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    finally:
        a.close()
        b.close()
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(t, 0): 1}
