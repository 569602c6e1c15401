"""What several benchmarks share: the brokers' warm pools of replica actors (wait until they are full, so a
timed run does not share the machine with actor starts) and a CPU meter for the client and the cluster."""

from __future__ import annotations

import time


def replica_pools(cluster) -> dict:
    """Every broker's warm pool (actors/server/replica_pool.py): ``{broker id: {size, warm, ready, taken, cold, ...}}``."""
    import ray

    return {i: ray.get(b.replica_pool.remote(), timeout=30) for i, b in cluster.server.brokers.items()}


def wait_pools_full(cluster, timeout_s: float = 60.0) -> float:
    """Seconds until every broker's warm pool is full (started and answering). Creating a topic takes actors
    from the pools and the refill starts new ones (~0.5 s of CPU each, 2 at a time): a timed run started
    during the refill measures the actor starts as much as rafka."""
    t0 = time.perf_counter()
    while not all(p["ready"] >= p["size"] for p in replica_pools(cluster).values()):
        if time.perf_counter() - t0 > timeout_s:
            break
        time.sleep(0.05)
    return round(time.perf_counter() - t0, 2)


def add_host_partitions_arg(ap) -> None:
    """``--host-partitions N``: ``replica.host.max.partitions`` of the benchmark's brokers (replicas per
    process; 1: a ReplicaActor process each); unset, the brokers' default."""
    ap.add_argument(
        "--host-partitions", type=int, default=None, help="replica.host.max.partitions (default: the brokers')"
    )


def host_config(host_partitions: int | None) -> dict:
    """The broker config of ``--host-partitions`` (empty when unset)."""
    return {} if host_partitions is None else {"replica.host.max.partitions": host_partitions}


def replica_memory(cluster) -> dict:
    """USS and RSS of the processes running the cluster's replicas: one per replica, or shared ReplicaHosts
    (``replica.host.max.partitions``): ``{replicas, processes, uss_mib_per_replica (their total USS / replicas),
    uss_mib_per_process_mean, uss_mib_per_process_max, rss_mib_per_replica, rss_mib_per_process_mean}``."""
    import psutil
    import ray

    handles = []
    for b in cluster.server.brokers.values():
        handles += list(ray.get(b.replica_handles.remote(), timeout=30).values())
    pids = {ray.get(h.state.remote(), timeout=30)["pid"] for h in handles}
    info = [psutil.Process(pid).memory_full_info() for pid in pids]
    uss = [m.uss / 2**20 for m in info]
    rss = [m.rss / 2**20 for m in info]
    if not uss:
        return {"replicas": 0, "processes": 0}
    return {
        "replicas": len(handles),
        "processes": len(uss),
        "uss_mib_per_replica": round(sum(uss) / len(handles), 1),
        "uss_mib_per_process_mean": round(sum(uss) / len(uss), 1),
        "uss_mib_per_process_max": round(max(uss), 1),
        "rss_mib_per_replica": round(sum(rss) / len(handles), 1),
        "rss_mib_per_process_mean": round(sum(rss) / len(rss), 1),
    }


class CpuMeter:
    """Cores used from construction to ``stop()``: by this process (the client under test with all its
    threads: librdkafka's broker threads, rafka's sender) and by the cluster's actor processes (``ray::*``)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.me0, self.srv0 = self._me(), self._servers()

    @staticmethod
    def _me() -> float:
        import psutil

        t = psutil.Process().cpu_times()
        return t.user + t.system

    @staticmethod
    def _servers() -> dict[int, float]:
        import psutil

        out = {}
        for proc in psutil.process_iter(["cmdline", "cpu_times"]):
            cmd = proc.info.get("cmdline") or []
            t = proc.info.get("cpu_times")
            if cmd and cmd[0].startswith("ray::") and t is not None:
                out[proc.pid] = t.user + t.system
        return out

    def stop(self) -> dict:
        secs = max(time.monotonic() - self.t0, 1e-6)
        used = sum(v - self.srv0.get(pid, v) for pid, v in self._servers().items())
        return {
            "client_cpu_cores": round((self._me() - self.me0) / secs, 2),
            "cluster_cpu_cores": round(used / secs, 2),
        }
