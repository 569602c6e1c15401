"""A whole-cluster restart's metadata: GCS KV is new and empty, and each node's disk holds the metadata log of the
controllers that ran there, so the node of the last controller has the newest and the others an older one or none.
The new controller asks every broker of the cluster for its node's log and, when one is newer than its own, takes
it over before loading (Raft's rule that only the most up-to-date log may lead, for KRaft's metadata quorum)."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import ray

from actors.metadata.image import MetadataImage
from actors.metadata.store import MetadataLog
from protocol.names import RAY_NAMESPACE, broker_id_of

log = logging.getLogger("rafka.controller")

PEER_WAIT_S = 10.0  # for the brokers' answers: well below their first-contact wait for a controller (30 s)


def metadata_log_path(data_dir: str) -> str:
    return os.path.join(data_dir, "controller", "metadata.log")


def read_node_metadata_log(data_dir: str) -> list[dict]:
    """This node's metadata log as a peer reads it (not repaired: its owner may be another process)."""
    path = metadata_log_path(data_dir)
    return MetadataLog(path).read_all(repair=False) if os.path.exists(path) else []


def newest(logs: dict[int, list[dict]]) -> tuple[int | None, int, list[dict]]:
    """``(broker id, version, records)`` of the log with the highest metadata version (the lowest broker id among
    equals); ``(None, -1, [])`` when every log is empty. Pure."""
    best: tuple[int | None, int, list[dict]] = (None, -1, [])
    for broker_id in sorted(logs):
        records = logs[broker_id]
        if not records:
            continue
        version = MetadataImage.from_records(records).version
        if version > best[1]:
            best = (broker_id, version, records)
    return best


def cluster_brokers(cluster: str) -> dict[int, Any]:
    """Handles of the cluster's broker actors that exist now (by name in GCS)."""
    out: dict[int, Any] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        broker_id = broker_id_of(cluster, entry["name"]) if entry["namespace"] == RAY_NAMESPACE else None
        if broker_id is not None:
            try:
                out[broker_id] = ray.get_actor(entry["name"], namespace=RAY_NAMESPACE)
            except ValueError:  # gone since the listing
                continue
    return out


def adopt_newest_log(cluster: str, mlog: MetadataLog, host_broker_id: int, wait_s: float = PEER_WAIT_S) -> int | None:
    """Make ``mlog`` hold the newest metadata of the cluster's nodes: ask every broker for its node's log (up to
    ``wait_s`` for their answers) and, when one is newer than ``mlog``, rewrite ``mlog`` with it. The broker whose
    log was taken, or None when the local one is the newest."""
    t0 = time.monotonic()
    mine = mlog.read_all()
    mine_version = MetadataImage.from_records(mine).version if mine else -1
    peers = {b: h for b, h in cluster_brokers(cluster).items() if b != host_broker_id}
    refs = {b: h.node_metadata_log.remote() for b, h in peers.items()}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=wait_s) if refs else ([], [])
    logs: dict[int, list[dict]] = {}
    for b, ref in refs.items():
        if ref in ready:
            try:
                logs[b] = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a broker that cannot answer has no say
                log.warning("whole-cluster restart: broker %d did not give its node's metadata log: %s", b, e)
    missing = sorted(set(refs) - set(logs))
    broker_id, version, records = newest(logs)
    log.info(
        "GCS KV empty (a new cluster, or a whole-cluster restart): metadata log versions: local %d, brokers %s%s, "
        "in %.1f s",
        mine_version,
        {b: (MetadataImage.from_records(r).version if r else -1) for b, r in sorted(logs.items())},
        f", no answer from {missing}" if missing else "",
        time.monotonic() - t0,
    )
    if broker_id is None or version <= mine_version:
        return None
    log.warning(
        "Taking the metadata log of broker %d's node (version %d) over this node's (version %d)",
        broker_id,
        version,
        mine_version,
    )
    mlog.rewrite(MetadataImage.from_records(records).snapshot_records())
    return broker_id
