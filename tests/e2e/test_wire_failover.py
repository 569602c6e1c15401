"""A partition leader killed mid-stream while a real Kafka client produces through the wire listener.

Its own 3-broker cluster (a broker dies here, so not the shared ``e2e_cluster``), listeners on ephemeral
loopback ports. A topic of 3 partitions, RF 3, min.insync.replicas 2; a confluent-kafka (librdkafka)
idempotent producer (acks=all) sends keyed records continuously while a confluent consumer tails every
partition. Part-way, the OS process of the broker leading partition 0 gets SIGKILL. The producer must
follow the new leader (Metadata) and the tailing consumer must too (Metadata, then OffsetForLeaderEpoch
to validate its position on the new leader's epoch, seen in librdkafka's protocol log). Every record
whose delivery report said OK is then in the log exactly once, at the offset reported, in per-key order:
read back with rafka's Python consumer and with a fresh confluent consumer. The broker is started again
and rejoins (back in every ISR, its listener in the cluster's metadata)."""

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
from actors.worker_process import actor_pid
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
