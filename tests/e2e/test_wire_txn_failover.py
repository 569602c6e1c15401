"""A real Kafka client's transactions across the SIGKILL or SIGSTOP of its transaction coordinator's broker.

Its own 3-broker cluster (``failover_cluster``: listeners on loopback, a dead broker fenced after 4 s). A
confluent-kafka (librdkafka) transactional producer commits transactions of ``K`` records spread over the 3
partitions of a topic (RF 3, min.insync.replicas 2), one after another. Part-way, the OS process of the broker
whose transaction coordinator serves the producer's transactional id gets SIGKILL (its coordinator, its
``__transaction_state`` replicas and its partition leaders die with it) or SIGSTOP (all of them freeze, are
fenced, and later run on as zombies). The producer must find the new coordinator (FindCoordinator), which
loads the id from the replicated log and finishes or aborts what was in flight; a commit that fails with an
abortable error is aborted, and the producer goes on with new transactions until ``TXNS`` committed. Then a read_committed consumer (confluent and rafka's) sees every committed transaction whole, exactly
once, none of the aborted ones, and no transaction in part; read_uncommitted sees every record that
read_committed does.

Last, a coordinator paused past a transaction's timeout wakes as a zombie that cannot abort what its successor
committed. A client crash is in test_wire_txn_client_crash.py."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter

import pytest
import ray
from support import confluent_read, coordinator_of

import rafka
from actors.server.worker_process import actor_pid
from protocol.names import RAY_NAMESPACE, txn_coordinator_name
from rafka import TopicPartition
from rafka.admin.txn_admin import describe_transaction

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "wire-txn-failover"
PARTITIONS = 3
K = 30  # records per transaction, over every partition
TXNS = 40  # transactions that must commit
KILL_AT = 12  # the coordinator's broker is killed once this many have committed, while the next is open
RESUME_AFTER = 5  # SIGSTOP: transactions committed through the new coordinator before the old one runs on


def read_all(bootstrap: str, topic: str, isolation: str, want: int) -> list[bytes]:
    """Every value of ``topic`` read from the start by a fresh confluent consumer (``confluent_read``): until
    ``want`` came, then 1 s more; errors right after a failover are skipped."""
    return confluent_read(bootstrap, [(topic, p) for p in range(PARTITIONS)], isolation, want, 1.0, strict=False)


def transactional_setup(cluster, topic: str, prefix: str, **conf):
    """``(admin, transactional id, producer, coordinator's broker id, its OS pid)``: ``topic`` created (3
    partitions, RF 3, min.insync.replicas 2) and a confluent-kafka transactional producer (acks=all, ``conf``
    on top) initialized, whose coordinator's broker process is the one to fail."""
    from confluent_kafka import Producer

    admin = rafka.Admin(cluster)
    admin.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    tid = f"{prefix}-{uuid.uuid4().hex[:8]}"
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": tid,
            "acks": "all",
            # a request to a paused broker is given up after this (librdkafka's default is 60 s)
            "socket.timeout.ms": 6000,
            **conf,
        }
    )
    producer.init_transactions(30)
    victim = coordinator_of(cluster, tid)
    pid = actor_pid(cluster.server.broker(victim))
    assert pid and pid != os.getpid()
    return admin, tid, producer, victim, pid


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
def test_coordinator_broker_fails_confluent_transactions_stay_atomic(failover_cluster, fault):
    """SIGKILL: the broker's process dies. SIGSTOP: it is paused (a long GC pause, a frozen VM) until its
    coordinator's id has moved and the producer committed ``RESUME_AFTER`` more transactions through the new
    one; then it runs on (SIGCONT) as a zombie that still believes it leads, while the producer goes on, and
    it must come back as a live broker."""
    from confluent_kafka import KafkaException

    cluster = failover_cluster
    admin, tid, producer, victim, pid = transactional_setup(
        cluster,
        TOPIC,
        "wtx",
        **{"linger.ms": 5, "transaction.timeout.ms": 20000, "message.timeout.ms": 20000, "retry.backoff.ms": 100},
    )
    bootstrap = cluster.bootstrap_servers

    committed: list[int] = []  # transaction numbers whose commit returned
    aborted: list[int] = []  # ... whose commit failed abortably, then aborted
    errors: list[str] = []
    killed_at = recovered_s = resumed_at = None
    n = 0
    t_end = time.monotonic() + 120
    try:
        while len(committed) < TXNS and time.monotonic() < t_end:
            n += 1
            producer.begin_transaction()
            for i in range(K):
                producer.produce(TOPIC, value=b"t%d-%d" % (n, i), partition=i % PARTITIONS)
            if len(committed) == KILL_AT and killed_at is None:
                producer.flush(10)  # the records are in the open transaction on every leader, then the fault
                os.kill(pid, getattr(signal, fault))
                killed_at = time.monotonic()
            if fault == "SIGSTOP" and resumed_at is None and len(committed) == KILL_AT + 1 + RESUME_AFTER:
                os.kill(pid, signal.SIGCONT)  # the zombie runs on while this transaction is open
                resumed_at = time.monotonic()
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
    finally:
        if fault == "SIGSTOP" and resumed_at is None:
            os.kill(pid, signal.SIGCONT)  # never leave a stopped process behind
    producer.flush(10)
    assert len(committed) == TXNS, f"{len(committed)} of {TXNS} committed in 120 s; errors {errors}"
    assert killed_at is not None and recovered_s is not None

    # the id moved to another broker's coordinator, which holds its last transaction as committed
    alive = next(b for b in cluster.broker_ids() if b != victim)
    now = coordinator_of(cluster, tid, via=alive)
    assert now != victim
    desc = describe_transaction(admin, tid)
    assert desc["state"] in ("CompleteCommit", "Empty"), desc
    if fault == "SIGSTOP":  # the zombie, fenced while paused, registers again and is a live broker
        assert resumed_at is not None

        def back() -> bool:
            return any(b["id"] == victim and b["alive"] for b in admin.describe_cluster()["brokers"])

        deadline = time.monotonic() + 40
        while not back() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert back(), admin.describe_cluster()

    def by_txn(values: list[bytes]) -> Counter:
        return Counter(int(v.split(b"-")[0][1:]) for v in values)

    rc = read_all(bootstrap, TOPIC, "read_committed", K * len(committed))
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
    ru = read_all(bootstrap, TOPIC, "read_uncommitted", len(rc))
    assert set(rc) <= set(ru)
    assert set(by_txn(ru)) <= set(committed) | set(aborted), "a record of no transaction begun here"
    print(
        f"wire txn failover ({fault}): coordinator broker {victim} -> {now}; first commit {recovered_s:.1f} s after"
        " the fault;"
        f" {len(committed)} committed, aborted {aborted}; client errors {errors[:4]}"
    )


