"""A cluster start that cannot succeed fails with the broker's own words, and leaves nothing behind: a listener
port that is taken, a second cluster of one name, a log directory another broker holds, a label naming no node."""

from __future__ import annotations

import socket

import pytest
import ray

from actors.bootstrap import BrokerStartError, start_cluster
from actors.server.broker_placement import BrokerPlacement
from protocol.errors import ClusterAlreadyRunningError, InvalidConfigError
from protocol.names import RAY_NAMESPACE, broker_name


def _no_actor(name: str) -> bool:
    try:
        ray.get_actor(name, namespace=RAY_NAMESPACE)
    except ValueError:
        return True
    return False


def test_a_configured_listener_port_that_is_taken_is_a_start_error(ray_cluster, cluster_name, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerStartError) as err:
            start_cluster(cluster_name, 1, str(tmp_path), broker_config={"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    assert "broker 0" in str(err.value) and f"127.0.0.1:{port}" in str(err.value), err.value
    assert "address already in use" in str(err.value).lower()
    assert _no_actor(broker_name(cluster_name, 0))  # what was started is stopped again


def test_brokers_sharing_a_node_take_the_next_ports_of_a_shared_listener(ray_cluster, cluster_name, tmp_path):
    with socket.socket() as probe:  # three consecutive free ports are very likely here
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
    server = start_cluster(cluster_name, 3, str(tmp_path), broker_config={"listeners": f"127.0.0.1:{base}"})
    try:
        got = sorted(ray.get(h.incarnation.remote())["listener"][1] for h in server.brokers.values())
        assert got == [base, base + 1, base + 2]
    finally:
        server.shutdown()


def test_a_second_cluster_of_one_name_is_refused_and_the_first_keeps_running(ray_cluster, cluster_name, tmp_path):
    first = start_cluster(cluster_name, 1, str(tmp_path / "a"), broker_config={"listeners": "127.0.0.1:0"})
    try:
        with pytest.raises(ClusterAlreadyRunningError, match=f"named {cluster_name!r} is already running"):
            start_cluster(cluster_name, 1, str(tmp_path / "b"), broker_config={"listeners": "127.0.0.1:0"})
        assert ray.get(first.brokers[0].incarnation.remote(), timeout=10)["broker_id"] == 0
        assert first.metadata()["brokers"][0]["alive"]
    finally:
        first.shutdown()


def test_a_log_directory_held_by_another_broker_is_a_start_error(ray_cluster, cluster_name, tmp_path):
    first = start_cluster(cluster_name, 1, str(tmp_path), broker_config={"listeners": "127.0.0.1:0"})
    try:
        with pytest.raises(BrokerStartError, match="broker 0 did not start: .*lock"):
            start_cluster(
                cluster_name + "x",
                1,
                str(tmp_path),
                broker_config={"listeners": "127.0.0.1:0", "broker.session.timeout.ms": 1000},
            )
    finally:
        first.shutdown()


def test_a_node_label_that_names_no_node_is_refused_before_anything_starts(ray_cluster, cluster_name, tmp_path):
    with pytest.raises(InvalidConfigError, match="no alive Ray node matches label 'rafka.io/broker=yes'"):
        start_cluster(cluster_name, 1, str(tmp_path), placement=BrokerPlacement(node_label="rafka.io/broker=yes"))
    assert _no_actor(broker_name(cluster_name, 0))
