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

from protocol.control_messages import LeaderAndIsrPartitionState  # noqa: E402
from protocol.messages import FetchRequest, ProduceRequest  # noqa: E402
from protocol.names import RAY_NAMESPACE, broker_name  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402
from storage.records import RecordBatchBuilder, decode_records  # noqa: E402

VALUE_BYTES = 100


def build_batches(n: int, batch_bytes: int, per_call: int = 1, codec: int = 0) -> tuple[list[bytes], int]:
    """``n`` payloads, each ``per_call`` distinct non-idempotent batches of 100-byte records
    concatenated (one produce call carries them all); returns (payloads, records per payload).
    ``batch_bytes`` bounds the uncompressed records (the producer's batch.size); ``codec`` compresses."""
    payload = os.urandom(VALUE_BYTES * 64)
    out, per = [], 0
    for i in range(n * per_call):
        b = RecordBatchBuilder(batch_size=batch_bytes, compression_type=codec)
        j = 0
        while b.append(1_700_000_000_000 + i, None, payload[(j % 64) * VALUE_BYTES : (j % 64 + 1) * VALUE_BYTES]):
            j += 1
        per = b.record_count
        out.append(b.build())
    calls = [b"".join(out[i : i + per_call]) for i in range(0, len(out) - per_call + 1, per_call)]
    return calls, per * per_call


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def drive(handle, batches: list[bytes], calls: int, acks: int, inflight: int, per_batch: int) -> dict:
    """``calls`` produce calls with ``inflight`` outstanding; per-call latency from submit to reply."""
    # requests whose payload is above Ray's inline limit (100 KiB) are stored once and passed by reference
    # (Ray resolves a top-level ObjectRef argument); smaller ones travel inline with the call (cheaper than
    # an object-store lookup per call)
    reqs = [ProduceRequest(b, acks, 30000) for b in batches]
    refs = [ray.put(r) if len(r.records) > 100 * 1024 else r for r in reqs]
    pending: dict = {}
    lat: list[float] = []
    errors: dict[int, int] = {}
    sent = 0
    t0 = time.perf_counter()
    while sent < calls or pending:
        while sent < calls and len(pending) < inflight:
            ref = handle.produce.remote(refs[sent % len(refs)])
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
    return {
        "records": recs,
        "seconds": round(dt, 3),
        "records_per_s": round(recs / dt),
        "mb_per_s": round(nbytes / dt / 1e6, 1),
        "calls_per_s": round(calls / dt),
        "p50_ms": round(pct(lat, 0.5), 2),
        "p99_ms": round(pct(lat, 0.99), 2),
        "inflight": inflight,
        "errors": errors,
    }


def consume(handle, end_offset: int, max_bytes: int) -> dict:
    """Read [0, end_offset) from the leader with large fetches, decoding every record."""
    t0 = time.perf_counter()
    offset, records, nbytes = 0, 0, 0
    fetch_s = decode_s = 0.0
    while offset < end_offset:
        t1 = time.perf_counter()
        resp = ray.get(handle.fetch.remote(FetchRequest(offset, max_bytes)))
        t2 = time.perf_counter()
        assert resp["error_code"] == 0, resp
        buf = resp["records"]
        recs = decode_records(buf)
        t3 = time.perf_counter()
        fetch_s += t2 - t1
        decode_s += t3 - t2
        records += len(recs)
        nbytes += len(buf)
        offset = resp["next_offset"]  # the offset after the last batch (protocol.messages.FetchResponse)
    dt = time.perf_counter() - t0
    return {
        "records": records,
        "seconds": round(dt, 3),
        "records_per_s": round(records / dt),
        "mb_per_s": round(nbytes / dt / 1e6, 1),
        "fetch_s": round(fetch_s, 3),
        "decode_s": round(decode_s, 3),
        "decode_records_per_s": round(records / decode_s),
    }


@ray.remote(num_cpus=0)
def _consume_range(handle, start: int, end: int, max_bytes: int) -> int:
    offset, records = start, 0
    while offset < end:
        resp = ray.get(handle.fetch.remote(FetchRequest(offset, max_bytes)))
        assert resp["error_code"] == 0, resp
        recs = decode_records(resp["records"])
        records += sum(1 for r in recs if offset <= r.offset < end)
        offset = recs[-1].offset + 1
    return records


