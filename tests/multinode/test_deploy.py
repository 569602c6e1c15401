"""Deploying onto a running Ray cluster of real nodes (each in its own network namespace, rafka.testkit): the CLI's
``rafka cluster start --address`` and ``rafka.deploy``; one broker per node, racks from node labels, log
directories on each node's disk, listeners reached from another namespace by kcat and advertised at the node's
address, ``rafka.connect()`` from a driver on another node and by Ray Client from the host, a clear error for each
bad start, and ``rafka cluster stop`` stopping only what it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .probes import serve_tcp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # real nodes: minutes each on 2 cores

RAFKA = os.path.join(os.path.dirname(sys.executable), "rafka")
BROKER_LABEL = "rafka.io/broker"
ZONE = "topology.kubernetes.io/zone"

# a driver (on a Ray node, or by Ray Client with the address in argv[4]): rafka's Python client against the deployed
# cluster (name in argv[1], topic argv[2]): 50 records produced, then read until argv[3] of them are back
CONNECT_PRODUCE_CONSUME = """
import json, sys, rafka
from rafka import TopicPartition
cluster = rafka.connect(sys.argv[4] if len(sys.argv) > 4 else None, cluster=sys.argv[1], timeout_s=30)
topic = sys.argv[2]
with rafka.Producer(cluster, acks="all") as p:
    for i in range(50):
        p.send(topic, b"py-%d" % i, key=b"k%d" % (i % 5))
    p.flush(60)
got = []
with rafka.Consumer(cluster, auto_offset_reset="earliest") as c:
    c.assign([TopicPartition(topic, q) for q in range(6)])
    for _ in range(120):
        got += [r.value.decode() for rs in c.poll(timeout_ms=500).values() for r in rs]
        if sum(v.startswith("py-") for v in got) >= int(sys.argv[3]):
            break
desc = rafka.Admin(cluster).describe_cluster()
print(json.dumps({"values": got, "brokers": desc["brokers"]}))
"""

# a driver on a Ray node: what Ray and rafka's controller say about placement
PLACEMENT = """
import json, sys, ray
import rafka
cluster = rafka.connect(cluster=sys.argv[1], timeout_s=30)
from actors.bootstrap import ServerHandle
from protocol.names import RAY_NAMESPACE, broker_name
nodes = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}
brokers = {}
for i in range(int(sys.argv[2])):
    inc = ray.get(ray.get_actor(broker_name(sys.argv[1], i), namespace=RAY_NAMESPACE).incarnation.remote())
    brokers[i] = {"node": nodes[inc["node_id"]], "listener": inc["listener"]}
server = ServerHandle(sys.argv[1], int(sys.argv[2]), "", None, None)
topics = {t: server.describe(t)["partitions"] for t in sys.argv[3:]}
print(json.dumps({"brokers": brokers, "topics": topics, "alive_nodes": sorted(nodes.values())}))
"""

DETACHED_BYSTANDER = """
import json, ray
ray.init()
@ray.remote
class Bystander:
    def ping(self):
        return "pong"
