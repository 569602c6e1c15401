"""rafka beside Redis Streams and NATS JetStream on the same workloads, in one sitting, through each system's
Python client as a Python user would use it (rafka's client; redis-py + hiredis; nats-py), 100-byte values.

    python benchmarks/peers_bench.py --json [--records 200000] [--rounds 3] [--e2e-seconds 5]

The peers are started and stopped here on loopback from their Debian packages (``redis-server``,
``nats-server``; ``.ci/system-deps.sh bench`` installs them, ``pip install -e '.[bench]'`` the clients). A
missing peer is skipped and named in ``skipped``. Workloads, interleaved (for each round and workload:
rafka, then Redis, then NATS), medians over rounds:

- ``produce_acks1``: rafka ``send`` acks=1 on an RF 1 topic | Redis pipelined XADD (no persistence) |
  JetStream ``publish_async`` to an R1 file stream;
- ``produce_batch_acks1``: rafka ``send_batch`` (10,000 per call) acks=1 RF 1 | the same peer figures (their
  batch API is the pipeline above);
- ``produce_acks_all``: rafka ``send`` acks=all RF 3 (min.insync.replicas 2) | Redis XADD with AOF
  ``appendfsync everysec`` (its durability analog; Redis has no synchronous replication) | JetStream R3
  stream on three local servers;
- ``produce_batch_acks_all``: rafka ``send_batch`` acks=all RF 3 | as above;
- ``consume``: one rafka consumer over 6 partitions from the start | XREAD COUNT 10000 | a pull consumer
  (AckNone) fetching 1,000 at a time;
- ``group_consume``: 3 rafka group members committing every 10 polls | XREADGROUP COUNT 10000 + pipelined
  XACK | a durable pull consumer with explicit acks (acking the last message of each fetch, AckAll);
- ``e2e``: send -> delivered latency at ``--e2e-rate`` records/s: rafka acks=all RF 3 defaults (linger 5 ms)
  | XADD + XREAD BLOCK | JetStream publish + push subscription (R1).

Each figure is printed with the best peer and ``rafka_vs_best`` (rafka/best for rates, best/rafka for
latencies: above 1 means rafka is ahead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from client_bench import latency_summary  # noqa: E402

import rafka  # noqa: E402
from rafka.cli.clusterctl import free_port  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

VALUE = 100
PARTITIONS = 6
PIPELINE = 1000


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


# ---- Redis Streams ------------------------------------------------------------------------------------
class RedisPeer:
    name = "redis"

    def __init__(self, root: str):
        self.root = root
        self.procs: dict[bool, tuple[subprocess.Popen, int]] = {}

    @staticmethod
    def available() -> str | None:
        if not shutil.which("redis-server"):
            return "redis-server not installed (Debian package redis-server)"
        try:
            import redis  # noqa: F401
        except ImportError:
            return "redis-py not installed (pip install -e '.[bench]')"
        return None

    def client(self, aof: bool):
        import redis

        if aof not in self.procs:
            port = free_port()
            d = os.path.join(self.root, f"redis-{'aof' if aof else 'mem'}")
            os.makedirs(d, exist_ok=True)
            args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", d]
            args += ["--appendonly", "yes", "--appendfsync", "everysec"] if aof else ["--appendonly", "no"]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_port(port)
            self.procs[aof] = (proc, port)
        return redis.Redis(port=self.procs[aof][1])

    def stop(self) -> None:
        for proc, _ in self.procs.values():
            proc.terminate()
            proc.wait(10)

    def produce(self, n: int, aof: bool) -> dict:
        r = self.client(aof)
        stream = f"s-{time.monotonic_ns()}"
        value = os.urandom(VALUE)
        t0 = time.perf_counter()
        for i in range(0, n, PIPELINE):
            p = r.pipeline(transaction=False)
            for _ in range(min(PIPELINE, n - i)):
                p.xadd(stream, {"v": value})
            p.execute()
        dt = time.perf_counter() - t0
        self.last_stream = (stream, aof, n)
        return {"records_per_s": round(n / dt)}

    def consume(self) -> dict:
        stream, aof, n = self.last_stream
        r = self.client(aof)
        got, last = 0, "0"
        t0 = time.perf_counter()
        while got < n:
            res = r.xread({stream: last}, count=10000)
            entries = res[0][1]
            got += len(entries)
            last = entries[-1][0]
        return {"records_per_s": round(n / (time.perf_counter() - t0))}

    def group_consume(self) -> dict:
        stream, aof, n = self.last_stream
        r = self.client(aof)
        group = f"g-{time.monotonic_ns()}"
        r.xgroup_create(stream, group, id="0")
        got = 0
        t0 = time.perf_counter()
        while got < n:
            res = r.xreadgroup(group, "c1", {stream: ">"}, count=10000)
            ids = [e[0] for e in res[0][1]]
            p = r.pipeline(transaction=False)
            for i in range(0, len(ids), PIPELINE):
                p.xack(stream, group, *ids[i : i + PIPELINE])
            p.execute()
            got += len(ids)
        return {"records_per_s": round(n / (time.perf_counter() - t0))}

    def e2e(self, rate: int, seconds: float) -> dict:
        stream = f"e-{time.monotonic_ns()}"
        prod, cons = self.client(False), self.client(False)
        total = int(rate * seconds)
        lat: list[float] = []

        def reader() -> None:
            last = "$"
            while len(lat) < total:
                res = cons.xread({stream: last}, count=1000, block=1000)
                if not res:
                    continue
                now = time.perf_counter_ns()
                for eid, fields in res[0][1]:
                    lat.append((now - struct.unpack_from(">q", fields[b"v"])[0]) / 1e6)
                    last = eid

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        time.sleep(0.2)
        pad = b"x" * (VALUE - 8)
        t0 = time.perf_counter()
        for i in range(total):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            prod.xadd(stream, {"v": struct.pack(">q", time.perf_counter_ns()) + pad})
        t.join(30)
        return latency_summary(lat)


# ---- NATS JetStream -----------------------------------------------------------------------------------
class NatsPeer:
    name = "nats"

    def __init__(self, root: str):
        self.root = root
        self.single: list[int] = []
        self.cluster: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.loop = asyncio.new_event_loop()

    @staticmethod
    def available() -> str | None:
        if not shutil.which("nats-server"):
            return "nats-server not installed (Debian package nats-server)"
        try:
            import nats  # noqa: F401
        except ImportError:
            return "nats-py not installed (pip install -e '.[bench]')"
        return None

    def _start(self, replicas: int) -> list[int]:
        ports = [free_port() for _ in range(replicas)]
        routes = [free_port() for _ in range(replicas)]
        for i, port in enumerate(ports):
            d = os.path.join(self.root, f"nats-{replicas}-{i}")
            args = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", d, "-n", f"n{replicas}-{i}"]
            if replicas > 1:
                args += ["--cluster_name", f"bench{replicas}", "--cluster", f"nats://127.0.0.1:{routes[i]}"]
                args += ["--routes", ",".join(f"nats://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i)]
            self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in ports:
            wait_port(port)
        return ports

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
            p.wait(10)
        self.loop.close()

    def _run(self, coro):
        return self.loop.run_until_complete(coro)

    async def _js(self, replicas: int):
        import nats

        if replicas == 1 and not self.single:
            self.single = self._start(1)
        if replicas == 3 and not self.cluster:
            self.cluster = self._start(3)
        ports = self.single if replicas == 1 else self.cluster
        nc = await nats.connect([f"nats://127.0.0.1:{p}" for p in ports])
        return nc, nc.jetstream()

    async def _stream(self, js, name: str, replicas: int) -> None:
        deadline = time.monotonic() + 60
        while True:  # an R3 stream needs the JetStream meta leader elected first
            try:
                await js.add_stream(name=name, subjects=[name], num_replicas=replicas, storage="file")
                return
            except Exception:  # noqa: BLE001 - retried until the cluster is ready
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    def produce(self, n: int, replicas: int) -> dict:
        async def go():
            nc, js = await self._js(replicas)
            name = f"S{time.monotonic_ns()}"
            await self._stream(js, name, replicas)
            value = os.urandom(VALUE)
            t0 = time.perf_counter()
            for i in range(0, n, PIPELINE):
                futs = [await js.publish_async(name, value) for _ in range(min(PIPELINE, n - i))]
                await asyncio.gather(*futs)
            dt = time.perf_counter() - t0
            await nc.close()
            self.last_stream = (name, replicas, n)
            return {"records_per_s": round(n / dt)}

        return self._run(go())

    def _pull(self, explicit_ack: bool) -> dict:
        from nats.js.api import AckPolicy, ConsumerConfig

        async def go():
            name, replicas, n = self.last_stream
            nc, js = await self._js(replicas)
            cfg = ConsumerConfig(ack_policy=AckPolicy.ALL if explicit_ack else AckPolicy.NONE, max_ack_pending=-1)
            sub = await js.pull_subscribe(name, durable=f"d{time.monotonic_ns()}", config=cfg)
            got = 0
            t0 = time.perf_counter()
            while got < n:
                msgs = await sub.fetch(1000, timeout=5)
                got += len(msgs)
                if explicit_ack and msgs:
                    await msgs[-1].ack()
            dt = time.perf_counter() - t0
            await nc.close()
            return {"records_per_s": round(n / dt)}

        return self._run(go())

    def consume(self) -> dict:
        return self._pull(False)

    def group_consume(self) -> dict:
        return self._pull(True)

    def e2e(self, rate: int, seconds: float) -> dict:
        async def go():
            nc, js = await self._js(1)
            name = f"E{time.monotonic_ns()}"
            await self._stream(js, name, 1)
            total = int(rate * seconds)
            lat: list[float] = []
            done = asyncio.Event()

            async def cb(msg):
                lat.append((time.perf_counter_ns() - struct.unpack_from(">q", msg.data)[0]) / 1e6)
                if len(lat) >= total:
                    done.set()

            sub = await js.subscribe(name, cb=cb)
            pad = b"x" * (VALUE - 8)
            t0 = time.perf_counter()
            for i in range(total):
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await js.publish_async(name, struct.pack(">q", time.perf_counter_ns()) + pad)
            await asyncio.wait_for(done.wait(), 30)
            await sub.unsubscribe()
            await nc.close()
            return latency_summary(lat)

        return self._run(go())


# ---- rafka --------------------------------------------------------------------------------------------
class RafkaPeer:
    name = "rafka"

    def __init__(self, root: str):
        self.cluster = rafka.LocalCluster(brokers=3, data_dir=os.path.join(root, "rafka"), name="peersbench")
        self.admin = rafka.Admin(self.cluster)
        self.n = 0

    def stop(self) -> None:
        self.cluster.stop()

    def _topic(self, rf: int) -> str:
        """A fresh topic; the previous one is deleted first, so each figure runs with only its own topic (an
        idle replica costs ~0.01 cores: topics left behind would tax every later figure)."""
        old = [t for t in self.admin.list_topics() if t.startswith("t") and "-rf" in t]
        if old:
            self.admin.delete_topics(old)
        self.n += 1
        name = f"t{self.n}-rf{rf}"
        self.admin.create_topic(name, PARTITIONS, rf, {"min.insync.replicas": "2"} if rf == 3 else None)
        return name

    def produce(self, n: int, rf: int, batch: bool) -> dict:
        from client_bench import bench_send, bench_send_batch, wait_high_watermarks

        topic = self._topic(rf)
        conf = {} if rf == 3 else {"acks": 1, "enable_idempotence": False}
        res = (bench_send_batch if batch else bench_send)(self.cluster, topic, n, **conf)
        wait_high_watermarks(self.admin, topic, PARTITIONS, n + 1)
        self.last_topic = (topic, n + 1)
        return {"records_per_s": res["records_per_s"]}

    def consume(self) -> dict:
        from client_bench import bench_consume

        topic, n = self.last_topic
        return {"records_per_s": bench_consume(self.cluster, topic, n)["records_per_s"]}

    def group_consume(self) -> dict:
        from client_bench import warm_up_groups
        from group_bench import group_consume

        topic, n = self.last_topic
        warm_up_groups(self.cluster, topic)
        res = group_consume(self.cluster, topic, PARTITIONS, 3, 10, 300)
        return {"records_per_s": res["records_per_s_after_first_record"], "join_s": res["first_record_after_s"]}

    def e2e(self, rate: int, seconds: float) -> dict:
        from client_bench import bench_e2e

        res = bench_e2e(self.cluster, self._topic(3), rate, seconds, PARTITIONS)
        return {k: res.get(k) for k in ("records", "p50_ms", "p99_ms")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--e2e-rate", type=int, default=5000)
    ap.add_argument("--e2e-seconds", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    stdout = claim_stdout()
    root = tempfile.mkdtemp(prefix="rafka-peers-bench-")
    skipped = {}
    peers: list = []
    try:
        peers.append(RafkaPeer(root))
        for cls in (RedisPeer, NatsPeer):
            why = cls.available()
            if why:
                skipped[cls.name] = why
            else:
                peers.append(cls(root))
        n = a.records
        # workload -> per peer: how to run it (each returns a dict with records_per_s or p50_ms/p99_ms)
        plans = {
            "produce_acks1": {
                "rafka": lambda p: p.produce(n, 1, False),
                "redis": lambda p: p.produce(n, False),
                "nats": lambda p: p.produce(n, 1),
            },
            "produce_batch_acks1": {
                "rafka": lambda p: p.produce(n, 1, True),
                "redis": lambda p: p.produce(n, False),
                "nats": lambda p: p.produce(n, 1),
            },
            "produce_acks_all": {
                "rafka": lambda p: p.produce(n, 3, False),
                "redis": lambda p: p.produce(n, True),
                "nats": lambda p: p.produce(n, 3),
            },
            "produce_batch_acks_all": {
                "rafka": lambda p: p.produce(n, 3, True),
                "redis": lambda p: p.produce(n, True),
                "nats": lambda p: p.produce(n, 3),
            },
            "consume": {name: (lambda p: p.consume()) for name in ("rafka", "redis", "nats")},
            "group_consume": {name: (lambda p: p.group_consume()) for name in ("rafka", "redis", "nats")},
            "e2e": {name: (lambda p: p.e2e(a.e2e_rate, a.e2e_seconds)) for name in ("rafka", "redis", "nats")},
        }
        runs: dict = {w: {p.name: [] for p in peers} for w in plans}
        for _ in range(a.rounds):
            for w, plan in plans.items():
                if w in ("consume", "group_consume"):
                    continue  # read what the acks=all batch produce of this round wrote, right after it
                for p in peers:
                    runs[w][p.name].append(plan[p.name](p))
                if w == "produce_batch_acks_all":
                    for rw in ("consume", "group_consume"):
                        for p in peers:
                            runs[rw][p.name].append(plans[rw][p.name](p))
        figures = {}
        for w, per in runs.items():
            row: dict = {}
            for name, results in per.items():
                keys = [k for k in ("records_per_s", "p50_ms", "p99_ms") if all(r.get(k) is not None for r in results)]
                row[name] = {k: statistics.median(r[k] for r in results) for k in keys}
            figures[w] = row
            rate = "records_per_s" in row.get("rafka", {})
            key = "records_per_s" if rate else "p50_ms"
            others = {k: v[key] for k, v in row.items() if k != "rafka" and key in v}
            if others and key in row.get("rafka", {}):
                best = max(others, key=others.get) if rate else min(others, key=others.get)
                ours = row["rafka"][key]
                row["best_peer"] = best
                row["rafka_vs_best"] = round(ours / others[best] if rate else others[best] / ours, 3)
    finally:
        for p in peers:
            p.stop()
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "value_bytes": VALUE,
        "records": a.records,
        "rounds": a.rounds,
        "skipped": skipped,
        "figures": figures,
    }
    print(json.dumps(out, indent=None if a.json else 2), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
