"""Time to recovery when the process behind an actor dies for real, on an embedded 3-broker LocalCluster.

    python benchmarks/liveness_bench.py --json [--rounds 3]

Each fault kills or freezes the OS process (pid from the actor itself) with a signal from this process:

- ``controller_sigkill``: SIGKILL of the controller's worker; seconds until a controller of a newer
  epoch answers ``describe_controller`` (goal < 3 s), and until a topic create (leaders running) returns.
- ``controller_ray_kill``: the same through ``ray.kill`` (for comparison).
- ``leader_replica_sigkill`` / ``follower_replica_sigkill``: SIGKILL of one replica's worker of an RF 3,
  min.insync.replicas 2 partition; seconds until an idempotent acks=all record sent after the kill is
  acknowledged (goal < 5 s), and until the replica is back in the ISR.
- ``leader_replica_sigstop`` / ``follower_replica_sigstop``: SIGSTOP of the replica's worker (judged
  frozen by its broker after ``broker.session.timeout.ms``; a frozen follower also leaves the ISR after
  ``replica.lag.time.max.ms``, whichever comes first); same figures.
- ``controller_sigstop_with_leader_broker_sigkill``: the controller frozen while the broker leading a
  partition is SIGKILLed; seconds until that partition is writable (the brokers replace the controller
  after ``controller.quorum.fetch.timeout.ms``), then the broker is restarted and every ISR is full
  again before the next round.

A new controller is a new Ray actor: its worker process start dominates the failover (~0.7 s on a quiet
machine; measured up to ~10 s at a load average of 35 on 2 cores, or while a restarted broker's replica
actors are still queued for worker processes).

Every acknowledged record is read back at the end (``lost`` and ``duplicated`` must be 0). Configs are
Kafka's defaults except where ``BROKER_CONFIG`` says; the output repeats them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray  # noqa: E402
from ray.exceptions import GetTimeoutError, RayActorError  # noqa: E402

import rafka  # noqa: E402
from protocol.names import RAY_NAMESPACE, controller_name  # noqa: E402
from rafka import TopicPartition  # noqa: E402
from rafka.output import claim_stdout  # noqa: E402

BROKER_CONFIG = {
    "leader.imbalance.check.interval.seconds": 3600,
    "replica.lag.time.max.ms": 10000,
    "broker.session.timeout.ms": 9000,
    "broker.heartbeat.interval.ms": 2000,
    "controller.quorum.fetch.timeout.ms": 2000,
}


def controller_info(cluster: str):
    try:
        h = ray.get_actor(controller_name(cluster), namespace=RAY_NAMESPACE)
        return ray.get(h.describe_controller.remote(), timeout=1.0)
    except (ValueError, RayActorError, GetTimeoutError):
        return None


def wait_controller_after(cluster: str, epoch: int, t0: float, timeout_s: float = 120) -> float:
    while time.monotonic() - t0 < timeout_s:
        info = controller_info(cluster)
        if info is not None and info["controller_epoch"] > epoch:
            return time.monotonic() - t0
        time.sleep(0.01)
    raise TimeoutError(f"no controller after epoch {epoch} within {timeout_s}s")


class Bench:
    def __init__(self, cluster: rafka.LocalCluster):
        self.c = cluster
        self.ch = cluster.server
        self.name = cluster.name
        self.prod = rafka.Producer(
            cluster, linger_ms=0, request_timeout_ms=1000, retry_backoff_ms=20, delivery_timeout_ms=120000
        )
        self.acked: dict[tuple[str, int], list[bytes]] = {}
        self.n = 0

    def send(self, topic: str, p: int, timeout_s: float = 120) -> None:
        v = b"%d" % self.n
        self.n += 1
        self.prod.send(topic, v, partition=p).get(timeout=timeout_s)
        self.acked.setdefault((topic, p), []).append(v)

    def part(self, topic: str, p: int = 0) -> dict:
        return self.ch.describe(topic)["partitions"][p]

    def wait_isr(self, topic: str, p: int, n: int, t0: float, timeout_s: float = 120) -> float:
        while time.monotonic() - t0 < timeout_s:
            if len(self.part(topic, p)["isr"]) == n:
                return time.monotonic() - t0
            time.sleep(0.02)
        raise TimeoutError(f"{topic}-{p} ISR not back to {n}")

    def topic(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.ch.create_topic(name, partitions=1, rf=3, configs={"min.insync.replicas": "2"})
        for _ in range(10):
            self.send(name, 0)
        return name

    # ---- faults ------------------------------------------------------------------------------------
    def controller_kill(self, how: str) -> dict:
        info = ray.get(self.ch.controller().describe_controller.remote())
        t0 = time.monotonic()
        if how == "sigkill":
            os.kill(info["pid"], signal.SIGKILL)
        else:
            ray.kill(ray.get_actor(controller_name(self.name), namespace=RAY_NAMESPACE), no_restart=True)
        serving = wait_controller_after(self.name, info["controller_epoch"], t0)
        self.topic("after-ctl")
        return {"controller_serving_s": round(serving, 3), "topic_created_s": round(time.monotonic() - t0, 3)}

    def replica_fault(self, role: str, sig) -> dict:
        topic = self.topic(f"{role}-{sig.name.lower()}")
        s = self.part(topic)
        victim = s["leader"] if role == "leader" else next(b for b in s["replicas"] if b != s["leader"])
        pid = ray.get(self.ch.replica(topic, 0, victim).state.remote())["pid"]
        t0 = time.monotonic()
        os.kill(pid, sig)
        try:
            self.send(topic, 0)
            writable = time.monotonic() - t0
        finally:
            if sig == signal.SIGSTOP:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass  # its broker killed the frozen process
        isr = self.wait_isr(topic, 0, 3, t0)
        self.send(topic, 0)
        return {"writable_s": round(writable, 3), "back_in_isr_s": round(isr, 3)}

    def frozen_controller_and_broker_loss(self) -> dict:
        info = ray.get(self.ch.controller().describe_controller.remote())
        topic = f"frozen-{uuid.uuid4().hex[:6]}"
        self.ch.create_topic(topic, partitions=3, rf=3, configs={"min.insync.replicas": "2"})
        p, s = next(
            (x["partition"], x) for x in self.ch.describe(topic)["partitions"] if x["leader"] != info["host_broker_id"]
        )
        self.send(topic, p)
        victim = s["leader"]
        bpid = ray.get(self.ch.broker(victim).incarnation.remote())["pid"]
        os.kill(info["pid"], signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            os.kill(bpid, signal.SIGKILL)
            self.send(topic, p)
            writable = time.monotonic() - t0
        finally:
            try:
                os.kill(info["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.ch.restart_broker(victim)
        # settle before the next fault: the restarted broker recreates a replica actor per partition it
        # hosts, and Ray starts their worker processes a few at a time; a fault injected meanwhile would
        # measure that queue (a new controller's process waits in it too)
        self.ch.wait_for(
            lambda md: (
                all(b["alive"] for b in md["brokers"])
                and all(len(p["isr"]) == len(p["replicas"]) for t in md["topics"] for p in t["partitions"])
            ),
            120,
            what="broker back, every ISR full",
        )
        return {"writable_s": round(writable, 3)}

    def verify(self) -> dict:
        lost = dup = 0
        for (topic, p), values in self.acked.items():
            c = rafka.Consumer(self.c, auto_offset_reset="earliest")
            c.assign([TopicPartition(topic, p)])
            got, deadline = [], time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                for recs in c.poll(500).values():
                    got += [r.value for r in recs]
            c.close()
            lost += len(set(values) - set(got))
            dup += len(got) - len(set(got))
        return {"acknowledged": sum(len(v) for v in self.acked.values()), "lost": lost, "duplicated": dup}


def summary(runs: list[dict]) -> dict:
    out = {"runs": runs}
    for k in runs[0]:
        vals = [r[k] for r in runs]
        out[k] = {"median": round(statistics.median(vals), 3), "max": round(max(vals), 3)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()
    stdout = claim_stdout()
    faults = {
        "controller_sigkill": [],
        "controller_ray_kill": [],
        "leader_replica_sigkill": [],
        "follower_replica_sigkill": [],
        "leader_replica_sigstop": [],
        "follower_replica_sigstop": [],
        "controller_sigstop_with_leader_broker_sigkill": [],
    }
    with tempfile.TemporaryDirectory(prefix="rafka-lbench-") as d:
        cluster = rafka.LocalCluster(
            brokers=3, data_dir=d, name="lbench" + uuid.uuid4().hex[:6], broker_config=BROKER_CONFIG
        )
        try:
            b = Bench(cluster)
            for _ in range(args.rounds):
                faults["controller_sigkill"].append(b.controller_kill("sigkill"))
                faults["controller_ray_kill"].append(b.controller_kill("ray.kill"))
                faults["leader_replica_sigkill"].append(b.replica_fault("leader", signal.SIGKILL))
                faults["follower_replica_sigkill"].append(b.replica_fault("follower", signal.SIGKILL))
                faults["leader_replica_sigstop"].append(b.replica_fault("leader", signal.SIGSTOP))
                faults["follower_replica_sigstop"].append(b.replica_fault("follower", signal.SIGSTOP))
                faults["controller_sigstop_with_leader_broker_sigkill"].append(b.frozen_controller_and_broker_loss())
            check = b.verify()
            b.prod.close()
        finally:
            cluster.stop()
    res = {
        "brokers": 3,
        "rounds": args.rounds,
        "broker_config": BROKER_CONFIG,
        "cpus": os.cpu_count(),
        "goals_s": {"controller_serving": 3, "partition_writable_after_replica_sigkill": 5},
        "faults": {k: summary(v) for k, v in faults.items()},
        **check,
    }
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    return 0 if check["lost"] == 0 and check["duplicated"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
