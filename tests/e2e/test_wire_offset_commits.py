"""The group coordinator's offset commits over the Kafka wire with real clients, on the shared 3-broker
cluster (tests/e2e/conftest.py):

- aiokafka's consume-transform-produce loop: its TxnOffsetCommit v0 carries no member id or generation,
  and Kafka accepts it while the source group has live members (ClassicGroup.validateOffsetCommit checks
  membership only for non-transactional commits);
- kafka-python's loop: TxnOffsetCommit v3, with generation -1 and no member id (a bare group id) or with the
  member's (its group_metadata());
- TxnOffsetCommit keeps the committed leader epoch (librdkafka's and kafka-python's committed() read it back);
- OffsetCommit for a topic that does not exist, or a partition past the topic's, answers
  UNKNOWN_TOPIC_OR_PARTITION and stores nothing (KafkaApis.handleOffsetCommitRequest), with
  confluent-kafka, kafka-python and kafkajs (tests/e2e/kafkajs/offsets.js);
- kafkajs's consume-transform-produce (tests/e2e/kafkajs/eos.js): sendOffsets while its consumer is a member."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid

import pytest

from .test_wire_aiokafka_txn import aio_read, run_collected
from .test_wire_versions import Lines


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_aiokafka_consume_transform_produce_with_a_live_group(bootstrap, e2e_topic, e2e_admin):
    """aiokafka's EOS loop: a group member consumes the source, a transactional producer writes one output per
    input and commits the member's offsets in the same transaction (send_offsets_to_transaction: TxnOffsetCommit
    v0, no member fields). Every transaction commits; read_committed sees each output exactly once; the group
    holds the offsets of what was processed, and the member stayed in it throughout."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    src, out = e2e_topic(2, 1), e2e_topic(2, 1)
    group, n = uid("aio-eos-g"), 60
    inputs = [b"in-%d" % i for i in range(n)]

    async def run() -> tuple[int, list[dict]]:
        feeder = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await feeder.start()
        try:
            for i, v in enumerate(inputs):
                await feeder.send(src, v, partition=i % 2)
            await feeder.flush()
        finally:
            await feeder.stop()
        consumer = AIOKafkaConsumer(
            src,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=uid("aio-eos-tx"), linger_ms=5)
        await consumer.start()
        await producer.start()
        processed, transactions = 0, 0
        try:
            async with asyncio.timeout(90):
                while processed < n:
                    batches = await consumer.getmany(timeout_ms=500, max_records=15)
                    if not batches:
                        continue
                    async with producer.transaction():
                        offsets = {}
                        for tp, recs in batches.items():
                            for r in recs:
                                await producer.send(out, b"out-" + r.value, partition=tp.partition)
                            offsets[TopicPartition(tp.topic, tp.partition)] = recs[-1].offset + 1
                            processed += len(recs)
                        await producer.send_offsets_to_transaction(offsets, group)
                    transactions += 1
            # the member is still in the group that received the transactional commits
            described = await asyncio.to_thread(e2e_admin.describe_groups, [group])
        finally:
            await producer.stop()
            await consumer.stop()
        return transactions, described

    transactions, described = run_collected(run())
    assert transactions >= 2, transactions  # several transactions, each with the group's offsets
    (g,) = described
    assert g["state"] == "Stable" and len(g["members"]) == 1, g
    expected = sorted(b"out-" + v for v in inputs)
    got = run_collected(aio_read(bootstrap, out, "read_committed", n))
    assert sorted(got) == expected, "not exactly one output per input"
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(src, 0): n // 2, (src, 1): n // 2}


