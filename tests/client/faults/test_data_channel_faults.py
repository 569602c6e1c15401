"""Process faults under the clients' data channel (rafka/channel.py): the leader replica's worker process paused
(SIGSTOP, then SIGCONT) and killed (SIGKILL) while a producer sends and a consumer long-polls over TCP. A paused
leader holds its connections' requests (the producer's time out and are retried, deduplicated by idempotence);
a killed one closes them (NOT_LEADER_OR_FOLLOWER: the clients look the leader up again and reconnect to its
replacement). Nothing acknowledged is lost, nothing is written twice, per-key order holds."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import ray

import rafka
from actors.channels.replica_lookup import replica_handle
from rafka import TopicPartition

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def leader_pid(cluster, topic: str, p: int) -> tuple[int, int]:
    leader = cluster.server.describe(topic)["partitions"][p]["leader"]
    st = ray.get(replica_handle(cluster.name, topic, p, leader).state.remote(), timeout=30)
    assert st["role"] == "leader"
    return leader, st["pid"]


def test_paused_and_killed_leader_replicas_lose_and_duplicate_nothing_over_the_channel(fault_cluster):
    admin = rafka.Admin(fault_cluster)
    topic, n = "chan-faults", 6000
    admin.create_topic(topic, 2, 3, {"min.insync.replicas": "2"})
    got: list = []
    stop = threading.Event()

    def consume() -> None:
        c = rafka.Consumer(fault_cluster, auto_offset_reset="earliest", fetch_max_wait_ms=500)
        c.assign([TopicPartition(topic, p) for p in range(2)])
        deadline = time.monotonic() + 180
        while not stop.is_set() and len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                got.extend(recs)
        c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    errors: list = []
    paused: list[int] = []
    with rafka.Producer(fault_cluster, linger_ms=2, request_timeout_ms=1500, delivery_timeout_ms=120000) as prod:
        for i in range(n):
            if i == 1500:  # batches and the consumer's long-poll are on the paused leader's connection
                _, pid = leader_pid(fault_cluster, topic, 0)
                os.kill(pid, signal.SIGSTOP)
                paused.append(pid)
                threading.Timer(3.0, os.kill, (pid, signal.SIGCONT)).start()
            if i == 4000:
                _, killed = leader_pid(fault_cluster, topic, 1)
                os.kill(killed, signal.SIGKILL)
            prod.send(topic, b"%d" % i, key=b"k%d" % (i % 11), callback=lambda md, exc: exc and errors.append(exc))
            if i % 200 == 0:
                time.sleep(0.02)
        prod.flush()
    reader.join(180)
    stop.set()
    assert errors == []
    assert sorted(int(r.value) for r in got) == list(range(n))  # all there, once each
    for p in range(2):
        offs = [r.offset for r in got if r.partition == p]
        assert offs == sorted(offs) and len(set(offs)) == len(offs)
        per_key: dict = {}
        for r in got:
            if r.partition == p:
                per_key.setdefault(r.key, []).append(int(r.value))
        assert all(v == sorted(v) for v in per_key.values())
    assert paused  # (its SIGCONT came from the timer 3 s later)
    leader = fault_cluster.server.describe(topic)["partitions"][1]["leader"]
    st = ray.get(replica_handle(fault_cluster.name, topic, 1, leader).state.remote(), timeout=30)
    assert st["pid"] != killed and st["client_listener"]["connections"] >= 1  # the clients moved to its replacement
    admin.close()
