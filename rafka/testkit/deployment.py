"""rafka deployed onto a NodeCluster as the multi-node suites and benchmarks do it: ``rafka.deploy`` from a driver
on node 0 (brokers on the nodes labelled ``rafka.io/broker``, listeners ``PLAINTEXT://:9092``), the JSON answer of a
driver, and a watcher: one driver polling the controller's metadata (brokers, leaders, ISRs) and printing when
each awaited state was first seen, so a wait costs one driver start, not one per poll."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rafka.testkit.node_cluster import NodeCluster, NodeClusterError

BROKER_LABEL = "rafka.io/broker"

# argv[1]: {"name", "brokers", "data_dir", "config", "brokers_per_node", "topics": [{name, partitions, rf, configs}]}
DEPLOY = (
    """
import json, sys, rafka
a = json.loads(sys.argv[1])
d = rafka.deploy(brokers=a["brokers"], name=a["name"], data_dir=a["data_dir"], node_label="%s",
                 brokers_per_node=a.get("brokers_per_node"), broker_config=a["config"])
for t in a["topics"]:
    d.server.create_topic(t["name"], partitions=t["partitions"], rf=t["rf"], configs=t.get("configs") or {})
print(json.dumps({"bootstrap": rafka.connect(cluster=a["name"]).bootstrap_servers}))
"""
    % BROKER_LABEL
)

# argv[1]: {"name", "brokers", "broker", "until", "timeout", "every"}: the controller's metadata polled every
# ``every`` s (``until`` "now": once); prints {"metadata": the last seen, "first": {state: wall-clock time first
# seen}, "timed_out"}.
# States of broker ``broker``: "out" (it leads nothing and is in no ISR), "registered" (alive under an epoch newer
# than at the start), "in_all_isrs"; of the cluster: "isr_full" (every partition's ISR is its replica set).
WATCH = """
import json, sys, time, ray, rafka
from ray.exceptions import GetTimeoutError, RayActorError
from actors.bootstrap import ServerHandle
a = json.loads(sys.argv[1])
rafka.connect(cluster=a["name"], timeout_s=30)
s = ServerHandle(a["name"], a["brokers"], "", None, None)
b, until, first, md, epoch0 = a.get("broker"), a["until"], {}, None, None
deadline = time.monotonic() + a["timeout"]
while True:
    try:
        md = ray.get(s.controller(5).metadata.remote(), timeout=5)
    except (GetTimeoutError, RayActorError, ValueError):
        if time.monotonic() > deadline:
            break
        time.sleep(a["every"])
        continue
    now = time.time()
    parts = [p for t in md["topics"] for p in t["partitions"]]
    me = next((x for x in md["brokers"] if x["id"] == b), None)
    if epoch0 is None:
        epoch0 = me["epoch"] if me else -1
        print("watching", flush=True)
    seen = {"isr_full": all(len(p["isr"]) == len(p["replicas"]) for p in parts)}
    if b is not None:
        mine = [p for p in parts if b in p["replicas"]]
        seen["out"] = all(p["leader"] != b and b not in p["isr"] for p in mine)
        seen["registered"] = bool(me and me["alive"] and me["epoch"] > epoch0)
        seen["in_all_isrs"] = all(b in p["isr"] for p in mine)
    for k, v in seen.items():
        if v and k not in first:
            first[k] = now
    if until in first or until == "now" or time.monotonic() > deadline:
        break
    time.sleep(a["every"])
