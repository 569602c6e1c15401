"""Producer latency during a throttled replica move, beside the same load without a move, on an embedded 3-broker
LocalCluster (one run, one Ray session):

    python benchmarks/throttle_bench.py --json [--move-mib 48] [--rate-mib 4] [--load-rate 200] [--baseline-s 15]

A librdkafka producer (confluent-kafka, acks=all, idempotent, in a process of its own as benchmarks/wire_clients.py
explains) sends ``--load-rate`` records/s of 1 KiB to a 3-partition RF 3 topic (min.insync.replicas 2) for the whole
run; each record's latency is its send-to-acknowledgement time. While it runs, by send time:

- ``baseline``: ``--baseline-s`` seconds without a move;
- ``throttled_move``: a partition of ``--move-mib`` MiB moved from broker 0 to broker 1 with its
  ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas`` naming both replicas, the
  brokers' ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` at ``--rate-mib`` MiB/s;
- ``unthrottled_move``: the same move of another partition of the same size, not listed (not throttled);
- ``baseline_after``: ``--baseline-s`` seconds without a move again (drift of the machine during the run).

Each phase gives p50/p99/max latency and its records; each move its seconds and MiB/s. Broker configs are Kafka's
defaults except BROKER_CONFIG (``replication.quota.window.num`` 2: Kafka's 11 lets the first 10 s of a move through
at any speed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
VALUE_BYTES = 1024
MOVE_VALUE_BYTES = 64 << 10
V4 = {"broker.address.family": "v4"}


def load(spec: dict) -> None:
    """The load process: paced produce until ``spec["stop"]`` exists; prints [[send wall time, latency ms or -1]]."""
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": spec["bootstrap"], "acks": "all", "enable.idempotence": True, "linger.ms": 1, **V4}
    )
    value = os.urandom(VALUE_BYTES)
    for i in range(3):  # connections, metadata and the producer id before the first timed record
        p.produce(spec["topic"], value, partition=i)
    p.flush(60)
    out: list[list[float]] = []
    period = 1.0 / spec["rate"]
    nxt = time.monotonic()
    i = 0
    while not os.path.exists(spec["stop"]):
        wall, t0 = time.time(), time.perf_counter()

        def done(err, _m, wall=wall, t0=t0):
            out.append([wall, -1.0 if err else (time.perf_counter() - t0) * 1000])

        p.produce(spec["topic"], value, partition=i % 3, on_delivery=done)
        i += 1
        nxt = max(nxt + period, time.monotonic())  # behind (a stall): no catch-up burst, the missed sends are skipped
        while (left := nxt - time.monotonic()) > 0:  # poll returns at its first callback: poll until the next send
            p.poll(left)
    p.flush(120)
    print(json.dumps(out))


def quantiles(samples: list[list[float]], start: float, end: float) -> dict:
    lat = [ms for wall, ms in samples if start <= wall < end and ms >= 0]
    errors = sum(1 for wall, ms in samples if start <= wall < end and ms < 0)
    if len(lat) < 2:
        return {"records": len(lat), "errors": errors}
    q = statistics.quantiles(lat, n=100)
    return {
        "seconds": round(end - start, 2),
        "records": len(lat),
        "errors": errors,
        "p50_ms": round(statistics.median(lat), 2),
        "p99_ms": round(q[98], 2),
        "max_ms": round(max(lat), 2),
    }


def fill(bootstrap: str, topic: str, nbytes: int) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 16, **V4})
    n = nbytes // MOVE_VALUE_BYTES
    for _ in range(n):
        while True:
            try:
                p.produce(topic, os.urandom(MOVE_VALUE_BYTES), partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0
    return n * MOVE_VALUE_BYTES


def move(admin, topic: str, target: int, timeout_s: float = 900) -> tuple[float, float]:
    """(wall start, wall end) of moving ``topic``'s partition 0 to ``[target]`` until the controller shows it done."""
    start = time.time()
    admin.alter_partition_reassignments({(topic, 0): [target]})
    while True:
        (p,) = admin.describe_topics([topic])[0]["partitions"]
        if p["replicas"] == [target] and p["leader"] == target:
            return start, time.time()
        if time.time() - start > timeout_s:
            raise TimeoutError(f"{topic} not moved in {timeout_s} s: {p}")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--move-mib", type=int, default=48)
    ap.add_argument("--rate-mib", type=float, default=4.0)
    ap.add_argument("--load-rate", type=int, default=200, help="records/s of the producer under measure")
    ap.add_argument("--baseline-s", type=float, default=15.0)
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()

    sys.path.insert(0, os.path.dirname(HERE))
    import rafka
    from rafka.output import claim_stdout

    stdout = claim_stdout()
    rate = int(args.rate_mib * (1 << 20))
    broker_config = {
        "leader.replication.throttled.rate": rate,
        "follower.replication.throttled.rate": rate,
        "replication.quota.window.num": 2,
        "replication.quota.window.size.seconds": 1,
    }
    res: dict = {"cpus": os.cpu_count(), "broker_config": broker_config, "load": {}}
    with tempfile.TemporaryDirectory(prefix="rafka-tbench-") as d:
        cluster = rafka.LocalCluster(
            brokers=3, data_dir=d, name="tbench" + uuid.uuid4().hex[:6], broker_config=broker_config
        )
        proc = None
        try:
            admin = rafka.Admin(cluster)
            bootstrap = cluster.bootstrap_servers
            admin.create_topic("load", 3, 3, {"min.insync.replicas": "2"})
            throttled = {
                "leader.replication.throttled.replicas": "0:0",
                "follower.replication.throttled.replicas": "0:1",
            }
            admin.create_topic("bulk-throttled", 1, 1, throttled, replica_assignment=[[0]])
            admin.create_topic("bulk-free", 1, 1, {}, replica_assignment=[[0]])
            nbytes = fill(bootstrap, "bulk-throttled", args.move_mib << 20)
            fill(bootstrap, "bulk-free", args.move_mib << 20)

            stop = os.path.join(d, "stop")
            spec = {"bootstrap": bootstrap, "topic": "load", "rate": args.load_rate, "stop": stop}
            proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "load", json.dumps(spec)], stdout=subprocess.PIPE, text=True
            )
            time.sleep(5)  # the load's connections and producer id, outside every phase
            phases = {}
            t = time.time()
            time.sleep(args.baseline_s)
            phases["baseline"] = (t, time.time())
            phases["throttled_move"] = move(admin, "bulk-throttled", 1)
            time.sleep(3)
            phases["unthrottled_move"] = move(admin, "bulk-free", 1)
            time.sleep(3)
            t = time.time()
            time.sleep(args.baseline_s)
            phases["baseline_after"] = (t, time.time())
            open(stop, "w").close()
            out, _ = proc.communicate(timeout=300)
            samples = json.loads(out.strip().splitlines()[-1])
            for name, (a, b) in phases.items():
                res["load"][name] = quantiles(samples, a, b)
                if name.endswith("_move"):
                    res["load"][name]["move_mib_per_s"] = round(nbytes / (b - a) / (1 << 20), 2)
            res.update(
                move_mib=round(nbytes / (1 << 20), 1),
                rate_mib_per_s=args.rate_mib,
                load_records_per_s=args.load_rate,
                load_value_bytes=VALUE_BYTES,
            )
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
            cluster.stop()
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "load":
        load(json.loads(sys.argv[2]))
    else:
        sys.exit(main())
