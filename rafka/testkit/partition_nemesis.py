"""The partition nemesis of issue 46's section 5 (Jepsen's way) over a NodeCluster running a rafka deployment: the
five network faults, one function each, aimed from the cluster's metadata (who leads what, which broker hosts the
controller) and carried out with ``cluster.net`` (nftables in the nodes' namespaces). Each returns a ``Strike`` with
when it struck and healed (wall-clock, as the workload's history) and what it saw meanwhile. tests/multinode/
test_partitions.py drives it; rafka/tools/jepsen.py checks the histories."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rafka.testkit.node_cluster import NodeCluster

__all__ = [
    "STATE",
    "Strike",
    "Topology",
    "client_cut_off",
    "cluster_state",
    "controller_isolated",
    "driver_json",
    "flapping",
    "leader_cut_off",
    "one_way_loss",
]

# a driver on a node: the topics' partitions, the brokers and the controller (argv: cluster name, topics...)
STATE = """
import json, sys, ray, rafka
from actors.bootstrap import ServerHandle
from rafka.tools.nemesis import actor_processes
from protocol.names import controller_name
name, topics = sys.argv[1], sys.argv[2:]
rafka.connect(cluster=name, timeout_s=30)
s = ServerHandle(name, 3, "", None, None)
md = s.metadata()
parts = {t: s.describe(t)["partitions"] for t in topics}
ctl = actor_processes(controller_name(name)).get(controller_name(name))
print(json.dumps({"partitions": parts, "brokers": md["brokers"], "controller_id": md["controller_id"],
                  "controller_epoch": md["controller_epoch"], "controller_node": ctl[1] if ctl else None}))
"""


def driver_json(c: NodeCluster, i: int, code: str, args: list[str] | tuple[str, ...] = (), timeout: float = 120) -> Any:
    """A driver's last JSON line (Ray may print its own lines after it, e.g. a node marked dead)."""
    out = c.python(i, code, args=list(args), timeout=timeout, parse_json=False)
    for line in reversed(out.strip().splitlines()):
        if line.startswith(("{", "[")):
            return json.loads(line)
    raise AssertionError(f"no JSON from the driver: {out[-2000:]}")


def cluster_state(c: NodeCluster, name: str, topics: list[str], node: int = 0, timeout: float = 120) -> dict:
    """STATE run on ``node`` (the head by default: no fault here cuts it off)."""
    return driver_json(c, node, STATE, [name, *topics], timeout=timeout)


@dataclass
class Topology:
    """Who is where: broker id -> node index, (topic, partition) -> leader broker, the controller's host broker."""

    broker_node: dict[int, int]
    leaders: dict[tuple[str, int], int]
    controller_broker: int
    controller_epoch: int

    @classmethod
    def of(cls, c: NodeCluster, state: dict) -> Topology:
        broker_node = {
            b["id"]: next(n.index for n in c.nodes if b["log_dir"].startswith(n.data_dir + "/"))
            for b in state["brokers"]
        }
        leaders = {(t, p["partition"]): p["leader"] for t, ps in state["partitions"].items() for p in ps}
        return cls(broker_node, leaders, state["controller_id"], state["controller_epoch"])

    def ns(self, c: NodeCluster, broker: int) -> str:
        return c.node(self.broker_node[broker]).name

    def other_broker_ns(self, c: NodeCluster, broker: int) -> list[str]:
        return [self.ns(c, b) for b in sorted(self.broker_node) if b != broker]

    def leader_not_controller(self, topic: str) -> tuple[int, int]:
        """(partition, leader broker) of the lowest partition of ``topic`` led by a broker not hosting the
        controller."""
        for (t, p), b in sorted(self.leaders.items()):
            if t == topic and b != self.controller_broker and b >= 0:
                return p, b
        raise AssertionError(f"every partition of {topic} is led by the controller's broker {self.controller_broker}")


@dataclass
class Strike:
    """One fault: ``kind``, ``target`` (what it cut), ``struck_at``/``healed_at`` (time.time()), what ``observe``
    returned while it held (``during``) and anything else of note (``detail``)."""

    kind: str
    target: str
    struck_at: float = 0.0
    healed_at: float = 0.0
    during: Any = None
    detail: dict[str, Any] = field(default_factory=dict)


Observe = Callable[[], Any] | None


def _hold(c: NodeCluster, strike: Strike, hold_s: float, observe: Observe, observe_after_s: float) -> Strike:
    """Keep the fault ``hold_s``, observing ``observe_after_s`` in on a thread of its own (a slow observer never
    stretches the fault); then heal every rule. ``detail["observed_at"]`` says when the observation returned."""
    box: dict[str, Any] = {}

    def watch() -> None:
        time.sleep(max(0.0, strike.struck_at + observe_after_s - time.time()))
        try:
            box["during"] = observe() if observe is not None else None
        except Exception as e:  # noqa: BLE001 - what the observer could not see is recorded, not fatal
            box["during"] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        box["at"] = time.time()

    watcher = threading.Thread(target=watch, name="nemesis-observe", daemon=True)
    if observe is not None:
        watcher.start()
    try:
        time.sleep(max(0.0, strike.struck_at + hold_s - time.time()))
    finally:
        c.network.heal()
        strike.healed_at = time.time()
    if observe is not None:
        watcher.join(180)
        strike.during = box.get("during", {"error": "the observer did not return"})
        strike.detail["observed_at"] = box.get("at")
        strike.detail["observed_while_held"] = box.get("at", float("inf")) <= strike.healed_at
    return strike