def _member(bootstrap: str, group: str, topic: str, want: int):
    """A confluent-kafka group member of ``topic`` that has polled ``want`` records: (consumer, messages)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == want, f"the member polled {len(got)} of {want}"
    return c, got


def test_confluent_txn_offset_commit_keeps_the_leader_epoch(bootstrap, e2e_topic):
    """librdkafka's TxnOffsetCommit v3 carries the epoch of the last record consumed; committed() (OffsetFetch)
    returns it with the offset, as for a plain OffsetCommit."""
    from confluent_kafka import Producer, TopicPartition

    t = e2e_topic(1, 3)
    group = uid("ck-epoch-g")
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        seed.produce(t, value=b"e-%d" % i, partition=0)
    assert seed.flush(30) == 0
    c, msgs = _member(bootstrap, group, t, 10)
    try:
        epoch = msgs[-1].leader_epoch()
        assert epoch is not None and epoch >= 0, epoch
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": uid("ck-epoch-tx"), "linger.ms": 5})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce(t, value=b"e-out", partition=0)
        p.send_offsets_to_transaction(
            [TopicPartition(t, 0, msgs[-1].offset() + 1, leader_epoch=epoch)], c.consumer_group_metadata(), 30
        )
        p.commit_transaction(60)
        (tp,) = c.committed([TopicPartition(t, 0)], timeout=30)
    finally:
        c.close()
    assert tp.error is None, tp.error
    assert (tp.offset, tp.leader_epoch) == (10, epoch)


def test_confluent_offset_commit_to_an_unknown_topic_or_partition(bootstrap, e2e_topic, e2e_admin):
    """A commit naming a topic that does not exist and a partition index past a real topic's partitions:
    each answers UNKNOWN_TOPIC_OR_PARTITION; the real partition in the same commit is stored, nothing else."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    t = e2e_topic(2, 1)
    ghost, group = uid("no-such-topic"), uid("ck-unknown-g")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        with pytest.raises(KafkaException) as failed:
            c.commit(offsets=[TopicPartition(ghost, 0, 5)], asynchronous=False)
        assert failed.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, failed.value
        assert e2e_admin.list_consumer_group_offsets(group) == {}

        try:
            parts = c.commit(
                offsets=[TopicPartition(t, 0, 4), TopicPartition(t, 7, 4), TopicPartition(ghost, 1, 4)],
                asynchronous=False,
            )
        except KafkaException as e:  # librdkafka raises the first partition error, the others in args
            parts = None
            assert e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, e
        if parts is not None:
            errors = {(x.topic, x.partition): x.error.code() if x.error else 0 for x in parts}
            assert errors == {
                (t, 0): 0,
                (t, 7): KafkaError.UNKNOWN_TOPIC_OR_PART,
                (ghost, 1): KafkaError.UNKNOWN_TOPIC_OR_PART,
            }
    finally:
        c.close()
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(t, 0): 4}
    assert ghost not in e2e_admin.list_topics()