b = Bystander.options(name="bystander", namespace="others", lifetime="detached", num_cpus=0).remote()
print(json.dumps(ray.get(b.ping.remote())))
"""

BYSTANDER_ALIVE = """
import json, ray
ray.init()
print(json.dumps(ray.get(ray.get_actor("bystander", namespace="others").ping.remote(), timeout=30)))
"""


def _cli(cluster, i, args, home, check=True, timeout=240):
    proc = cluster.run(i, [RAFKA, *args], env={"RAFKA_HOME": str(home)}, check=False, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"rafka {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


def _kcat(cluster, args, input_text=None, timeout=60):
    return cluster.run(None, ["kcat", *args], input=input_text, timeout=timeout)


def test_rafka_cluster_start_on_a_running_ray_cluster(node_cluster, tmp_path):
    """4 nodes (a head and 3 labeled broker nodes in zones z1-z3): `rafka cluster start --address` from the head
    puts one broker on each labeled node, with its rack from the zone label and its log directory on that node's
    disk; kcat in a namespace of its own reaches every broker at its node's address; a driver on a worker node and
    Ray Client from the host use the cluster; `rafka cluster stop` stops the brokers and leaves Ray and another
    application's actor running."""
    labels = [{}] + [{BROKER_LABEL: "yes", ZONE: f"z{i}"} for i in (1, 2, 3)]
    c = node_cluster(4, labels=labels)
    home = tmp_path / "home"
    name = "deployed"
    broker_nodes = [c.node(i).address for i in (1, 2, 3)]
    base = ["--cluster", name, "--json", "cluster", "start", "--brokers", "3", "--data-dir", str(tmp_path / "d")]
    listeners = ["-c", "listeners=PLAINTEXT://:9092", "-c", "group.initial.rebalance.delay.ms=100"]

    # bad starts: each a clear error, and nothing left behind
    t0 = time.monotonic()
    nothing = _cli(c, 0, [*base, "--address", f"{c.head.address}:1"], home, check=False)
    assert nothing.returncode == 3 and "no Ray cluster answers" in nothing.stderr, nothing.stderr
    assert time.monotonic() - t0 < 30
    no_node = _cli(c, 0, [*base, "--address", c.head_address, "--node-label", f"{BROKER_LABEL}=nope"], home, False)
    assert no_node.returncode == 1 and "no alive Ray node matches label" in no_node.stderr, no_node.stderr

    assert c.python(1, DETACHED_BYSTANDER) == "pong"  # another application on the same Ray cluster

    started = _cli(c, 0, [*base, "--address", c.head_address, "--node-label", BROKER_LABEL, *listeners], home)
    info = json.loads(started.stdout)
    assert sorted(info["nodes"]) == sorted(broker_nodes) and info["attached"] is True
    assert sorted(info["bootstrap_servers"].split(",")) == sorted(f"{a}:9092" for a in broker_nodes)

    again = _cli(c, 0, [*base, "--address", c.head_address, "--node-label", BROKER_LABEL, *listeners], home, False)
    assert again.returncode == 1 and "is recorded as running" in again.stderr, again.stderr
    other_home = tmp_path / "home2"  # a second start of that name from elsewhere: refused by the Ray cluster
    dup = _cli(c, 2, [*base, "--address", c.head_address, "--node-label", BROKER_LABEL, *listeners], other_home, False)
    assert dup.returncode == 1 and f"named {name!r} is already running" in dup.stderr, dup.stderr

    # a replicated topic from kcat's namespace (kcat has no admin: the CLI creates it, through its agent)
    _cli(
        c,
        0,
        ["--cluster", name, "topic", "create", "orders", "-p", "6", "-r", "3", "-c", "min.insync.replicas=2"],
        home,
    )
    bootstrap = f"{broker_nodes[0]}:9092"
    lines = "".join(f"k{i % 7}:kc-{i}\n" for i in range(200))
    _kcat(c, ["-b", bootstrap, "-P", "-t", "orders", "-K", ":", "-X", "acks=all"], input_text=lines)
    consumed = _kcat(c, ["-b", bootstrap, "-C", "-t", "orders", "-e", "-f", "%s\n", "-o", "beginning"]).stdout.split()
    assert sorted(v for v in consumed if v.startswith("kc-")) == sorted(f"kc-{i}" for i in range(200))
    meta = json.loads(_kcat(c, ["-b", bootstrap, "-L", "-J"]).stdout)
    assert sorted(f"{b['name']}" for b in meta["brokers"]) == sorted(f"{a}:9092" for a in broker_nodes)

    where = c.python(0, PLACEMENT, args=[name, "3", "orders"])
    by_address = {where["brokers"][str(i)]["node"]: i for i in range(3)}
    assert sorted(by_address) == sorted(broker_nodes)  # one broker per labeled node, none on the head
    for part in where["topics"]["orders"]:
        assert len(set(part["replicas"])) == 3
    for i in (1, 2, 3):  # each broker's log directory is on its own node's disk (its RAFKA_DATA_DIR)
        b = by_address[c.node(i).address]
        assert any(d.startswith("orders-") for d in os.listdir(os.path.join(c.node(i).data_dir, f"broker-{b}")))

    # rafka's Python client from a driver on a worker node, then by Ray Client from the host (outside the cluster)
    got = c.python(3, CONNECT_PRODUCE_CONSUME, args=[name, "orders", "50"], timeout=240)
    assert sorted(v for v in got["values"] if v.startswith("py-")) == sorted(f"py-{i}" for i in range(50))
    racks = {b["id"]: (b["rack"], b["log_dir"]) for b in got["brokers"]}
    want = {
        by_address[c.node(i).address]: (
            f"z{i}",
            os.path.join(c.node(i).data_dir, f"broker-{by_address[c.node(i).address]}"),
        )
        for i in (1, 2, 3)
    }
    assert racks == want, got["brokers"]
    host_env = {**c.env(None), "RAY_ADDRESS": ""}
    for _attempt in range(3):  # Ray Client's server sometimes fails a session's start on this loaded machine
        outside = subprocess.run(
            [sys.executable, "-c", CONNECT_PRODUCE_CONSUME, name, "orders", "100", c.client_address],
            capture_output=True,
            text=True,
            timeout=240,
            env=host_env,
        )
        if "Initialization failure from server" not in outside.stderr:
            break
    assert outside.returncode == 0, outside.stderr[-3000:]
    values = json.loads(outside.stdout.strip().splitlines()[-1])["values"]
    assert sorted(v for v in values if v.startswith("py-")) == sorted(f"py-{i}" for i in range(50) for _ in "ab")

    stopped = json.loads(_cli(c, 0, ["--json", "cluster", "stop"], home).stdout)
    assert stopped["brokers_stopped"] == 3 and stopped["killed"] == 0
    assert c.python(0, BYSTANDER_ALIVE) == "pong"  # Ray and the other application run on
    assert all(c.alive(i) for i in range(4))
    after = c.python(
        0,
        "import json, ray; ray.init(); from protocol.names import RAY_NAMESPACE; "
        "print(json.dumps([a['name'] for a in ray.util.list_named_actors(all_namespaces=True) "
        "if a['namespace'] == RAY_NAMESPACE]))",
    )
    assert after == [], after  # nothing of rafka's is left


