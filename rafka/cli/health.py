"""``rafka cluster health``: each partition's state from the controller's metadata, and the cluster's worst.

Pure: ``cluster_health(metadata)`` takes the brokers and topics the controller describes (``{brokers: [{id,
alive, ...}], topics: [{name, configs, partitions: [{partition, leader, replicas, isr}]}]}``) and returns the
report. A partition is, worst first:

- ``offline``: no leader and no live ISR member to elect (Kafka's OfflinePartitionsCount; with
  ``unclean.leader.election.enable`` false it stays so until an ISR member's broker returns);
- ``leaderless``: no serving leader (leader -1, or a leader whose broker is dead) but a live ISR member, so
  an election is pending;
- ``under-min-isr``: led, but the ISR is smaller than ``min.insync.replicas`` (acks=all produces fail with
  NOT_ENOUGH_REPLICAS);
- ``under-replicated``: led, ISR smaller than the replica set (Kafka's UnderReplicatedPartitions);
- ``healthy``.

The cluster's status is its worst partition's state; ``EXIT_CODES`` maps it to the command's exit code
(0 healthy, 4 under-replicated, 5 under-min-isr, 6 leaderless, 7 offline; 3 is the CLI's "no cluster").
Internal topics (``__consumer_offsets``, ``__transaction_state``) count, as in Kafka.
"""

from __future__ import annotations

from typing import Any

HEALTHY, UNDER_REPLICATED, UNDER_MIN_ISR, LEADERLESS, OFFLINE = (
    "healthy",
    "under-replicated",
    "under-min-isr",
    "leaderless",
    "offline",
)
STATES = (HEALTHY, UNDER_REPLICATED, UNDER_MIN_ISR, LEADERLESS, OFFLINE)  # best to worst
EXIT_CODES = {HEALTHY: 0, UNDER_REPLICATED: 4, UNDER_MIN_ISR: 5, LEADERLESS: 6, OFFLINE: 7}


def partition_state(p: dict, alive: set[int], min_isr: int) -> str:
    leader, isr, replicas = p["leader"], list(p["isr"]), list(p["replicas"])
    if leader < 0 or leader not in alive:
        return LEADERLESS if any(r in alive for r in isr) else OFFLINE
    if len(isr) < min_isr:
        return UNDER_MIN_ISR
    if len(isr) < len(replicas) or any(r not in alive for r in replicas):
        return UNDER_REPLICATED
    return HEALTHY


def _min_isr(configs: dict) -> int:
    try:
        return int((configs or {}).get("min.insync.replicas", 1))
    except (TypeError, ValueError):
        return 1


def cluster_health(md: dict) -> dict[str, Any]:
    brokers = md.get("brokers") or []
    alive = {int(b["id"]) for b in brokers if b.get("alive", True)}
    dead = sorted(int(b["id"]) for b in brokers if not b.get("alive", True))
    counts = dict.fromkeys(STATES, 0)
    problems = []
    total = 0
    for t in md.get("topics") or []:
        min_isr = _min_isr(t.get("configs") or {})
        for p in t.get("partitions") or []:
            total += 1
            state = partition_state(p, alive, min_isr)
            counts[state] += 1
            if state != HEALTHY:
                problems.append(
                    {
                        "topic": t["name"],
                        "partition": p["partition"],
                        "state": state,
                        "leader": p["leader"],
                        "replicas": list(p["replicas"]),
                        "isr": list(p["isr"]),
                        "offline_replicas": [r for r in p["replicas"] if r not in alive],
                        "min_insync_replicas": min_isr,
                    }
                )
    status = max((s for s in STATES if counts[s]), key=STATES.index, default=HEALTHY)
    problems.sort(key=lambda x: (-STATES.index(x["state"]), x["topic"], x["partition"]))
    return {
        "status": status,
        "exit_code": EXIT_CODES[status],
        "brokers_alive": sorted(alive),
        "brokers_dead": dead,
        "partitions": total,
        "counts": counts,
        "unhealthy": problems,
    }


def health_report(admin) -> dict[str, Any]:
    """``cluster_health`` of a running cluster through a ``rafka.Admin``, with the controller's id and epoch."""
    desc = admin.describe_cluster()
    report = cluster_health({"brokers": desc["brokers"], "topics": admin.describe_topics()})
    report["cluster"], report["controller_id"] = desc["cluster"], desc["controller_id"]
    report["controller_epoch"] = desc["controller_epoch"]
    return report