ZOMBIE_TOPIC = "wire-txn-zombie"
ZOMBIE_TIMEOUT_MS = 25000  # past the slowest failover seen (13.6 s for a SIGSTOP, under a parallel test run)


def test_a_paused_coordinator_that_wakes_after_the_timeout_cannot_abort_a_committed_transaction(failover_cluster):
    """The coordinator's broker is paused (SIGSTOP) with a transaction open; the producer commits it through the
    new coordinator; the old one stays paused past the transaction's timeout and then runs on (SIGCONT). To
    it, the transaction is still Ongoing and now expired, so its timer tries to abort it: a PrepareAbort to
    the ``__transaction_state`` partition it no longer leads (its followers fetch from the new leader, so
    acks=all with min.insync.replicas 2 cannot complete there) and nothing else. The transaction stays
    committed (read_committed shows it, the new coordinator says CompleteCommit), and the producer's next
    transaction commits: no epoch was bumped behind its back. Whether the zombie's timer fires before it
    learns that it no longer leads is a race (its ``aborted_timeouts``, printed: 1 in each of 4 runs here), so
    only the outcome is asserted."""
    cluster = failover_cluster
    admin, tid, producer, victim, pid = transactional_setup(
        cluster, ZOMBIE_TOPIC, "wzt", **{"transaction.timeout.ms": ZOMBIE_TIMEOUT_MS}
    )
    bootstrap = cluster.bootstrap_servers
    first = [b"z1-%d" % i for i in range(K)]
    second = [b"z2-%d" % i for i in range(K)]
    producer.begin_transaction()
    for i, v in enumerate(first):
        producer.produce(ZOMBIE_TOPIC, value=v, partition=i % PARTITIONS)
    assert producer.flush(10) == 0
    began = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        producer.commit_transaction(60)  # through the new coordinator
        committed_s = time.monotonic() - began
        assert committed_s < ZOMBIE_TIMEOUT_MS / 1000, f"the commit took {committed_s:.1f} s, past the timeout"
        time.sleep(max(0.0, began + ZOMBIE_TIMEOUT_MS / 1000 + 2 - time.monotonic()))  # past the timeout, paused
    finally:
        os.kill(pid, signal.SIGCONT)
    time.sleep(5)  # the zombie's expiry check runs at once (every 500 ms here); then it learns it is no leader
    zombie = ray.get_actor(txn_coordinator_name(cluster.name, victim), namespace=RAY_NAMESPACE)
    tried = ray.get(zombie.metrics.remote(), timeout=30)["stats"]["aborted_timeouts"]
    alive = next(b for b in cluster.broker_ids() if b != victim)
    assert coordinator_of(cluster, tid, via=alive) != victim
    assert describe_transaction(admin, tid)["state"] == "CompleteCommit"
    producer.begin_transaction()
    for i, v in enumerate(second):
        producer.produce(ZOMBIE_TOPIC, value=v, partition=i % PARTITIONS)
    producer.commit_transaction(60)
    rc = read_all(bootstrap, ZOMBIE_TOPIC, "read_committed", 2 * K)
    assert sorted(rc) == sorted(first + second), "the zombie's abort reached the log"
    print(
        f"wire txn zombie coordinator: committed {committed_s:.1f} s after the pause; the zombie tried {tried}"
        " timeout abort(s), none reached the log"
    )
