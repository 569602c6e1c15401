"""Issue 17's figures through the public API, in one run on one embedded 3-broker LocalCluster.

    python benchmarks/client_bench.py --json [--records 300000] [--batch-records 1000000] [--no-http]

Every figure uses 100-byte values and, unless named otherwise, a 6-partition topic with RF 3 and
min.insync.replicas 2 and the producer's defaults (acks=all, idempotent, linger 5 ms):

- ``cluster_start_s``: ``LocalCluster(brokers=3)`` ready, Ray start included (Ray is not running before);
- ``topic_create_s``: ``Admin.create_topic`` of 6 partitions x RF 3 (returns once every partition has a leader),
  once the brokers' warm replica pools are full (``replica_pool_fill_s`` after the cluster is ready;
  ``detail.replica_pools_after_create``: replicas bound from each pool, ``taken``, or started cold, ``cold``);
- every timed figure starts once the warm pools have refilled after its topic's create (``detail.pool_refill_s_*``:
  a refill starts actors, ~0.5 s of CPU each, and would be measured with rafka);
- ``send_records_per_s``: ``Producer.send`` per record, then ``flush``;
- ``send_batch_records_per_s``: ``Producer.send_batch`` in calls of 10,000 records, then ``flush``; beside it (not
  a goal) ``send_batch_1mb_records_per_s``, the same with ``batch_size=1_000_000``;
- ``consume_records_per_s``: one ``Consumer`` assigned the 6 partitions from the start, until it has them all;
- ``group_consume_records_per_s``: 3 members of one group committing every 10 polls (benchmarks/group_bench.py),
  from the first record delivered to the last (the join, which waits Kafka's 3 s
  ``group.initial.rebalance.delay.ms``, is ``detail.group_consume.first_record_after_s``; __consumer_offsets is
  created by a warm-up group before);
- ``e2e_p50_ms`` / ``e2e_p99_ms``: end-to-end latency (send to the consumer's poll returning it) of a producer
  paced at ``--e2e-rate`` records/s; ``e2e_acks1_rf1_p50_ms`` the same at acks=1 on an RF 1 topic; beside them
  (not goals) ``e2e_linger1_p50_ms`` / ``e2e_linger1_p99_ms`` and ``e2e_acks1_rf1_linger1_p50_ms`` at ``linger.ms``
  1, since at the default 5 a record waits a median ~2.5 ms for its batch before it is sent;
- ``replica_uss_mib``: USS of the replica processes per replica (``detail.replica_memory``); with
  ``--host-partitions N`` (``replica.host.max.partitions``) up to N of a broker's replicas share one ReplicaHost
  process, and every figure runs in that mode (unset: the brokers' default, 64);
- ``idle_cores``: CPU cores used by every process of the Ray instance (raylet, GCS, agents, actors) with one 6 x RF 3
  topic (each figure runs with only its own topic: an idle replica costs ~0.01 cores) while the
  cluster sits idle with its topics, over ``--idle-window`` seconds after the load stopped;
- ``http_records_per_s``: produce through the Serve gateway at 10,000 records per request (benchmarks/http_bench.py).

The goals (issue 17): send >= 300k, send_batch >= 1M, consume >= 1.5M, group consume (3 members) >= 800k records/s;
e2e p50 <= 5 ms and p99 <= 15 ms (acks=1 p50 <= 2 ms); topic create <= 2 s; <= 50 MiB USS per replica;
cluster start <= 5 s; HTTP >= 100k records/s; idle <= 0.05 cores. ``goals`` in the output says which are met.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_util import (  # noqa: E402
    add_host_partitions_arg,
    host_config,
    replica_memory,
    replica_pools,
    wait_pools_full,
)

import rafka  # noqa: E402
from actors.replication.replica_config import HOST_MAX_PARTITIONS_DEFAULT  # noqa: E402
from rafka import TopicPartition  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

VALUE = 100
PARTITIONS = 6
TOPIC_CONF = {"min.insync.replicas": "2"}
GOALS = {
    "send_records_per_s": (">=", 300_000),
    "send_batch_records_per_s": (">=", 1_000_000),
    "consume_records_per_s": (">=", 1_500_000),
    "group_consume_records_per_s": (">=", 800_000),
    "e2e_p50_ms": ("<=", 5),
    "e2e_p99_ms": ("<=", 15),
    "e2e_acks1_rf1_p50_ms": ("<=", 2),
    "topic_create_s": ("<=", 2),
    "replica_uss_mib": ("<=", 50),
    "cluster_start_s": ("<=", 5),
    "http_records_per_s": (">=", 100_000),
    "idle_cores": ("<=", 0.05),
}


def latency_summary(lat: list[float]) -> dict:
    """Record count, p50, p99 and max of latencies in milliseconds (peers_bench uses it too)."""
    s = sorted(lat)
    return {
        "records": len(s),
        "p50_ms": round(statistics.median(s), 3),
        "p99_ms": round(s[min(len(s) - 1, int(0.99 * len(s)))], 3),
        "max_ms": round(s[-1], 3),
    }


def wait_high_watermarks(admin, topic: str, partitions: int, total: int, timeout_s: float = 120) -> None:
    tps = {TopicPartition(topic, p): "latest" for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    while sum(o.offset for o in admin.list_offsets(tps).values()) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic}: the high watermarks did not reach {total}")
        time.sleep(0.05)


def bench_send(cluster, topic: str, n: int, **producer_conf) -> dict:
    value = os.urandom(VALUE)
    with rafka.Producer(cluster, **producer_conf) as p:
        p.send(topic, value).get(60)  # metadata and producer id outside the timing
        t0 = time.perf_counter()
        for _ in range(n):
            p.send(topic, value)
        p.flush()
        dt = time.perf_counter() - t0
    return {"records": n, "seconds": round(dt, 2), "records_per_s": round(n / dt)}


def bench_send_batch(
    cluster, topic: str, n: int, per_call: int = 10_000, value_bytes: int = VALUE, **producer_conf
) -> dict:
    """``send_batch`` calls of ``per_call`` records of ``value_bytes`` each, then ``flush``."""
    value = os.urandom(value_bytes)
    chunk = [(None, value)] * per_call
    with rafka.Producer(cluster, **producer_conf) as p:
        p.send(topic, value).get(60)
        t0 = time.perf_counter()
        sent = 0
        while sent < n:
            k = min(per_call, n - sent)
            p.send_batch(topic, chunk if k == per_call else chunk[:k])
            sent += k
        p.flush()
        dt = time.perf_counter() - t0
    return {
        "records": n,
        "records_per_call": per_call,
        "seconds": round(dt, 2),
        "records_per_s": round(n / dt),
        "mb_per_s": round(n * value_bytes / dt / 1e6, 1),
    }


def bench_consume(
    cluster, topic: str, total: int, partitions: int = PARTITIONS, value_bytes: int = VALUE, **consumer_conf
) -> dict:
    """One consumer assigned every partition from the start until it has ``total`` records."""
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", **consumer_conf)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < total and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            got += len(recs)
    dt = time.perf_counter() - t0
    c.close()
    done = got >= total
    return {
        "records": got,
        "seconds": round(dt, 2),
        "records_per_s": round(got / dt) if done else None,
        "mb_per_s": round(got * value_bytes / dt / 1e6, 1) if done else None,
    }


def bench_e2e(cluster, topic: str, rate: int, seconds: float, partitions: int, **producer_conf) -> dict:
    """A producer paced at ``rate`` records/s stamps each value with its send time; a consumer assigned every
    partition at its end measures send -> poll-returned latency."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c = rafka.Consumer(cluster, auto_offset_reset="latest", fetch_max_wait_ms=500)
    c.assign(tps)
    c.seek_to_end(*tps)
    for tp in tps:
        c.position(tp)
    lat: list[float] = []
    expected = int(rate * seconds)
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set() and len(lat) < expected:
            for recs in c.poll(timeout_ms=200).values():
                now = time.perf_counter_ns()
                lat.extend((now - struct.unpack_from(">q", r.value)[0]) / 1e6 for r in recs)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    pad = b"x" * (VALUE - 8)
    with rafka.Producer(cluster, **producer_conf) as p:
        p.send(topic, struct.pack(">q", time.perf_counter_ns()) + pad).get(60)
        t0 = time.perf_counter()
        for i in range(expected):
            target = t0 + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            p.send(topic, struct.pack(">q", time.perf_counter_ns()) + pad)
        p.flush()
    reader.join(30)
    stop.set()
    c.close()
    lat = lat[1:] if len(lat) > expected else lat  # the warm-up record
    if not lat:
        return {"records": 0}
    return {"rate": rate, **latency_summary(lat)}


