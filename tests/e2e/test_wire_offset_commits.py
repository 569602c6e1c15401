"""The group coordinator's offset commits over the Kafka wire with real clients, on the shared 3-broker
cluster (tests/e2e/conftest.py):

- aiokafka's consume-transform-produce loop: its TxnOffsetCommit v0 carries no member id or generation,
  and Kafka accepts it while the source group has live members (ClassicGroup.validateOffsetCommit checks
  membership only for non-transactional commits);
- TxnOffsetCommit keeps the committed leader epoch (librdkafka's committed() reads it back);
- OffsetCommit for a topic that does not exist, or a partition past the topic's, answers
  UNKNOWN_TOPIC_OR_PARTITION and stores nothing (KafkaApis.handleOffsetCommitRequest), with
  confluent-kafka and kafka-python.

- kafkajs's consume-transform-produce (tests/e2e/kafkajs/eos.js): sendOffsets while its consumer is a member."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from .test_wire_aiokafka_txn import aio_read, run_collected
from .test_wire_kafkajs import node as kafkajs_node  # noqa: F401 - the fixture: node after npm ci of tests/e2e/kafkajs


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


def test_kafkajs_send_offsets_in_a_transaction_with_a_live_group(kafkajs_node, bootstrap, e2e_topic, e2e_admin):  # noqa: F811
    """kafkajs's consume-transform-produce (tests/e2e/kafkajs/eos.js): each batch of a group member becomes one
    transaction with the member's offsets (TxnOffsetCommit v1: no member fields, no leader epoch). Every
    transaction commits, the member stays in the group, read_committed sees each output exactly once and the
    group holds the end offsets of the source."""
    import json
    import subprocess

    from support import confluent_read

    from .test_wire_kafkajs import KAFKAJS

    src, out = e2e_topic(3, 1), e2e_topic(3, 1)
    group, n = uid("kjs-eos-g"), 45
    r = subprocess.run(
        [kafkajs_node, str(KAFKAJS / "eos.js"), bootstrap, src, out, group, str(n)],
        cwd=KAFKAJS,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert r.returncode == 0, f"eos.js failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    s = json.loads(r.stdout.strip().splitlines()[-1])
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
