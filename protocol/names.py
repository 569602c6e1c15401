"""Every Ray actor name of a cluster, and the Ray namespace they live in.

A cluster ``{cluster}`` is a set of named actors in Ray namespace ``rafka``::

    {cluster}:controller                                  the controller (creating it is the election)
    {cluster}:broker-{broker_id}                          one broker per id, detached
    {cluster}:replica-{topic}-{partition}-b{broker_id}    a replica's label (logs, faults): no actor has this
                                                          name; replicas are unnamed children of their broker,
                                                          found through it (actors/channels/replica_lookup.py)
    {cluster}:group-coordinator-{broker_id}               a broker's group coordinator, a child of it
    {cluster}:txn-coordinator-{broker_id}                 a broker's transaction coordinator, a child of it
    {cluster}:metrics                                     the Prometheus exporter (actors/metrics_exporter.py)

Every module that names an actor builds the name here; nothing else writes these strings.
"""

from __future__ import annotations

RAY_NAMESPACE = "rafka"


def cluster_prefix(cluster: str) -> str:
    """The prefix every actor name of ``cluster`` starts with."""
    return f"{cluster}:"


def controller_name(cluster: str) -> str:
    return f"{cluster}:controller"


def broker_name(cluster: str, broker_id: int) -> str:
    return f"{cluster}:broker-{broker_id}"


def replica_name(cluster: str, topic: str, partition: int, broker_id: int) -> str:
    return f"{cluster}:replica-{topic}-{partition}-b{broker_id}"


def group_coordinator_name(cluster: str, broker_id: int) -> str:
    return f"{cluster}:group-coordinator-{broker_id}"


def txn_coordinator_name(cluster: str, broker_id: int) -> str:
    return f"{cluster}:txn-coordinator-{broker_id}"


def metrics_exporter_name(cluster: str) -> str:
    return f"{cluster}:metrics"


def broker_id_of(cluster: str, name: str) -> int | None:
    """The broker id if ``name`` is ``broker_name(cluster, id)``, else None."""
    head = f"{cluster}:broker-"
    tail = name[len(head) :] if name.startswith(head) else ""
    return int(tail) if tail.isdigit() else None