def warm_up_groups(cluster, topic: str) -> float:
    """The first group a cluster sees makes it create __consumer_offsets and load its coordinators: done here,
    outside the group figure, by one member joining a throwaway group until it has an assignment."""
    t0 = time.perf_counter()
    c = rafka.Consumer(cluster, group_id="client-bench-warm-up")
    c.subscribe([topic])
    deadline = time.monotonic() + 120
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(timeout_ms=200)
    c.close()
    return round(time.perf_counter() - t0, 2)


def idle_cores(window_s: float, settle_s: float) -> dict:
    """CPU used by every process of this Ray instance (found by the files they hold open in its session
    directory), except this driver, over ``window_s`` seconds."""
    import ray

    from rafka.cli.clusterctl import ray_processes

    session = ray._private.worker._global_node.get_session_dir_path()
    time.sleep(settle_s)
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(pid: int) -> float | None:
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(f[11]) + int(f[12])) / tick

    pids = ray_processes(session) - {os.getpid()}
    before = {p: cpu(p) for p in pids}
    time.sleep(window_s)
    used = 0.0
    for p, b in before.items():
        a = cpu(p)
        if a is not None and b is not None:
            used += a - b
    return {"processes": len(pids), "window_s": window_s, "cores": round(used / window_s, 3)}