def test_deploy_from_a_driver_caps_brokers_per_node_and_spreads_replicas_over_nodes(node_cluster, tmp_path):
    """``rafka.deploy`` from a driver on a worker node: 4 brokers on the 2 nodes with the broker resource
    (``brokers_per_node=2``), so two brokers share each node and take ports 9092 and 9093 of one shared listener;
    every partition's 2 replicas are on two different nodes. A port taken on a node is a start error that names
    the broker and the address, and stops what had started."""
    resources = [{}, {BROKER_LABEL: 1}, {BROKER_LABEL: 1}]
    c = node_cluster(3, resources=resources)
    deploy = """
import json, sys, rafka
d = rafka.deploy(brokers=4, name="capped", data_dir=sys.argv[1], brokers_per_node=2, node_resource="rafka.io/broker",
                 broker_config={"listeners": "PLAINTEXT://0.0.0.0:9092"})
d.server.create_topic("spread", partitions=8, rf=2)
print(json.dumps({"nodes": d.server.node_addresses, "indexes": d.server.node_indexes}))
"""
    placed = c.python(1, deploy, args=[str(tmp_path / "d")], timeout=300)
    assert sorted(placed["nodes"]) == sorted([c.node(1).address] * 2 + [c.node(2).address] * 2)
    where = c.python(0, PLACEMENT, args=["capped", "4", "spread"])
    ports = sorted((b["node"], b["listener"][1]) for b in where["brokers"].values())
    assert ports == sorted((c.node(i).address, p) for i in (1, 2) for p in (9092, 9093))
    assert all(b["listener"][0] == b["node"] for b in where["brokers"].values())  # advertised: the node's address
    node_of = {int(i): b["node"] for i, b in where["brokers"].items()}
    for part in where["topics"]["spread"]:
        assert len({node_of[r] for r in part["replicas"]}) == 2, part  # never two replicas on one node
    c.python(
        0,
        "import json, rafka\nfrom actors.bootstrap import ServerHandle\nrafka.connect(cluster='capped')\n"
        "ServerHandle.of_running('capped', 4).shutdown()\nprint(json.dumps(0))",
    )

    blocker = serve_tcp(c.node(2).ns, 9092)  # something else holds 9092 on node 2
    try:
        taken = c.run(1, [sys.executable, "-c", deploy, str(tmp_path / "e")], check=False, timeout=300)
        assert taken.returncode != 0
        assert "did not start" in taken.stderr and "0.0.0.0:9092 cannot bind" in taken.stderr, taken.stderr[-2000:]
        left = c.python(
            0,
            "import json, ray; ray.init(); from protocol.names import RAY_NAMESPACE; "
            "print(json.dumps([a['name'] for a in ray.util.list_named_actors(all_namespaces=True) "
            "if a['namespace'] == RAY_NAMESPACE]))",
        )
        assert left == [], left
    finally:
        blocker.kill()
        blocker.wait(10)
