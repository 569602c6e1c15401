"""A partition leader killed mid-stream while a real Kafka client produces through the wire listener.

Its own 3-broker cluster (a broker dies here, so not the shared ``e2e_cluster``), listeners on ephemeral
loopback ports. A topic of 3 partitions, RF 3, min.insync.replicas 2; a confluent-kafka (librdkafka)
idempotent producer (acks=all) sends keyed records continuously while a confluent consumer tails every
partition. Part-way, the OS process of the broker leading partition 0 gets SIGKILL. The producer must
follow the new leader (Metadata) and the tailing consumer must too (Metadata, then OffsetForLeaderEpoch
to validate its position on the new leader's epoch, seen in librdkafka's protocol log). Every record
whose delivery report said OK is then in the log exactly once, at the offset reported, in per-key order:
read back with rafka's Python consumer and with a fresh confluent consumer. The broker is started again
and rejoins (back in every ISR, its listener in the cluster's metadata).

A second test kills the broker of a group's coordinator under two confluent members that commit as they
consume: they follow the coordinator to its new broker, nothing is lost, and the group's offsets end at the
log ends."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections import defaultdict

import pytest

import rafka
from actors.server.worker_process import actor_pid
from rafka import TopicPartition

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "failover"
PARTITIONS = 3
N = 3000
KILL_AT = 1000
KEYS = 30


def partitions(admin) -> dict[int, tuple[int, tuple[int, ...]]]:
    return {p["partition"]: (p["leader"], tuple(p["isr"])) for p in admin.describe_topics([TOPIC])[0]["partitions"]}


class LineCollector(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def tail(bootstrap: str, stop: threading.Event, got: dict, log_lines: LineCollector) -> None:
    """A confluent consumer reading every partition from the beginning until ``stop``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTP

    logger = logging.getLogger("wf-tail-" + uuid.uuid4().hex[:4])
    logger.addHandler(log_lines)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            "debug": "protocol",
        },
        logger=logger,
    )
    c.assign([CTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.partition()].append((msg.key(), msg.value(), msg.offset()))
    finally:
        c.close()


def check_log(records: list[tuple[int, bytes, bytes, int]], ok: dict[bytes, tuple[int, int]]) -> None:
    """``records`` (partition, key, value, offset) read back: offsets dense from 0 per partition, no value
    twice, every OK-delivered value at the partition and offset its delivery report gave, per-key order."""
    values = [v for _, _, v, _ in records]
    assert len(values) == len(set(values)), "a record is in the log twice"
    by_part = defaultdict(list)
    for p, k, v, o in records:
        by_part[p].append((o, k, v))
    for p, recs in by_part.items():
        recs.sort()
        assert [o for o, _, _ in recs] == list(range(len(recs))), f"partition {p}: offsets not dense"
    where = {v: (p, o) for p, _, v, o in records}
    missing = [v for v in ok if v not in where]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"
    # a report without an offset (negative: librdkafka did not learn it) still names the partition
    assert all(where[v] == ok[v] or (ok[v][1] < 0 and where[v][0] == ok[v][0]) for v in ok), (
        "a record is not where its delivery report said"
    )
    for p, recs in by_part.items():
        per_key = defaultdict(list)
        for _, k, v in recs:
            per_key[k].append(int(v.split(b"-")[1]))
        assert all(seq == sorted(seq) for seq in per_key.values()), f"partition {p}: per-key order broken"


def test_leader_sigkilled_mid_stream_confluent_producer_follows_and_nothing_acked_is_lost(failover_cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as CTP

    t_start = time.monotonic()
    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    admin.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    before = partitions(admin)
    victim = before[0][0]
    pid = actor_pid(cluster.server.broker(victim))
    assert pid and pid != os.getpid()
    bootstrap = cluster.bootstrap_servers

    stop = threading.Event()
    tailed: dict = defaultdict(list)
    tail_log = LineCollector()
    tailer = threading.Thread(target=tail, args=(bootstrap, stop, tailed, tail_log), daemon=True)
    tailer.start()

    ok: dict[bytes, tuple[int, int]] = {}
    failed: list = []

    def report(err, msg):
        if err is None:
            ok[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed.append((msg.value(), err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 40000,
            "retry.backoff.ms": 100,
        }
    )
    killed_at = None
    for i in range(N):
        producer.produce(TOPIC, key=b"k%d" % (i % KEYS), value=b"v-%d" % i, on_delivery=report)
        if i == KILL_AT:
            while len(ok) < KILL_AT // 2:  # the stream is flowing: records acked and more in flight
                producer.poll(0.05)
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
        if i % 20 == 0:
            producer.poll(0)
            time.sleep(0.02)  # ~1,000 records/s: the stream spans the kill, the failover and after
    assert producer.flush(45) == 0, "records still undelivered after 45 s"
    produced_s = time.monotonic() - killed_at
    assert failed == [], f"{len(failed)} deliveries failed, e.g. {failed[:3]}"
    assert len(ok) == N

    after = partitions(admin)
    assert after[0][0] not in (victim, -1) and victim not in after[0][1]  # a new leader, the victim fenced
    assert [v for v in ok if int(v.split(b"-")[1]) > KILL_AT and ok[v][0] == 0], (
        "nothing reached partition 0 after the kill"
    )

    # the tailing consumer followed the new leader of partition 0 and validated its position there
    deadline = time.monotonic() + 30
    while sum(len(v) for v in tailed.values()) < N and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    tailer.join(10)
    check_log([(p, k, v, o) for p, recs in tailed.items() for k, v, o in recs], ok)
    epoch_lines = [line for line in tail_log.lines if "OffsetForLeaderEpoch" in line]
    assert epoch_lines, "librdkafka sent no OffsetForLeaderEpoch"

    # read back with rafka's Python consumer
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        for recs in c.poll(500).values():
            got += recs
    c.close()
    check_log([(r.partition, r.key, r.value, r.offset) for r in got], ok)

    # and with a fresh confluent consumer
    cc = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    cc.assign([CTP(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    fresh = []
    deadline = time.monotonic() + 30
    while len(fresh) < N and time.monotonic() < deadline:
        msg = cc.poll(0.5)
        if msg is not None and msg.error() is None:
            fresh.append((msg.partition(), msg.key(), msg.value(), msg.offset()))
    cc.close()
    check_log(fresh, ok)

    # the killed broker starts again and rejoins: back in every ISR, its listener in the metadata
    cluster.restart_broker(victim)
    deadline = time.monotonic() + 40
    while any(victim not in isr for _, isr in partitions(admin).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(victim in isr for _, isr in partitions(admin).values()), partitions(admin)
    probe = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    deadline = time.monotonic() + 20
    while victim not in probe.list_topics(TOPIC, timeout=10).brokers and time.monotonic() < deadline:
        time.sleep(0.2)  # brokers learn of the rejoined one through the controller, asynchronously
    assert victim in probe.list_topics(TOPIC, timeout=10).brokers
    probe.produce(TOPIC, key=b"after", value=b"v-%d" % N)
    assert probe.flush(20) == 0
    took = time.monotonic() - t_start
    after_kill = sum(1 for v, (p, _) in ok.items() if p == 0 and int(v.split(b"-")[1]) > KILL_AT)
    print(
        f"wire failover: produce after kill {produced_s:.1f} s, whole test {took:.1f} s; partition 0 took"
        f" {after_kill} records after the kill; {len(epoch_lines)} OffsetForLeaderEpoch log lines, e.g. {epoch_lines[0]!r}"
    )
    assert took < 60


GROUP_TOPIC = "wire-group-failover"
GROUP_N = 3000


def test_group_members_follow_their_coordinator_across_a_sigkill(failover_cluster):
    """Two confluent-kafka members of one group consume a topic and commit as they go; part-way, the OS process
    of the broker whose group coordinator holds the group gets SIGKILL (with it, some of the topic's leaders).
    The members find the new coordinator (FindCoordinator), which loads the group's offsets from the replicated
    __consumer_offsets; they rejoin if asked and go on. No record is lost (at-least-once: a record between a
    member's last commit and a rebalance may be read twice), and the group's committed offsets end at the
    log ends."""
    from confluent_kafka import Consumer, KafkaException
    from support import coordinator_of

    cluster = failover_cluster
    admin = rafka.Admin(cluster)
    admin.create_topic(GROUP_TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    with rafka.Producer(cluster, acks="all") as p:
        p.send_batch(GROUP_TOPIC, [(None, b"g-%d" % i, i % PARTITIONS) for i in range(GROUP_N)])
        p.flush(60)
    group = "wg-" + uuid.uuid4().hex[:6]
    seen: set[bytes] = set()
    reads = 0
    lock = threading.Lock()
    stop = threading.Event()
    commit_errors: list[str] = []

    def member() -> None:
        nonlocal reads
        c = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "fetch.wait.max.ms": 200,
            }
        )
        c.subscribe([GROUP_TOPIC])
        n = 0
        try:
            while not stop.is_set():
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    with lock:
                        seen.add(msg.value())
                        reads += 1
                    n += 1
                    time.sleep(0.002)  # ~500 records/s a member: the run spans the kill and the failover
                if (n and n % 100 == 0) or (msg is None and n):
                    try:
                        c.commit(asynchronous=False)
                    except KafkaException as e:  # no offsets to commit, or the coordinator moving: the next one
                        commit_errors.append(e.args[0].name())
        finally:
            c.close()

    threads = [threading.Thread(target=member, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(seen) < GROUP_N // 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = coordinator_of(cluster, group, key_type=0)
    os.kill(actor_pid(cluster.server.broker(victim)), signal.SIGKILL)
    killed_at = time.monotonic()

    ends = {p: GROUP_N // PARTITIONS for p in range(PARTITIONS)}

    def committed() -> dict[int, int]:
        offs = admin.list_consumer_group_offsets(group)
        return {tp.partition: o for tp, o in offs.items() if tp.topic == GROUP_TOPIC}

    deadline = time.monotonic() + 90
    while (len(seen) < GROUP_N or committed() != ends) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
    assert len(seen) == GROUP_N, f"{GROUP_N - len(seen)} records never read"
    assert committed() == ends, committed()
    alive = next(b for b in cluster.broker_ids() if b != victim)
    assert coordinator_of(cluster, group, key_type=0, via=alive) != victim
    print(
        f"wire group failover: {reads} reads for {GROUP_N} records ({reads - GROUP_N} again), offsets at the ends"
        f" {time.monotonic() - killed_at:.1f} s after the kill; commit errors {sorted(set(commit_errors))}"
    )