def bench_http(cluster, topic: str, seconds: float) -> dict:
    from http_bench import run_case

    from rafka.cli.clusterctl import free_port
    from serve.gateway import start_gateway, stop_gateway

    url = start_gateway(cluster, port=free_port())
    try:
        return run_case(url, topic, "msgpack", 10_000, VALUE, 2, seconds)
    finally:
        stop_gateway()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000, help="records for send (and consume)")
    ap.add_argument("--batch-records", type=int, default=1_000_000, help="records for send_batch (and group consume)")
    ap.add_argument("--e2e-rate", type=int, default=5000)
    ap.add_argument("--e2e-seconds", type=float, default=10.0)
    ap.add_argument("--idle-window", type=float, default=20.0)
    ap.add_argument("--http-seconds", type=float, default=10.0)
    ap.add_argument("--no-http", action="store_true", help="skip the Serve gateway figure")
    add_host_partitions_arg(ap)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    stdout = claim_stdout()
    from group_bench import group_consume

    out: dict = {
        "value_bytes": VALUE,
        "partitions": PARTITIONS,
        "replication_factor": 3,
        "host_partitions": a.host_partitions or HOST_MAX_PARTITIONS_DEFAULT,
    }
    detail: dict = {}
    with tempfile.TemporaryDirectory(prefix="rafka-client-bench-") as data_dir:
        t0 = time.perf_counter()
        hosted = host_config(a.host_partitions)
        cluster = rafka.LocalCluster(brokers=3, data_dir=data_dir, name="clientbench", broker_config=hosted)
        out["cluster_start_s"] = round(time.perf_counter() - t0, 2)
        try:
            admin = rafka.Admin(cluster)
            # the brokers start their warm replica pools in the background once registered: the create of a
            # running cluster's topic is measured once they are full (the fill time is its own figure)
            out["replica_pool_fill_s"] = wait_pools_full(cluster)
            t0 = time.perf_counter()
            admin.create_topic("send", PARTITIONS, 3, TOPIC_CONF)
            out["topic_create_s"] = round(time.perf_counter() - t0, 2)
            detail["replica_pools_after_create"] = replica_pools(cluster)
            detail["pool_refill_s_send"] = wait_pools_full(cluster)  # timed runs start with full pools
            # each figure sees only its own topic: an idle replica costs ~0.01 cores (docs/internals.md, cost
            # model), so topics left behind would tax every later figure
            detail["send"] = bench_send(cluster, "send", a.records)
            out["send_records_per_s"] = detail["send"]["records_per_s"]
            wait_high_watermarks(admin, "send", PARTITIONS, a.records + 1)
            detail["consume"] = bench_consume(cluster, "send", a.records + 1)
            out["consume_records_per_s"] = detail["consume"]["records_per_s"]
            admin.delete_topics(["send"])

            admin.create_topic("batch", PARTITIONS, 3, TOPIC_CONF)
            detail["pool_refill_s_batch"] = wait_pools_full(cluster)  # timed runs start with full pools
            detail["send_batch"] = bench_send_batch(cluster, "batch", a.batch_records)
            out["send_batch_records_per_s"] = detail["send_batch"]["records_per_s"]
            wait_high_watermarks(admin, "batch", PARTITIONS, a.batch_records + 1)
            detail["group_warm_up_s"] = warm_up_groups(cluster, "batch")
            detail["group_consume"] = group_consume(cluster, "batch", PARTITIONS, 3, 10, 300)
            out["group_consume_records_per_s"] = detail["group_consume"]["records_per_s_after_first_record"]
            admin.delete_topics(["batch"])

            # beside the goal (not one): the same with batch.size 1,000,000 (send_batch's own batches are bulk
            # ones, up to max.message.bytes, either way: rafka/producer/send_batch.py bulk_bytes)
            admin.create_topic("batch-1mb", PARTITIONS, 3, TOPIC_CONF)
            detail["pool_refill_s_batch-1mb"] = wait_pools_full(cluster)
            detail["send_batch_1mb"] = bench_send_batch(cluster, "batch-1mb", a.batch_records, batch_size=1_000_000)
            out["send_batch_1mb_records_per_s"] = detail["send_batch_1mb"]["records_per_s"]
            admin.delete_topics(["batch-1mb"])

            admin.create_topic("e2e", PARTITIONS, 3, TOPIC_CONF)
            detail["pool_refill_s_e2e"] = wait_pools_full(cluster)  # timed runs start with full pools
            detail["e2e"] = bench_e2e(cluster, "e2e", a.e2e_rate, a.e2e_seconds, PARTITIONS)
            out["e2e_p50_ms"], out["e2e_p99_ms"] = detail["e2e"].get("p50_ms"), detail["e2e"].get("p99_ms")
            # the same at linger.ms 1: at the default 5 a record waits a median ~2.5 ms for its batch to go
            detail["e2e_linger1"] = bench_e2e(cluster, "e2e", a.e2e_rate, a.e2e_seconds, PARTITIONS, linger_ms=1)
            out["e2e_linger1_p50_ms"] = detail["e2e_linger1"].get("p50_ms")
            out["e2e_linger1_p99_ms"] = detail["e2e_linger1"].get("p99_ms")
            admin.delete_topics(["e2e"])
            admin.create_topic("e2e-rf1", PARTITIONS, 1)
            detail["pool_refill_s_e2e-rf1"] = wait_pools_full(cluster)  # timed runs start with full pools
            detail["e2e_acks1_rf1"] = bench_e2e(cluster, "e2e-rf1", a.e2e_rate, a.e2e_seconds, PARTITIONS, acks=1)
            out["e2e_acks1_rf1_p50_ms"] = detail["e2e_acks1_rf1"].get("p50_ms")
            detail["e2e_acks1_rf1_linger1"] = bench_e2e(
                cluster, "e2e-rf1", a.e2e_rate, a.e2e_seconds, PARTITIONS, acks=1, linger_ms=1
            )
            out["e2e_acks1_rf1_linger1_p50_ms"] = detail["e2e_acks1_rf1_linger1"].get("p50_ms")
            admin.delete_topics(["e2e-rf1"])

            # the idle figure: the cluster with one 6 x RF 3 topic (and __consumer_offsets), nothing running
            admin.create_topic("http", PARTITIONS, 3, TOPIC_CONF)
            detail["replica_memory"] = replica_memory(cluster)
            out["replica_uss_mib"] = detail["replica_memory"]["uss_mib_per_replica"]
            detail["idle"] = idle_cores(a.idle_window, settle_s=5)
            out["idle_cores"] = detail["idle"]["cores"]

            if not a.no_http:
                detail["http"] = bench_http(cluster, "http", a.http_seconds)
                out["http_records_per_s"] = detail["http"].get("records_per_s")
        finally:
            cluster.stop()
    out["goals"] = {
        k: (out[k] >= goal if op == ">=" else out[k] <= goal)
        for k, (op, goal) in GOALS.items()
        if out.get(k) is not None
    }
    out["detail"] = detail
    print(json.dumps(out, indent=None if a.json else 2), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
