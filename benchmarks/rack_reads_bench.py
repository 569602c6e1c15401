"""KIP-392 fetch from follower: the consumer bytes that cross racks, with and without ``client.rack``, on one
embedded 3-broker LocalCluster whose brokers are in racks az-0, az-1, az-2 (``replica.selector.class``
RackAwareReplicaSelector), a topic of 3 partitions, RF 3 (one leader per broker).

    python benchmarks/rack_reads_bench.py --json [--mb 8] [--value-bytes 1000]

For each rack in turn, a confluent-kafka (librdkafka) consumer in that rack reads the whole topic from the
start (assign), once without ``client.rack`` (every partition from its leader) and once with it. What each
replica served to consumers is read from its own counters (its metrics' ``bytes_out``, consumer fetches only):
``cross_rack_bytes`` are the bytes served by brokers of another rack than the consumer's. Also the records/s of
each read (on a 2-core machine shared with the brokers: compare within one run only)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rafka  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
PARTITIONS = 3


def served(cluster, topic: str) -> dict[int, int]:
    """Consumer bytes each broker's replicas of ``topic`` served so far (their metrics' ``bytes_out``)."""
    import ray

    out = {}
    for b, broker in cluster.server.brokers.items():
        handles = [ray.get(broker.replica_handle.remote(topic, p), timeout=30) for p in range(PARTITIONS)]
        out[b] = sum(m["counters"]["bytes_out"] for m in ray.get([h.metrics.remote() for h in handles], timeout=30))
    return out


def consume_all(bootstrap: str, topic: str, n: int, rack: str | None) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": "rr-" + uuid.uuid4().hex[:6], "enable.auto.commit": False}
    if rack is not None:
        conf["client.rack"] = rack
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, t0 = 0, time.perf_counter()
    deadline = t0 + 120
    try:
        while got < n and time.perf_counter() < deadline:
            for msg in c.consume(1000, 0.2):
                if msg.error() is None:
                    got += 1
    finally:
        c.close()
    s = time.perf_counter() - t0
    return {"records": got, "seconds": round(s, 2), "records_per_s": round(got / s) if s else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=8.0, help="MB of values produced")
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()
    stdout = claim_stdout()
    n = int(args.mb * 1e6 / args.value_bytes)
    racks = {b: f"az-{b}" for b in range(3)}
    with tempfile.TemporaryDirectory(prefix="rafka-rackbench-") as d:
        cluster = rafka.LocalCluster(
            brokers=3,
            data_dir=d,
            name="rackbench" + uuid.uuid4().hex[:6],
            broker_config={
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "replica.selector.class": RACK_AWARE,
                **{f"broker.{b}.broker.rack": r for b, r in racks.items()},
            },
        )
        try:
            from confluent_kafka import Producer

            topic = "rr-" + uuid.uuid4().hex[:6]
            admin = rafka.Admin(cluster)
            admin.create_topic(topic, num_partitions=PARTITIONS, replication_factor=3)
            leaders = {p["partition"]: p["leader"] for p in admin.describe_topics([topic])[0]["partitions"]}
            p = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 20})
            value = b"x" * args.value_bytes
            for i in range(n):
                while True:
                    try:
                        p.produce(topic, value=value, partition=i % PARTITIONS)
                        break
                    except BufferError:
                        p.poll(0.05)
            assert p.flush(60) == 0
            del p  # its threads would reconnect to the brokers while they stop
            res: dict = {
                "brokers": 3,
                "racks": racks,
                "partitions": PARTITIONS,
                "leaders": leaders,
                "records": n,
                "value_bytes": args.value_bytes,
            }
            time.sleep(1.0)  # followers learn the final HW
            for mode in ("without_client_rack", "with_client_rack"):
                runs, total, cross = {}, 0, 0
                for rack in racks.values():
                    before = served(cluster, topic)
                    run = consume_all(cluster.bootstrap_servers, topic, n, rack if mode == "with_client_rack" else None)
                    after = served(cluster, topic)
                    by_broker = {x: after[x] - before[x] for x in after}
                    run["bytes_by_broker"] = by_broker
                    run["cross_rack_bytes"] = sum(v for x, v in by_broker.items() if racks[x] != rack)
                    runs[rack] = run
                    total += sum(by_broker.values())
                    cross += run["cross_rack_bytes"]
                res[mode] = {
                    "consumers": runs,
                    "bytes": total,
                    "cross_rack_bytes": cross,
                    "cross_rack_fraction": round(cross / total, 3) if total else None,
                }
            res["cpus"] = os.cpu_count()
        finally:
            cluster.stop()
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    ok = all(
        r["records"] == n for m in ("without_client_rack", "with_client_rack") for r in res[m]["consumers"].values()
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
