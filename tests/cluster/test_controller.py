"""Controller, brokers and bootstrap on a real Ray cluster (faults injected with ray.kill / node removal)."""
from __future__ import annotations

import os
import time

import pytest
import ray

from actors.bootstrap import start_cluster
from storage.records import RecordBatchBuilder, decode_records

pytestmark = pytest.mark.cluster

FAST = {"broker.heartbeat.interval.ms": 200, "broker.session.timeout.ms": 3000,
        "replica.lag.time.max.ms": 1500, "replica.fetch.wait.max.ms": 100,
        "leader.imbalance.check.interval.seconds": 3600}


@pytest.fixture
def cluster(ray_cluster, cluster_name, tmp_path):
    handles = []

    def start(num_brokers=3, config=None, node_ids=None, data_dir=None, name=None):
        ch = start_cluster(name or cluster_name, num_brokers, str(data_dir or tmp_path), {**FAST, **(config or {})},
                           node_ids=node_ids)
        handles.append(ch)
        return ch
    yield start
    for ch in handles:
        ch.shutdown()


def batch(*values: bytes) -> bytes:
    b = RecordBatchBuilder()
    for v in values:
        assert b.append(int(time.time() * 1000), None, v)
    return b.build()


def produce(ch, topic, p, *values, acks=-1):
    res = ray.get(ch.leader_replica(topic, p).produce.remote(batch(*values), acks, 10000))
    assert res["error_code"] == 0, res
    return res["base_offset"]


def read_all(replica) -> list[bytes]:
    res = ray.get(replica.fetch.remote(0, 1 << 20))
    assert res["error_code"] == 0, res
    return [r.value for r in decode_records(res["records"])]


def part(ch, topic, p=0) -> dict:
    return ch.describe(topic)["partitions"][p]


def wait_part(ch, topic, p, pred, what, timeout_s=30):
    return ch.wait_for(lambda md: pred(next(x for x in next(t for t in md["topics"] if t["name"] == topic)
                                            ["partitions"] if x["partition"] == p)), timeout_s, what=what)


def test_create_describe_spread_and_controller_failover(cluster):
    ch = cluster()
    print(f"cluster start {ch.timings['start_s']:.2f}s")
    t0 = time.monotonic()
    res = ch.create_topic("orders", partitions=3, rf=3)
    print(f"create 3x3 topic {time.monotonic() - t0:.2f}s")
    d = ch.describe("orders")
    assert d["topic_id"] == res["topic_id"] and len(d["partitions"]) == 3
    leaders = sorted(p["leader"] for p in d["partitions"])
    assert leaders == [0, 1, 2]  # round robin: one leader per broker
    for p in d["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2] and sorted(p["isr"]) == [0, 1, 2]
        st = ray.get(ch.leader_replica("orders", p["partition"]).state.remote())
        assert st["role"] == "leader" and st["leader_epoch"] == p["leader_epoch"]

    old = ray.get(ch.controller().describe_controller.remote())
    ray.kill(ch.controller(), no_restart=True)
    t0 = time.monotonic()
    new = ray.get(ch.controller().describe_controller.remote())
    while new["controller_epoch"] == old["controller_epoch"]:
        time.sleep(0.02)
        new = ray.get(ch.controller().describe_controller.remote())
    took = time.monotonic() - t0
    print(f"controller failover {took:.2f}s")
    assert new["controller_epoch"] == old["controller_epoch"] + 1 and took < 5
    # every broker learns the new epoch, then refuses the old one
    for i in range(3):
        deadline = time.monotonic() + 5
        while ray.get(ch.broker(i).incarnation.remote())["controller_epoch"] < new["controller_epoch"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        res = ray.get(ch.broker(i).leader_and_isr.remote(old["controller_epoch"], []))
        assert res["error_code"] == 11  # STALE_CONTROLLER_EPOCH
        assert ray.get(ch.broker(i).stop_replica.remote(old["controller_epoch"], [["orders", 0]], True))[
            "error_code"] == 11
    # the metadata survived the failover and the brokers are still registered, nothing moved
    assert ch.describe("orders")["partitions"] == d["partitions"]
    md = ch.metadata()
    assert all(b["alive"] for b in md["brokers"])
