"""Which Ray node each broker runs on (a deployment's placement, which Kafka leaves to its operators): pure,
over the alive nodes the driver read from Ray (``RayNode``), called by actors/bootstrap.py.

Brokers go round the chosen nodes in a stable order (by address, then node id), so no two brokers share a node
while a chosen node has none, and a cluster started again on the same machines puts each broker id back on the
machine of its log directory. ``BrokerPlacement`` chooses the nodes (a Ray node label, ``key`` or ``key=value``,
or a custom resource) and caps the brokers per node. docs/deploying.md has the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import InvalidConfigError

# The Ray node label a broker's ``broker.rack`` is read from when the config does not set it (Kubernetes'
# well-known zone label, which KubeRay copies onto its Ray nodes).
DEFAULT_RACK_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class RayNode:
    node_id: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_ray(cls, n: dict) -> "RayNode":
        """From one entry of ``ray.nodes()``."""
        return cls(n["NodeID"], n["NodeManagerAddress"], dict(n.get("Labels") or {}), dict(n.get("Resources") or {}))


@dataclass(frozen=True)
class BrokerPlacement:
    """``node_label``: only nodes with this label (``key``) or this label value (``key=value``);
    ``node_resource``: only nodes with this custom resource (e.g. ``rafka.io/broker``, from ``ray start
    --resources``); ``brokers_per_node``: at most this many brokers on one node (None: no cap, spread evenly)."""

    node_label: str | None = None
    node_resource: str | None = None
    brokers_per_node: int | None = None

    def selects(self, node: RayNode) -> bool:
        if self.node_label:
            key, sep, value = self.node_label.partition("=")
            if key not in node.labels or (sep and node.labels[key] != value):
                return False
        if self.node_resource and node.resources.get(self.node_resource, 0) <= 0:
            return False
        return True

    def describe(self) -> str:
        parts = [f"label {self.node_label!r}"] if self.node_label else []
        parts += [f"resource {self.node_resource!r}"] if self.node_resource else []
        return " and ".join(parts) or "any alive node"


def place_brokers(nodes: list[RayNode], num_brokers: int, placement: BrokerPlacement) -> list[RayNode]:
    """The node of each broker id ``0..num_brokers-1``. Raises InvalidConfigError when no alive node
    matches the placement, or when the nodes cannot hold ``num_brokers`` under ``brokers_per_node``."""
    if placement.brokers_per_node is not None and placement.brokers_per_node < 1:
        raise InvalidConfigError(f"brokers per node must be at least 1, not {placement.brokers_per_node}")
    chosen = sorted((n for n in nodes if placement.selects(n)), key=lambda n: (_address_key(n.address), n.node_id))
    if not chosen:
        seen = ", ".join(sorted(f"{n.address} {sorted(n.labels)}" for n in nodes)) or "none"
        raise InvalidConfigError(f"no alive Ray node matches {placement.describe()} (nodes: {seen})")
    cap = placement.brokers_per_node
    if cap is not None and num_brokers > cap * len(chosen):
        raise InvalidConfigError(
            f"{num_brokers} brokers do not fit on {len(chosen)} node(s) at {cap} broker(s) per node "
            f"({placement.describe()})"
        )
    return [chosen[i % len(chosen)] for i in range(num_brokers)]


def node_indexes(assigned: list[RayNode]) -> list[int]:
    """Each broker's index among the brokers of its node (0 for the first): the offset a shared listener port
    takes on that node (serve/kafka_wire/config.py), so brokers on one node never collide."""
    seen: dict[str, int] = {}
    out = []
    for n in assigned:
        out.append(seen.get(n.node_id, 0))
        seen[n.node_id] = out[-1] + 1
    return out


def _address_key(address: str) -> tuple:
    """IPv4 addresses in numeric order (10.0.0.9 before 10.0.0.10), anything else after them by text."""
    parts = address.split(".")
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        return (0, tuple(int(p) for p in parts), "")
    return (1, (), address)


def returned_nodes(homes: dict[int, RayNode], nodes: list[RayNode], running: set[int]) -> dict[int, RayNode]:
    """The brokers to start again, each on the node now at its home's address: brokers not ``running`` whose
    machine is back as a new Ray node (same address, another node id: the node was lost and started again, with
    its disk or without). A broker whose own node is still up is not started here (it was stopped on purpose,
    or its node's Ray restarts it), nor one whose machine has not come back (issue 47 heals those)."""
    by_address = {n.address: n for n in nodes}
    out = {}
    for b, home in homes.items():
        now = by_address.get(home.address)
        if b not in running and now is not None and now.node_id != home.node_id:
            out[b] = now
    return out
