"""rafka on several real Ray nodes (rafka.testkit: each node in its own network namespace, on one machine), driven
by librdkafka from a namespace of its own, as a Kafka client on another machine. Root only.

    python benchmarks/multinode_bench.py --json [--nodes 3,5] [--records 100000] [--value-bytes 1000]
        [--seconds 40] [--rate 200] [--faults kill,freeze] [--catchup-mb 400] [--catchup-nodes 3]
        [--no-one-node] [--skip-failover] [--skip-catchup]

For each size N of ``--nodes``: N Ray nodes with a broker each (``rafka.deploy``, listeners ``PLAINTEXT://:9092``,
the head included, which is never the one faulted), then, beside it, the same N brokers on ONE Ray node
(``brokers_per_node`` N; ``--no-one-node`` leaves it out). On each, in one run:

- ``produce``: confluent-kafka's Producer (benchmarks/wire_clients.py, in the client namespace): ``--records``
  records of ``--value-bytes`` over 2 partitions per broker, RF 3, min.insync.replicas 2, acks=all, idempotent;
  records/s, MB/s (values), and p50/p99 of a paced latency run (1,000 records at ~1,000/s) before it;
- ``consume``: one librdkafka consumer reading them back from the start (assign): records/s, MB/s.

Multi-node only (``--skip-failover``, ``--skip-catchup``):

- ``failover``, per fault of ``--faults`` on the non-head node leading the most partitions, under a paced
  acks=all load (rafka.testkit.kafka_workload, ``--rate`` records/s for ``--seconds``): ``kill`` (SIGKILL of every
  process of the node, a lost machine; then ``ray start`` again with its disk) and ``freeze`` (SIGSTOP for
  ``--freeze-s``, and at least until the controller has fenced its broker and moved its partitions; then SIGCONT),
  each on a topic of its own. Seconds from the fault until every partition it led
  acknowledges a record sent after the fault (``writable_s``, the client's view), Ray's death detection, the
  broker's fence as the controller saw it, the ISRs whole again, and the load's check (nothing acknowledged lost).
- ``catchup`` (sizes of ``--catchup-nodes``): ``--catchup-mb`` MB written (10 kB values), the node of a follower
  SIGKILLed, and started again with an EMPTY disk. The broker's log directory is sampled from the host and the
  controller watched from a driver: the rate is the bytes of the re-replicated logs over the time from the first
  byte on the new disk (or the broker's registration) to the broker back in every ISR, apart from the node's start.

The machine is shared (2 cores for every node, the clients and anything else running): ``load_avg`` and
``raylets_on_machine`` are recorded beside each figure. The default run took 20 minutes there (load average 12-50,
`ray start` up to 219 s a cluster); docs/deploying.md ("Sizing, measured") has its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rafka.output import claim_stdout  # noqa: E402
from rafka.testkit import NodeCluster, NodeClusterError, sweep_stale  # noqa: E402
from rafka.testkit.deployment import (  # noqa: E402
    BROKER_LABEL,
    deploy,
    finish_watch,
    start_watch,
    state,
    wait_pools_full,
    watch,
)
from rafka.testkit.kafka_workload import windows  # noqa: E402

CLIENTS = os.path.join(HERE, "wire_clients.py")
BROKER_CONFIG = {
    "listeners": "PLAINTEXT://:9092",
    "broker.session.timeout.ms": 6000,  # as tests/multinode/test_node_loss.py
    "broker.heartbeat.interval.ms": 1000,
}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
CATCHUP_VALUE_BYTES = 10_000
LATENCY_RECORDS = 1000
WARM_S = 8.0  # the load runs this long before each fault


# -- pure logic (tests/unit/benchmarks/test_multinode_bench.py) --


def parse_sizes(text: str) -> list[int]:
    """``"3,5"`` -> [3, 5]; every size at least 3 (RF 3 needs 3 brokers); empty -> []."""
    sizes = [int(x) for x in text.split(",") if x.strip()]
    if any(n < 3 for n in sizes):
        raise ValueError(f"cluster sizes {sizes}: RF 3 needs at least 3 nodes")
    return sizes


def node_of_brokers(brokers: Sequence[Mapping], data_dirs: Sequence[str]) -> dict[int, int]:
    """Broker id -> the index of the node whose data dir holds its log dir."""
    out = {}
    for b in brokers:
        for i, d in enumerate(data_dirs):
            if b["log_dir"].startswith(d.rstrip("/") + "/"):
                out[b["id"]] = i
    return out


def partitions_of(metadata: Mapping, topics: Sequence[str] | None = None) -> list[dict]:
    """Every partition of ``topics`` (all when None) in the controller's metadata, each with its topic's name."""
    return [
        {**p, "topic": t["name"]}
        for t in metadata["topics"]
        if topics is None or t["name"] in topics
        for p in t["partitions"]
    ]


def pick_victim(metadata: Mapping, node_of: Mapping[int, int], topics: Sequence[str], by: str = "leader") -> int:
    """The broker to fault: on a node other than the head (node 0), and not the controller's host while another is
    there (a controller lost with its node is another fault, with an election of its own), the one leading the most
    partitions of ``topics`` (``by`` "leader") or holding the most replicas (``by`` "replica"); ties go to the
    lowest id."""
    parts = partitions_of(metadata, topics)
    controller = metadata.get("controller_id")

    def count(b: int) -> int:
        if by == "leader":
            return sum(p["leader"] == b for p in parts)
        return sum(b in p["replicas"] for p in parts)

    candidates = [b for b, i in sorted(node_of.items()) if i != 0]
    if not candidates:
        raise ValueError("no broker off the head node to fault")
    return max(candidates, key=lambda b: (b != controller, count(b), -b))


def worst_writable(win: Mapping, led: Sequence[int]) -> float | None:
    """The longest unwritable window (``windows()['writable_s']``) over the partitions ``led``; None when one of
    them never acknowledged a record sent after the fault."""
    got = [win["writable_s"].get(q) for q in led]
    if not got or any(g is None for g in got):
        return None
    return max(got)


def catchup_rate(samples: Sequence[tuple[float, int]], full_at: float, registered_at: float | None) -> dict:
    """The catch-up of an empty replica from ``samples`` of (wall-clock time, bytes of its log segments), taken from
    before the node's start until after ``full_at`` (the broker back in every ISR): the bytes at ``full_at``, the
    first byte's time, MB/s from it and from ``registered_at`` to ``full_at``, and the 10%-90% slope of the copy."""
    before = [b for t, b in samples if t <= full_at]
    size = before[-1] if before else 0
    first = next((t for t, b in samples if b > 0), None)
    out: dict = {"bytes": size, "mb": round(size / 1e6, 1)}
    if first is not None and full_at > first:
        out["first_byte_to_isr_s"] = round(full_at - first, 2)
        out["mb_per_s"] = round(size / 1e6 / (full_at - first), 2)
    if registered_at is not None and full_at > registered_at:
        out["registered_to_isr_s"] = round(full_at - registered_at, 2)
        out["mb_per_s_from_registration"] = round(size / 1e6 / (full_at - registered_at), 2)
    if size:
        t10 = next((t for t, b in samples if b >= 0.1 * size), None)
        t90 = next((t for t, b in samples if b >= 0.9 * size), None)
        if t10 is not None and t90 is not None and t90 > t10:
            out["copy_10_90_mb_per_s"] = round(0.8 * size / 1e6 / (t90 - t10), 2)
    return out