def leader_cut_off(c: NodeCluster, topo: Topology, topic: str, hold_s: float = 20.0, observe: Observe = None) -> Strike:
    """Fault 1: the node of a leader (of a partition of ``topic``, on a broker not hosting the controller) cut off
    from the controller's node and its followers' nodes, both ways; the head node (the GCS) and the clients still
    reach it. It cannot grow its high watermark (no follower fetches) nor shrink its ISR (no controller), so it
    acknowledges no acks=all write, while the controller fences its broker and elects a new leader on the majority
    side. After the heal it learns the new epoch, truncates to it and rejoins."""
    p, b = topo.leader_not_controller(topic)
    me, others = topo.ns(c, b), topo.other_broker_ns(c, b)
    s = Strike("leader-cut-off", f"{topic}-{p} leader broker {b} ({me}) | {others}", time.time())
    s.detail.update(partition=p, broker=b)
    c.network.partition([[me], others])
    return _hold(c, s, hold_s, observe, hold_s * 0.5)


def controller_isolated(c: NodeCluster, topo: Topology, hold_s: float = 10.0, observe: Observe = None) -> Strike:
    """Fault 2: the node of the broker hosting the controller isolated from everything (the head's GCS and the
    clients too). The other brokers stop hearing the controller, declare it dead and elect a new one in a new
    controller epoch; the old one's epoch is fenced. ``hold_s`` stays under Ray's node death detection (its
    health checks), so the node itself lives on; whether the GCS marked it dead anyway is in ``detail``."""
    b = topo.controller_broker
    me = topo.ns(c, b)
    s = Strike("controller-isolated", f"controller epoch {topo.controller_epoch} on broker {b} ({me})", time.time())
    s.detail.update(broker=b, node=topo.broker_node[b], epoch=topo.controller_epoch)
    c.network.isolate(me)
    _hold(c, s, hold_s, observe, hold_s * 0.5)
    return s


def one_way_loss(c: NodeCluster, topo: Topology, topic: str, hold_s: float = 20.0, observe: Observe = None) -> Strike:
    """Fault 3: a leader's node (not the controller's) loses every packet it sends on a connection it opened to the
    other broker nodes (its heartbeats, AlterPartition and controller calls), while the connections they opened to it
    (the followers' fetches) still work both ways: it hears them and they hear it, but it cannot reach the
    controller, which fences it and moves its leaders while its followers may still be fetching from it."""
    p, b = topo.leader_not_controller(topic)
    me, others = topo.ns(c, b), topo.other_broker_ns(c, b)
    s = Strike("one-way-loss", f"{me} (leader broker {b} of {topic}-{p}) -> {others} dropped", time.time())
    s.detail.update(partition=p, broker=b)
    for o in others:
        c.network.drop_one_way(me, o, replies=True)
    return _hold(c, s, hold_s, observe, hold_s * 0.5)


def flapping(
    c: NodeCluster,
    topo: Topology,
    topic: str,
    flaps: int = 6,
    cut_s: float = 2.0,
    up_s: float = 2.0,
    observe: Observe = None,
) -> Strike:
    """Fault 4: the links between a leader's node (not the controller's) and the other broker nodes cut ``flaps``
    times for ``cut_s``, up ``up_s`` in between: around the session timeout and the controller link's timeout, so
    elections, fencing and truncation race the links coming back."""
    p, b = topo.leader_not_controller(topic)
    me, others = topo.ns(c, b), topo.other_broker_ns(c, b)
    s = Strike("flapping", f"{me} (leader broker {b} of {topic}-{p}) <-> {others}, {flaps} x {cut_s}s", time.time())
    s.detail.update(partition=p, broker=b, flaps=flaps)
    try:
        for _ in range(flaps):
            c.network.partition([[me], others])
            time.sleep(cut_s)
            c.network.heal()
            time.sleep(up_s)
    finally:
        c.network.heal()
        s.healed_at = time.time()
    if observe is not None:
        try:
            s.during = observe()
        except Exception as e:  # noqa: BLE001 - recorded, as in _hold
            s.during = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        s.detail["observed_at"] = time.time()
    return s


def client_cut_off(c: NodeCluster, topo: Topology, topic: str, hold_s: float = 12.0, observe: Observe = None) -> Strike:
    """Fault 5: the client namespace cut off from one leader's node only (every broker still reaches every other,
    and the client reaches the rest): the brokers see nothing wrong, so nothing fails over; that leader's partitions
    are unavailable to this client until the heal, and what it queued meanwhile is delivered after, exactly once."""
    p, b = topo.leader_not_controller(topic)
    me = topo.ns(c, b)
    client = c.client_namespace().name
    s = Strike("client-cut-off", f"{client} | {me} (leader broker {b} of {topic}-{p})", time.time())
    s.detail.update(partition=p, broker=b)
    c.network.partition([[client], [me]])
    return _hold(c, s, hold_s, observe, hold_s * 0.5)