def test_kafka_python_commit_to_an_unknown_topic(bootstrap, e2e_topic, e2e_admin, caplog):
    """kafka-python retries UNKNOWN_TOPIC_OR_PARTITION (retriable) until its timeout, logging the error of
    the partition; nothing is stored. The same consumer's commit to a real partition goes through."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError
    from kafka.structs import OffsetAndMetadata

    t = e2e_topic(1, 1)
    ghost, group = uid("no-such-topic"), uid("kp-unknown-g")
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        with caplog.at_level(logging.ERROR, logger="kafka.coordinator.consumer"):
            with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
                c.commit({TopicPartition(ghost, 0): OffsetAndMetadata(5, "", -1)}, timeout_ms=3000)
        refused = [r.getMessage() for r in caplog.records if "UnknownTopicOrPartitionError" in r.getMessage()]
        assert refused and ghost in refused[0], [r.getMessage() for r in caplog.records]
        assert e2e_admin.list_consumer_group_offsets(group) == {}
        c.commit({TopicPartition(t, 0): OffsetAndMetadata(2, "", -1)}, timeout_ms=30000)
    finally:
        c.close()
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(t, 0): 2}


KP_TXN_OFFSET_COMMIT = re.compile(
    r"Request \d+: TxnOffsetCommitRequest\(version=(\d+), .*?generation_id=(-?\d+), member_id='([^']*)'"
)
KP_COMMITTED_EPOCH = re.compile(r"partition_index=(\d+), committed_offset=(\d+), committed_leader_epoch=(-?\d+)")


def kp_txn_offset_commits(lines: list[str]) -> list[tuple[int, int, str, list[tuple[int, int, int]]]]:
    """kafka-python's TxnOffsetCommit requests, read from its connection's debug log: (version, generation_id,
    member_id, [(partition, committed offset, committed leader epoch)])."""
    out = []
    for line in lines:
        m = KP_TXN_OFFSET_COMMIT.search(line)
        if m:
            parts = [tuple(map(int, p)) for p in KP_COMMITTED_EPOCH.findall(line)]
            out.append((int(m[1]), int(m[2]), m[3], parts))
    return out


@pytest.mark.parametrize("identity", ["group_id", "group_metadata"])
def test_kafka_python_consume_transform_produce_with_a_live_group(identity, bootstrap, e2e_topic, e2e_admin):
    """kafka-python 3.0's EOS loop: a KafkaConsumer member of the source's group polls, a transactional
    KafkaProducer writes one output per input and sends the member's offsets in the same transaction while the
    member is in the group. kafka-python sends TxnOffsetCommit v3 (its TxnOffsetCommitHandler's
    max_version=3; the listener serves 0-4): given the bare ``group_id`` string it carries generation -1 and
    no member id (Kafka accepts that for a transactional commit into a group with members: ClassicGroup.
    validateOffsetCommit), given ``consumer.group_metadata()`` the member's id and generation (KIP-447,
    validated). Either way: every transaction commits, read_committed sees each output exactly once, the
    member stayed in the group, and the group's committed offsets are the end of the source."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from support import confluent_read

    src, out = e2e_topic(2, 1), e2e_topic(2, 1)
    group, n = uid("kp-eos-g"), 60
    inputs = [b"in-%d" % i for i in range(n)]
    feeder = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i, v in enumerate(inputs):
        feeder.send(src, v, partition=i % 2)
    feeder.flush(30)
    feeder.close()

    consumer = KafkaConsumer(
        src,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=uid("kp-eos-tx"), linger_ms=5)
    processed, transactions, members = 0, 0, set()
    try:
        producer.init_transactions()
        with Lines("kafka.net.connection") as log:
            deadline = time.monotonic() + 60
            while processed < n and time.monotonic() < deadline:
                batches = consumer.poll(timeout_ms=500, max_records=15)
                if not batches:
                    continue
                meta = consumer.group_metadata()
                members.add((meta.member_id, meta.generation_id))
                producer.begin_transaction()
                offsets = {}
                for tp, recs in batches.items():
                    for r in recs:
                        producer.send(out, b"out-" + r.value, partition=tp.partition)
                    offsets[tp] = OffsetAndMetadata(recs[-1].offset + 1, "", recs[-1].leader_epoch)
                    processed += len(recs)
                producer.send_offsets_to_transaction(offsets, group if identity == "group_id" else meta)
                producer.commit_transaction()
                transactions += 1
        (g,) = e2e_admin.describe_groups([group])  # while the member is still in it
    finally:
        producer.close(5)
        consumer.close()

    assert processed == n and transactions >= 2, (processed, transactions)
    assert g["state"] == "Stable" and len(g["members"]) == 1, g
    ((member_id, generation),) = members  # one member, one generation, throughout
    sent = kp_txn_offset_commits(log.lines)
    assert len(sent) == transactions, sent
    assert {v for v, *_ in sent} == {3}, sent
    if identity == "group_id":
        assert {(gen, mid) for _, gen, mid, _ in sent} == {(-1, "")}, sent
    else:
        assert member_id and generation >= 1
        assert {(gen, mid) for _, gen, mid, _ in sent} == {(generation, member_id)}, sent
    got = confluent_read(bootstrap, [(out, 0), (out, 1)], "read_committed", n)
    assert sorted(got) == sorted(b"out-" + v for v in inputs), "not exactly one output per input"
    # the last transaction's offsets are visible once its marker is on __consumer_offsets (EndTxn answers
    # before the markers, as in Kafka); rafka's Admin reads without require_stable
    want = {(src, 0): n // 2, (src, 1): n // 2}
    deadline = time.monotonic() + 10
    while True:
        offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
        if offsets == want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert offsets == want


def test_kafka_python_txn_offset_commit_keeps_the_leader_epoch(bootstrap, e2e_topic):
    """kafka-python's TxnOffsetCommit v3 carries each OffsetAndMetadata's leader_epoch as committed_leader_epoch
    (TxnOffsetCommitHandler._build_request; its ConsumerRecord has the batch's leader epoch). Partition 0 is
    committed with the epoch of the last record the member consumed, partition 1 with an epoch given by the
    application (5, so that neither "none" (-1) nor the topic's first epoch (0) passes by chance); both come
    back from OffsetFetch with their offset and metadata: kafka-python's committed(metadata=True) and
    librdkafka's committed()."""
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka import TopicPartition as CKPartition
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    t = e2e_topic(2, 3)
    group = uid("kp-epoch-g")
    seed = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(6):
        seed.send(t, b"e-%d" % i, partition=0)
    seed.flush(30)
    seed.close()
    # read_committed: its OffsetFetch asks for stable offsets (require_stable), so committed() waits for the
    # transaction's marker on __consumer_offsets instead of reading what was there before (KIP-447)
    c = KafkaConsumer(
        t,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=uid("kp-epoch-tx"), linger_ms=5)
    try:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(recs)
        assert len(got) == 6, got
        epoch = got[-1].leader_epoch
        assert epoch is not None and epoch >= 0, got[-1]
        p0, p1 = TopicPartition(t, 0), TopicPartition(t, 1)
        p.init_transactions()
        p.begin_transaction()
        p.send(t, b"e-out", partition=1)
        with Lines("kafka.net.connection") as log:
            p.send_offsets_to_transaction(
                {p0: OffsetAndMetadata(6, "kp-meta", epoch), p1: OffsetAndMetadata(1, "", 5)}, c.group_metadata()
            )
        p.commit_transaction()
        back = {tp.partition: c.committed(tp, metadata=True) for tp in (p0, p1)}
    finally:
        p.close(5)
        c.close()
    ((version, _, _, parts),) = kp_txn_offset_commits(log.lines)
    assert version == 3 and sorted(parts) == [(0, 6, epoch), (1, 1, 5)], parts
    assert back == {0: OffsetAndMetadata(6, "kp-meta", epoch), 1: OffsetAndMetadata(1, "", 5)}, back
    ck = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        read = ck.committed([CKPartition(t, 0), CKPartition(t, 1)], timeout=30)
    finally:
        ck.close()
    assert [(x.partition, x.offset, x.leader_epoch, x.metadata) for x in read] == [
        (0, 6, epoch, "kp-meta"),
        (1, 1, 5, None),
    ], read


def test_kafkajs_send_offsets_in_a_transaction_with_a_live_group(kafkajs, bootstrap, e2e_topic, e2e_admin):
    """kafkajs's consume-transform-produce (tests/e2e/kafkajs/eos.js): each batch of a group member becomes one
    transaction with the member's offsets (TxnOffsetCommit v1: no member fields, no leader epoch). Every
    transaction commits, the member stays in the group, read_committed sees each output exactly once and the
    group holds the end offsets of the source."""
    from support import confluent_read

    src, out = e2e_topic(3, 1), e2e_topic(3, 1)
    group, n = uid("kjs-eos-g"), 45
    s = kafkajs("eos.js", bootstrap, src, out, group, str(n))
    assert s["failure"] is None, s
    assert s["processed"] == n and s["transactions"] >= 3, s
    assert s["group"] == [{"state": "Stable", "members": 1}], s
    assert sorted(s["committed"], key=lambda c: c["partition"]) == [
        {"partition": p, "offset": n // 3} for p in range(3)
    ]
    got = confluent_read(bootstrap, [(out, p) for p in range(3)], "read_committed", n)
    assert sorted(got) == sorted(b"out-in-%d" % i for i in range(n)), "not exactly one output per input"
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(src, p): n // 3 for p in range(3)}


def test_kafkajs_commit_to_an_unknown_topic_or_partition(kafkajs, bootstrap, e2e_topic, e2e_admin):
    """Issue 45 item 3 with kafkajs (tests/e2e/kafkajs/offsets.js): a group member's OffsetCommit (v5, its member
    id and generation) of a topic that does not exist, and of a partition past a real topic's two, fails with
    UNKNOWN_TOPIC_OR_PARTITION (retriable for kafkajs) and stores nothing; in a commit that also names the real
    partition 0, that partition alone is stored. The consumer's commitOffsets of a partition that does not exist
    retries and then reports the same error. The unknown topic is not created by any of it."""
    t = e2e_topic(2, 1)
    ghost, group = uid("no-such-topic"), uid("kjs-unknown-g")
    s = kafkajs("offsets.js", bootstrap, t, ghost, group)
    assert s["failure"] is None, s
    refused = {"ok": False, "name": "KafkaJSProtocolError", "type": "UNKNOWN_TOPIC_OR_PARTITION", "retriable": True}
    assert s["commits"]["ghost"] == refused, s["commits"]
    assert s["commits"]["past"] == refused, s["commits"]
    assert s["storedAfterRefused"] == [], s
    assert s["commits"]["mixed"] == refused, s["commits"]  # kafkajs raises the first partition error it reads
    assert s["commits"]["consumerCommitOffsets"] == {**refused, "name": "KafkaJSNumberOfRetriesExceeded"}, s["commits"]
    assert s["stored"] == [{"topic": t, "partition": 0, "offset": 1}], s
    assert s["ghostListed"] is False
    offsets = {(tp.topic, tp.partition): o for tp, o in e2e_admin.list_consumer_group_offsets(group).items()}
    assert offsets == {(t, 0): 1}
    assert ghost not in e2e_admin.list_topics()
