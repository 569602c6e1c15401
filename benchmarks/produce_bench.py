"""Produce/consume throughput and latency of partition replicas, driven directly with pre-built batches.

    python benchmarks/produce_bench.py --json            # through start_cluster (brokers + controller)
    python benchmarks/produce_bench.py --json --direct   # replica actors only, hand-built LeaderAndIsr

Measures, for 100-byte records in RecordBatch v2 batches of ``--batch-kb`` (64 KiB) each, with
``--inflight`` produce calls outstanding: records/s, MB/s and per-call p50/p99 latency for acks=1 RF=1
and acks=all RF=3 (min.insync.replicas=2, 3 brokers); per-call latency at moderate load (``--light``
calls in flight); consume records/s (leader ``fetch`` + ``decode_records``); cluster start time;
memory (RSS/USS) per replica actor process. Starts its own local Ray instance and removes it at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil  # noqa: E402  (ray depends on it)
import ray  # noqa: E402

from storage.records import RecordBatchBuilder, decode_records, iter_batch_headers  # noqa: E402

VALUE_BYTES = 100


def build_batches(n: int, batch_bytes: int) -> tuple[list[bytes], int]:
    """``n`` distinct non-idempotent batches of 100-byte records; returns (batches, records per batch)."""
    payload = os.urandom(VALUE_BYTES * 64)
    out, per = [], 0
    for i in range(n):
        b = RecordBatchBuilder(batch_size=batch_bytes)
        j = 0
        while b.append(1_700_000_000_000 + i, None, payload[(j % 64) * VALUE_BYTES:(j % 64 + 1) * VALUE_BYTES]):
            j += 1
        per = b.record_count
        out.append(b.build())
    return out, per


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def drive(handle, batches: list[bytes], calls: int, acks: int, inflight: int, per_batch: int) -> dict:
    """``calls`` produce calls with ``inflight`` outstanding; per-call latency from submit to reply."""
    refs = [ray.put(b) for b in batches]  # stored once: each call ships an object-store reference
    pending: dict = {}
    lat: list[float] = []
    errors: dict[int, int] = {}
    sent = 0
    t0 = time.perf_counter()
    while sent < calls or pending:
        while sent < calls and len(pending) < inflight:
            ref = handle.produce.remote(refs[sent % len(refs)], acks, 30000)
            pending[ref] = time.perf_counter()
            sent += 1
        ready, _ = ray.wait(list(pending), num_returns=1)
        for r in ready:
            start = pending.pop(r)
            resp = ray.get(r)
            lat.append((time.perf_counter() - start) * 1000)
            if resp["error_code"]:
                errors[resp["error_code"]] = errors.get(resp["error_code"], 0) + 1
    dt = time.perf_counter() - t0
    nbytes = sum(len(batches[i % len(batches)]) for i in range(calls))
    recs = calls * per_batch
    return {"records": recs, "seconds": round(dt, 3), "records_per_s": round(recs / dt),
            "mb_per_s": round(nbytes / dt / 1e6, 1), "calls_per_s": round(calls / dt),
            "p50_ms": round(pct(lat, 0.5), 2), "p99_ms": round(pct(lat, 0.99), 2),
            "inflight": inflight, "errors": errors}


def consume(handle, end_offset: int, max_bytes: int) -> dict:
    """Read [0, end_offset) from the leader with large fetches, decoding every record."""
    t0 = time.perf_counter()
    offset, records, nbytes = 0, 0, 0
    fetch_s = decode_s = 0.0
    while offset < end_offset:
        t1 = time.perf_counter()
        resp = ray.get(handle.fetch.remote(offset, max_bytes, 0, 1, -1, -1, 0))
        t2 = time.perf_counter()
        assert resp["error_code"] == 0, resp
        buf = resp["records"]
        recs = decode_records(buf)
        t3 = time.perf_counter()
        fetch_s += t2 - t1
        decode_s += t3 - t2
        records += len(recs)
        nbytes += len(buf)
        last = None
        for _pos, h in iter_batch_headers(buf, validate=False):
            last = h
        offset = last.next_offset
    dt = time.perf_counter() - t0
    return {"records": records, "seconds": round(dt, 3), "records_per_s": round(records / dt),
            "mb_per_s": round(nbytes / dt / 1e6, 1), "fetch_s": round(fetch_s, 3),
            "decode_s": round(decode_s, 3), "decode_records_per_s": round(records / decode_s)}


def memory_of(handles) -> dict:
    rss, uss = [], []
    for h in handles:
        pid = ray.get(h.state.remote())["pid"]
        mi = psutil.Process(pid).memory_full_info()
        rss.append(mi.rss / 2**20)
        uss.append(mi.uss / 2**20)
    return {"replica_actors": len(handles), "rss_mib_mean": round(statistics.mean(rss), 1),
            "uss_mib_mean": round(statistics.mean(uss), 1), "rss_mib_max": round(max(rss), 1)}


# ---- two ways to stand replicas up ------------------------------------------------------------------

class DirectSetup:
    """Replica actors created by hand with LeaderAndIsr states (no controller: the ISR stays put)."""

    def __init__(self, cluster: str, root: str):
        self.cluster, self.root, self.actors = cluster, root, []

    def start(self, num_brokers: int) -> None:
        self.num_brokers = num_brokers

    def topic(self, name: str, rf: int, configs: dict) -> tuple:
        from actors.replica import ReplicaActor, replica_name
        replicas = list(range(rf))
        handles = {}
        for b in replicas:
            d = os.path.join(self.root, str(b), f"{name}-0")
            os.makedirs(d, exist_ok=True)
            handles[b] = ReplicaActor.options(
                name=replica_name(self.cluster, name, 0, b), namespace="rafka", num_cpus=0,
                max_concurrency=1000).remote(self.cluster, name, 0, name, b, d, configs)
        state = {"topic": name, "partition": 0, "topic_id": name, "leader": 0, "leader_epoch": 1,
                 "isr": replicas, "replicas": replicas, "partition_epoch": 1, "controller_epoch": 1}
        ray.get([handles[0].become_leader.remote(state)]
                + [handles[b].become_follower.remote(state) for b in replicas[1:]])
        self.actors += list(handles.values())
        return handles[0], list(handles.values())

    def stop(self) -> None:
        for h in self.actors:
            ray.kill(h)


class ClusterSetup:
    """Brokers + controller through ``actors.bootstrap.start_cluster``; topics through the controller."""

    def __init__(self, cluster: str, root: str):
        self.cluster, self.root = cluster, root

    def start(self, num_brokers: int) -> None:
        from actors.bootstrap import start_cluster
        self.handle = start_cluster(self.cluster, num_brokers=num_brokers, log_dir=self.root)

    def topic(self, name: str, rf: int, configs: dict) -> tuple:
        from actors.replica import replica_name
        ctrl = ray.get_actor(f"{self.cluster}:controller", namespace="rafka")
        res = ray.get(ctrl.create_topics.remote(
            [{"name": name, "num_partitions": 1, "replication_factor": rf, "configs": configs}], 30000))
        assert res[0]["error_code"] == 0, res
        desc = ray.get(ctrl.describe_topics.remote([name]))
        part = _partition0(desc, name)
        handles = [ray.get_actor(replica_name(self.cluster, name, 0, b), namespace="rafka")
                   for b in part["replicas"]]
        leader = ray.get_actor(replica_name(self.cluster, name, 0, part["leader"]), namespace="rafka")
        deadline = time.time() + 30
        while time.time() < deadline:  # wait until every follower is in the ISR
            st = ray.get(leader.state.remote())
            if st["role"] == "leader" and len(st["isr"]) == rf:
                break
            time.sleep(0.05)
        return leader, handles

    def stop(self) -> None:
        self.handle.shutdown()


def _partition0(desc, name):
    t = desc[0] if isinstance(desc, list) else desc[name]
    parts = t["partitions"]
    return parts[0] if isinstance(parts, list) else parts.get(0, parts.get("0"))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--direct", action="store_true", help="replica actors without brokers/controller")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run")
    ap.add_argument("--batch-kb", type=int, default=64)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--light", type=int, default=1, help="calls in flight for the moderate-load run")
    ap.add_argument("--light-calls", type=int, default=300)
    ap.add_argument("--fetch-mb", type=int, default=8)
    args = ap.parse_args(argv)

    root = tempfile.mkdtemp(prefix="rafka-bench-")
    cluster = "bench" + str(os.getpid())
    t0 = time.perf_counter()
    ray.init(address="local", namespace="rafka", include_dashboard=False, log_to_driver=False,
             configure_logging=False, num_cpus=2)
    ray_init_s = time.perf_counter() - t0
    setup = (DirectSetup if args.direct else ClusterSetup)(cluster, root)
    out: dict = {"mode": "direct" if args.direct else "cluster", "record_bytes": VALUE_BYTES}
    try:
        t0 = time.perf_counter()
        setup.start(3)
        t1 = time.perf_counter()
        lead1, h1 = setup.topic("bench-rf1", 1, {})
        lead3, h3 = setup.topic("bench-rf3", 3, {"min.insync.replicas": "2"})
        t2 = time.perf_counter()
        out["ray_init_s"] = round(ray_init_s, 2)
        out["cluster_start_s"] = round(t1 - t0, 2)
        out["topics_ready_s"] = round(t2 - t1, 2)
        batches, per = build_batches(32, args.batch_kb * 1024)
        out["records_per_batch"] = per
        out["batch_bytes"] = len(batches[0])
        calls = max(1, args.records // per)
        drive(lead1, batches, 50, 1, args.inflight, per)  # warm-up
        drive(lead3, batches, 50, -1, args.inflight, per)
        out["acks1_rf1"] = drive(lead1, batches, calls, 1, args.inflight, per)
        out["acksall_rf3"] = drive(lead3, batches, calls, -1, args.inflight, per)
        out["acks1_rf1_moderate"] = drive(lead1, batches, args.light_calls, 1, args.light, per)
        out["acksall_rf3_moderate"] = drive(lead3, batches, args.light_calls, -1, args.light, per)
        end = ray.get(lead1.state.remote())["high_watermark"]
        out["consume_rf1"] = consume(lead1, end, args.fetch_mb * 2**20)
        out["memory"] = memory_of(h1 + h3)
        out["targets"] = {
            "acksall_rf3_250k": out["acksall_rf3"]["records_per_s"] >= 250_000,
            "acks1_rf1_600k": out["acks1_rf1"]["records_per_s"] >= 600_000,
            "consume_1m": out["consume_rf1"]["records_per_s"] >= 1_000_000,
            "p50_5ms_moderate": max(out["acks1_rf1_moderate"]["p50_ms"],
                                    out["acksall_rf3_moderate"]["p50_ms"]) <= 5.0,
        }
    finally:
        try:
            setup.stop()
        finally:
            ray.shutdown()
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(f"{k:24s} {v}")
    return out


if __name__ == "__main__":
    main()
