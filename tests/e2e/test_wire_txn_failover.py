"""A real Kafka client's transactions across the SIGKILL of its transaction coordinator's broker.

Its own 3-broker cluster (``failover_cluster``: listeners on loopback, a dead broker fenced after 4 s). A
confluent-kafka (librdkafka) transactional producer commits transactions of ``K`` records spread over the 3
partitions of a topic (RF 3, min.insync.replicas 2), one after another. Part-way, the OS process of the broker
whose transaction coordinator serves the producer's transactional id gets SIGKILL: its coordinator, its
``__transaction_state`` replicas and its partition leaders die with it. The producer must find the new
coordinator (FindCoordinator), which loads the id from the replicated log and finishes or aborts what was in
flight; a commit that fails with an abortable error is aborted, and the transaction is written again as a new
one. Then a read_committed consumer (confluent and rafka's) sees every committed transaction whole, exactly
once, none of the aborted ones, and no transaction in part; read_uncommitted sees every record that
read_committed does."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter

import pytest
from support import txn_coordinator_of

import rafka
from actors.worker_process import actor_pid
from rafka import TopicPartition
from rafka.txn_admin import describe_transaction

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "wire-txn-failover"
PARTITIONS = 3
K = 30  # records per transaction, over every partition
TXNS = 40  # transactions that must commit
KILL_AT = 12  # the coordinator's broker is killed once this many have committed, while the next is open


def read_all(bootstrap: str, isolation: str, want: int, timeout_s: float = 40) -> list[bytes]:
    """Every value of the topic read from the start by a fresh confluent consumer with ``isolation``: until
    ``want`` values came and then nothing more for 1 s (or ``timeout_s``)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([CTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
                quiet_until = None
            elif len(got) >= want:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    return got


def test_coordinator_broker_sigkilled_confluent_transactions_stay_atomic(failover_cluster):
    from confluent_kafka import KafkaException, Producer

    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    bootstrap = cluster.bootstrap_servers
    tid = "wtx-" + uuid.uuid4().hex[:8]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": tid,
            "acks": "all",
            "linger.ms": 5,
            "transaction.timeout.ms": 20000,
            "message.timeout.ms": 20000,
            "retry.backoff.ms": 100,
        }
    )
    producer.init_transactions(30)
    victim = txn_coordinator_of(cluster, tid)
    pid = actor_pid(cluster.server.broker(victim))
    assert pid and pid != os.getpid()

    committed: list[int] = []  # transaction numbers whose commit returned
    aborted: list[int] = []  # ... whose commit failed abortably, then aborted
    errors: list[str] = []
    killed_at = recovered_s = None
    n = 0
    t_end = time.monotonic() + 120
    while len(committed) < TXNS and time.monotonic() < t_end:
        n += 1
        producer.begin_transaction()
        for i in range(K):
            producer.produce(TOPIC, value=b"t%d-%d" % (n, i), partition=i % PARTITIONS)
        if len(committed) == KILL_AT and killed_at is None:
            producer.flush(10)  # the records are in the open transaction on every leader, then the crash
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
        try:
            while True:
                try:
                    producer.commit_transaction(30)
                    break
                except KafkaException as e:
                    err = e.args[0]
                    errors.append(f"commit of t{n}: {err.str()}")
                    if err.txn_requires_abort():
                        producer.abort_transaction(30)
                        aborted.append(n)
                        break
                    assert err.retriable() and not err.fatal(), f"commit of t{n} failed: {err}"
        except KafkaException as e:
            pytest.fail(f"transaction t{n}: {e.args[0]}; earlier errors {errors}")
        if n not in aborted:
            committed.append(n)
            if killed_at is not None and recovered_s is None:
                recovered_s = time.monotonic() - killed_at
    producer.flush(10)
    assert len(committed) == TXNS, f"{len(committed)} of {TXNS} committed in 120 s; errors {errors}"
    assert killed_at is not None and recovered_s is not None

    # the id moved to another broker's coordinator, which holds its last transaction as committed
    alive = next(b for b in cluster.broker_ids() if b != victim)
    now = txn_coordinator_of(cluster, tid, via=alive)
    assert now != victim
    desc = describe_transaction(admin, tid)
    assert desc["state"] in ("CompleteCommit", "Empty"), desc

    def by_txn(values: list[bytes]) -> Counter:
        return Counter(int(v.split(b"-")[0][1:]) for v in values)

    rc = read_all(bootstrap, "read_committed", K * len(committed))
    assert len(rc) == len(set(rc)), "a record is read twice"
    seen = by_txn(rc)
    assert sorted(seen) == sorted(committed), (
        f"read_committed shows transactions {sorted(set(seen) - set(committed))} that did not commit and misses"
        f" {sorted(set(committed) - set(seen))}; aborted {aborted}, errors {errors}"
    )
    assert all(c == K for c in seen.values()), f"a transaction is visible in part: {seen}"

    # rafka's own read_committed consumer agrees, record for record
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", isolation_level="read_committed")
    c.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    mine: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(mine) < len(rc) and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            mine.extend(r.value for r in recs)
    c.close()
    assert sorted(mine) == sorted(rc)

    # read_uncommitted holds all of that, and whatever the aborted transactions had written
    ru = read_all(bootstrap, "read_uncommitted", len(rc))
    assert set(rc) <= set(ru)
    assert set(by_txn(ru)) <= set(committed) | set(aborted), "a record of no transaction begun here"
    print(
        f"wire txn failover: coordinator broker {victim} -> {now}; first commit {recovered_s:.1f} s after the kill;"
        f" {len(committed)} committed, aborted {aborted}; client errors {errors[:4]}"
    )