print(json.dumps({"metadata": md, "first": first, "timed_out": until != "now" and until not in first}))
"""


def last_json(out: str) -> Any:
    """The last line of a driver's output that is a JSON object or list (Ray may print lines after it, e.g. a node
    marked dead)."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith(("{", "[")):
            return json.loads(line)
    raise NodeClusterError(f"no JSON from the driver: {out[-2000:]}")


def driver(c: NodeCluster, i: int, code: str, args: Sequence[str] = (), timeout: float = 120.0) -> Any:
    """Run a driver on node ``i``; its last JSON line."""
    return last_json(c.python(i, code, args=list(args), timeout=timeout, parse_json=False))


def deploy(
    c: NodeCluster,
    name: str,
    brokers: int,
    config: Mapping[str, Any],
    topics: Sequence[Mapping[str, Any]] = (),
    brokers_per_node: int | None = None,
    data_dir: str = "/var/lib/rafka",
    timeout: float = 300.0,
) -> str:
    """``rafka.deploy`` from a driver on node 0 onto the labelled nodes, then ``topics`` made; the bootstrap list.
    Each node's RAFKA_DATA_DIR (its own data dir) wins over ``data_dir``."""
    spec = {
        "name": name,
        "brokers": brokers,
        "data_dir": data_dir,
        "config": dict(config),
        "brokers_per_node": brokers_per_node,
        "topics": [dict(t) for t in topics],
    }
    return driver(c, 0, DEPLOY, [json.dumps(spec)], timeout=timeout)["bootstrap"]


def _watch_spec(name: str, brokers: int, until: str, broker: int | None, timeout: float, every: float) -> str:
    return json.dumps(
        {"name": name, "brokers": brokers, "broker": broker, "until": until, "timeout": timeout, "every": every}
    )


def watch(
    c: NodeCluster,
    name: str,
    brokers: int,
    until: str,
    broker: int | None = None,
    timeout: float = 120.0,
    every: float = 0.25,
) -> dict:
    """Poll the controller from a driver on node 0 until ``until`` (a WATCH state) holds; ``{"metadata", "first",
    "timed_out"}``."""
    return driver(c, 0, WATCH, [_watch_spec(name, brokers, until, broker, timeout, every)], timeout=timeout + 120)


def start_watch(
    c: NodeCluster,
    name: str,
    brokers: int,
    until: str,
    broker: int | None = None,
    timeout: float = 300.0,
    every: float = 0.25,
) -> subprocess.Popen:
    """``watch`` in the background, returned once it has read the metadata (so "registered" means under an epoch
    newer than now's): read its answer with ``finish_watch``."""
    argv = [sys.executable, "-c", WATCH, _watch_spec(name, brokers, until, broker, timeout, every)]
    proc = c.popen(0, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "watching":
            return proc
    err = proc.stderr.read() if proc.stderr else ""
    raise NodeClusterError(f"the watcher ended before it watched ({proc.wait()}): {err[-3000:]}")


def finish_watch(proc: subprocess.Popen, timeout: float = 420.0) -> dict:
    """A background watcher's answer, once it ends."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode:
        raise NodeClusterError(f"the watcher failed ({proc.returncode}): {err[-3000:]}")
    return last_json(out)


def state(c: NodeCluster, name: str, brokers: int) -> dict:
    """The controller's metadata now: ``{brokers, topics, controller_id, ...}``."""
    md = watch(c, name, brokers, "now", timeout=30.0)["metadata"]
    if md is None:
        raise NodeClusterError(f"no controller of {name} answered in 30 s")
    return md


# argv: cluster name, brokers, timeout: seconds until every broker's warm pool of replica actors is full again
POOLS_FULL = """
import json, sys, time, ray, rafka
from actors.bootstrap import ServerHandle
name, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rafka.connect(cluster=name, timeout_s=30)
s = ServerHandle.of_running(name, n)
t0 = time.monotonic()
while True:
    pools = [ray.get(b.replica_pool.remote(), timeout=30) for b in s.brokers.values()]
    full = all(p["ready"] >= p["size"] for p in pools)
    if full or time.monotonic() - t0 > timeout:
        break
    time.sleep(0.2)
print(json.dumps({"pools_fill_s": round(time.monotonic() - t0, 2), "full": full}))
"""


def wait_pools_full(c: NodeCluster, name: str, brokers: int, timeout: float = 120.0) -> dict:
    """Wait until every broker's warm pool of replica actors is full (benchmarks/bench_util.py's wait_pools_full,
    from a driver on node 0): creating topics takes actors from the pools, and a timed run during the refill
    measures actor starts. ``{"pools_fill_s", "full"}``."""
    return driver(c, 0, POOLS_FULL, [name, str(brokers), str(timeout)], timeout=timeout + 120)