def sizing(results: Mapping) -> dict:
    """Rules of thumb from one run's figures: acks=all MB/s per broker node, seconds to re-replicate 1 GB onto an
    empty broker, and the worst writability gap seen per fault."""
    out: dict = {}
    for key, run in results.items():
        if not key.startswith("nodes_") or "produce" not in run:
            continue
        n = run["nodes"]
        out[f"{key}_produce_mb_per_s_per_node"] = round(run["produce"]["mb_per_s"] / n, 2)
        cu = run.get("catchup", {})
        if cu.get("mb_per_s"):
            out[f"{key}_rereplicate_s_per_gb"] = round(1000 / cu["mb_per_s"])
        for fault, f in run.get("failover", {}).items():
            if f.get("writable_s") is not None:
                out[f"{key}_{fault}_writable_s"] = f["writable_s"]
    return out


# -- the machine --


def raylets_on_machine() -> int:
    """How many raylets run on this machine (anyone's): a shared machine's sign."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    n += b"/raylet" in f.read().split(b"\0")[0]
            except OSError:
                pass
    return n


def source_tree() -> dict:
    """The commit the run's code is at, and the files changed from it in the working tree (what the nodes ran)."""

    def git(*argv: str) -> str:
        out = subprocess.run(["git", "-C", os.path.dirname(HERE), *argv], capture_output=True, text=True, check=False)
        return out.stdout.rstrip("\n")

    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(), "modified": changed}


