"""The test cluster itself (rafka.testkit), on real namespaces and real Ray: each node is a Ray node of its own
address; the network faults cut what they say and heal restores it; kill, freeze and restart act on the node's
processes and the GCS sees it; close leaves nothing, also when the body or the start fails. One quick test
(the bare Network) runs in `make test`; the rest are slow."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rafka.testkit import Network, NetworkError, NodeCluster, NodeClusterError, netem_available, netem_message
from rafka.testkit import network as netmod
from rafka.testkit.node_cluster import processes_under

from .probes import (
    connects,
    proc_state,
    send_seconds,
    serve_sink,
    serve_tcp,
    udp_delivered,
    wait_until,
)

PORT = 7100  # every namespace's TCP server
SINK_PORT = 7101
UDP_PORT = 7102


def netns_names() -> set[str]:
    return {line.split()[0] for line in netmod.run(["ip", "netns", "list"]).splitlines() if line.strip()}


def assert_nothing_left(net_id: str, pids: set[int], temp_root: str) -> None:
    assert netmod.leftovers(net_id) == []
    assert not any(n.startswith(f"{netmod.PREFIX}{net_id}") for n in netns_names())
    assert [p for p in pids if netmod.pid_alive(p)] == []
    assert processes_under(temp_root) == set()
    assert not os.path.exists(temp_root)


# ---- the quick one: the bare network (no Ray), in `make test` ----


def test_network_namespaces_have_their_own_link_and_nothing_is_left():
    with Network() as net:
        a, b = net.add("a"), net.add("b")
        routes = netmod.run(a.exec_argv(["ip", "-j", "route"]))
        assert [r["dst"] for r in json.loads(routes)] == [str(net.subnet)]  # no default route: the bridge only
        assert "UP" in json.loads(netmod.run(a.exec_argv(["ip", "-j", "link", "show", "lo"])))[0]["flags"]
        assert a.address != b.address and net.gateway.endswith(".1")
        server = serve_tcp(b, PORT)
        try:
            assert connects(a, b.address, PORT)
            assert connects(None, b.address, PORT)  # the host, through the bridge's .1
            net.isolate(b)
            assert not connects(a, b.address, PORT, timeout=0.5)
            net.heal()
            assert netmod.run(b.exec_argv(["nft", "list", "tables"])).split() == ["table", "inet", netmod.TRACK_TABLE]
            assert connects(a, b.address, PORT)
        finally:
            server.kill()
            server.wait()
        pids = net.pids(a) | net.pids(b)
    assert netmod.leftovers(net.id) == [] and not any(net.id in n for n in netns_names())
    assert [p for p in pids if netmod.pid_alive(p)] == []


# ---- one 3-node cluster (and a client namespace) for the tests that leave it as they found it ----


@pytest.fixture(scope="module")
def held_port():
    """A port held on the host's every address while the cluster's GCS listens on the same number inside node 0's
    namespace: the host's port space (other Ray clusters included) does not reach the namespaces."""
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, held_port):
    netmod.sweep_stale()
    c = NodeCluster(
        3,
        root=str(tmp_path_factory.mktemp("nodes")),
        labels=[{"zone": f"z{i}"} for i in range(3)],
        resources=[{"rafka.io/broker": 1}, {"rafka.io/broker": 1}, {"rafka.io/broker": 1, "spare": 2}],
        gcs_port=held_port,
    )
    print(f"\n3-node cluster started in {c.start_seconds:.1f} s")
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def servers(cluster):
    """A TCP server on PORT in every node's namespace and in the client namespace."""
    spaces = [n.ns for n in cluster.nodes] + [cluster.client_namespace()]
    procs = [serve_tcp(ns, PORT) for ns in spaces]
    yield {ns.name: ns for ns in spaces}
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def net(cluster, servers):
    """The cluster's network, healed after each test; every pair connects before it."""
    n = cluster.network
    for a in servers.values():
        for b in servers.values():
            if a is not b:
                assert connects(a, b.address, PORT), f"{a.name} -> {b.name} before the fault"
    try:
        yield n
    finally:
        n.heal()


