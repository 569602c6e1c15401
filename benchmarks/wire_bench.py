"""Kafka clients through rafka's wire listener, beside rafka's own Python client, on one embedded 3-broker
LocalCluster (RF 3, min.insync.replicas 2, acks=all, idempotent, 100 B values, 6 partitions).

    python benchmarks/wire_bench.py --json [--records 300000] [--latency-records 2000]

In one run, side by side, each on its own topic:

- ``librdkafka_produce``: confluent-kafka's Producer (librdkafka) through the listeners: records/s, MB/s
  (values), and the produce latency p50/p99 (send to delivery report) of a paced run at ~1,000 records/s;
- ``librdkafka_produce_errors_only``: the same throughput run with ``delivery.report.only.error`` (no Python
  callback per message, as ``rafka_produce`` registers none), on its own topic;
- ``rafka_produce``: rafka.Producer (``send`` per record) on the same workload, and the same latency run;
- ``librdkafka_consume`` / ``rafka_consume``: one consumer reading the librdkafka topic from the start
  (assign, read_uncommitted), records/s and MB/s; ``librdkafka_consume_queue_backoff_10ms`` the librdkafka one
  with ``fetch.queue.backoff.ms`` 10 instead of its default 1000 (the pause after its local queue fills).

The librdkafka clients run in a Python process of their own (benchmarks/wire_clients.py: as in a user's
application, not in this process, which holds the Ray driver and the embedded cluster, whose heap their
per-message objects made Python's cyclic collector walk); rafka's client runs here, in the driver.

Each throughput figure comes with ``client_cpu_cores`` (the client's process and its threads) and
``cluster_cpu_cores`` (the ``ray::`` actor processes) over its run: on a 2-core machine a client that uses
most of a core per 40k records/s caps the figure whatever the server does. Each producer starts once the
brokers' warm pools of replica actors are full again (``pools_fill_s``: the first wait, after creating the
topics), so the paced latency run is not measured against a cluster busy starting actors.

The issue's goals: librdkafka's producer >= 200k records/s and consumer >= 500k records/s, and no slower
than rafka's Python client on the same workload.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_util import CpuMeter, wait_pools_full  # noqa: E402
from wire_clients import PARTITIONS, V4, VALUE_BYTES, _q, _rate  # noqa: E402

import rafka  # noqa: E402
from rafka import TopicPartition  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire_clients.py")


def in_own_process(kind: str, **args) -> dict:
    """A librdkafka run (benchmarks/wire_clients.py) in a fresh Python process, as a Kafka client runs in the
    user's application: its figures, CPU of that process and of the cluster's actors included."""
    out = subprocess.run(
        [sys.executable, CLIENTS, kind, json.dumps(args)], capture_output=True, text=True, timeout=600, check=False
    )
    if out.returncode:
        raise RuntimeError(f"wire_clients.py {kind} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def rafka_produce(cluster, topic: str, n: int, lat_n: int) -> dict:
    value = os.urandom(VALUE_BYTES)
    p = rafka.Producer(cluster, acks="all", enable_idempotence=True, linger_ms=5)
    for f in [p.send(topic, value, partition=i) for i in range(PARTITIONS)]:  # connections and producer id first
        f.get(60)
    lat: list[float] = []
    futs = []
    for i in range(lat_n):
        t0 = time.perf_counter()
        f = p.send(topic, value, partition=i % PARTITIONS)
        f.add_callback(lambda _md, t0=t0: lat.append((time.perf_counter() - t0) * 1000))
        futs.append(f)
        time.sleep(0.001)
    p.flush()
    t = time.monotonic()
    cpu = CpuMeter()
    for i in range(n):
        p.send(topic, value, partition=i % PARTITIONS)
    p.flush()
    out = _rate(n, time.monotonic() - t)
    out.update(cpu.stop())
    p.close()
    out.update(_q(lat))
    return out


def warm_up_groups(bootstrap: str, topic: str) -> None:
    """A consumer with a group.id makes the cluster create __consumer_offsets and its coordinators (15 replica
    actors and more on the first FindCoordinator): done before timing, as on any running Kafka cluster. A cold
    run measured that creation (23k records/s) instead of the fetch path (165k-676k warm, one sitting)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "warm-up", "enable.auto.commit": False, **V4})
    c.assign([CTP(topic, 0, 0)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [m for m in c.consume(num_messages=1, timeout=1.0) if not m.error()]:
        pass
    from confluent_kafka import KafkaException

    try:
        while True:  # reaches the group coordinator: __consumer_offsets exists and is led (it may still move)
            try:
                c.commit(asynchronous=False)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()
    time.sleep(3)


def rafka_consume(cluster, topic: str, n: int) -> dict:
    c = rafka.Consumer(cluster, auto_offset_reset="earliest", max_poll_records=10000)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = 0
    t = time.monotonic()
    cpu = CpuMeter()
    while got < n and time.monotonic() - t < 300:
        got += sum(len(r) for r in c.poll(timeout_ms=1000).values())
    out = {**_rate(got, time.monotonic() - t), **cpu.stop()}
    c.close()
    return {**out, "complete": got >= n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--latency-records", type=int, default=2000)
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()
    stdout = claim_stdout()
    n = args.records
    with tempfile.TemporaryDirectory(prefix="rafka-wirebench-") as d:
        cluster = rafka.LocalCluster(
            brokers=3,
            data_dir=d,
            name="wirebench" + uuid.uuid4().hex[:6],
            broker_config={"listeners": "PLAINTEXT://127.0.0.1:0"},
        )
        try:
            admin = rafka.Admin(cluster)
            topics = {k: f"wb-{k}-{uuid.uuid4().hex[:6]}" for k in ("librdkafka", "librdkafka-eo", "rafka")}
            for name in topics.values():
                admin.create_topic(
                    name, num_partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"}
                )
            bootstrap = cluster.bootstrap_servers
            res: dict = {"brokers": 3, "replication_factor": 3, "partitions": PARTITIONS, "value_bytes": VALUE_BYTES}
            res["pools_fill_s"] = wait_pools_full(cluster)
            res["librdkafka_produce"] = in_own_process(
                "produce", bootstrap=bootstrap, topic=topics["librdkafka"], n=n, lat_n=args.latency_records
            )
            wait_pools_full(cluster)
            res["librdkafka_produce_errors_only"] = in_own_process(
                "produce", bootstrap=bootstrap, topic=topics["librdkafka-eo"], n=n, lat_n=0, errors_only=True
            )
            wait_pools_full(cluster)
            res["rafka_produce"] = rafka_produce(cluster, topics["rafka"], n, args.latency_records)
            warm_up_groups(bootstrap, topics["librdkafka"])
            res["librdkafka_consume"] = in_own_process("consume", bootstrap=bootstrap, topic=topics["librdkafka"], n=n)
            # librdkafka pauses a partition's fetching for fetch.queue.backoff.ms (1000 by default) each time its
            # local queue holds queued.min.messages (100,000, counted over every partition forwarded to the
            # consumer's queue): a client-side pacing that ends runs with the queue empty for most of a second
            # (librdkafka issue #2879; the setting exists since 2.3.0). The same consumer with it at 10 ms:
            res["librdkafka_consume_queue_backoff_10ms"] = in_own_process(
                "consume", bootstrap=bootstrap, topic=topics["librdkafka"], n=n, **{"fetch.queue.backoff.ms": 10}
            )
            res["rafka_consume"] = rafka_consume(cluster, topics["librdkafka"], n)
            res["cpus"] = os.cpu_count()
        finally:
            cluster.stop()
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    return 0 if res["librdkafka_consume"]["complete"] and res["rafka_consume"]["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