def machine() -> dict:
    return {"load_avg_1m": round(os.getloadavg()[0], 2), "raylets_on_machine": raylets_on_machine()}


def log_bytes(log_dir: str) -> int:
    """Bytes of the log segments (``*.log``) under a broker's log dir (indexes are left out: preallocated)."""
    total = 0
    for d, _, files in os.walk(log_dir):
        for f in files:
            if f.endswith(".log"):
                try:
                    total += os.path.getsize(os.path.join(d, f))
                except OSError:
                    pass
    return total


class Sampler:
    """(time, log bytes) of a log dir every ``every`` s from a thread, until ``stop``."""

    def __init__(self, log_dir: str, every: float = 0.2):
        self.log_dir, self.every = log_dir, every
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), log_bytes(self.log_dir)))
            self._stop.wait(self.every)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), log_bytes(self.log_dir)))
        return self.samples


def wait_for_load(max_load: float, timeout: float) -> float:
    """Seconds waited (``timeout`` at most) for the machine's 1-minute load average to fall under ``max_load``
    before a cluster starts: other people's runs on a shared machine."""
    t0 = time.monotonic()
    while os.getloadavg()[0] >= max_load and time.monotonic() - t0 < timeout:
        time.sleep(5)
    return round(time.monotonic() - t0, 1)


class OneByOneCluster(NodeCluster):
    """A NodeCluster whose nodes join one at a time: four raylets registering at once on a loaded 2-core machine
    missed `ray start`'s 30 s for it (the 5-node cluster, three times in a row, at a load average of 35-40)."""

    def _ray_start(self, nodes, timeout: float = 180.0) -> None:
        for node in nodes:
            super()._ray_start([node], timeout)


def start_nodes(root: str, n: int, attempts: int = 3) -> tuple[NodeCluster, int]:
    """A NodeCluster of ``n`` broker-labelled nodes, and the attempts it took. `ray start` gives a node's raylet 30 s
    to register with the GCS (hard-coded in ray/_private/node.py), which a loaded 2-core machine can miss: such a
    start (the cluster removed again by NodeCluster) is tried again; any other failure is raised."""
    for attempt in range(1, attempts + 1):
        try:
            c = OneByOneCluster(n, root=os.path.join(root, f"try{attempt}"), labels=[{BROKER_LABEL: "yes"}] * n)
            return c, attempt
        except NodeClusterError as e:
            if "timed out during startup" not in str(e) or attempt == attempts:
                raise
            print(f"multinode_bench: `ray start` timed out under load, again ({e})"[:500], file=sys.stderr)
    raise AssertionError("unreachable")


# -- one cluster --