WHERE = """
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()

@ray.remote(num_cpus=0)
def where():
    node = ray._private.worker.global_worker.node
    return {"ip": ray.util.get_node_ip_address(), "data_dir": os.environ.get("RAFKA_DATA_DIR"),
            "netns": os.stat("/proc/self/ns/net").st_ino, "temp_dir": node.get_temp_dir_path()}

nodes = [n for n in ray.nodes() if n["Alive"]]
out = {n["NodeManagerAddress"]: ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    n["NodeID"], soft=False)).remote(), timeout=60) for n in nodes}
print(json.dumps({"nodes": [{"address": n["NodeManagerAddress"], "labels": n["Labels"], "resources": n["Resources"]}
                            for n in nodes], "where": out}))
"""


@pytest.mark.slow
def test_each_namespace_is_a_ray_node_of_its_own_address(cluster, held_port):
    got = cluster.python(0, WHERE)  # a driver on the head node
    by_address = {n["address"]: n for n in got["nodes"]}
    assert sorted(by_address) == sorted(n.address for n in cluster.nodes)
    for node in cluster.nodes:
        seen = by_address[node.address]
        assert seen["labels"]["zone"] == f"z{node.index}"
        assert seen["resources"]["rafka.io/broker"] == 1 and seen["resources"]["CPU"] == 2
        assert got["where"][node.address]["ip"] == node.address
    assert by_address[cluster.nodes[2].address]["resources"]["spare"] == 2
    assert cluster.gcs_port == held_port  # held on the host the whole time
    assert {n["address"] for n in cluster.nodes_info() if n["alive"]} == {n.address for n in cluster.nodes}


@pytest.mark.slow
def test_node_processes_see_their_data_dir_and_temp_dir(cluster):
    got = cluster.python(1, WHERE)["where"]  # a driver on a worker node this time
    for node in cluster.nodes:
        worker = got[node.address]
        assert worker["data_dir"] == node.data_dir  # RAFKA_DATA_DIR, from `ray start`'s environment
        assert worker["temp_dir"] == node.temp_dir  # --temp-dir per node holds
        assert worker["netns"] == os.stat(f"/run/netns/{node.ns.netns}").st_ino  # it ran inside the node's namespace
    assert len({w["data_dir"] for w in got.values()}) == 3


