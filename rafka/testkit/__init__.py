"""rafka's test cluster of real machines on one host, like Kafka's KafkaClusterTestKit: Ray nodes in Linux network
namespaces (NodeCluster) on a bridge of their own (Network), with the faults of a Jepsen nemesis. For tests,
benchmarks and `rafka verify`; root only. The server packages never import it."""

from rafka.testkit.delay_proxy import DelayProxy
from rafka.testkit.network import Namespace, Network, NetworkError, netem_available, netem_message, sweep_stale
from rafka.testkit.node_cluster import Node, NodeCluster, NodeClusterError

__all__ = [
    "DelayProxy",
    "Namespace",
    "Network",
    "NetworkError",
    "Node",
    "NodeCluster",
    "NodeClusterError",
    "netem_available",
    "netem_message",
    "sweep_stale",
]
