"""The pure parts of rafka.testkit (no root, no namespace): names within Linux's 15 characters, /24 allocation
around the host's routes, the nft rule text of each fault, partition groups, `ray start`'s command line, the GCS
probe's wait condition, and the DelayProxy on loopback."""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
import time

import pytest

from rafka.testkit import gcs_probe
from rafka.testkit import network as net
from rafka.testkit.delay_proxy import DelayProxy
from rafka.testkit.network import Namespace
from rafka.testkit.node_cluster import Node, ray_start_argv


def test_interface_names_fit_linux_and_differ_per_network():
    ids = {net.new_id() for _ in range(50)}
    assert len(ids) == 50
    for i in ids:
        assert len(net.bridge_name(i)) <= 15 and len(net.veth_name(i, 999)) <= 15
    assert net.veth_name("abcdef", 0) != net.veth_name("abcdef", 1)
    with pytest.raises(ValueError):
        net.veth_name("abcdef", 1000)


def test_pick_subnet_avoids_the_hosts_networks():
    pool = [ipaddress.IPv4Network(f"10.200.{b}.0/24") for b in range(4)]
    used = [ipaddress.IPv4Network("10.200.0.0/23"), ipaddress.IPv4Network("10.200.3.7/32")]
    assert net.pick_subnet(used, random.Random(1), pool) == ipaddress.IPv4Network("10.200.2.0/24")
    with pytest.raises(net.NetworkError):
        net.pick_subnet([ipaddress.IPv4Network("10.0.0.0/8")], pool=pool)
    picks = {net.pick_subnet([], random.Random(s)) for s in range(20)}
    assert len(picks) > 10 and all(
        p.prefixlen == 24 and p.subnet_of(ipaddress.IPv4Network("10.192.0.0/10")) for p in picks
    )
    assert all(200 <= p.network_address.packed[1] <= 250 for p in picks)


def test_addresses_start_at_2_and_1_is_the_hosts():
    s = ipaddress.IPv4Network("10.201.5.0/24")
    assert str(net.host_address(s, 0)) == "10.201.5.2" and str(net.host_address(s, 252)) == "10.201.5.254"
    with pytest.raises(ValueError):
        net.host_address(s, 253)


def test_isolate_drops_the_veth_both_ways():
    assert [(r.chain, r.text) for r in net.isolate_rules()] == [
        ("input", 'iifname "eth0" drop'),
        ("output", 'oifname "eth0" drop'),
    ]


def test_block_rules_name_the_peers_as_a_set():
    rules = net.block_rules(["10.0.0.4", "10.0.0.3"])
    assert [r.text for r in rules] == ["ip saddr { 10.0.0.3, 10.0.0.4 } drop", "ip daddr { 10.0.0.3, 10.0.0.4 } drop"]
    assert [r.text for r in net.block_rules(["10.0.0.3"])] == ["ip saddr 10.0.0.3 drop", "ip daddr 10.0.0.3 drop"]
    assert net.block_rules([]) == []


def test_one_way_keeps_replies_unless_asked():
    assert [r.text for r in net.one_way_rules("10.0.0.3")] == ["ip daddr 10.0.0.3 ct direction original drop"]
    assert [r.text for r in net.one_way_rules("10.0.0.3", replies=False)] == ["ip daddr 10.0.0.3 drop"]
    assert all(r.chain == "output" for r in net.one_way_rules("10.0.0.3"))


def test_lossy_uses_numgen():
    assert [r.text for r in net.lossy_rules(30)] == [
        'iifname "eth0" numgen random mod 100 < 30 drop',
        'oifname "eth0" numgen random mod 100 < 30 drop',
    ]
    for bad in (-1, 101):
        with pytest.raises(ValueError):
            net.lossy_rules(bad)


def test_partition_blocks_each_member_from_the_other_groups():
    blocks = net.partition_blocks([{"a", "b"}, {"c", "d", "e"}])
    assert blocks["a"] == ["c", "d", "e"] and blocks["e"] == ["a", "b"]
    assert net.partition_blocks([{"a"}, {"b"}, {"c"}])["b"] == ["a", "c"]
    with pytest.raises(ValueError, match="more than one group"):
        net.partition_blocks([{"a", "b"}, {"b", "c"}])