@pytest.mark.slow
def test_a_driver_on_the_host_attaches_by_ray_client(cluster):
    code = "import json, ray, sys; ray.init(sys.argv[1]); print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))"
    out = subprocess.run(
        [sys.executable, "-c", code, cluster.client_address],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == sorted(n.address for n in cluster.nodes)


@pytest.mark.slow
def test_isolate_cuts_a_node_off_both_ways_and_heal_restores(cluster, servers, net):
    n0, n1, n2, client = (servers[k] for k in ("n0", "n1", "n2", "client"))
    net.isolate(n2)
    assert not connects(n0, n2.address, PORT, 0.5)
    assert not connects(n2, n0.address, PORT, 0.5)
    assert not connects(client, n2.address, PORT, 0.5)
    assert not connects(None, n2.address, PORT, 0.5)  # the host too
    assert connects(n0, n1.address, PORT) and connects(client, n1.address, PORT)
    net.heal()
    assert connects(n0, n2.address, PORT) and connects(n2, n0.address, PORT) and connects(None, n2.address, PORT)


@pytest.mark.slow
def test_partition_cuts_across_groups_only(cluster, servers, net):
    n0, n1, n2, client = (servers[k] for k in ("n0", "n1", "n2", "client"))
    net.partition([{"n0", "n1"}, {"n2", "client"}])
    assert connects(n0, n1.address, PORT) and connects(n1, n0.address, PORT)
    assert connects(n2, client.address, PORT) and connects(client, n2.address, PORT)
    for a, b in ((n0, n2), (n2, n0), (n1, client), (client, n1), (n0, client), (n2, n1)):
        assert not connects(a, b.address, PORT, 0.5), f"{a.name} -> {b.name} across the partition"
    assert connects(None, n0.address, PORT) and connects(None, n2.address, PORT)  # the host is in no group
    net.heal()
    assert connects(n0, n2.address, PORT) and connects(client, n1.address, PORT)


@pytest.mark.slow
def test_drop_one_way_cuts_one_direction_only(cluster, servers, net):
    n0, n1 = servers["n0"], servers["n1"]
    net.drop_one_way(n0, n1)
    assert not connects(n0, n1.address, PORT, 0.5)  # n0's SYN to n1 is dropped
    assert connects(n1, n0.address, PORT)  # n1 reaches n0, and n0's answers get back
    assert udp_delivered(n0, n1, UDP_PORT, 200) == 0
    assert udp_delivered(n1, n0, UDP_PORT, 200) == 200
    net.heal()
    assert connects(n0, n1.address, PORT)
    net.drop_one_way(n0, n1, replies=False)  # every packet: n1's connections to n0 get no SYN-ACK
    assert not connects(n1, n0.address, PORT, 0.5)
    assert udp_delivered(n1, n0, UDP_PORT, 200) == 200
    net.heal()
    assert connects(n1, n0.address, PORT)


@pytest.mark.slow
def test_lossy_drops_some_packets_and_heal_none(cluster, servers, net):
    n0, n1 = servers["n0"], servers["n1"]
    net.lossy(n1, 20)
    got = udp_delivered(n0, n1, UDP_PORT, 1000)
    print(f"\nlossy 20%: {got} of 1000 datagrams arrived")
    assert 650 < got < 950
    net.heal()
    assert udp_delivered(n0, n1, UDP_PORT, 1000) >= 995


@pytest.mark.slow
def test_throttle_slows_a_link(cluster, servers, net):
    n0, n1 = servers["n0"], servers["n1"]
    sink = serve_sink(n1, SINK_PORT)
    try:
        fast = send_seconds(n0, n1, SINK_PORT, 2_000_000)
        net.throttle(n1, rate="8mbit")
        slow = send_seconds(n0, n1, SINK_PORT, 2_000_000)  # 16 Mbit at 8 Mbit/s: ~2 s
        net.heal()
        print(f"\n2 MB: {fast:.3f} s, throttled to 8 Mbit/s {slow:.3f} s")
        assert slow > 1.5 and fast < 1.0
        assert send_seconds(n0, n1, SINK_PORT, 2_000_000) < 1.0
    finally:
        sink.kill()
        sink.wait()


@pytest.mark.slow
def test_delay_by_netem_or_else_by_the_delay_proxy(cluster, servers, net):
    n1, client = servers["n1"], servers["client"]
    if netem_available():
        net.delay(n1, 100)
    else:
        assert "unknown" in netem_message().lower()
        with pytest.raises(NetworkError, match="netem"):
            net.delay(n1, 100)
    t0 = time.monotonic()
    assert connects(client, n1.address, PORT)
    direct = time.monotonic() - t0
    net.heal()
    proxy = cluster.delay_proxy(None, 7200, (n1.address, PORT), delay_ms=300)  # in the client namespace
    try:
        t0 = time.monotonic()
        assert connects(client, "127.0.0.1", 7200, timeout=5)
        proxied = time.monotonic() - t0
    finally:
        proxy.kill()
        proxy.wait()
    print(f"\nconnect+read direct {direct:.3f} s, through a 300 ms DelayProxy {proxied:.3f} s")
    assert proxied >= 0.3 and proxied > direct + 0.2


@pytest.mark.slow
def test_the_cluster_survived_the_short_faults(cluster):
    assert all(cluster.alive(n.index) for n in cluster.nodes)


@pytest.mark.slow
def test_freeze_stops_a_node_and_thaw_resumes_it(cluster):
    node = cluster.nodes[2]
    pinned = f"""
import json, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
f = ray.remote(num_cpus=0)(lambda: ray.util.get_node_ip_address())
ref = f.options(scheduling_strategy=NodeAffinitySchedulingStrategy("{node.node_id}", soft=False)).remote()
try:
    print(json.dumps(ray.get(ref, timeout=5)))
except ray.exceptions.GetTimeoutError:
    print(json.dumps("timeout"))
"""
    assert cluster.freeze_node(2) > 0
    try:
        pids = cluster.network.pids(node.ns)
        assert pids and all(proc_state(p) == "T" for p in pids)
        assert cluster.python(0, pinned) == "timeout"  # nothing on the frozen node answers
    finally:
        cluster.thaw_node(2)
    assert all(proc_state(p) not in ("T", "") for p in pids)
    assert cluster.python(0, pinned) == node.address
    assert cluster.alive(2)


@pytest.mark.slow
def test_kill_node_then_restart_with_and_without_its_disk(cluster):
    node = cluster.nodes[2]
    marker = os.path.join(node.data_dir, "marker")
    with open(marker, "w") as f:
        f.write("kept")
    old_id = node.node_id
    pids = cluster.network.pids(node.ns)
    assert cluster.kill_node(2) >= len(pids) > 0
    assert cluster.network.pids(node.ns) == set() and not any(netmod.pid_alive(p) for p in pids)
    dead_after = cluster.wait_dead(2)
    print(f"\nthe GCS marked the SIGKILLed node dead {dead_after:.2f} s after the kill")
    assert 0 <= dead_after < 60
    assert not cluster.alive(2)

    with_disk = cluster.restart_node(2)
    assert node.node_id != old_id and os.path.exists(marker)
    got = cluster.python(0, WHERE)["where"][node.address]
    assert got["ip"] == node.address and got["data_dir"] == node.data_dir

    cluster.kill_node(2)
    cluster.wait_dead(2)  # else the GCS lists the killed start beside the new one until it notices
    empty = cluster.restart_node(2, wipe_disk=True)  # a replaced machine
    assert os.listdir(node.data_dir) == []
    print(f"restart (ray start to alive in the GCS): with its disk {with_disk:.1f} s, with an empty disk {empty:.1f} s")
    assert cluster.alive(2)
    addresses = [n["address"] for n in cluster.nodes_info() if n["alive"]]
    assert sorted(addresses) == sorted(n.address for n in cluster.nodes)


# ---- teardown: nothing left, however it ends ----


def _inventory(c: NodeCluster) -> tuple[str, set[int], str]:
    assert c.net is not None
    pids = set().union(*(c.net.pids(ns) for ns in c.net.namespaces.values()))
    return c.net.id, pids, c.temp_root


@pytest.mark.slow
def test_close_leaves_no_namespace_link_process_or_dir():
    c = NodeCluster(2)
    c.client_namespace()
    c.popen(None, ["sleep", "600"])
    c.popen(1, ["sleep", "600"])
    net_id, pids, temp_root = _inventory(c)
    root = c.root
    assert len(pids) > 5 and os.path.isdir(temp_root) and netmod.leftovers(net_id)
    c.close()
    assert_nothing_left(net_id, pids, temp_root)
    assert not os.path.exists(root)  # it made it, it removed it


@pytest.mark.slow
def test_close_after_the_body_raises(tmp_path):
    seen = {}
    with pytest.raises(RuntimeError, match="the test failed"):
        with NodeCluster(1, root=str(tmp_path)) as c:
            c.freeze_node(0)  # even frozen
            seen["inventory"] = _inventory(c)
            raise RuntimeError("the test failed")
    assert_nothing_left(*seen["inventory"])
    assert os.path.isdir(tmp_path / "nodes" / "n0" / "data")  # the caller's root is kept


@pytest.mark.slow
def test_a_start_failing_halfway_leaves_nothing(node_cluster, monkeypatch):
    net_id = netmod.new_id()
    monkeypatch.setattr(netmod, "new_id", lambda: net_id)
    # node 0 (the head) starts, node 1's `ray start` refuses a negative resource
    with pytest.raises(NodeClusterError, match="n1 .*nonnegative"):
        node_cluster(2, resources=[{}, {"bad": -1}])
    assert_nothing_left(net_id, set(), f"/tmp/{netmod.PREFIX}{net_id}")


@pytest.mark.slow
def test_exit_closes_a_cluster_left_open():
    code = "import json; from rafka.testkit import NodeCluster; c = NodeCluster(1); print(json.dumps([c.network.id, sorted(c.network.pids('n0')), c.temp_root, c.root]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    net_id, pids, temp_root, root = json.loads(out.stdout.strip().splitlines()[-1])
    assert pids
    assert_nothing_left(net_id, set(pids), temp_root)
    assert not os.path.exists(root)


@pytest.mark.slow
def test_sweep_stale_removes_what_a_killed_owner_left():
    code = (
        "import subprocess, sys; from rafka.testkit import Network; n = Network(); ns = n.add('a'); "
        "subprocess.Popen(ns.exec_argv(['sleep', '600'])); print(n.id, flush=True); sys.stdin.read()"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    net_id = owner.stdout.readline().strip()
    owner.send_signal(signal.SIGKILL)  # no atexit, no finally
    owner.wait()
    assert wait_until(lambda: len(netmod.leftovers(net_id)) == 3, 5)  # the namespace, the bridge, the veth
    removed = netmod.sweep_stale()
    assert netmod.leftovers(net_id) == []
    assert any(net_id in r for r in removed)