class Run:
    """One NodeCluster with rafka deployed: ``nodes`` Ray nodes, ``brokers`` brokers (``one_node``: all on node 0)."""

    def __init__(self, root: str, nodes: int, brokers: int, args: argparse.Namespace):
        self.args, self.brokers, self.name = args, brokers, "mnb" + uuid.uuid4().hex[:6]
        self.partitions = 2 * brokers
        kinds = ["produce", "catchup", *(f"failover-{f}" for f in args.faults)]
        self.topics = {k: f"{k}-{uuid.uuid4().hex[:6]}" for k in kinds}
        self.root = root
        self.out: dict = {"nodes": nodes, "brokers": brokers, "partitions": self.partitions, "replication_factor": 3}
        self.out["waited_for_load_s"] = wait_for_load(args.max_load, args.load_wait_s)
        t0 = time.monotonic()
        self.c, self.out["ray_start_attempts"] = start_nodes(root, nodes)
        self.out["ray_start_s"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        topics = [
            {"name": t, "partitions": self.partitions, "rf": 3, "configs": TOPIC_CONFIGS} for t in self.topics.values()
        ]
        try:
            self.bootstrap = deploy(
                self.c, self.name, brokers, BROKER_CONFIG, topics, brokers_per_node=brokers if nodes == 1 else None
            )
            self.out["deploy_s"] = round(time.monotonic() - t0, 1)
            self.out.update(wait_pools_full(self.c, self.name, brokers))
        except BaseException:
            self.c.close()
            raise

    def client(self, argv: Sequence[str], timeout: float = 600) -> dict:
        """A client command in the client namespace; its last stdout line as JSON."""
        proc = self.c.run(None, [sys.executable, *argv], timeout=timeout)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def wire(self, kind: str, **kw) -> dict:
        return self.client([CLIENTS, kind, json.dumps({"bootstrap": self.bootstrap, **kw})])

    def metadata(self) -> dict:
        return state(self.c, self.name, self.brokers)

    def node_of(self, md: Mapping) -> dict[int, int]:
        return node_of_brokers(md["brokers"], [n.data_dir for n in self.c.nodes])

    # -- throughput --

    def throughput(self) -> None:
        a, topic = self.args, self.topics["produce"]
        common = {"topic": topic, "partitions": self.partitions, "value_bytes": a.value_bytes}
        m = machine()
        res = self.wire("produce", n=a.records, lat_n=LATENCY_RECORDS, errors_only=True, **common)
        res.pop("cluster_cpu_cores", None)  # its meter counts every ray:: process on the machine, anyone's
        self.out["produce"] = {**res, **m}
        warm = f"import sys; sys.path.insert(0, {HERE!r}); from wire_bench import warm_up_groups; "
        warm += f"warm_up_groups({self.bootstrap!r}, {topic!r}); print('{{}}')"
        self.client(["-c", warm])  # __consumer_offsets and its coordinators made before the timed read
        m = machine()
        res = self.wire("consume", n=a.records, **common)
        res.pop("cluster_cpu_cores", None)
        self.out["consume"] = {**res, **m}

    # -- failover --

    def _load(self, topic: str, hist: str) -> subprocess.Popen:
        a = self.args
        argv = ["-m", "rafka.testkit.kafka_workload", "produce", self.bootstrap, topic]
        argv += ["--seconds", str(a.seconds), "--rate", str(a.rate), "--out", hist]
        return self.c.popen(None, [sys.executable, *argv], stdout=subprocess.PIPE, text=True)

    def _end_load(self, load: subprocess.Popen, topic: str, hist: str, fault_at: float, led: Sequence[int]) -> dict:
        out, _ = load.communicate(timeout=600)
        if load.returncode:
            raise RuntimeError(f"the load failed ({load.returncode}): {out[-2000:]}")
        with open(hist) as f:
            history = json.load(f)["history"]
        win = windows(history, fault_at)
        check = ["-m", "rafka.testkit.kafka_workload", "check", self.bootstrap, topic]
        verdict = self.client([*check, "--partitions", str(self.partitions), "--history", hist])
        return {
            "writable_s": worst_writable(win, led),
            "writable_s_per_partition": {q: win["writable_s"].get(q) for q in led},
            "delivery_errors": win["errors"],
            "acked": sum(1 for h in history if not h[4]),
            "check": verdict,
        }

    def failover(self, fault: str) -> dict:
        topic = self.topics[f"failover-{fault}"]
        md = self.metadata()
        node_of = self.node_of(md)
        vb = pick_victim(md, node_of, [topic])
        v = node_of[vb]
        led = [p["partition"] for p in partitions_of(md, [topic]) if p["leader"] == vb]
        res: dict = {"broker": vb, "node": v, "led": led, "controller_on_victim": md.get("controller_id") == vb}
        res.update(machine())
        hist = os.path.join(self.root, f"history-{fault}.json")
        w = start_watch(self.c, self.name, self.brokers, "out", broker=vb, timeout=120)
        load = self._load(topic, hist)
        time.sleep(WARM_S)
        fault_at = time.time()
        if fault == "kill":
            self.c.kill_node(v)
            res["ray_node_dead_s"] = round(self.c.wait_dead(v), 2)
            first = finish_watch(w)["first"]
            res["fenced_s"] = round(first["out"] - fault_at, 2) if "out" in first else None
            res.update(self._end_load(load, topic, hist, fault_at, led))
            t0 = time.time()
            res["node_restart_s"] = round(self.c.restart_node(v), 1)
            back = watch(self.c, self.name, self.brokers, "isr_full", timeout=300)
            res["isr_full_after_restart_s"] = (
                round(back["first"]["isr_full"] - t0, 1) if not back["timed_out"] else None
            )
        elif fault == "freeze":
            self.c.freeze_node(v)
            try:
                first = finish_watch(w)["first"]
                # frozen on past the fence, so the clients' view is of the frozen node, not of its thaw
                time.sleep(max(0.0, fault_at + self.args.freeze_s - time.time()))
            finally:
                self.c.thaw_node(v)
            thawed_at = time.time()
            res["frozen_s"] = round(thawed_at - fault_at, 2)
            res["fenced_s"] = round(first["out"] - fault_at, 2) if "out" in first else None
            back = watch(self.c, self.name, self.brokers, "isr_full", timeout=300)
            res["isr_full_after_thaw_s"] = (
                round(back["first"]["isr_full"] - thawed_at, 1) if not back["timed_out"] else None
            )
            res.update(self._end_load(load, topic, hist, fault_at, led))
        else:
            raise ValueError(f"unknown fault {fault!r}")
        return res

    # -- catch-up of an empty replica --

    def catchup(self) -> dict:
        a, topic = self.args, self.topics["catchup"]
        n = max(1, int(a.catchup_mb * 1e6 / CATCHUP_VALUE_BYTES))
        fill = self.wire(
            "produce",
            n=n,
            lat_n=0,
            errors_only=True,
            topic=topic,
            partitions=self.partitions,
            value_bytes=CATCHUP_VALUE_BYTES,
        )
        fill.pop("cluster_cpu_cores", None)
        md = self.metadata()
        node_of = self.node_of(md)
        vb = pick_victim(md, node_of, [topic], by="replica")
        v = node_of[vb]
        res: dict = {"broker": vb, "node": v, "fill": fill}
        self.c.kill_node(v)
        self.c.wait_dead(v)
        fenced = watch(self.c, self.name, self.brokers, "out", broker=vb, timeout=120)
        if fenced["timed_out"]:
            raise RuntimeError(f"broker {vb} still leads or is in an ISR 120 s after its node was killed")
        w = start_watch(self.c, self.name, self.brokers, "in_all_isrs", broker=vb, timeout=900, every=0.2)
        res.update(machine())
        data_dir = self.c.node(v).data_dir
        shutil.rmtree(data_dir)  # emptied before the sampling starts (restart_node's wipe finds it empty)
        os.makedirs(data_dir)
        t0 = time.time()
        sampler = Sampler(os.path.join(data_dir, f"broker-{vb}"))
        try:
            res["node_start_s"] = round(self.c.restart_node(v, wipe_disk=True), 1)
            watched = finish_watch(w, timeout=1000)
        finally:
            samples = sampler.stop()
        first = watched["first"]
        if "in_all_isrs" not in first:
            raise RuntimeError(f"broker {vb} not back in every ISR within 900 s: {json.dumps(watched)[:2000]}")
        reg = first.get("registered")
        res["registered_after_node_start_s"] = round(reg - t0 - res["node_start_s"], 1) if reg else None
        res["restart_to_isr_s"] = round(first["in_all_isrs"] - t0, 1)
        res.update(catchup_rate(samples, first["in_all_isrs"], reg))
        return res

    def close(self) -> None:
        self.c.close()


def one_size(root: str, nodes: int, brokers: int, args: argparse.Namespace, multi: bool) -> dict:
    """One cluster's figures; a phase that fails ends that cluster's run with its ``error`` recorded beside what was
    measured before it (the other sizes still run)."""
    t0 = time.monotonic()
    out: dict = {"nodes": nodes, "brokers": brokers}
    run = None
    try:
        run = Run(root, nodes, brokers, args)
        out = run.out
        run.throughput()
        if multi and not args.skip_failover:
            out["failover"] = {}
            for f in args.faults:
                out["failover"][f] = run.failover(f)
        if multi and not args.skip_catchup and nodes in args.catchup_nodes:
            out["catchup"] = run.catchup()
    except Exception as e:  # noqa: BLE001 - recorded, and the exit status says so
        out["error"] = f"{type(e).__name__}: {e}"[:3000]
    finally:
        if run is not None:
            run.close()
    out["run_s"] = round(time.monotonic() - t0, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="3,5", help="cluster sizes, a broker per node (default 3,5)")
    ap.add_argument("--records", type=int, default=100_000, help="records per produce/consume run")
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=40.0, help="how long the paced load runs around each fault")
    ap.add_argument("--rate", type=float, default=200.0, help="the paced load's records/s")
    ap.add_argument("--faults", default="kill,freeze", help="of kill, freeze")
    ap.add_argument(
        "--freeze-s",
        type=float,
        default=20.0,
        help="how long a frozen node stays frozen (at least until its broker is fenced)",
    )
    ap.add_argument("--catchup-mb", type=float, default=400.0, help="MB written before an empty replica catches up")
    ap.add_argument("--catchup-nodes", default="3", help="the sizes whose catch-up is measured")
    ap.add_argument("--no-one-node", action="store_true", help="leave out the same clusters on one node")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument("--skip-catchup", action="store_true")
    ap.add_argument("--max-load", type=float, default=8.0, help="wait before each cluster for the load under this")
    ap.add_argument("--load-wait-s", type=float, default=120.0, help="how long to wait for it at most")
    ap.add_argument("--root", default=None, help="where the nodes' disks go (default: a temp dir under /tmp)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (default: the same, indented)")
    args = ap.parse_args()
    args.faults = [f for f in args.faults.split(",") if f]
    args.catchup_nodes = parse_sizes(args.catchup_nodes)
    sizes = parse_sizes(args.nodes)
    stdout = claim_stdout()
    if os.geteuid() != 0:
        print("multinode_bench needs root (network namespaces)", file=sys.stderr)
        return 2
    sweep_stale()
    t0 = time.monotonic()
    res: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "value_bytes": args.value_bytes,
        "acks": "all",
        "min_insync_replicas": 2,
        "broker_config": BROKER_CONFIG,
        "start": machine(),
        "source": source_tree(),
    }
    with tempfile.TemporaryDirectory(prefix="rafka-mnbench-", dir=args.root) as root:
        for n in sizes:
            res[f"nodes_{n}"] = one_size(os.path.join(root, f"n{n}"), n, n, args, multi=True)
            if not args.no_one_node:
                res[f"one_node_{n}_brokers"] = one_size(os.path.join(root, f"one{n}"), 1, n, args, multi=False)
    res["sizing"] = sizing(res)
    res["bench_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(res) if args.json else json.dumps(res, indent=2), file=stdout)
    return 1 if any(isinstance(v, dict) and "error" in v for v in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
