"""Exactly-once with a real Kafka client across failures, on its own 3-broker cluster (``failover_cluster``:
listeners on loopback, a dead broker fenced after 4 s, timed-out transactions checked every 500 ms).

- confluent-kafka's consume-transform-produce loop across the SIGKILL of the broker whose group coordinator
  holds the group, 2 ms into a commit: every input has exactly one output in read_committed;
- the client dies instead: a transactional client's own process is SIGKILLed with its transaction open, and
  the coordinator aborts it at its timeout, until when read_committed waits at its first offset.

Coordinator failures under a plain transactional producer are in test_wire_txn_failover.py."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter

import pytest
from support import confluent_read, coordinator_of

import rafka
from actors.worker_process import actor_pid
from rafka import TopicPartition
from rafka.txn_admin import describe_transaction

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PARTITIONS = 3


EOS_IN, EOS_OUT = "wire-eos-in", "wire-eos-out"
EOS_N = 3000  # input records
EOS_KILL_AT = 900  # the group coordinator's broker is killed once this many inputs are committed


def test_group_coordinator_broker_sigkilled_confluent_consume_transform_produce_is_exactly_once(failover_cluster):
    """confluent-kafka's exactly-once loop (a read_committed group member, a transactional producer, the
    consumed offsets sent to each transaction) across the SIGKILL of the broker whose group coordinator holds
    the group, 2 ms into a commit (EndTxn, then the markers on the input's offsets and output partitions and
    the group's __consumer_offsets partition, which that broker leads): an abortable failure aborts and rewinds to the group's committed offsets, as Kafka's EOS
    examples do. Every input record then has exactly one output record in read_committed, and the group's
    committed offsets are the ends of the input."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka import TopicPartition as CTP

    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    for t in (EOS_IN, EOS_OUT):
        admin.create_topic(t, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    with rafka.Producer(cluster, acks="all") as p:
        p.send_batch(EOS_IN, [(None, b"i-%d" % i, i % PARTITIONS) for i in range(EOS_N)])
        p.flush(60)
    group = "wire-eos-" + uuid.uuid4().hex[:6]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 30000,
        }
    )
    consumer.subscribe([EOS_IN])
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "wire-eos-" + uuid.uuid4().hex[:8],
            "acks": "all",
            "linger.ms": 5,
            "transaction.timeout.ms": 20000,
        }
    )
    producer.init_transactions(30)
    victim = coordinator_of(cluster, group, key_type=0)
    pid = actor_pid(cluster.server.broker(victim))
    done = aborts = 0
    errors: list[str] = []
    killed_at = None
    deadline = time.monotonic() + 150
    while done < EOS_N and time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(100, 0.5) if m.error() is None]
        if not msgs:
            continue
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(EOS_OUT, value=b"o-" + m.value()[2:], partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            if killed_at is None and done >= EOS_KILL_AT:  # the kill lands while this commit is under way
                killer = threading.Timer(0.002, os.kill, (pid, signal.SIGKILL))
                killer.start()
                killed_at = time.monotonic()
            producer.commit_transaction(30)
            done += len(msgs)
        except KafkaException as e:
            err = e.args[0]
            errors.append(err.str())
            assert err.txn_requires_abort() and not err.fatal(), f"{err}; earlier errors {errors}"
            producer.abort_transaction(30)
            aborts += 1
            # rewind to what the group committed: the aborted inputs are consumed again
            committed = consumer.committed(consumer.assignment(), 30)
            for tp in committed:
                consumer.seek(CTP(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            done = sum(max(0, tp.offset) for tp in committed)
    assert killed_at is not None, "the group coordinator's broker was never killed"
    killer.join()
    assert done == EOS_N, f"{done} of {EOS_N} inputs processed in 150 s; errors {errors}"
    ends = consumer.committed([CTP(EOS_IN, p) for p in range(PARTITIONS)], 30)
    consumer.close()
    assert sum(tp.offset for tp in ends) == EOS_N, f"the group committed {ends}"
    now = coordinator_of(cluster, group, key_type=0, via=next(b for b in cluster.broker_ids() if b != victim))
    assert now != victim

    out = confluent_read(
        bootstrap, [(EOS_OUT, p) for p in range(PARTITIONS)], "read_committed", EOS_N, 1.0, strict=False
    )
    counts = Counter(out)
    assert not [v for v, c in counts.items() if c > 1], "an input has two outputs in read_committed"
    assert set(out) == {b"o-%d" % i for i in range(EOS_N)}, f"{EOS_N - len(set(out))} inputs have no output"
    print(
        f"wire EOS failover: group coordinator broker {victim} -> {now}; {aborts} transactions aborted and"
        f" redone; client errors {errors[:4]}"
    )


HANG_TOPIC = "wire-txn-hang"
CLIENT = """
import sys, time
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2], "transaction.timeout.ms": 3000})
p.init_transactions(30)
p.begin_transaction()
for i in range(20):
    p.produce(sys.argv[3], value=b"hung-%d" % i, partition=0)
assert p.flush(30) == 0
print("open", flush=True)
time.sleep(600)
"""


def test_transactional_client_process_sigkilled_mid_transaction_is_aborted_by_its_timeout(failover_cluster):
    """A confluent-kafka transactional producer's own process is SIGKILLed with its transaction open and its
    records on the leader (a client crash). Until the coordinator aborts it at its transaction.timeout.ms
    (3 s), read_committed stops at its first offset (the LSO), even for the records other producers commit
    after it; then they show, and the dead client's records never do."""
    import subprocess
    import sys

    from confluent_kafka import Producer

    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    admin.create_topic(HANG_TOPIC, 1, 3, {"min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    tid = "hang-" + uuid.uuid4().hex[:8]
    before = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(10):
        before.produce(HANG_TOPIC, value=b"before-%d" % i, partition=0)
    assert before.flush(30) == 0
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, bootstrap, tid, HANG_TOPIC], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout.readline().strip() == "open", "the client did not open its transaction"
        client.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        client.wait(10)
    finally:
        client.kill()
    hung = describe_transaction(admin, tid)
    assert hung["state"] == "Ongoing", hung
    for i in range(10):
        before.produce(HANG_TOPIC, value=b"after-%d" % i, partition=0)
    assert before.flush(30) == 0

    # while the dead client's transaction is open: read_committed ends at its first offset
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level="read_committed")
    c.assign([TopicPartition(HANG_TOPIC, 0)])
    seen: list[bytes] = []
    first_after = shown_ms = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(seen) < 20:
        for recs in c.poll(timeout_ms=200).values():
            seen.extend(r.value for r in recs)
        if first_after is None and any(v.startswith(b"after-") for v in seen):
            first_after, shown_ms = time.monotonic() - killed_at, time.time() * 1000
    c.close()
    assert seen == [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)], seen
    # not before the transaction's timeout, counted from its start at the coordinator
    assert first_after is not None and shown_ms >= hung["transaction_start_time_ms"] + 3000, (
        f"records behind an open transaction showed {shown_ms - hung['transaction_start_time_ms']:.0f} ms after it began"
    )
    state = describe_transaction(admin, tid)["state"]
    assert state in ("CompleteAbort", "Empty"), state
    print(f"wire txn hang: the killed client's transaction aborted, later records visible {first_after:.1f} s after")