def test_the_nemesis_script_replaces_the_table_in_one_go():
    rules = net.isolate_rules() + net.one_way_rules("10.0.0.9")
    script = net.nemesis_script(rules)
    lines = [line.strip() for line in script.splitlines()]
    assert lines[:3] == ["table inet rafka_nemesis", "delete table inet rafka_nemesis", "table inet rafka_nemesis {"]
    i, o = lines.index("chain input {"), lines.index("chain output {")
    assert lines[i + 1] == "type filter hook input priority -10; policy accept;"
    assert lines[i + 2] == 'iifname "eth0" drop' and lines[i + 3] == "}"
    assert lines[o + 2 : o + 4] == ['oifname "eth0" drop', "ip daddr 10.0.0.9 ct direction original drop"]
    assert script.count("{") == script.count("}")
    empty = net.nemesis_script([])
    assert "drop" not in empty and "chain input" in empty and "chain output" in empty
    assert "ct state" in net.track_script()


def _node(index: int, **kw) -> Node:
    ns = Namespace(f"n{index}", f"rfkabcdef-n{index}", f"10.200.1.{index + 2}", f"rfkabcdefv{index}", index)
    return Node(index, ns, f"/r/nodes/n{index}/data", f"/tmp/rfkabcdef/n{index}", "/r/log", 2, **kw)


def test_ray_start_argv_head_and_worker():
    head = ray_start_argv(
        _node(0, labels={"zone": "a"}), "10.200.1.2:6380", 6380, 10001, {"health_check_period_ms": 500}
    )
    assert head[1:2] == ["start"] and "--head" in head
    pairs = dict(zip(head[2::], head[3::]))
    assert pairs["--node-ip-address"] == "10.200.1.2" and pairs["--temp-dir"] == "/tmp/rfkabcdef/n0"
    assert pairs["--port"] == "6380" and pairs["--ray-client-server-port"] == "10001"
    assert pairs["--labels"] == "zone=a" and pairs["--system-config"] == '{"health_check_period_ms": 500}'
    assert "--include-dashboard=false" in head and "--disable-usage-stats" in head
    worker = ray_start_argv(_node(1, resources={"rafka.io/broker": 1}), "10.200.1.2:6380", 6380, 10001, {})
    pairs = dict(zip(worker[2::], worker[3::]))
    assert "--head" not in worker and pairs["--address"] == "10.200.1.2:6380" and "--port" not in worker
    assert pairs["--resources"] == '{"rafka.io/broker": 1}' and pairs["--num-cpus"] == "2" and "--labels" not in worker


def test_probe_condition_alive_with_a_new_id_and_dead():
    table = [
        {"node_id": "old", "address": "10.0.0.3", "alive": False},
        {"node_id": "new", "address": "10.0.0.3", "alive": True},
        {"node_id": "h", "address": "10.0.0.2", "alive": True},
    ]
    assert gcs_probe.satisfied(table, {"alive": [["10.0.0.3", ["old"]], ["10.0.0.2", []]], "dead": ["old"]})
    assert not gcs_probe.satisfied(table, {"alive": [["10.0.0.3", ["new"]]]})
    assert not gcs_probe.satisfied(table, {"dead": ["h"]})
    assert not gcs_probe.satisfied(table, {"alive": [["10.0.0.4", []]]})


def test_delay_proxy_delays_each_way_and_passes_the_end_of_stream():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def echo():
        c, _ = srv.accept()
        while data := c.recv(100):
            c.sendall(data)
        c.close()

    threading.Thread(target=echo, daemon=True).start()
    with DelayProxy(("127.0.0.1", 0), srv.getsockname(), 0.1) as proxy:
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        t0 = time.monotonic()
        s.sendall(b"ping")
        got = b""
        while len(got) < 4:
            got += s.recv(10)
        rtt = time.monotonic() - t0
        s.shutdown(socket.SHUT_WR)
        assert s.recv(10) == b""  # the echo server saw our end and closed
        s.close()
    srv.close()
    assert got == b"ping" and 0.2 <= rtt < 1.0
