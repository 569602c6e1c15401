"""The names of a cluster's things: the Ray namespace, every actor's name (``{cluster}:broker-{id}``, ...; the
list is in docs/internals.md, protocol/) and the internal topics. Every module that names an actor or an
internal topic takes the name from here; nothing else writes these strings. Pure.
"""

from __future__ import annotations

RAY_NAMESPACE = "rafka"

OFFSETS_TOPIC = "__consumer_offsets"  # the group coordinators' log (Kafka's Topic.GROUP_METADATA_TOPIC_NAME)
TXN_TOPIC = "__transaction_state"  # the transaction coordinators' log (Kafka's Topic.TRANSACTION_STATE_TOPIC_NAME)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC})  # never auto-created, reported is_internal


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
