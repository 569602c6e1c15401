"""Finding a running cluster, as Kafka's ClientUtils resolves ``bootstrap.servers``: ``resolve_cluster`` (what
every client constructor calls), ``attach`` (what ``rafka.connect`` calls), the state file ``rafka cluster
start`` writes, and the cluster's listeners and scrape URL. A leaf under the client classes: it imports
only protocol/ and rafka.ray_session, never a client or rafka/cluster.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from protocol.errors import ClusterNotFoundError
from protocol.names import RAY_NAMESPACE, controller_name
from rafka.ray_session import attach_ray

__all__ = [
    "DEFAULT_CLUSTER",
    "attach",
    "bootstrap_servers",
    "metrics_url",
    "read_state",
    "resolve_cluster",
    "state_file",
    "wait_for_controller",
]

DEFAULT_CLUSTER = "rafka"


def state_file() -> Path:
    """Where ``rafka cluster start`` records the Ray head it started (``$RAFKA_HOME`` or ``~/.rafka``)."""
    home = os.environ.get("RAFKA_HOME") or os.path.join(Path.home(), ".rafka")
    return Path(home) / "cluster.json"


def read_state() -> dict | None:
    try:
        return json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None


def bootstrap_servers(cluster: str, timeout_s: float = 10.0) -> str:
    """``host:port,...``: the Kafka wire listeners (serve/kafka_wire) of the cluster's live brokers, as a
    Kafka client's ``bootstrap.servers``; "" when no broker runs a listener. Needs Ray connected."""
    import ray

    from actors.metadata.kv import GcsKV
    from protocol.kv import read_cluster
    from protocol.names import broker_name

    brokers = [b["id"] for b in read_cluster(GcsKV(cluster))["brokers"] if b.get("alive", True)]
    refs = []
    for bid in brokers:
        try:
            refs.append(ray.get_actor(broker_name(cluster, bid), namespace=RAY_NAMESPACE).incarnation.remote())
        except ValueError:  # a broker that is down right now
            continue
    out = []
    for inc in ray.get(refs, timeout=timeout_s):
        if inc.get("listener"):
            host, port = inc["listener"]
            out.append(f"{host}:{port}")
    return ",".join(out)


def metrics_url(cluster: str) -> str | None:
    """The cluster's Prometheus scrape URL (``http://host:port/metrics``, published by its exporter in GCS
    KV; docs/metrics.md), None when no exporter runs. Needs Ray connected."""
    from actors.metadata.kv import GcsKV
    from protocol.kv import METRICS_URL

    return GcsKV(cluster).get(METRICS_URL)


def wait_for_controller(name: str, timeout_s: float) -> Any:
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get_actor(controller_name(name), namespace=RAY_NAMESPACE)
        except ValueError:
            if time.monotonic() >= deadline:
                raise ClusterNotFoundError(
                    f"no rafka cluster named {name!r} on this Ray cluster (no actor "
                    f"{controller_name(name)!r} in namespace {RAY_NAMESPACE!r})"
                ) from None
            time.sleep(0.1)


def attach(address: str | None = None, cluster: str | None = None, timeout_s: float = 5.0) -> tuple[str, str | None]:
    """``(cluster name, Ray address)`` of a running cluster, connecting to Ray first when needed (the body of
    ``rafka.connect``: its docstring has the defaults). ``ClusterNotFoundError`` when there is no such cluster."""
    import ray

    state = read_state()
    if cluster is None:
        cluster = (state or {}).get("cluster", DEFAULT_CLUSTER)
    if not ray.is_initialized():
        if address is None:
            address = os.environ.get("RAY_ADDRESS") or (state or {}).get("address") or "auto"
        address = attach_ray(address)
    wait_for_controller(cluster, timeout_s)
    return cluster, address


def resolve_cluster(cluster: Any, timeout_s: float = 5.0) -> str:
    """The cluster name a client constructor was given, after checking that the cluster is there
    (connecting to Ray first when needed); ``ClusterNotFoundError`` otherwise."""
    import ray

    if cluster is None:
        return attach(timeout_s=timeout_s)[0]
    if isinstance(cluster, str):
        if not ray.is_initialized():
            return attach(cluster=cluster, timeout_s=timeout_s)[0]
        name = cluster
    else:
        name = getattr(cluster, "name", None)
        if not isinstance(name, str):
            raise TypeError(f"expected a LocalCluster, ClusterHandle or cluster name, not {type(cluster).__name__}")
        if not ray.is_initialized():
            raise ClusterNotFoundError(f"cluster {name!r} is not running (Ray is not initialized)")
    wait_for_controller(name, timeout_s)
    return name