def consume_parallel(handle, end_offset: int, max_bytes: int, consumers: int) -> dict:
    """``consumers`` Ray tasks each read and decode a slice of [0, end_offset) (decoding is the
    consumer's cost, so it scales with processes)."""
    step = -(-end_offset // consumers)
    ranges = [(i * step, min(end_offset, (i + 1) * step)) for i in range(consumers)]
    ray.get([_consume_range.remote(handle, 0, 1, max_bytes) for _ in range(consumers)])  # warm workers
    t0 = time.perf_counter()
    counts = ray.get([_consume_range.remote(handle, a, b, max_bytes) for a, b in ranges])
    dt = time.perf_counter() - t0
    assert sum(counts) == end_offset, (sum(counts), end_offset)
    return {
        "consumers": consumers,
        "records": sum(counts),
        "seconds": round(dt, 3),
        "records_per_s": round(sum(counts) / dt),
    }


def memory_of(handles) -> dict:
    rss, uss = [], []
    for h in handles:
        pid = ray.get(h.state.remote())["pid"]
        mi = psutil.Process(pid).memory_full_info()
        rss.append(mi.rss / 2**20)
        uss.append(mi.uss / 2**20)
    return {
        "replica_actors": len(handles),
        "rss_mib_mean": round(statistics.mean(rss), 1),
        "uss_mib_mean": round(statistics.mean(uss), 1),
        "rss_mib_max": round(max(rss), 1),
    }


# ---- two ways to stand replicas up ------------------------------------------------------------------


@ray.remote
class _LeaderDirectory:
    """``BrokerActor.replica_handle`` of broker 0 in a DirectSetup (no brokers there)."""

    def __init__(self):
        self.handles: dict = {}

    def add(self, topic: str, partition: int, handle) -> None:
        self.handles[(topic, partition)] = handle

    def replica_handle(self, topic: str, partition: int):
        return self.handles.get((topic, partition))


class DirectSetup:
    """Replica actors created by hand with LeaderAndIsr states (no controller: the ISR stays put)."""

    def __init__(self, cluster: str, root: str):
        self.cluster, self.root, self.actors = cluster, root, []
        self.directory = None

    def start(self, num_brokers: int) -> None:
        self.num_brokers = num_brokers

    def topic(self, name: str, rf: int, configs: dict) -> tuple:
        from actors.replica import ReplicaActor

        replicas = list(range(rf))
        handles = {}
        for b in replicas:
            d = os.path.join(self.root, str(b), f"{name}-0")
            os.makedirs(d, exist_ok=True)
            handles[b] = ReplicaActor.options(num_cpus=0, max_concurrency=1000).remote(
                self.cluster, name, 0, name, b, d, configs
            )
        state = LeaderAndIsrPartitionState(
            topic=name,
            partition=0,
            controller_epoch=1,
            leader=0,
            leader_epoch=1,
            isr=replicas,
            partition_epoch=1,
            replicas=replicas,
            topic_id=name,
        )
        ray.get(
            [handles[0].become_leader.remote(state)] + [handles[b].become_follower.remote(state) for b in replicas[1:]]
        )
        # replicas are found through the broker that hosts them (actors/channels/replica_lookup.py): a stand-in
        # answers the followers' lookups of the leader (broker 0)
        if self.directory is None:
            self.directory = _LeaderDirectory.options(
                name=broker_name(self.cluster, 0), namespace=RAY_NAMESPACE, num_cpus=0
            ).remote()
            self.actors.append(self.directory)
        ray.get(self.directory.add.remote(name, 0, handles[0]))
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

        self.handle = start_cluster(self.cluster, num_brokers, self.root)

    def topic(self, name: str, rf: int, configs: dict) -> tuple:
        ch = self.handle
        ch.create_topic(name, 1, rf, configs)
        part = ch.describe(name)["partitions"][0]
        handles = [ch.replica(name, 0, b) for b in part["replicas"]]
        leader = ch.replica(name, 0, part["leader"])
        deadline = time.time() + 60
        while time.time() < deadline:  # every follower fetching and in the leader's ISR
            st = ray.get(leader.state.remote())
            if st["role"] == "leader" and len(st["isr"]) == rf:
                break
            time.sleep(0.05)
        return leader, handles

    def stop(self) -> None:
        self.handle.shutdown()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--direct", action="store_true", help="replica actors without brokers/controller")
    ap.add_argument("--records", type=int, default=1_000_000, help="records per produce run")
    ap.add_argument("--batch-kb", type=int, default=64, help="size of one record batch")
    ap.add_argument(
        "--batches-per-call",
        type=int,
        default=8,
        help="record batches concatenated into one produce call (throughput runs)",
    )
    ap.add_argument("--inflight", type=int, default=8)
    ap.add_argument("--light", type=int, default=1, help="calls in flight for the moderate-load run")
    ap.add_argument("--light-calls", type=int, default=300)
    ap.add_argument("--fetch-mb", type=int, default=8)
    ap.add_argument("--consumers", type=int, default=2, help="processes for the parallel consume run")
    ap.add_argument(
        "--compression",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        default="none",
        help="codec of the produced batches (the leader decompresses each to validate it)",
    )
    args = ap.parse_args(argv)
    codec = ["none", "gzip", "snappy", "lz4", "zstd"].index(args.compression)
    stdout = claim_stdout()

    root = tempfile.mkdtemp(prefix="rafka-bench-")
    cluster = "bench" + str(os.getpid())
    t0 = time.perf_counter()
    ray.init(
        address="local",
        namespace=RAY_NAMESPACE,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        num_cpus=2,
    )
    ray_init_s = time.perf_counter() - t0
    setup = (DirectSetup if args.direct else ClusterSetup)(cluster, root)
    out: dict = {
        "mode": "direct" if args.direct else "cluster",
        "record_bytes": VALUE_BYTES,
        "compression": args.compression,
    }
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
        single, per1 = build_batches(16, args.batch_kb * 1024, codec=codec)
        multi, per = build_batches(16, args.batch_kb * 1024, args.batches_per_call, codec)
        out["records_per_batch"] = per1
        out["batch_bytes"] = len(single[0])
        out["bytes_per_call"] = len(multi[0])
        calls = max(1, args.records // per)
        drive(lead1, multi, 20, 1, args.inflight, per)  # warm-up
        drive(lead3, multi, 20, -1, args.inflight, per)
        out["acks1_rf1"] = drive(lead1, multi, calls, 1, args.inflight, per)
        out["acksall_rf3"] = drive(lead3, multi, calls, -1, args.inflight, per)
        # moderate load: one 64 KiB batch per call, ``--light`` calls in flight
        out["acks1_rf1_moderate"] = drive(lead1, single, args.light_calls, 1, args.light, per1)
        out["acksall_rf3_moderate"] = drive(lead3, single, args.light_calls, -1, args.light, per1)
        end = ray.get(lead1.state.remote())["high_watermark"]
        out["consume_rf1"] = consume(lead1, end, args.fetch_mb * 2**20)
        out["consume_rf1_parallel"] = consume_parallel(lead1, end, args.fetch_mb * 2**20, args.consumers)
        out["memory"] = memory_of(h1 + h3)
        out["targets"] = {
            "acksall_rf3_250k": out["acksall_rf3"]["records_per_s"] >= 250_000,
            "acks1_rf1_600k": out["acks1_rf1"]["records_per_s"] >= 600_000,
            "consume_1m": max(out["consume_rf1"]["records_per_s"], out["consume_rf1_parallel"]["records_per_s"])
            >= 1_000_000,
            "p50_5ms_moderate": max(out["acks1_rf1_moderate"]["p50_ms"], out["acksall_rf3_moderate"]["p50_ms"]) <= 5.0,
        }
    finally:
        try:
            setup.stop()
        finally:
            ray.shutdown()
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1), file=stdout)
    else:
        for k, v in out.items():
            print(f"{k:24s} {v}", file=stdout)
    return out


if __name__ == "__main__":
    main()
