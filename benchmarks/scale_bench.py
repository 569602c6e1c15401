"""How rafka's cost grows with partitions and with record size, on one embedded 3-broker LocalCluster.

    python benchmarks/scale_bench.py --json [--partitions 1,6,24,96] [--rf 3] [--sizes 100,1000,10000,100000]

(a) Per partition count P (a fresh topic of P partitions x ``--rf``, min.insync.replicas 2 when RF 3):
topic create time; ``send_batch`` throughput (acks=all) and one consumer's throughput over ``--records``
100-byte records; end-to-end latency p50/p99 at 1,000 records/s; the cluster's process count, mean replica
USS and the idle CPU of every process of the Ray instance after the topic exists. A replica is one Ray actor
(one process, ~60-70 MiB) unless ``--host-partitions`` N > 1 puts up to N of a broker's replicas in one
ReplicaHost process (``replica.host.max.partitions``, 64 by default): a point whose replica processes would not
fit in the machine's available memory (with
``--memory-headroom-gib`` left over) is skipped and reported with its projected memory instead of being run.

(b) Per record size (a 6-partition topic of ``--rf``): ``send_batch`` and consume records/s and MB/s with
about ``--size-bytes`` of values per size.

Topics of earlier points are deleted before the next one, so each point is measured with only its own topic.
``--cost-only`` measures only what a partition costs (create time, memory, idle CPU; no traffic, no record
sizes), first the idle cluster without topics (``idle_no_topics``), and waits for the brokers' warm hosts (or
pools) before each create.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402  (ray depends on it)
from bench_util import add_host_partitions_arg, host_config, replica_memory, wait_pools_full  # noqa: E402

import rafka  # noqa: E402
from actors.replication.replica_config import HOST_MAX_PARTITIONS_DEFAULT  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402


def send_batch(cluster, topic: str, n: int, size: int, per_call_bytes: int = 1 << 20) -> dict:
    from client_bench import bench_send_batch

    per_call = max(1, min(10_000, per_call_bytes // size))
    res = bench_send_batch(cluster, topic, n, per_call, size, max_request_size=max(1 << 20, 2 * size + 1024))
    return {k: res[k] for k in ("records_per_s", "mb_per_s")}


def consume(cluster, topic: str, partitions: int, total: int, size: int) -> dict:
    from client_bench import bench_consume

    res = bench_consume(cluster, topic, total, partitions, size, max_partition_fetch_bytes=max(1 << 20, 2 * size))
    return {k: res[k] for k in ("records_per_s", "mb_per_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1,6,24,96")
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--size-bytes", type=int, default=100_000_000, help="value bytes sent per record size")
    ap.add_argument("--idle-window", type=float, default=10.0)
    ap.add_argument("--replica-mib", type=float, default=70.0, help="memory one replica actor needs (projection)")
    ap.add_argument("--memory-headroom-gib", type=float, default=4.0)
    add_host_partitions_arg(ap)
    ap.add_argument("--cost-only", action="store_true", help="create time, memory and idle CPU only")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    stdout = claim_stdout()
    from client_bench import bench_e2e, idle_cores, wait_high_watermarks

    by_partitions, by_size = [], []
    idle_no_topics = None
    with tempfile.TemporaryDirectory(prefix="rafka-scale-bench-") as data_dir:
        hosted = host_config(a.host_partitions)
        cluster = rafka.LocalCluster(brokers=3, data_dir=data_dir, name="scalebench", broker_config=hosted)
        admin = rafka.Admin(cluster)
        conf = {"min.insync.replicas": "2"} if a.rf == 3 else None
        try:
            if a.cost_only:
                wait_pools_full(cluster)
                idle_no_topics = idle_cores(a.idle_window, settle_s=3)
            for p in (int(x) for x in a.partitions.split(",")):
                per_host = a.host_partitions or HOST_MAX_PARTITIONS_DEFAULT
                processes = p * a.rf if per_host == 1 else 3 * -(-p * a.rf // (3 * per_host))
                projected = processes * a.replica_mib / 1024
                available = psutil.virtual_memory().available / 2**30
                row: dict = {"partitions": p, "replicas": p * a.rf, "projected_replica_gib": round(projected, 1)}
                if projected > available - a.memory_headroom_gib:
                    row["skipped"] = (
                        f"{p * a.rf} replica actors need ~{projected:.1f} GiB; {available:.1f} GiB available"
                    )
                    by_partitions.append(row)
                    continue
                topic = f"scale-p{p}"
                if a.cost_only:
                    wait_pools_full(cluster)
                t0 = time.perf_counter()
                admin.create_topic(topic, p, a.rf, conf)
                row["topic_create_s"] = round(time.perf_counter() - t0, 2)
                if not a.cost_only:
                    row["send_batch"] = send_batch(cluster, topic, a.records, 100)
                    wait_high_watermarks(admin, topic, p, a.records + 1)
                    row["consume"] = consume(cluster, topic, p, a.records + 1, 100)
                    e2e = bench_e2e(cluster, topic, 1000, 3, p)
                    row["e2e_p50_ms"], row["e2e_p99_ms"] = e2e.get("p50_ms"), e2e.get("p99_ms")
                row["replica_memory"] = replica_memory(cluster)
                deadline = time.monotonic() + 30  # the create answers once the leaders run; followers bind after
                while row["replica_memory"]["replicas"] < p * a.rf and time.monotonic() < deadline:
                    time.sleep(0.2)
                    row["replica_memory"] = replica_memory(cluster)
                idle = idle_cores(a.idle_window, settle_s=3)
                row["ray_processes"], row["idle_cores"] = idle["processes"], idle["cores"]
                by_partitions.append(row)
                if not a.json:
                    print(json.dumps(row), file=sys.stderr)
                admin.delete_topics([topic])
            for size in () if a.cost_only else (int(x) for x in a.sizes.split(",")):
                topic = f"scale-s{size}"
                admin.create_topic(topic, 6, a.rf, {**(conf or {}), "max.message.bytes": str(max(1 << 20, 2 * size))})
                n = max(1000, a.size_bytes // size)
                row = {"value_bytes": size, "records": n, "send_batch": send_batch(cluster, topic, n, size)}
                wait_high_watermarks(admin, topic, 6, n + 1)
                row["consume"] = consume(cluster, topic, 6, n + 1, size)
                by_size.append(row)
                if not a.json:
                    print(json.dumps(row), file=sys.stderr)
                admin.delete_topics([topic])
        finally:
            cluster.stop()
    out = {
        "brokers": 3,
        "replication_factor": a.rf,
        "host_partitions": a.host_partitions or HOST_MAX_PARTITIONS_DEFAULT,
        "idle_no_topics": idle_no_topics,
        "by_partitions": by_partitions,
        "by_record_size": by_size,
    }
    print(json.dumps(out, indent=None if a.json else 2), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
