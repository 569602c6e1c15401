"""Faults injected into a real cluster (the fault suites' shared 3-broker cluster, tests/client/faults/conftest.py;
each test restarts the broker it killed): leader loss mid-stream, and a stalled partition."""

from __future__ import annotations

import time

import pytest

import rafka
from protocol.errors import KafkaTimeoutError
from rafka import TopicPartition

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def fresh_cluster(fault_cluster):
    return fault_cluster


def leaders(admin, topic):
    return {p["partition"]: (p["leader"], tuple(p["isr"])) for p in admin.describe_topics([topic])[0]["partitions"]}


def test_leader_failover_mid_stream_loses_and_duplicates_nothing(fresh_cluster):
    admin = rafka.Admin(fresh_cluster)
    admin.create_topic("clicks", 3, 3, {"min.insync.replicas": "2"})
    before = leaders(admin, "clicks")
    # the broker hosting the controller: it leads one of the 3 partitions (leaders are spread), so both a
    # partition leader and the controller fail over while the producer keeps going
    victim = admin.describe_cluster()["controller_id"]
    part = next(p for p, (leader, _) in before.items() if leader == victim)
    n, kill_at = 6000, 2000
    errors, futs = [], []
    try:
        with rafka.Producer(fresh_cluster, linger_ms=5, batch_size=8192, request_timeout_ms=5000) as p:
            for i in range(n):
                if i == kill_at:  # batches are in flight to the victim at this point
                    fresh_cluster.kill_broker(victim)
                futs.append(
                    p.send(
                        "clicks",
                        b"%d" % i,
                        key=b"user-%d" % (i % 25),
                        callback=lambda md, exc: exc and errors.append(exc),
                    )
                )
                if i % 500 == 0:
                    time.sleep(0.01)
            p.flush()
        after = leaders(admin, "clicks")  # before the victim is back
    finally:
        fresh_cluster.restart_broker(victim)  # the cluster is shared: the next test needs every broker
    assert errors == []
    acked = [f.get() for f in futs]
    assert after[part][0] not in (victim, -1) and victim not in after[part][1]
    c = rafka.Consumer(fresh_cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition("clicks", p) for p in range(3)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(1000).values():
            got += recs
    assert sorted(int(r.value) for r in got) == list(range(n))  # nothing lost, nothing twice
    assert admin.describe_cluster()["controller_id"] != victim
    for part in range(3):
        offs = [r.offset for r in got if r.partition == part]
        assert offs == list(range(len(offs)))
        assert sorted(md.offset for md in acked if md.partition == part) == offs
        per_key = {}
        for r in got:
            if r.partition == part:
                per_key.setdefault(r.key, []).append(int(r.value))
        assert all(v == sorted(v) for v in per_key.values())  # per-key order across the failover


def test_stalled_partition_blocks_send_then_times_out(fresh_cluster):
    admin = rafka.Admin(fresh_cluster)
    admin.create_topic("stuck", 1, 3, {"min.insync.replicas": "3"})
    leader = leaders(admin, "stuck")[0][0]
    follower = next(b for b in range(3) if b != leader)
    fresh_cluster.kill_broker(follower)  # acks=all can no longer be satisfied
    errs = []
    p = rafka.Producer(
        fresh_cluster,
        batch_size=16384,
        buffer_memory=2 * 16384 + 100,
        max_block_ms=500,
        linger_ms=0,
        request_timeout_ms=1000,
        delivery_timeout_ms=2500,
    )
    f1 = p.send("stuck", b"a" * 15000, callback=lambda md, exc: errs.append(exc))
    f2 = p.send("stuck", b"b" * 15000)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="buffer_memory"):  # both batches hold the whole buffer
        p.send("stuck", b"c" * 15000)
    assert 0.45 < time.monotonic() - t0 < 3
    with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms|since batch creation"):
        f1.get(timeout=20)
    with pytest.raises(KafkaTimeoutError):
        f2.get(timeout=20)
    assert isinstance(errs[0], KafkaTimeoutError)
    assert p.metrics()["buffer_available_bytes"] == 2 * 16384 + 100  # memory came back
    p.close()
    fresh_cluster.restart_broker(follower)  # the ISR recovers: sends go through again
    deadline = time.monotonic() + 60
    while len(leaders(admin, "stuck")[0][1]) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    with rafka.Producer(fresh_cluster) as p2:
        assert p2.send("stuck", b"d", key=b"k").get(timeout=60).offset >= 0
